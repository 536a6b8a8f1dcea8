//! `spin`: test-and-test-and-set with exponential backoff, never sleeping.
//!
//! Lock word: bit 0 locked, the bits above it the number of *hungry*
//! waiters. Waiters read the word until it looks free (no cache-line
//! ping-pong while it is held), then try one CAS; after each failure they
//! wait twice as long (up to 2^10 pause instructions).
//!
//! Starvation bound: a plain test-and-set lets the thread that just
//! released take the lock again before a backed-off waiter looks, and
//! `lockmeter torture` saw a writer get nothing for 5 s. A waiter that has
//! waited `HUNGRY_AFTER_NS` declares itself hungry; while anyone is hungry
//! only hungry waiters may take the lock, and they yield their CPU between
//! attempts (still never sleeping in the kernel), so the holder they wait
//! for can run when threads outnumber cores.
//!
//! The reference of what collapses: when threads outnumber cores, a waiter
//! burns its whole time slice while the owner it waits for is preempted
//! (seed 003's "performance falls off a cliff"). Pick it only for critical
//! sections of a few instructions on threads that are never oversubscribed.

use crate::clock::{self, SpinBudget};
use crate::record::{self, AcquireKind, NoStats, Recorder};
use crate::sync::{spin_hint, AtomicU32, Ordering};
use std::time::Instant;

/// Backoff doubles up to 2^MAX_BACKOFF_SHIFT pauses between attempts.
const MAX_BACKOFF_SHIFT: u32 = 10;
const LOCKED: u32 = 1;
/// One hungry waiter, counted above the lock bit.
const HUNGRY_ONE: u32 = 2;
/// A waiter turns hungry after waiting this long.
const HUNGRY_AFTER_NS: u64 = 1_000_000;

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
        let mut budget = SpinBudget::new(clock::ns_to_cycles(HUNGRY_AFTER_NS));
        let mut hungry = false;
        let mut shift = 0;
        loop {
            let word = self.word.load(Ordering::Relaxed);
            // A well-fed waiter defers to hungry ones; a hungry one only
            // needs the lock bit clear.
            let free = if hungry { word & LOCKED == 0 } else { word == 0 };
            if free {
                let taken = if hungry { (word | LOCKED) - HUNGRY_ONE } else { LOCKED };
                if self.word.compare_exchange(word, taken, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                    self.recorder.acquired(AcquireKind::Spin, record::waited::<R>(start));
                    return true;
                }
                continue;
            }
            if hungry {
                std::thread::yield_now();
            } else {
                for _ in 0..(1u32 << shift) {
                    spin_hint();
                }
                shift = (shift + 1).min(MAX_BACKOFF_SHIFT);
                if budget.exhausted() {
                    self.word.fetch_add(HUNGRY_ONE, Ordering::Relaxed);
                    hungry = true;
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                if hungry {
                    self.word.fetch_sub(HUNGRY_ONE, Ordering::Relaxed);
                }
                self.recorder.timed_out(record::waited::<R>(start));
                return false;
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
        // Keep the hungry count: clear the lock bit alone.
        if self.word.compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed).is_err() {
            self.word.fetch_and(!LOCKED, Ordering::Release);
        }
    }

    /// Whether the lock is held.
    pub fn is_locked(&self) -> bool {
        self.word.load(Ordering::Relaxed) & LOCKED != 0
    }
}

#[cfg(not(loom))]
impl<R: Recorder> Default for RawSpin<R> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(loom))]
// SAFETY: acquisition by an acquire CAS that sets the lock bit, release by
// a release RMW that clears it.
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
