//! Timed and untimed waiters mixed, with spinning off so every wait sleeps
//! (its own binary: the switch is process-wide). A timed waiter that is
//! woken and then gives up must pass the wake on, or the untimed sleepers
//! behind it sleep forever once the others stop contending.

#![cfg(not(loom))]

use lock_api::RawMutexTimed;
use lockmeter_locks::{config, RawAdaptive, RawFutex, RawFutexTid, RawPi, RawSpin};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn mixed_waiters<L: RawMutexTimed<Duration = Duration> + Send + Sync + 'static>() {
    const THREADS: usize = 8;
    const ROUNDS: u64 = 400;
    config::set_spinning(false);
    let lock = Arc::new(L::INIT);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    for i in 0..THREADS as u64 {
        let (lock, done_tx) = (lock.clone(), done_tx.clone());
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
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_micros(30) {}
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
