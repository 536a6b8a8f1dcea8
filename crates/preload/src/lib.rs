//! `liblockmeter.so`: lockmeter for C programs and for unmodified ones.
//!
//! - Linked (`-llockmeter`, `include/lockmeter.h`): the C ABI of the lock
//!   library (`lm_mutex_*`, `lm_cond_*`).
//! - Preloaded (`LD_PRELOAD`, which `lockmeter run` sets up): with
//!   `LOCKMETER_OUTPUT` set, profile mode wraps glibc's pthread lock and
//!   semaphore functions and writes a profile of every lock when the
//!   process ends. Without it the frequent calls (lock, trylock and
//!   unlock of mutexes, rwlocks and spinlocks, semaphore waits, condvar
//!   wakes) jump to glibc's own functions, chosen when the library is
//!   loaded, and the rarer ones forward after one check, so a program
//!   that links the library for the C ABI pays under 1 ns per
//!   lock+unlock, and with `LOCKMETER_LOCK` set has its pthread mutexes
//!   and condvars served, as under `LD_PRELOAD`.

mod cancel;
mod capi;
#[cfg(target_arch = "x86_64")]
mod environment;
#[cfg(target_arch = "x86_64")]
pub mod profile;
#[cfg(target_arch = "x86_64")]
pub mod replace;

pub use capi::{LmCond, LmMutex};

/// `malloc`, but for a profile written from a signal handler.
#[cfg(target_arch = "x86_64")]
#[global_allocator]
static ALLOCATOR: profile::heap::LibraryHeap = profile::heap::LibraryHeap;
