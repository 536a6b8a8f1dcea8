//! `liblockmeter.so`: lockmeter for C programs and for unmodified ones.
//!
//! - Linked (`-llockmeter`, `include/lockmeter.h`): the C ABI of the lock
//!   library (`lm_mutex_*`, `lm_cond_*`).
//! - Preloaded (`LD_PRELOAD`, which `lockmeter run` sets up): with
//!   `LOCKMETER_OUTPUT` set, profile mode wraps glibc's pthread lock and
//!   semaphore functions and writes a profile of every lock when the
//!   process ends. Without it, the frequent pthread calls (lock, trylock
//!   and unlock of mutexes, rwlocks and spinlocks, semaphore waits,
//!   condvar wakes) jump to glibc's own functions, chosen when the
//!   library is loaded, and the rarer ones (and the C11 `mtx_*` and
//!   `cnd_*`) forward after one check, so a program that links the
//!   library for the C ABI pays under 1 ns per lock+unlock. With
//!   `LOCKMETER_LOCK` set, its pthread mutexes and condvars are served,
//!   as under `LD_PRELOAD`, and its other locks' calls still jump to
//!   glibc's.

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
