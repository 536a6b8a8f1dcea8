//! Forks of a process whose threads contend on an `adaptive` lock. The
//! forking thread holds the lock across `fork`, so each child starts with
//! the flags and handoff requests of parent threads that do not exist
//! there: its unlock and its own threads take those requests back and
//! lock, with mutual exclusion, never waiting for a thread of the parent.
//! In its own test binary: it sets the handoff bound low for the whole
//! process, so that starving waiters ask for the lock at most forks.

#![cfg(not(loom))]

use lockmeter_locks::{config, RawAdaptive};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

static LOCK: RawAdaptive = RawAdaptive::new();
static STOP: AtomicBool = AtomicBool::new(false);
/// Incremented under the lock by a load and a store: a lost update shows
/// two holders at once.
static COUNT: AtomicU64 = AtomicU64::new(0);

fn hold_for(ns: u64) {
    let started = Instant::now();
    while started.elapsed() < Duration::from_nanos(ns) {}
}

fn locked_increment(hold_ns: u64) {
    LOCK.lock();
    COUNT.store(COUNT.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    hold_for(hold_ns);
    // SAFETY: held by this thread.
    unsafe { LOCK.unlock() };
}

/// In the child: releases the lock its parent's thread took, then counts
/// 3 x 2000 increments from threads of its own. Exits 0 when all counted
/// and the lock is free.
fn child() -> ! {
    // SAFETY: a watchdog for a child that hangs: the parent reads the
    // signal as a failure.
    unsafe { libc::alarm(10) };
    // SAFETY: held by this thread (in the parent, under its old id).
    unsafe { LOCK.unlock() };
    let before = COUNT.load(Ordering::Relaxed);
    let threads: Vec<_> = (0..3).map(|_| std::thread::spawn(|| (0..2000).for_each(|_| locked_increment(100)))).collect();
    let joined = threads.into_iter().all(|t| t.join().is_ok());
    let counted = COUNT.load(Ordering::Relaxed) == before + 6000;
    // SAFETY: ends the child without running the parent's exit handlers.
    unsafe { libc::_exit(if joined && counted && !LOCK.is_locked() { 0 } else { 1 }) }
}

#[test]
fn children_of_a_contended_fork_take_the_parents_requests_back_and_lock() {
    config::set_handoff_bound(Duration::from_micros(50));
    let workers: Vec<_> = (0..6u64)
        .map(|i| {
            std::thread::spawn(move || {
                while !STOP.load(Ordering::Relaxed) {
                    locked_increment(200 + 300 * (i % 3));
                }
            })
        })
        .collect();
    let mut failures = Vec::new();
    for fork in 0..100 {
        std::thread::sleep(Duration::from_millis(2));
        LOCK.lock();
        // SAFETY: the child runs `child` alone and `_exit`s; the parent's
        // workers allocate nothing while they loop.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            child();
        }
        // SAFETY: held by this thread.
        unsafe { LOCK.unlock() };
        assert!(pid > 0, "fork failed");
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
            failures.push((fork, status));
            break;
        }
    }
    STOP.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().unwrap();
    }
    assert!(failures.is_empty(), "a child failed or hung (fork, wait status): {failures:?}");
}
