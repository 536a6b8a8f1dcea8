//! Timed and untimed waiters mixed, with spinning off so every wait sleeps
//! (its own binary: the switch is process-wide). A timed waiter that is
//! woken and then gives up must pass the wake on, or the untimed sleepers
//! behind it sleep forever once the others stop contending. A queue lock's
//! timed waiter that gives up leaves its place abandoned (`mcs`) or its
//! ticket given up (`ticket`), and the unlock that reaches it must pass the
//! lock on. And a timed lock gets a lock that keeps changing hands.

#![cfg(not(loom))]

use lock_api::RawMutexTimed;
use lockmeter_locks::{config, RawAdaptive, RawFutex, RawFutexTid, RawMcs, RawPi, RawSpin, RawTicket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn mixed_waiters<L: RawMutexTimed<Duration = Duration> + Send + Sync + 'static>() {
    const THREADS: usize = 8;
    const ROUNDS: u64 = 400;
    config::set_spinning(false);
    let lock = Arc::new(L::INIT);
    let inside = Arc::new(AtomicBool::new(false));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    for i in 0..THREADS as u64 {
        let (lock, done_tx, inside) = (lock.clone(), done_tx.clone(), inside.clone());
        std::thread::spawn(move || {
            for round in 0..ROUNDS {
                // Most threads give up after a few microseconds, often just
                // after being woken; two threads never give up.
                let got = if i >= 2 {
                    lock.try_lock_for(Duration::from_micros(2 + (round * 7 + i * 13) % 40))
                } else {
                    lock.lock();
                    true
                };
                if got {
                    assert!(!inside.swap(true, Ordering::Relaxed), "two holders at once");
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_micros(30) {}
                    inside.store(false, Ordering::Relaxed);
                    unsafe { lock.unlock() };
                }
            }
            done_tx.send(()).unwrap();
        });
    }
    for finished in 0..THREADS {
        if done_rx.recv_timeout(Duration::from_secs(30)).is_err() {
            panic!("{} of {THREADS} threads still waiting after 30 s: a lost wake-up", THREADS - finished);
        }
    }
}

#[test]
fn adaptive() {
    mixed_waiters::<RawAdaptive>();
}
#[test]
fn futex() {
    mixed_waiters::<RawFutex>();
}
#[test]
fn futex_tid() {
    mixed_waiters::<RawFutexTid>();
}
#[test]
fn pi() {
    mixed_waiters::<RawPi>();
}
#[test]
fn spin() {
    mixed_waiters::<RawSpin>();
}
#[test]
fn mcs() {
    mixed_waiters::<RawMcs>();
}
#[test]
fn ticket() {
    mixed_waiters::<RawTicket>();
}

/// Six threads keep the lock busy (a short section, no pause between);
/// timed locks with room for thousands of hand-overs must get it. `mcs`
/// polled its queue for a moment it was empty, which never came: 0 of 10;
/// `ticket` polled for a moment between two holders: 5-10 of 10.
fn timed_lock_gets_a_busy_lock<L: RawMutexTimed<Duration = Duration> + Send + Sync + 'static>() {
    let lock = Arc::new(L::INIT);
    let stop = Arc::new(AtomicBool::new(false));
    let hammers: Vec<_> = (0..6)
        .map(|_| {
            let (lock, stop) = (lock.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    lock.lock();
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_micros(1) {}
                    unsafe { lock.unlock() };
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(10));
    let got = (0..10)
        .filter(|_| {
            let got = lock.try_lock_for(Duration::from_millis(200));
            if got {
                unsafe { lock.unlock() };
            }
            got
        })
        .count();
    stop.store(true, Ordering::Relaxed);
    for hammer in hammers {
        hammer.join().unwrap();
    }
    assert_eq!(got, 10, "timed locks that got the lock");
}

#[test]
fn a_timed_mcs_lock_gets_a_busy_lock() {
    timed_lock_gets_a_busy_lock::<RawMcs>();
}

#[test]
fn a_timed_ticket_lock_gets_a_busy_lock() {
    timed_lock_gets_a_busy_lock::<RawTicket>();
}
