//! A condition variable that works with every algorithm of this crate (and
//! any other `lock_api::RawMutex`).
//!
//! State (8 bytes): `sequence`, bumped by every notify and used as the futex
//! word; `waiters`, the number of threads between "about to wait" and
//! "done waiting", so that notify skips the system call when nobody waits.
//!
//! No lost wake-up: a waiter reads `sequence` *before* releasing the mutex,
//! so any notify that follows the release changes the value and the futex
//! wait returns at once. `waiters` is published before `sequence` is read
//! and notify bumps `sequence` before reading `waiters` (both SeqCst): one
//! of the two always sees the other. Spurious wake-ups are possible, as
//! POSIX allows; `notify_all` wakes every waiter (they then queue on the
//! mutex by its own algorithm).
//!
//! One condvar may be waited on with different mutexes; nothing checks it
//! (parking_lot's panics): a notify wakes waiters of either, as a POSIX
//! condvar's would, and each goes back to its own mutex.

use crate::futex::keeping_errno;
use crate::sync::{futex_wait, futex_wake, AtomicU32, Ordering, WaitOutcome};
use std::time::{Duration, Instant};

/// A condition variable for any raw mutex.
#[repr(C)]
pub struct Condvar {
    sequence: AtomicU32,
    waiters: AtomicU32,
}

/// Whether a timed wait ended by notification or by its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitResult {
    /// Notified, or woken spuriously.
    Notified,
    /// The deadline passed.
    TimedOut,
}

impl Condvar {
    crate::sync::const_unless_loom! {
        /// A condition variable nobody waits on.
        pub fn new() -> Self {
            Condvar { sequence: AtomicU32::new(0), waiters: AtomicU32::new(0) }
        }
    }

    /// Releases `mutex`, waits for a notification (or `deadline`), and
    /// re-acquires `mutex` before returning, whatever the outcome.
    ///
    /// # Safety
    /// The calling thread must hold `mutex`.
    pub unsafe fn wait_raw<M: lock_api::RawMutex>(&self, mutex: &M, deadline: Option<Instant>) -> WaitResult {
        // SAFETY: the caller holds the mutex.
        self.wait_with(|| unsafe { mutex.unlock() }, || mutex.lock(), deadline)
    }

    /// The wait protocol, for a lock given as its release and re-acquire
    /// operations: `release` runs after the waiter is registered, `reacquire`
    /// after the wait ends.
    ///
    /// Leaving (the waiter count's decrement) is the waiter's last access
    /// to the condvar, also when the wait is left by unwinding (a thread
    /// cancelled while blocked), so a destroyer that sees no waiters can
    /// free the memory.
    pub fn wait_with(&self, release: impl FnOnce(), reacquire: impl FnOnce(), deadline: Option<Instant>) -> WaitResult {
        struct Leave<'a>(&'a AtomicU32);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Release);
            }
        }
        let seen = self.enter();
        let leave = Leave(&self.waiters);
        release();
        let outcome = futex_wait(&self.sequence, seen, deadline);
        drop(leave);
        reacquire();
        match outcome {
            WaitOutcome::TimedOut => WaitResult::TimedOut,
            // A signal handler's interruption is one of the spurious
            // wake-ups a Rust condvar's caller loops over.
            WaitOutcome::Woken | WaitOutcome::ValueChanged | WaitOutcome::Interrupted => WaitResult::Notified,
        }
    }

    /// The first step of a wait, for a caller that blocks by itself (a
    /// wait that must be a pthread cancellation point blocks in one raw
    /// system call, with nothing of Rust's to unwind): registers the caller
    /// as a waiter and returns the value of [`Condvar::futex_word`] to wait
    /// for a change of (`FUTEX_WAIT`). The caller then releases its mutex,
    /// blocks, and calls [`Condvar::leave`] once it stops waiting, however
    /// it stops.
    pub fn enter(&self) -> u32 {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        self.sequence.load(Ordering::SeqCst)
    }

    /// The word every notify changes, and wakes the waiters of.
    pub fn futex_word(&self) -> &AtomicU32 {
        &self.sequence
    }

    /// The last step of a wait begun with [`Condvar::enter`]: its last
    /// access to the condvar.
    pub fn leave(&self) {
        self.waiters.fetch_sub(1, Ordering::Release);
    }

    /// Waits on a `lock_api` guard: releases its mutex while waiting.
    pub fn wait<M: lock_api::RawMutex, T: ?Sized>(&self, guard: &mut lock_api::MutexGuard<'_, M, T>) {
        // SAFETY: the guard proves the mutex is held by this thread, and the
        // mutex is held again when wait_raw returns, so the guard stays valid.
        unsafe { self.wait_raw(lock_api::MutexGuard::mutex(guard).raw(), None) };
    }

    /// Like [`Condvar::wait`], giving up at `deadline`.
    pub fn wait_until<M: lock_api::RawMutex, T: ?Sized>(
        &self,
        guard: &mut lock_api::MutexGuard<'_, M, T>,
        deadline: Instant,
    ) -> WaitResult {
        // SAFETY: as in `wait`.
        unsafe { self.wait_raw(lock_api::MutexGuard::mutex(guard).raw(), Some(deadline)) }
    }

    /// Like [`Condvar::wait`], giving up after `timeout` (a timeout too
    /// long to be a deadline waits for ever).
    pub fn wait_for<M: lock_api::RawMutex, T: ?Sized>(&self, guard: &mut lock_api::MutexGuard<'_, M, T>, timeout: Duration) -> WaitResult {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.wait_until(guard, deadline),
            None => {
                self.wait(guard);
                WaitResult::Notified
            }
        }
    }

    /// Waits while `condition` holds of the guarded value: checked first
    /// and after every wake-up (spurious ones included), so it returns with
    /// the mutex held and `condition` false.
    pub fn wait_while<M: lock_api::RawMutex, T: ?Sized>(
        &self,
        guard: &mut lock_api::MutexGuard<'_, M, T>,
        mut condition: impl FnMut(&mut T) -> bool,
    ) {
        while condition(&mut **guard) {
            self.wait(guard);
        }
    }

    /// Wakes one waiter, if any. Leaves `errno` as it was (its one system
    /// call, the wake, keeps it), so that a pthread condvar served by it
    /// need not keep it around every signal (a served lock + signal +
    /// unlock with nobody waiting, in a C loop, pinned, medians of 11
    /// alternated runs: 12.67 ns keeping it around the call, 11.42 here,
    /// glibc 8.88).
    #[inline]
    pub fn notify_one(&self) {
        self.sequence.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) != 0 {
            keeping_errno(|| futex_wake(&self.sequence, 1));
        }
    }

    /// Wakes every waiter, leaving `errno` as [`Condvar::notify_one`].
    #[inline]
    pub fn notify_all(&self) {
        self.sequence.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) != 0 {
            keeping_errno(|| futex_wake(&self.sequence, u32::MAX));
        }
    }

    /// Whether some thread is (about to be) waiting, or woken and not yet
    /// gone (see [`Condvar::wait_with`]).
    pub fn has_waiters(&self) -> bool {
        self.waiters.load(Ordering::Acquire) != 0
    }
}

#[cfg(not(loom))]
impl Default for Condvar {
    fn default() -> Self {
        Self::new()
    }
}
