//! loom models with the default settings: waiters spin (briefly, under the
//! model) before they park. See `common/loom_models.rs` for what they prove.
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p lockmeter-locks --release --test 'loom*'`.
#![cfg(loom)]

#[macro_use]
mod common;
loom_suite!(());
