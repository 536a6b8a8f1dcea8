//! `futex-tid`: a futex mutex with the TID|FUTEX_WAITERS lock-word policy
//! and no spinning (futextest's "futex_wait_tid" in seed 001).
//!
//! Lock word: owner tid in bits 0..30, WAITERS in bit 31. It costs more
//! than the 0/1/2 policy (an OR, a mask and a CAS loop to set WAITERS) but
//! records the owner, which is what an owner-aware (adaptive or PI) lock
//! needs. Seed 001 added it to measure exactly that overhead: pick it to
//! see the price of knowing the owner, without spinning.

use crate::record::{self, AcquireKind, NoStats, Recorder};
use crate::sync::{current_tid, futex_wait, futex_wake, AtomicU32, Ordering, WaitOutcome};
use std::time::Instant;

const WAITERS: u32 = 1 << 31;

/// The raw `futex-tid` mutex.
#[repr(C)]
pub struct RawFutexTid<R: Recorder = NoStats> {
    word: AtomicU32,
    recorder: R,
}

impl<R: Recorder> RawFutexTid<R> {
    crate::sync::const_unless_loom! {
        /// An unlocked mutex.
        pub fn new() -> Self {
            RawFutexTid { word: AtomicU32::new(0), recorder: R::INIT }
        }
    }

    /// The statistics recorder.
    pub fn recorder(&self) -> &R {
        &self.recorder
    }

    /// Acquires the lock.
    #[inline]
    pub fn lock(&self) {
        let tid = current_tid();
        if self.word.compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            self.recorder.acquired(AcquireKind::NoWait, 0);
            return;
        }
        self.lock_contended(tid, None);
    }

    /// Acquires the lock if free.
    #[inline]
    pub fn try_lock(&self) -> bool {
        let ok = self.word.compare_exchange(0, current_tid(), Ordering::Acquire, Ordering::Relaxed).is_ok();
        if ok {
            self.recorder.acquired(AcquireKind::NoWait, 0);
        } else {
            self.recorder.rejected();
        }
        ok
    }

    /// Acquires the lock unless `deadline` passes first.
    pub fn lock_until(&self, deadline: Instant) -> bool {
        let tid = current_tid();
        if self.word.compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            self.recorder.acquired(AcquireKind::NoWait, 0);
            return true;
        }
        self.lock_contended(tid, Some(deadline))
    }

    #[cold]
    fn lock_contended(&self, tid: u32, deadline: Option<Instant>) -> bool {
        let start = record::wait_start::<R>();
        loop {
            let word = self.word.load(Ordering::Relaxed);
            if word == 0 {
                // We were contending, so others may be asleep: keep WAITERS.
                if self
                    .word
                    .compare_exchange(0, tid | WAITERS, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    self.recorder.acquired(AcquireKind::Sleep, record::waited::<R>(start));
                    return true;
                }
                continue;
            }
            if word & WAITERS == 0
                && self
                    .word
                    .compare_exchange(word, word | WAITERS, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            if futex_wait(&self.word, word | WAITERS, deadline) == WaitOutcome::TimedOut {
                self.recorder.timed_out(record::waited::<R>(start));
                return false;
            }
        }
    }

    /// Releases the lock.
    ///
    /// # Safety
    /// The calling thread must hold the lock.
    #[inline]
    pub unsafe fn unlock(&self) {
        self.recorder.releasing();
        if self.word.swap(0, Ordering::Release) & WAITERS != 0 {
            futex_wake(&self.word, 1);
        }
    }

    /// Whether the lock is held.
    pub fn is_locked(&self) -> bool {
        self.word.load(Ordering::Relaxed) != 0
    }

    /// The holder's kernel thread id, if held.
    pub fn owner(&self) -> Option<u32> {
        Some(self.word.load(Ordering::Relaxed) & !WAITERS).filter(|&tid| tid != 0)
    }

    /// Forgets every waiter and leaves the lock held by thread `tid`: for a
    /// child of `fork`, where the thread that forked keeps the locks it
    /// held (`tid` is its id in the child) and the other threads the state
    /// names do not exist.
    ///
    /// # Safety
    /// No other thread may use the lock during the call, and `tid` is to
    /// unlock it.
    pub unsafe fn reset_to_held_by(&self, tid: u32) {
        self.word.store(tid, Ordering::Release);
    }
}

crate::sync::owner_word_uncontended_steps!(RawFutexTid);

#[cfg(not(loom))]
impl<R: Recorder> Default for RawFutexTid<R> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(loom))]
// SAFETY: acquisition is an acquire CAS from 0; release is a release swap.
unsafe impl<R: Recorder> lock_api::RawMutex for RawFutexTid<R> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type GuardMarker = lock_api::GuardNoSend;
    fn lock(&self) {
        RawFutexTid::lock(self)
    }
    fn try_lock(&self) -> bool {
        RawFutexTid::try_lock(self)
    }
    unsafe fn unlock(&self) {
        RawFutexTid::unlock(self)
    }
    fn is_locked(&self) -> bool {
        RawFutexTid::is_locked(self)
    }
}

// A timed-out attempt leaves at most the WAITERS bit (one spare wake).
crate::clock::timed_by_deadline!(RawFutexTid);
