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
//! ([`record::Recorder`]); the default [`NoStats`] compiles to nothing (the
//! aliases such as [`AdaptiveMutex`] use it). With a recorder, name the raw
//! type's parameter (`lock_api::Mutex<RawAdaptive<LockStats>, T>`, with
//! lockmeter-stats' `LockStats`, which counts every column of lockmeter's
//! report), and read it with [`recorder_of`].
//!
//! The types are `lock_api` 0.4's, re-exported as [`lock_api`] so that a
//! program need not name a version of its own. As with parking_lot's:
//! - locking a mutex twice in one thread deadlocks (no lock here is
//!   recursive; `pi` polls for ever rather than sleeps);
//! - a panic in a critical section releases the mutex as the guard drops,
//!   and nothing is poisoned;
//! - `ticket` and `mcs` implement [`lock_api::RawMutexFair`] (every unlock
//!   of theirs passes the lock to the next in line);
//! - a guard may move to another thread ([`lock_api::GuardSend`]) only for
//!   `futex`, `ticket` and `spin`: the others keep the owner's thread id
//!   (to spin while it runs, for priority inheritance, or for a queue node
//!   of the owner's), so their guards stay on the thread that locked.
//!
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

pub use lock_api;

mod sync;

pub mod adaptive;
#[doc(hidden)]
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
pub mod static_tls;
pub mod ticket;

#[cfg(not(loom))]
pub mod pi;
#[cfg(not(loom))]
mod algorithm;
#[cfg(not(loom))]
mod any;

pub use adaptive::RawAdaptive;
/// A lock that is wrong on purpose, for `lockmeter torture` to prove it
/// catches one: not for use.
#[doc(hidden)]
pub use busted::RawBusted;
pub use condvar::{Condvar, WaitResult};
pub use futex_mutex::RawFutex;
pub use futex_tid::RawFutexTid;
pub use mcs::RawMcs;
pub use record::{AcquireKind, NoStats, Recorder};
pub use spin::RawSpin;
pub use sync::current_tid;
#[cfg(not(loom))]
pub use sync::current_tid_at_hand;
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

/// A raw lock that records into a statistics recorder.
pub trait Recorded {
    /// The recorder's type.
    type Recorder: Recorder;
    /// The lock's recorder.
    fn recorder(&self) -> &Self::Recorder;
}

macro_rules! recorded {
    ($($raw:ident),*) => {
        $(impl<R: Recorder> Recorded for $raw<R> {
            type Recorder = R;
            fn recorder(&self) -> &R {
                $raw::recorder(self)
            }
        })*
    };
}
recorded!(RawAdaptive, RawFutex, RawFutexTid, RawMcs, RawSpin, RawTicket);
#[cfg(not(loom))]
recorded!(RawPi);

/// The statistics recorder of `mutex`'s lock, read while the mutex is in
/// use (lockmeter-stats' `LockStats` is the recorder of lockmeter's
/// report; a recorder of one's own is as easy):
///
/// ```
/// use lockmeter_locks::{lock_api, recorder_of, AcquireKind, RawAdaptive, Recorder};
/// use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
///
/// /// Counts acquisitions.
/// struct Acquisitions(AtomicU64);
///
/// impl Recorder for Acquisitions {
///     const INIT: Self = Acquisitions(AtomicU64::new(0));
///     const ENABLED: bool = false;
///     fn acquired(&self, _: AcquireKind, _: u64) {
///         self.0.fetch_add(1, Relaxed);
///     }
///     fn rejected(&self) {}
///     fn timed_out(&self, _: u64) {}
///     fn releasing(&self) {}
/// }
///
/// let counter = lock_api::Mutex::<RawAdaptive<Acquisitions>, u64>::new(0);
/// *counter.lock() += 1;
/// *counter.lock() += 1;
/// assert_eq!(recorder_of(&counter).0.load(Relaxed), 2);
/// ```
pub fn recorder_of<Raw: lock_api::RawMutex + Recorded, T: ?Sized>(mutex: &lock_api::Mutex<Raw, T>) -> &Raw::Recorder {
    // SAFETY: `raw` is unsafe because locking or unlocking through it
    // would break the guards' account of the mutex; the recorder is only
    // read, and its counters are atomics any thread may read.
    unsafe { mutex.raw() }.recorder()
}
