//! `futex`: the classic three-state futex mutex (futextest's "futex_wait"
//! baseline in seed 001; Drepper's "mutex3" in "Futexes Are Tricky").
//!
//! Lock word: 0 unlocked, 1 locked, 2 locked and somebody may sleep.
//! No spinning: a contended waiter swaps in 2 and sleeps. Unlock wakes one
//! sleeper only if the word was 2.
//!
//! Pick it as the baseline that every other lock must beat, or where the
//! smallest, simplest correct blocking lock is wanted.

use crate::record::{self, AcquireKind, NoStats, Recorder};
use crate::sync::{futex_wait, futex_wake, AtomicU32, Ordering, WaitOutcome};
use std::time::Instant;

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

/// The raw `futex` mutex.
#[repr(C)]
pub struct RawFutex<R: Recorder = NoStats> {
    word: AtomicU32,
    recorder: R,
}

impl<R: Recorder> RawFutex<R> {
    crate::sync::const_unless_loom! {
        /// An unlocked mutex.
        pub fn new() -> Self {
            RawFutex { word: AtomicU32::new(UNLOCKED), recorder: R::INIT }
        }
    }

    /// The statistics recorder.
    pub fn recorder(&self) -> &R {
        &self.recorder
    }

    /// Acquires the lock.
    #[inline]
    pub fn lock(&self) {
        if self.word.compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            self.recorder.acquired(AcquireKind::NoWait, 0);
            return;
        }
        self.lock_contended(None);
    }

    /// Acquires the lock if free.
    #[inline]
    pub fn try_lock(&self) -> bool {
        let ok = self.word.compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed).is_ok();
        if ok {
            self.recorder.acquired(AcquireKind::NoWait, 0);
        } else {
            self.recorder.rejected();
        }
        ok
    }

    /// Acquires the lock unless `deadline` passes first.
    pub fn lock_until(&self, deadline: Instant) -> bool {
        if self.word.compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            self.recorder.acquired(AcquireKind::NoWait, 0);
            return true;
        }
        self.lock_contended(Some(deadline))
    }

    #[cold]
    fn lock_contended(&self, deadline: Option<Instant>) -> bool {
        let start = record::wait_start::<R>();
        // Mark the lock contended; if it was free meanwhile, we hold it
        // (with a possibly spare wake at unlock: the price of the 0/1/2
        // policy).
        while self.word.swap(CONTENDED, Ordering::Acquire) != UNLOCKED {
            if futex_wait(&self.word, CONTENDED, deadline) == WaitOutcome::TimedOut {
                self.recorder.timed_out(record::waited::<R>(start));
                return false;
            }
        }
        self.recorder.acquired(AcquireKind::Sleep, record::waited::<R>(start));
        true
    }

    /// Releases the lock.
    ///
    /// # Safety
    /// The lock must be held (by any thread: the word has no owner).
    #[inline]
    pub unsafe fn unlock(&self) {
        self.recorder.releasing();
        if self.word.swap(UNLOCKED, Ordering::Release) == CONTENDED {
            futex_wake(&self.word, 1);
        }
    }

    /// Whether the lock is held.
    pub fn is_locked(&self) -> bool {
        self.word.load(Ordering::Relaxed) != UNLOCKED
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
        self.word.store(LOCKED, Ordering::Release);
    }
}

impl RawFutex<NoStats> {
    /// Releases the lock if no waiter needs waking: the uncontended
    /// unlock, one compare-exchange, never a system call. False, with
    /// nothing done, otherwise; then [`Self::unlock`] releases it. For
    /// callers that must know no system call ran (a pthread replacement
    /// keeps `errno` as the program left it, and saving it costs more than
    /// the unlock). Only on a lock that records nothing: a recorder hears
    /// of a release before it happens, and this one may not.
    ///
    /// # Safety
    /// As [`Self::unlock`]: the lock must be held.
    #[inline]
    pub unsafe fn unlock_if_uncontended(&self) -> bool {
        // Fails on CONTENDED (a waiter may sleep), and on a free word.
        self.word.compare_exchange(LOCKED, UNLOCKED, Ordering::Release, Ordering::Relaxed).is_ok()
    }
}

#[cfg(not(loom))]
impl<R: Recorder> Default for RawFutex<R> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(loom))]
// SAFETY: acquisition is an acquire transition out of UNLOCKED; release is a
// release store of UNLOCKED.
unsafe impl<R: Recorder> lock_api::RawMutex for RawFutex<R> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type GuardMarker = lock_api::GuardSend;
    fn lock(&self) {
        RawFutex::lock(self)
    }
    fn try_lock(&self) -> bool {
        RawFutex::try_lock(self)
    }
    unsafe fn unlock(&self) {
        RawFutex::unlock(self)
    }
    fn is_locked(&self) -> bool {
        RawFutex::is_locked(self)
    }
}

// A timed-out attempt leaves at most the contended mark on the word (one
// spare wake).
crate::clock::timed_by_deadline!(RawFutex);
