//! lockmeter's lock algorithms.
//!
//! Seven mutexes, each in its own file, each a [`lock_api::RawMutex`] (and
//! [`lock_api::RawMutexTimed`] where it can give up), plus a [`Condvar`] that
//! works with all of them:
//!
//! | name        | type              | idea |
//! |-------------|-------------------|------|
//! | `adaptive`  | [`RawAdaptive`]   | spin only while the owner runs, stop when the owner changes, else sleep (seeds 000, 001, 002) |
//! | `futex`     | [`RawFutex`]      | 0/1/2 futex mutex, no spinning (futextest's futex_wait) |
//! | `futex-tid` | [`RawFutexTid`]   | TID\|WAITERS futex mutex, no spinning (futextest's futex_wait_tid) |
//! | `pi`        | [`RawPi`]         | kernel priority-inheritance futex (rtmutex) |
//! | `ticket`    | [`RawTicket`]     | FIFO tickets, auto-tuned proportional backoff, a gate against oversubscription (seed 003) |
//! | `mcs`       | [`RawMcs`]        | MCS queue lock, spins on its own node then parks |
//! | `spin`      | [`RawSpin`]       | test-and-test-and-set with exponential backoff, never sleeps |
//!
//! Every lock takes a statistics recorder as a type parameter
//! ([`record::Recorder`]); the default [`NoStats`] compiles to nothing.
//! Every lock's state fits in a `pthread_mutex_t` (40 bytes) and is valid
//! when all-zero, and the condvar's fits in a `pthread_cond_t` (48 bytes).
//!
//! ```
//! use lockmeter_locks::{AdaptiveMutex, Condvar};
//! let ready = AdaptiveMutex::new(false);
//! let cv = Condvar::new();
//! *ready.lock() = true;
//! cv.notify_all();
//! assert!(*ready.lock());
//! ```

#![warn(missing_docs)]

mod sync;

pub mod adaptive;
pub mod busted;
pub mod clock;
pub mod condvar;
pub mod config;
pub mod futex;
pub mod futex_mutex;
pub mod futex_tid;
pub mod idle_cpu;
pub mod mcs;
pub mod oracle;
pub mod record;
pub mod spin;
pub mod ticket;

#[cfg(not(loom))]
pub mod pi;
#[cfg(not(loom))]
mod algorithm;
#[cfg(not(loom))]
mod any;

pub use adaptive::RawAdaptive;
pub use busted::RawBusted;
pub use condvar::{Condvar, WaitResult};
pub use futex_mutex::RawFutex;
pub use futex_tid::RawFutexTid;
pub use mcs::RawMcs;
pub use record::{AcquireKind, NoStats, Recorder};
pub use spin::RawSpin;
pub use sync::current_tid;
#[cfg(loom)]
pub use sync::model_time_up;
#[cfg(not(loom))]
pub use sync::kernel_tid;
pub use ticket::RawTicket;

/// A mutex protecting a `T` with the `adaptive` algorithm.
#[cfg(not(loom))]
pub type AdaptiveMutex<T> = lock_api::Mutex<RawAdaptive, T>;
/// A mutex protecting a `T` with the `futex` algorithm.
#[cfg(not(loom))]
pub type FutexMutex<T> = lock_api::Mutex<RawFutex, T>;
/// A mutex protecting a `T` with the `futex-tid` algorithm.
#[cfg(not(loom))]
pub type FutexTidMutex<T> = lock_api::Mutex<RawFutexTid, T>;
/// A mutex protecting a `T` with the `pi` algorithm.
#[cfg(not(loom))]
pub type PiMutex<T> = lock_api::Mutex<RawPi, T>;
/// A mutex protecting a `T` with the `ticket` algorithm.
#[cfg(not(loom))]
pub type TicketMutex<T> = lock_api::Mutex<RawTicket, T>;
/// A mutex protecting a `T` with the `mcs` algorithm.
#[cfg(not(loom))]
pub type McsMutex<T> = lock_api::Mutex<RawMcs, T>;
/// A mutex protecting a `T` with the `spin` algorithm.
#[cfg(not(loom))]
pub type SpinMutex<T> = lock_api::Mutex<RawSpin, T>;
#[cfg(not(loom))]
pub use algorithm::{Algorithm, UnknownAlgorithm};
#[cfg(not(loom))]
pub use any::AnyMutex;
#[cfg(not(loom))]
pub use pi::RawPi;
