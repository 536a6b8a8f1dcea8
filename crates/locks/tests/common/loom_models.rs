//! The loom models, shared by the test binaries that run them under
//! different process-wide settings (spinning on, spinning off, handoff
//! forced). What they prove, for each algorithm that parks:
//! - mutual exclusion: the critical section touches a `loom::cell::UnsafeCell`,
//!   which fails the model on any concurrent access;
//! - no lost wake-up: a thread asleep on a futex that nobody will wake makes
//!   loom report a deadlock.

use lockmeter_locks::{Condvar, NoStats, RawAdaptive, RawFutex, RawFutexTid, RawMcs, RawTicket};
use loom::cell::UnsafeCell;
use loom::sync::Arc;

/// The lock operations the models use (the raw types' inherent methods).
pub trait ModelLock: Send + Sync + 'static {
    fn create() -> Self;
    fn acquire(&self);
    fn try_acquire(&self) -> bool;
    fn release(&self);
    fn held(&self) -> bool;
}

macro_rules! model_lock {
    ($($t:ty),*) => {$(
        impl ModelLock for $t {
            fn create() -> Self { <$t>::new() }
            fn acquire(&self) { self.lock() }
            fn try_acquire(&self) -> bool { self.try_lock() }
            fn release(&self) { unsafe { self.unlock() } }
            fn held(&self) -> bool { self.is_locked() }
        }
    )*};
}
model_lock!(RawAdaptive<NoStats>, RawFutex<NoStats>, RawFutexTid<NoStats>, RawTicket<NoStats>, RawMcs<NoStats>);

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b
}

/// One thread tries the lock (and releases it if it got it) while the main
/// one takes it: what a successful try publishes must be complete for the
/// waiter that queues behind it (`mcs`'s try published its queue node
/// without Release, and the next waiter's link into it raced with the
/// node's own reset).
pub fn try_beside_lock<L: ModelLock>() {
    builder().check(|| {
        let shared = Arc::new((L::create(), UnsafeCell::new(0usize)));
        let trier = {
            let shared = shared.clone();
            loom::thread::spawn(move || {
                if shared.0.try_acquire() {
                    shared.1.with_mut(|v| unsafe { *v += 1 });
                    shared.0.release();
                }
            })
        };
        shared.0.acquire();
        shared.1.with_mut(|v| unsafe { *v += 1 });
        shared.0.release();
        trier.join().unwrap();
        assert!(!shared.0.held(), "left locked");
    });
}

/// `threads` threads (the main one included) each take the lock once and
/// increment a counter that loom watches for races.
pub fn exclusion<L: ModelLock>(threads: usize) {
    builder().check(move || {
        let shared = Arc::new((L::create(), UnsafeCell::new(0usize)));
        let others: Vec<_> = (1..threads)
            .map(|_| {
                let shared = shared.clone();
                loom::thread::spawn(move || {
                    shared.0.acquire();
                    shared.1.with_mut(|v| unsafe { *v += 1 });
                    shared.0.release();
                })
            })
            .collect();
        shared.0.acquire();
        shared.1.with_mut(|v| unsafe { *v += 1 });
        shared.0.release();
        for t in others {
            t.join().unwrap();
        }
        assert_eq!(shared.1.with(|v| unsafe { *v }), threads);
        assert!(!shared.0.held());
    });
}

/// `ticket`'s line-full mark: the lock starts with two tickets out under
/// the models' window of one, served by the main thread, and one newcomer.
/// With the line marked full (`marked`), the newcomer finds the gate word
/// set, looks at the line and sleeps at the gate: the unlock that empties
/// the line must admit it (a gate sleeper nobody wakes is a deadlock).
/// Unmarked, it joins beyond the window, marks the line and parks. Either
/// way the unlock that empties the line leaves no mark behind. (Two
/// newcomers take ten minutes to check, too long for every run.)
pub fn ticket_line(marked: bool) {
    builder().check(move || {
        let shared = Arc::new((RawTicket::<NoStats>::with_line_for_model(2, marked), UnsafeCell::new(0usize)));
        let newcomer = {
            let shared = shared.clone();
            loom::thread::spawn(move || {
                shared.0.acquire();
                shared.1.with_mut(|v| unsafe { *v += 1 });
                shared.0.release();
            })
        };
        shared.0.release();
        shared.0.release();
        newcomer.join().unwrap();
        assert_eq!(shared.1.with(|v| unsafe { *v }), 1);
        assert!(!shared.0.held());
        assert_eq!(shared.0.gate_word_for_model(), 0, "nobody at the gate and no mark left");
    });
}

/// The uncontended release a pthread replacement tries before the full
/// unlock (one atomic step, never a system call, nothing done when it
/// declines).
pub trait UncontendedRelease: ModelLock {
    /// # Safety
    /// The lock is held by the calling thread.
    unsafe fn release_if_uncontended(&self) -> bool;
}

impl UncontendedRelease for RawMcs<NoStats> {
    unsafe fn release_if_uncontended(&self) -> bool {
        unsafe { self.unlock_if_uncontended() }
    }
}

impl UncontendedRelease for RawFutex<NoStats> {
    unsafe fn release_if_uncontended(&self) -> bool {
        unsafe { self.unlock_if_uncontended() }
    }
}

impl UncontendedRelease for RawAdaptive<NoStats> {
    unsafe fn release_if_uncontended(&self) -> bool {
        unsafe { self.unlock_if_uncontended_as(lockmeter_locks::current_tid()) }
    }
}

impl UncontendedRelease for RawFutexTid<NoStats> {
    unsafe fn release_if_uncontended(&self) -> bool {
        unsafe { self.unlock_if_uncontended_as(lockmeter_locks::current_tid()) }
    }
}

/// Two threads take the lock once each and release it as a served
/// mutex's unlock does, the uncontended release first and the full
/// unlock when it declines: mutual exclusion, and no waiter left asleep
/// (a release that took the fast step with a waiter queued or flagged
/// would leave it parked: a deadlock).
pub fn uncontended_release<L: UncontendedRelease>() {
    fn release<L: UncontendedRelease>(lock: &L) {
        // SAFETY: held by this thread.
        if !unsafe { lock.release_if_uncontended() } {
            lock.release();
        }
    }
    builder().check(|| {
        let shared = Arc::new((L::create(), UnsafeCell::new(0usize)));
        let other = {
            let shared = shared.clone();
            loom::thread::spawn(move || {
                shared.0.acquire();
                shared.1.with_mut(|v| unsafe { *v += 1 });
                release(&shared.0);
            })
        };
        shared.0.acquire();
        shared.1.with_mut(|v| unsafe { *v += 1 });
        release(&shared.0);
        other.join().unwrap();
        assert_eq!(shared.1.with(|v| unsafe { *v }), 2);
        assert!(!shared.0.held(), "left locked");
    });
}

/// A waiter waits for a flag under the mutex; the notifier sets it and
/// notifies. A lost wake-up leaves the waiter asleep forever (a deadlock).
pub fn condvar<L: ModelLock>() {
    builder().check(|| {
        let shared = Arc::new((L::create(), Condvar::new(), UnsafeCell::new(false)));
        let notifier = {
            let shared = shared.clone();
            loom::thread::spawn(move || {
                shared.0.acquire();
                shared.2.with_mut(|ready| unsafe { *ready = true });
                shared.1.notify_one();
                shared.0.release();
            })
        };
        let (lock, cv, ready) = (&shared.0, &shared.1, &shared.2);
        lock.acquire();
        while !ready.with(|r| unsafe { *r }) {
            cv.wait_with(|| lock.release(), || lock.acquire(), None);
        }
        lock.release();
        notifier.join().unwrap();
    });
}

/// Declares the whole suite of models in the including test binary;
/// `$setup` runs at the start of every model test.
#[macro_export]
macro_rules! loom_suite {
    ($setup:expr) => {
        use lockmeter_locks::{NoStats, RawAdaptive, RawFutex, RawFutexTid, RawMcs, RawTicket};
        use common::loom_models::{condvar, exclusion, ticket_line, try_beside_lock, uncontended_release};
        loom_suite!(@tests $setup;
            adaptive_two_threads => exclusion::<RawAdaptive<NoStats>>(2),
            adaptive_three_threads => exclusion::<RawAdaptive<NoStats>>(3),
            futex_three_threads => exclusion::<RawFutex<NoStats>>(3),
            futex_tid_three_threads => exclusion::<RawFutexTid<NoStats>>(3),
            ticket_two_threads => exclusion::<RawTicket<NoStats>>(2),
            ticket_three_threads => exclusion::<RawTicket<NoStats>>(3),
            ticket_gate_admits_a_newcomer => ticket_line(true),
            ticket_newcomer_marks_the_line_full => ticket_line(false),
            mcs_two_threads => exclusion::<RawMcs<NoStats>>(2),
            mcs_three_threads => exclusion::<RawMcs<NoStats>>(3),
            adaptive_try_beside_lock => try_beside_lock::<RawAdaptive<NoStats>>(),
            futex_try_beside_lock => try_beside_lock::<RawFutex<NoStats>>(),
            futex_tid_try_beside_lock => try_beside_lock::<RawFutexTid<NoStats>>(),
            ticket_try_beside_lock => try_beside_lock::<RawTicket<NoStats>>(),
            mcs_try_beside_lock => try_beside_lock::<RawMcs<NoStats>>(),
            adaptive_uncontended_release => uncontended_release::<RawAdaptive<NoStats>>(),
            futex_uncontended_release => uncontended_release::<RawFutex<NoStats>>(),
            futex_tid_uncontended_release => uncontended_release::<RawFutexTid<NoStats>>(),
            mcs_uncontended_release => uncontended_release::<RawMcs<NoStats>>(),
            condvar_with_adaptive => condvar::<RawAdaptive<NoStats>>(),
            condvar_with_futex => condvar::<RawFutex<NoStats>>(),
            condvar_with_futex_tid => condvar::<RawFutexTid<NoStats>>(),
            condvar_with_ticket => condvar::<RawTicket<NoStats>>(),
            condvar_with_mcs => condvar::<RawMcs<NoStats>>()
        );
    };
    (@tests $setup:expr; $($name:ident => $model:expr),*) => {
        $(
            #[test]
            fn $name() {
                $setup;
                $model
            }
        )*
    };
}
