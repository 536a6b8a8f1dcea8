//! Behaviour of every algorithm on the real machine (2 cores here, so 8 and
//! 64 threads are oversubscribed): mutual exclusion, trylock, timeouts,
//! condvar wake-ups, and adaptive's starvation bound.

#![cfg(not(loom))]

use lock_api::{RawMutex, RawMutexTimed};
use lockmeter_locks::*;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// A counter the lock must protect: incremented non-atomically, so two
/// holders at once lose increments.
struct Shadow<L> {
    lock: L,
    count: UnsafeCell<u64>,
}
unsafe impl<L: Sync> Sync for Shadow<L> {}

fn exclusion<L: RawMutex + Send + Sync + 'static>(threads: usize, per_thread: u64) {
    exclusion_yielding::<L>(threads, per_thread, u64::MAX);
}

/// As `exclusion`, with the holder yielding its CPU inside the critical
/// section every `yield_every` acquisitions (waiters then queue and park).
fn exclusion_yielding<L: RawMutex + Send + Sync + 'static>(threads: usize, per_thread: u64, yield_every: u64) {
    exclusion_on(Arc::new(Shadow { lock: L::INIT, count: UnsafeCell::new(0) }), threads, per_thread, yield_every);
}

/// As `exclusion_yielding`, on a lock made elsewhere, its count at 0.
fn exclusion_on<L: RawMutex + Send + Sync + 'static>(shared: Arc<Shadow<L>>, threads: usize, per_thread: u64, yield_every: u64) {
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let shared = shared.clone();
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                for i in 0..per_thread {
                    shared.lock.lock();
                    // SAFETY (test): the lock under test is held.
                    unsafe {
                        let v = std::ptr::read_volatile(shared.count.get());
                        std::hint::spin_loop();
                        if i % yield_every == yield_every - 1 {
                            std::thread::yield_now();
                        }
                        std::ptr::write_volatile(shared.count.get(), v + 1);
                        shared.lock.unlock();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(unsafe { *shared.count.get() }, threads as u64 * per_thread);
    assert!(!shared.lock.is_locked());
}

fn trylock<L: RawMutex + Send + Sync + 'static>() {
    let lock = Arc::new(L::INIT);
    assert!(lock.try_lock(), "free lock must be taken by trylock");
    // Another thread must be refused while we hold it.
    let other = lock.clone();
    let refused = std::thread::spawn(move || !other.try_lock()).join().unwrap();
    assert!(refused, "held lock must refuse trylock");
    unsafe { lock.unlock() };
    let other = lock.clone();
    let taken = std::thread::spawn(move || {
        let ok = other.try_lock();
        if ok {
            unsafe { other.unlock() };
        }
        ok
    })
    .join()
    .unwrap();
    assert!(taken, "released lock must be taken by trylock");
}

fn timed_out<L: RawMutexTimed<Duration = Duration> + Sync + Send + 'static>() {
    let lock = Arc::new(L::INIT);
    lock.lock();
    let other = lock.clone();
    let (ok, waited) = std::thread::spawn(move || {
        let t = Instant::now();
        let ok = other.try_lock_for(Duration::from_millis(50));
        (ok, t.elapsed())
    })
    .join()
    .unwrap();
    assert!(!ok, "held lock must time out");
    assert!(waited >= Duration::from_millis(50), "gave up early: {waited:?}");
    assert!(waited < Duration::from_secs(2), "gave up late: {waited:?}");
    unsafe { lock.unlock() };
    // And a free lock is taken before the deadline.
    assert!(lock.try_lock_for(Duration::from_millis(50)));
    unsafe { lock.unlock() };
    // A timeout too long to be a deadline is none (Duration::MAX panicked
    // adding itself to now): waited for, held or free.
    assert!(lock.try_lock_for(Duration::MAX));
    let other = lock.clone();
    let waiter = std::thread::spawn(move || {
        let taken = other.try_lock_for(Duration::MAX);
        if taken {
            unsafe { other.unlock() };
        }
        taken
    });
    std::thread::sleep(Duration::from_millis(20));
    unsafe { lock.unlock() };
    assert!(waiter.join().unwrap(), "taken once released");
}

/// Two threads pass the turn back and forth through one condvar; a lost
/// wake-up hangs the exchange (caught by the watchdog).
fn condvar_ping_pong<L: RawMutex + Send + Sync + 'static>() {
    const ROUNDS: u64 = 2_000;
    let mutex = Arc::new(lock_api::Mutex::<L, u64>::new(0));
    let cv = Arc::new(Condvar::new());
    let done = Arc::new(AtomicBool::new(false));
    let players: Vec<_> = (0..2u64)
        .map(|me| {
            let (mutex, cv) = (mutex.clone(), cv.clone());
            std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let mut turn = mutex.lock();
                    while *turn % 2 != me {
                        cv.wait(&mut turn);
                    }
                    *turn += 1;
                    cv.notify_all();
                }
            })
        })
        .collect();
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            while !done.load(Ordering::Relaxed) {
                assert!(t.elapsed() < Duration::from_secs(30), "condvar ping-pong hung: lost wake-up");
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    for p in players {
        p.join().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    watchdog.join().unwrap();
    assert_eq!(*mutex.lock(), 2 * ROUNDS);
}

fn condvar_timeout<L: RawMutex + Send + Sync + 'static>() {
    let mutex = lock_api::Mutex::<L, ()>::new(());
    let cv = Condvar::new();
    let mut guard = mutex.lock();
    let t = Instant::now();
    let r = cv.wait_until(&mut guard, t + Duration::from_millis(30));
    assert_eq!(r, WaitResult::TimedOut);
    assert!(t.elapsed() >= Duration::from_millis(30));
    assert!(mutex.is_locked(), "the mutex is held again after the wait");
}

macro_rules! algorithm_tests {
    ($module:ident, $raw:ty, timed = $timed:tt) => {
        mod $module {
            use super::*;
            #[test]
            fn exclusion_2_threads() {
                exclusion::<$raw>(2, 20_000);
            }
            #[test]
            fn exclusion_8_threads() {
                exclusion::<$raw>(8, 4_000);
            }
            #[test]
            fn exclusion_64_threads() {
                exclusion::<$raw>(64, 300);
            }
            #[test]
            fn exclusion_past_16_bit_counters() {
                // 160,000 acquisitions: ticket numbers wrap at 65,536.
                exclusion::<$raw>(8, 20_000);
            }
            #[test]
            fn exclusion_with_holders_yielding() {
                // Oversubscribed, and the holder gives its CPU away now
                // and then: waiters queue up and park.
                exclusion_yielding::<$raw>(8, 3_000, 64);
            }
            #[test]
            fn trylock_refuses_held_lock() {
                trylock::<$raw>();
            }
            #[test]
            fn condvar_no_lost_wakeup() {
                condvar_ping_pong::<$raw>();
            }
            #[test]
            fn condvar_wait_times_out() {
                condvar_timeout::<$raw>();
            }
            algorithm_tests!(@timed $raw, $timed);
        }
    };
    (@timed $raw:ty, true) => {
        #[test]
        fn timed_lock_times_out() {
            timed_out::<$raw>();
        }
    };
    (@timed $raw:ty, false) => {};
}

algorithm_tests!(adaptive, RawAdaptive, timed = true);
algorithm_tests!(futex, RawFutex, timed = true);
algorithm_tests!(futex_tid, RawFutexTid, timed = true);
algorithm_tests!(pi, RawPi, timed = true);
algorithm_tests!(ticket, RawTicket, timed = false);
algorithm_tests!(mcs, RawMcs, timed = false);
algorithm_tests!(spin, RawSpin, timed = true);
algorithm_tests!(any_default_adaptive, AnyMutex, timed = false);

/// `wait_for` gives up after its timeout, and waits for a notification
/// when the timeout is too long for a deadline; `wait_while` returns with
/// the condition false, through notifications that leave it true.
#[test]
fn condvar_wait_for_and_wait_while() {
    let mutex = Arc::new(lockmeter_locks::AdaptiveMutex::new(0u32));
    let cv = Arc::new(Condvar::new());
    let mut guard = mutex.lock();
    let t = Instant::now();
    assert_eq!(cv.wait_for(&mut guard, Duration::from_millis(30)), WaitResult::TimedOut);
    assert!(t.elapsed() >= Duration::from_millis(30));
    drop(guard);
    let producer = {
        let (mutex, cv) = (mutex.clone(), cv.clone());
        std::thread::spawn(move || {
            for _ in 0..4 {
                std::thread::sleep(Duration::from_millis(10));
                *mutex.lock() += 1;
                cv.notify_all();
            }
        })
    };
    let mut guard = mutex.lock();
    cv.wait_while(&mut guard, |count| *count < 3);
    assert!(*guard >= 3);
    while *guard < 4 {
        assert_eq!(cv.wait_for(&mut guard, Duration::MAX), WaitResult::Notified);
    }
    drop(guard);
    producer.join().unwrap();
}

/// The FIFO locks' fair unlock: a guard bumped gives the lock to the
/// thread waiting in line before its own thread takes it again.
fn bump_lets_the_waiter_in<L: RawMutex + lock_api::RawMutexFair + Send + Sync + 'static>() {
    let mutex = Arc::new(lock_api::Mutex::<L, u32>::new(0));
    let mut guard = mutex.lock();
    let about_to_lock = Arc::new(AtomicBool::new(false));
    let waiter = {
        let (mutex, about_to_lock) = (mutex.clone(), about_to_lock.clone());
        std::thread::spawn(move || {
            about_to_lock.store(true, Ordering::Relaxed);
            *mutex.lock() += 1;
        })
    };
    while !about_to_lock.load(Ordering::Relaxed) {
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(50));
    lock_api::MutexGuard::bump(&mut guard);
    assert_eq!(*guard, 1, "the waiter had the lock first");
    drop(guard);
    waiter.join().unwrap();
}

#[test]
fn ticket_bump_is_fair() {
    bump_lets_the_waiter_in::<RawTicket>();
}

#[test]
fn mcs_bump_is_fair() {
    bump_lets_the_waiter_in::<RawMcs>();
}

/// Every algorithm through the run-time-chosen `AnyMutex`, including the
/// polling timed lock of `ticket` and `mcs`.
#[test]
fn any_mutex_every_algorithm() {
    for algorithm in Algorithm::ALL {
        let shared = Arc::new(Shadow { lock: AnyMutex::new(algorithm), count: UnsafeCell::new(0) });
        exclusion_on(shared.clone(), 4, 2_000, u64::MAX);
        shared.lock.lock();
        let other = shared.clone();
        let timed_out = std::thread::spawn(move || !other.lock.lock_until(Instant::now() + Duration::from_millis(20)))
            .join()
            .unwrap();
        assert!(timed_out, "{algorithm}: held lock must time out");
        unsafe { shared.lock.unlock() };
        assert!(shared.lock.lock_until(Instant::now() + Duration::from_millis(20)), "{algorithm}");
        unsafe { shared.lock.unlock() };
    }
}

/// `reset_to_held_by`, as a child of `fork` uses it: a lock its holder
/// left held (that thread is gone) becomes held by this thread, which
/// others find taken until it unlocks; then the lock works as ever.
macro_rules! reset_to_held_tests {
    ($($name:ident: $raw:ty),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let shared = Arc::new(Shadow { lock: <$raw>::new(), count: UnsafeCell::new(0) });
                let holder = shared.clone();
                std::thread::spawn(move || holder.lock.lock()).join().unwrap();
                // SAFETY: no other thread uses the lock, and this one unlocks it.
                unsafe { shared.lock.reset_to_held_by(current_tid()) };
                assert!(shared.lock.is_locked());
                let other = shared.clone();
                assert!(!std::thread::spawn(move || other.lock.try_lock()).join().unwrap(), "taken by this thread");
                // SAFETY: held by this thread.
                unsafe { shared.lock.unlock() };
                assert!(!shared.lock.is_locked());
                exclusion_on(shared, 4, 2_000, u64::MAX);
            }
        )*
    };
}

reset_to_held_tests!(
    adaptive_reset_to_held: RawAdaptive,
    futex_reset_to_held: RawFutex,
    futex_tid_reset_to_held: RawFutexTid,
    pi_reset_to_held: RawPi,
    ticket_reset_to_held: RawTicket,
    mcs_reset_to_held: RawMcs,
    spin_reset_to_held: RawSpin,
);

/// The uncontended unlock (`unlock_if_uncontended[_as]`, which a pthread
/// replacement calls first so as to skip saving `errno`) releases only a
/// lock that nobody waits for, and only for its holder where the word
/// names it; otherwise it leaves everything to the full unlock.
fn uncontended_unlock_only_when_nobody_waits<L: RawMutex + Send + Sync + 'static>(
    unlock_if_uncontended: fn(&L) -> bool,
    word_names_holder: bool,
) {
    let lock = Arc::new(L::INIT);
    lock.lock();
    assert!(unlock_if_uncontended(&lock), "held, nobody waiting: released");
    assert!(lock.try_lock(), "and free again");

    let waiter = {
        let lock = Arc::clone(&lock);
        std::thread::spawn(move || {
            lock.lock();
            // SAFETY: taken just above, on this thread.
            unsafe { lock.unlock() };
        })
    };
    // The holder sleeps, so the waiter stops spinning and sleeps too.
    std::thread::sleep(Duration::from_millis(100));
    assert!(!unlock_if_uncontended(&lock), "a sleeping waiter needs the full unlock's wake");
    assert!(!lock.try_lock(), "and the lock is still held");
    // SAFETY: held by this thread.
    unsafe { lock.unlock() };
    waiter.join().unwrap();

    if word_names_holder {
        let (held, release) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        let holder = {
            let (lock, held, release) = (Arc::clone(&lock), Arc::clone(&held), Arc::clone(&release));
            std::thread::spawn(move || {
                lock.lock();
                held.wait();
                release.wait();
                // SAFETY: taken above, on this thread.
                unsafe { lock.unlock() };
            })
        };
        held.wait();
        assert!(!unlock_if_uncontended(&lock), "another thread's lock is not this thread's to release");
        assert!(!lock.try_lock(), "and it stays held");
        release.wait();
        holder.join().unwrap();
    }
    assert!(lock.try_lock(), "free at the end");
}

#[test]
fn uncontended_unlock_adaptive() {
    // SAFETY: the caller's own id.
    uncontended_unlock_only_when_nobody_waits::<RawAdaptive>(|lock| unsafe { lock.unlock_if_uncontended_as(current_tid()) }, true);
}

#[test]
fn uncontended_unlock_futex_tid() {
    // SAFETY: the caller's own id.
    uncontended_unlock_only_when_nobody_waits::<RawFutexTid>(|lock| unsafe { lock.unlock_if_uncontended_as(current_tid()) }, true);
}

#[test]
fn uncontended_unlock_pi() {
    // SAFETY: the caller's own id.
    uncontended_unlock_only_when_nobody_waits::<RawPi>(|lock| unsafe { lock.unlock_if_uncontended_as(current_tid()) }, true);
}

#[test]
fn uncontended_unlock_mcs() {
    // SAFETY: the helper calls it only while the lock is held.
    uncontended_unlock_only_when_nobody_waits::<RawMcs>(|lock| unsafe { lock.unlock_if_uncontended() }, false);
}

#[test]
fn uncontended_unlock_futex() {
    // SAFETY: the helper calls it only while the lock is held.
    uncontended_unlock_only_when_nobody_waits::<RawFutex>(|lock| unsafe { lock.unlock_if_uncontended() }, false);
}

/// The process's anonymous resident memory, kB.
fn resident_anonymous_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// `mcs`'s queue nodes are recycled, however threads pass them around:
/// two threads each nesting 12 locks (each lock a node) for half a second
/// keep their memory. (The shared node list, found busy, mapped a fresh
/// page instead of waiting: 300 MB a second.)
#[test]
fn mcs_recycles_its_nodes() {
    let locks: Arc<Vec<Vec<RawMcs>>> = Arc::new((0..2).map(|_| (0..12).map(|_| RawMcs::INIT).collect()).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let before = resident_anonymous_kb();
    let workers: Vec<_> = (0..2)
        .map(|me| {
            let (locks, stop) = (Arc::clone(&locks), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for lock in &locks[me] {
                        lock.lock();
                    }
                    for lock in locks[me].iter().rev() {
                        // SAFETY: taken above by this thread.
                        unsafe { lock.unlock() };
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().unwrap();
    }
    let grown = resident_anonymous_kb().saturating_sub(before);
    assert!(grown < 4096, "mcs grew {grown} kB in 0.5 s");
}
