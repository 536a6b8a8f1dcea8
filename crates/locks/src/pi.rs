//! `pi`: the priority-inheritance futex (FUTEX_LOCK_PI / FUTEX_UNLOCK_PI),
//! i.e. the kernel's rtmutex, as glibc's PTHREAD_PRIO_INHERIT mutex uses it.
//!
//! Lock word: owner tid | FUTEX_WAITERS | FUTEX_OWNER_DIED, maintained by
//! the kernel once contended. Uncontended lock and unlock stay in userspace
//! (CAS 0 -> tid, CAS tid -> 0); contention goes to the kernel, which queues
//! waiters by priority, boosts the owner, hands the lock over directly, and
//! (on current kernels) spins while the owner runs.
//!
//! Seed 001 measured it one or two orders of magnitude behind the others:
//! the kernel round trip and the strict handoff convoy under
//! oversubscription. Pick it only when priority inversion matters more than
//! throughput (real-time threads sharing a lock with normal ones).

use crate::record::{self, AcquireKind, NoStats, Recorder};
use crate::sync::{current_tid, AtomicU32, Ordering};
use std::time::Instant;

const FUTEX_LOCK_PI2: libc::c_int = 13;

/// The raw `pi` mutex.
#[repr(C)]
pub struct RawPi<R: Recorder = NoStats> {
    word: AtomicU32,
    recorder: R,
}

impl<R: Recorder> RawPi<R> {
    /// An unlocked mutex.
    pub const fn new() -> Self {
        RawPi { word: AtomicU32::new(0), recorder: R::INIT }
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
        self.lock_in_kernel(None);
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
        self.lock_in_kernel(Some(deadline))
    }

    #[cold]
    fn lock_in_kernel(&self, deadline: Option<Instant>) -> bool {
        let start = record::wait_start::<R>();
        loop {
            let r = self.futex_lock_pi(deadline);
            if r == 0 {
                // The kernel decides whether we slept; it is a kernel wait
                // either way.
                self.recorder.acquired(AcquireKind::Sleep, record::waited::<R>(start));
                return true;
            }
            match crate::futex::errno() {
                libc::ETIMEDOUT => {
                    self.recorder.timed_out(record::waited::<R>(start));
                    return false;
                }
                // The owner is exiting, or a signal interrupted us: retry.
                libc::EAGAIN | libc::EINTR => continue,
                // The kernel will not queue this thread: it holds the lock
                // already (EDEADLK), or the word names a thread of another
                // process (EPERM, ESRCH: in a child of `fork`, a parent
                // thread held it). A normal mutex waits then, for ever or
                // until the deadline, and so does this one, in userspace:
                // only an unlock of a word left by `fork` can free it.
                _ => return self.wait_unqueued(deadline, start),
            }
        }
    }

    /// Waits, polling, for a word the kernel refuses to queue on to be
    /// freed, or for the deadline (none: as long as a normal mutex would).
    #[cold]
    fn wait_unqueued(&self, deadline: Option<Instant>, start: u64) -> bool {
        let tid = current_tid();
        let deadline = deadline.unwrap_or_else(|| Instant::now() + std::time::Duration::from_secs(1 << 32));
        let try_take = || self.word.compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed).is_ok();
        if !crate::clock::poll_until(deadline, try_take) {
            self.recorder.timed_out(record::waited::<R>(start));
            return false;
        }
        self.recorder.acquired(AcquireKind::Sleep, record::waited::<R>(start));
        true
    }

    fn futex_lock_pi(&self, deadline: Option<Instant>) -> libc::c_long {
        // FUTEX_LOCK_PI2 (Linux 5.14) takes an absolute CLOCK_MONOTONIC
        // deadline; older kernels only have FUTEX_LOCK_PI, whose deadline is
        // absolute CLOCK_REALTIME.
        let r = self.futex_lock_pi_op(FUTEX_LOCK_PI2, libc::CLOCK_MONOTONIC, deadline);
        if r == -1 && crate::futex::errno() == libc::ENOSYS {
            return self.futex_lock_pi_op(libc::FUTEX_LOCK_PI, libc::CLOCK_REALTIME, deadline);
        }
        r
    }

    fn futex_lock_pi_op(&self, op: libc::c_int, clock: libc::clockid_t, deadline: Option<Instant>) -> libc::c_long {
        let abs = deadline.map(|d| {
            let left = d.saturating_duration_since(Instant::now());
            let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: valid out-pointer.
            unsafe { libc::clock_gettime(clock, &mut now) };
            let total_ns = now.tv_nsec as u128 + left.subsec_nanos() as u128;
            libc::timespec {
                tv_sec: now.tv_sec + left.as_secs() as libc::time_t + (total_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (total_ns % 1_000_000_000) as libc::c_long,
            }
        });
        let ts = abs.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: the word is a live aligned u32; the deadline lives until
        // the call returns.
        unsafe { libc::syscall(libc::SYS_futex, self.word.as_ptr(), op | libc::FUTEX_PRIVATE_FLAG, 0, ts) }
    }

    /// Releases the lock.
    ///
    /// # Safety
    /// The calling thread must hold the lock.
    #[inline]
    pub unsafe fn unlock(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { self.release() };
    }

    /// Releases the lock if the calling thread holds it, as glibc's PI
    /// mutex does; returns false, leaving the lock held, if another thread
    /// does (the kernel hands a PI lock over only from its owner, so
    /// `pthread_mutex_unlock` returns EPERM there). In a child of `fork`,
    /// the thread that forked releases what it held as it forked (the word
    /// still names its parent-side id, which the kernel does not know).
    ///
    /// # Safety
    /// No thread may release the lock while another holds it on the
    /// caller's behalf (the checks above are the kernel's and the word's).
    #[inline]
    pub unsafe fn release(&self) -> bool {
        self.recorder.releasing();
        let tid = current_tid();
        if self.word.compare_exchange(tid, 0, Ordering::Release, Ordering::Relaxed).is_ok() {
            return true;
        }
        // SAFETY: forwarded caller contract.
        unsafe { self.release_in_kernel() }
    }

    /// [`Self::release`] of a word with waiters, or not the caller's.
    ///
    /// # Safety
    /// As for [`Self::release`].
    #[cold]
    unsafe fn release_in_kernel(&self) -> bool {
        // Waiters are queued in the kernel; it picks and wakes the next owner.
        // SAFETY: the word is a live aligned u32.
        let r = unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_UNLOCK_PI | libc::FUTEX_PRIVATE_FLAG,
            )
        };
        if r == 0 {
            return true;
        }
        let word = self.word.load(Ordering::Relaxed);
        let owner = word & libc::FUTEX_TID_MASK;
        if crate::sync::was_me_before_fork(owner) {
            // The child has no kernel state for this word (its futexes
            // are its own memory's), and no waiter of the parent is here.
            return self.word.compare_exchange(word, 0, Ordering::Release, Ordering::Relaxed).is_ok();
        }
        false
    }

    /// Whether the lock is held.
    pub fn is_locked(&self) -> bool {
        self.word.load(Ordering::Relaxed) & libc::FUTEX_TID_MASK != 0
    }

    /// The holder's kernel thread id, if held.
    pub fn owner(&self) -> Option<u32> {
        Some(self.word.load(Ordering::Relaxed) & libc::FUTEX_TID_MASK).filter(|&tid| tid != 0)
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
        // The kernel reads the owner from the word: FUTEX_UNLOCK_PI from
        // any other id would be refused.
        self.word.store(tid & libc::FUTEX_TID_MASK, Ordering::Release);
    }
}

crate::sync::owner_word_uncontended_steps!(RawPi);

impl<R: Recorder> Default for RawPi<R> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the kernel's rtmutex protocol on the word guarantees exclusion;
// userspace transitions are acquire/release CASes.
unsafe impl<R: Recorder> lock_api::RawMutex for RawPi<R> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type GuardMarker = lock_api::GuardNoSend;
    fn lock(&self) {
        RawPi::lock(self)
    }
    fn try_lock(&self) -> bool {
        RawPi::try_lock(self)
    }
    unsafe fn unlock(&self) {
        RawPi::unlock(self)
    }
    fn is_locked(&self) -> bool {
        RawPi::is_locked(self)
    }
}

// A timed-out attempt leaves the kernel's queue, as FUTEX_LOCK_PI's timeout does.
crate::clock::timed_by_deadline!(RawPi);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// The kernel refuses to queue the owner behind itself (EDEADLK): a
    /// timed relock waits out its deadline, as a normal mutex's does, and
    /// fails (it used to panic, aborting a C caller).
    #[test]
    fn a_timed_relock_by_the_owner_times_out() {
        let lock = RawPi::<NoStats>::new();
        lock.lock();
        let asked = Instant::now();
        assert!(!lock.lock_until(asked + Duration::from_millis(20)));
        assert!(asked.elapsed() >= Duration::from_millis(20));
        // SAFETY: locked above by this thread.
        assert!(unsafe { lock.release() });
        assert!(!lock.is_locked());
    }

    /// Only the owner releases a PI lock (the kernel refuses anyone
    /// else); the refusal is reported, not taken for a release.
    #[test]
    fn a_release_by_another_thread_is_refused_and_the_lock_stays_held() {
        let lock = Arc::new(RawPi::<NoStats>::new());
        lock.lock();
        let other = lock.clone();
        // SAFETY: a release the lock refuses: it touches nothing.
        let released = std::thread::spawn(move || unsafe { other.release() }).join().unwrap();
        assert!(!released);
        assert!(lock.is_locked() && !lock.try_lock());
        // SAFETY: locked above by this thread.
        assert!(unsafe { lock.release() });
    }

    /// In a child of `fork`, the lock the forking thread held names its
    /// parent-side id, which the kernel does not know as the child's: the
    /// thread releases it in userspace and can lock it again. A lock held
    /// by another parent thread stays held: a timed lock times out, and a
    /// release is refused (EPERM to a C caller).
    #[test]
    fn a_child_of_fork_releases_what_the_forking_thread_held() {
        let held_here = RawPi::<NoStats>::new();
        held_here.lock();
        let held_elsewhere = Arc::new(RawPi::<NoStats>::new());
        let (taken_tx, taken) = std::sync::mpsc::channel();
        let (done_tx, done) = std::sync::mpsc::channel::<()>();
        let holder = {
            let lock = held_elsewhere.clone();
            std::thread::spawn(move || {
                lock.lock();
                taken_tx.send(()).unwrap();
                let _ = done.recv();
                // SAFETY: locked above by this thread.
                unsafe { lock.unlock() };
            })
        };
        taken.recv().unwrap();
        let child_passed = crate::sync::in_forked_child(|| {
            // Forked again, the grandchild's thread too releases what its
            // grandparent-side self held, and so does the child after it.
            // SAFETY: held by this thread's grandparent-side self.
            let grandchild_released = crate::sync::in_forked_child(|| unsafe { held_here.release() });
            // SAFETY: held by this thread's parent-side self.
            let released = grandchild_released && unsafe { held_here.release() };
            let relocked = released && held_here.lock_until(Instant::now() + Duration::from_secs(1));
            let elsewhere_times_out = !held_elsewhere.lock_until(Instant::now() + Duration::from_millis(20));
            // SAFETY: a release the lock refuses: another thread holds it.
            let elsewhere_kept = !unsafe { held_elsewhere.release() };
            released && relocked && elsewhere_times_out && elsewhere_kept
        });
        done_tx.send(()).unwrap();
        holder.join().unwrap();
        // SAFETY: locked above by this thread.
        unsafe { held_here.unlock() };
        assert!(child_passed);
    }
}
