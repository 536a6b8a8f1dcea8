//! loom models with adaptive's handoff forced: the starvation bound is zero,
//! so every waiter that has waited once asks for the lock to be handed over.
//! See `common/loom_models.rs` for what they prove.
#![cfg(loom)]

#[macro_use]
mod common;
loom_suite!(lockmeter_locks::config::set_handoff_bound(std::time::Duration::ZERO));
