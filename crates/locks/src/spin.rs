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
//! fast paths stay one CAS and one plain store; beside it, the fork epoch
//! of the process whose threads it counts: a child of `fork` does not
//! have its parent's hungry waiters, which would otherwise keep every
//! thread of the child from the free lock (its try-lock failed every time
//! and each lock waited 1 ms to turn hungry).
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
/// The hungry word: the count of hungry waiters in its low bits, the fork
/// epoch of the process they belong to above.
const HUNGRY_COUNT: u32 = 0xFFFF;
const EPOCH_SHIFT: u32 = 16;

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

    /// Whether a thread that is not hungry may take the lock: nobody is
    /// (of this process: a parent's hungry waiters are not in a child).
    #[inline(always)]
    fn may_barge(&self) -> bool {
        let hungry = self.hungry.load(Ordering::Relaxed);
        hungry == 0 || !self.hungry_here(hungry)
    }

    /// Whether the hungry word `hungry` counts waiters of this process.
    #[cold]
    fn hungry_here(&self, hungry: u32) -> bool {
        hungry & HUNGRY_COUNT != 0 && hungry >> EPOCH_SHIFT == crate::sync::fork_epoch() & HUNGRY_COUNT
    }

    /// Counts the caller among the hungry: the first of its process, after
    /// a fork, starts the count again.
    #[cold]
    fn turn_hungry(&self) {
        crate::sync::note_forks();
        let epoch = crate::sync::fork_epoch() & HUNGRY_COUNT;
        let mut hungry = self.hungry.load(Ordering::Relaxed);
        loop {
            let counted = if self.hungry_here(hungry) { hungry + 1 } else { epoch << EPOCH_SHIFT | 1 };
            match self.hungry.compare_exchange_weak(hungry, counted, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => hungry = now,
            }
        }
    }

    /// Takes the caller off the hungry count (unless a fork since it
    /// turned hungry started the count again).
    #[cold]
    fn no_longer_hungry(&self) {
        let mut hungry = self.hungry.load(Ordering::Relaxed);
        while self.hungry_here(hungry) {
            // The last one leaves the word 0, epoch and all: the fast
            // paths read only that.
            let left = if hungry & HUNGRY_COUNT == 1 { 0 } else { hungry - 1 };
            match self.hungry.compare_exchange_weak(hungry, left, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => hungry = now,
            }
        }
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
                    self.no_longer_hungry();
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
                    self.turn_hungry();
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
                    self.no_longer_hungry();
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A parent's hungry waiter is not the child's: in a child of `fork`
    /// the free lock is taken at once (its try-lock failed every time, the
    /// parent's waiter counted hungry for ever there), and the child's own
    /// hunger is counted from nothing.
    #[test]
    fn a_parents_hungry_waiter_keeps_nobody_from_the_childs_lock() {
        let lock = Arc::new(RawSpin::<NoStats>::new());
        lock.lock();
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                lock.lock();
                // SAFETY: this thread holds it.
                unsafe { lock.unlock() };
            })
        };
        let started = Instant::now();
        while lock.hungry.load(Ordering::Relaxed) & HUNGRY_COUNT == 0 {
            assert!(started.elapsed() < std::time::Duration::from_secs(10), "the waiter never turned hungry");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let child_takes_it = crate::sync::in_forked_child(|| {
            // SAFETY: the forking thread held it; its copy is this thread's.
            unsafe { lock.unlock() };
            let taken = lock.try_lock();
            // SAFETY: taken just now.
            unsafe { lock.unlock() };
            taken
        });
        // SAFETY: held by this thread since the start.
        unsafe { lock.unlock() };
        waiter.join().unwrap();
        assert!(child_takes_it, "the child's try-lock of its free lock failed");
        assert_eq!(lock.hungry.load(Ordering::Relaxed), 0, "the parent's count back to nothing");
    }
}
