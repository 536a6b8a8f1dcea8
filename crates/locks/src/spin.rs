//! `spin`: test-and-test-and-set with exponential backoff, never sleeping.
//!
//! Lock word: 0 unlocked, 1 locked; beside it, the number of *hungry*
//! waiters. Waiters read the word until it looks free (no cache-line
//! ping-pong while it is held), then try one CAS; after each failure they
//! wait twice as long (up to 2^10 pause instructions).
//!
//! Starvation bound: a plain test-and-set lets the thread that just
//! released take the lock again before a backed-off waiter looks, and
//! `lockmeter torture` saw a writer get nothing for 5 s. A waiter that has
//! waited `HUNGRY_AFTER_NS` declares itself hungry; while anyone is hungry
//! only hungry waiters may take the lock, and they stop backing off. One
//! hungry for `YIELD_AFTER_NS` also yields its CPU between attempts (still
//! never sleeping in the kernel), so the holder it waits for can run when
//! threads outnumber cores. The count lives in its own word so that the
//! fast paths stay one CAS and one plain store.
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
/// A waiter turns hungry after waiting this long.
const HUNGRY_AFTER_NS: u64 = 1_000_000;
/// A hungry waiter yields its CPU between attempts after waiting this long.
const YIELD_AFTER_NS: u64 = 10_000_000;

/// The raw `spin` lock.
#[repr(C)]
pub struct RawSpin<R: Recorder = NoStats> {
    word: AtomicU32,
    hungry: AtomicU32,
    recorder: R,
}

impl<R: Recorder> RawSpin<R> {
    crate::sync::const_unless_loom! {
        /// An unlocked lock.
        pub fn new() -> Self {
            RawSpin { word: AtomicU32::new(0), hungry: AtomicU32::new(0), recorder: R::INIT }
        }
    }

    /// The statistics recorder.
    pub fn recorder(&self) -> &R {
        &self.recorder
    }

    /// Acquires the lock, spinning until it is free.
    #[inline]
    pub fn lock(&self) {
        if self.may_barge() && self.word.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            self.recorder.acquired(AcquireKind::NoWait, 0);
            return;
        }
        self.lock_contended(None);
    }

    /// Acquires the lock if free.
    #[inline]
    pub fn try_lock(&self) -> bool {
        let ok = self.may_barge() && self.word.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok();
        if ok {
            self.recorder.acquired(AcquireKind::NoWait, 0);
        } else {
            self.recorder.rejected();
        }
        ok
    }

    /// Acquires the lock unless `deadline` passes first.
    pub fn lock_until(&self, deadline: Instant) -> bool {
        if self.may_barge() && self.word.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            self.recorder.acquired(AcquireKind::NoWait, 0);
            return true;
        }
        self.lock_contended(Some(deadline))
    }

    /// Whether a thread that is not hungry may take the lock: nobody is.
    #[inline(always)]
    fn may_barge(&self) -> bool {
        self.hungry.load(Ordering::Relaxed) == 0
    }

    #[cold]
    fn lock_contended(&self, deadline: Option<Instant>) -> bool {
        let start = record::wait_start::<R>();
        let mut budget = SpinBudget::new(clock::ns_to_cycles(HUNGRY_AFTER_NS));
        let mut hungry = false;
        let mut shift = 0;
        loop {
            if (hungry || self.may_barge())
                && self.word.load(Ordering::Relaxed) == 0
                && self.word.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                if hungry {
                    self.hungry.fetch_sub(1, Ordering::Relaxed);
                }
                self.recorder.acquired(AcquireKind::Spin, record::waited::<R>(start));
                return true;
            }
            if !hungry {
                for _ in 0..(1u32 << shift) {
                    spin_hint();
                }
                shift = (shift + 1).min(MAX_BACKOFF_SHIFT);
                if budget.exhausted() {
                    self.hungry.fetch_add(1, Ordering::Relaxed);
                    hungry = true;
                    budget = SpinBudget::new(clock::ns_to_cycles(YIELD_AFTER_NS));
                }
            } else if budget.exhausted() {
                std::thread::yield_now();
            } else {
                spin_hint();
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                if hungry {
                    self.hungry.fetch_sub(1, Ordering::Relaxed);
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
        self.word.store(0, Ordering::Release);
    }

    /// Whether the lock is held.
    pub fn is_locked(&self) -> bool {
        self.word.load(Ordering::Relaxed) != 0
    }

    /// Forgets every waiter and leaves the lock held by thread `tid`: for a
    /// child of `fork`, where the thread that forked keeps the locks it
    /// held (`tid` is its id in the child) and the other threads the state
    /// names do not exist.
    ///
    /// # Safety
    /// No other thread may use the lock during the call, and `tid` is to
    /// unlock it.
    pub unsafe fn reset_to_held_by(&self, _tid: u32) {
        self.hungry.store(0, Ordering::Relaxed);
        self.word.store(1, Ordering::Release);
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

// A timed-out attempt leaves nothing.
crate::clock::timed_by_deadline!(RawSpin);
