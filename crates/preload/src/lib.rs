//! `liblockmeter.so`: lockmeter's locks for C programs (`include/lockmeter.h`).
//!
//! This library will also be what `lockmeter run` preloads into unmodified
//! programs; today it exports the C ABI of the lock library.

mod capi;

pub use capi::{LmCond, LmMutex};
