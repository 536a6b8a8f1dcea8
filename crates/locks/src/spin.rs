//! `spin`: test-and-test-and-set with exponential backoff, never sleeping.
//!
//! Lock word: 0 unlocked, 1 locked. Waiters read the word until it looks
//! free (no cache-line ping-pong while it is held), then try one CAS; after
//! each failure they wait twice as long (up to 2^10 pause instructions).
//!
//! The reference of what collapses: when threads outnumber cores, a waiter
//! burns its whole time slice while the owner it waits for is preempted
//! (seed 003's "performance falls off a cliff"). Pick it only for critical
//! sections of a few instructions on threads that are never oversubscribed.

use crate::record::{self, AcquireKind, NoStats, Recorder};
use crate::sync::{spin_hint, AtomicU32, Ordering};
use std::time::Instant;

/// Backoff doubles up to 2^MAX_BACKOFF_SHIFT pauses between attempts.
const MAX_BACKOFF_SHIFT: u32 = 10;

/// The raw `spin` lock.
#[repr(C)]
pub struct RawSpin<R: Recorder = NoStats> {
    word: AtomicU32,
    recorder: R,
}

impl<R: Recorder> RawSpin<R> {
    crate::sync::const_unless_loom! {
        /// An unlocked lock.
        pub fn new() -> Self {
            RawSpin { word: AtomicU32::new(0), recorder: R::INIT }
        }
    }

    /// The statistics recorder.
    pub fn recorder(&self) -> &R {
        &self.recorder
    }

    /// Acquires the lock, spinning until it is free.
    #[inline]
    pub fn lock(&self) {
        if self.word.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            self.recorder.acquired(AcquireKind::NoWait, 0);
            return;
        }
        self.lock_contended(None);
    }

    /// Acquires the lock if free.
    #[inline]
    pub fn try_lock(&self) -> bool {
        let ok = self.word.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok();
        if ok {
            self.recorder.acquired(AcquireKind::NoWait, 0);
        } else {
            self.recorder.rejected();
        }
        ok
    }

    /// Acquires the lock unless `deadline` passes first.
    pub fn lock_until(&self, deadline: Instant) -> bool {
        if self.word.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            self.recorder.acquired(AcquireKind::NoWait, 0);
            return true;
        }
        self.lock_contended(Some(deadline))
    }

    #[cold]
    fn lock_contended(&self, deadline: Option<Instant>) -> bool {
        let start = record::wait_start::<R>();
        let mut shift = 0;
        loop {
            // Test: read until it looks free, backing off.
            while self.word.load(Ordering::Relaxed) != 0 {
                for _ in 0..(1u32 << shift) {
                    spin_hint();
                }
                shift = (shift + 1).min(MAX_BACKOFF_SHIFT);
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    self.recorder.timed_out(record::waited::<R>(start));
                    return false;
                }
            }
            // Test-and-set.
            if self.word.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                self.recorder.acquired(AcquireKind::Spin, record::waited::<R>(start));
                return true;
            }
        }
    }

    /// Releases the lock.
    ///
    /// # Safety
    /// The lock must be held.
    #[inline]
    pub unsafe fn unlock(&self) {
        self.recorder.releasing();
        self.word.store(0, Ordering::Release);
    }

    /// Whether the lock is held.
    pub fn is_locked(&self) -> bool {
        self.word.load(Ordering::Relaxed) != 0
    }
}

#[cfg(not(loom))]
impl<R: Recorder> Default for RawSpin<R> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(loom))]
// SAFETY: acquire CAS 0 -> 1, release store of 0.
unsafe impl<R: Recorder> lock_api::RawMutex for RawSpin<R> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type GuardMarker = lock_api::GuardSend;
    fn lock(&self) {
        RawSpin::lock(self)
    }
    fn try_lock(&self) -> bool {
        RawSpin::try_lock(self)
    }
    unsafe fn unlock(&self) {
        RawSpin::unlock(self)
    }
    fn is_locked(&self) -> bool {
        RawSpin::is_locked(self)
    }
}

#[cfg(not(loom))]
// SAFETY: as for RawMutex.
unsafe impl<R: Recorder> lock_api::RawMutexTimed for RawSpin<R> {
    type Duration = std::time::Duration;
    type Instant = Instant;
    fn try_lock_for(&self, timeout: std::time::Duration) -> bool {
        self.lock_until(Instant::now() + timeout)
    }
    fn try_lock_until(&self, deadline: Instant) -> bool {
        self.lock_until(deadline)
    }
}
