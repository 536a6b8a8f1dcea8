//! loom models with spinning switched off (as `LOCKMETER_SPIN=0` does):
//! every wait takes the parking path, which a spinning waiter rarely
//! reaches inside a model. See `common/loom_models.rs` for what they prove.
#![cfg(loom)]

#[macro_use]
mod common;
loom_suite!(lockmeter_locks::config::set_spinning(false));
