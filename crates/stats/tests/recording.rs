//! Statistics on give exact counts; statistics off compile to nothing.

use lock_api::{RawMutex, RawMutexTimed};
use lockmeter_locks::*;
use lockmeter_stats::LockStats;
use std::sync::Arc;
use std::time::Duration;

fn exact_counts<L>(stats: impl Fn(&L) -> &LockStats)
where
    L: RawMutex + Send + Sync + 'static,
{
    const TRIES: u64 = 137;
    const LOCKS: u64 = 1000;
    let lock = Arc::new(L::INIT);
    for _ in 0..LOCKS {
        lock.lock();
        unsafe { lock.unlock() };
    }
    // Trylock failures while another thread holds it: REJECT = TRIES.
    lock.lock();
    let other = lock.clone();
    let refused = std::thread::spawn(move || (0..TRIES).filter(|_| !other.try_lock()).count())
        .join()
        .unwrap();
    assert_eq!(refused as u64, TRIES);
    unsafe { lock.unlock() };
    let s = stats(&lock).snapshot();
    assert_eq!(s.rejected, TRIES);
    assert_eq!(s.acquisitions, LOCKS + 1);
    assert_eq!(s.no_wait, LOCKS + 1, "uncontended acquisitions are NOWAIT");
    assert_eq!(s.contended(), 0);
    assert_eq!(s.wait_histogram.total(), 0);
    assert!(s.hold_total_cycles > 0);
}

#[test]
fn exact_counts_every_algorithm() {
    exact_counts::<RawAdaptive<LockStats>>(|l| l.recorder());
    exact_counts::<RawFutex<LockStats>>(|l| l.recorder());
    exact_counts::<RawFutexTid<LockStats>>(|l| l.recorder());
    exact_counts::<RawPi<LockStats>>(|l| l.recorder());
    exact_counts::<RawTicket<LockStats>>(|l| l.recorder());
    exact_counts::<RawMcs<LockStats>>(|l| l.recorder());
    exact_counts::<RawSpin<LockStats>>(|l| l.recorder());
}

/// Under contention every acquisition is counted exactly once, in exactly
/// one of NOWAIT / SPIN / SLEEP, and every contended one is in the histogram.
#[test]
fn contended_acquisitions_are_classified_once() {
    fn run<L: RawMutex + Send + Sync + 'static>(stats: fn(&L) -> &LockStats) {
        let lock = Arc::new(L::INIT);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..5_000 {
                        lock.lock();
                        std::hint::black_box(0);
                        unsafe { lock.unlock() };
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = stats(&lock).snapshot();
        assert_eq!(s.acquisitions, 20_000);
        assert_eq!(s.no_wait + s.spin + s.sleep, 20_000);
        assert_eq!(s.wait_histogram.total(), s.contended());
    }
    run::<RawAdaptive<LockStats>>(|l| l.recorder());
    run::<RawFutex<LockStats>>(|l| l.recorder());
    run::<RawTicket<LockStats>>(|l| l.recorder());
    run::<RawMcs<LockStats>>(|l| l.recorder());
    run::<RawSpin<LockStats>>(|l| l.recorder());
}

#[test]
fn timeouts_are_counted_apart_from_rejects() {
    let lock = Arc::new(RawAdaptive::<LockStats>::INIT);
    lock.lock();
    let other = lock.clone();
    std::thread::spawn(move || assert!(!other.try_lock_for(Duration::from_millis(5)))).join().unwrap();
    unsafe { lock.unlock() };
    let s = lock.recorder().snapshot();
    assert_eq!((s.timed_out, s.rejected, s.acquisitions), (1, 0, 1));
}

/// Recording off is a zero-sized recorder: the lock is exactly as large as
/// its state, so the fast path touches nothing else.
#[test]
fn stats_off_adds_no_state() {
    assert_eq!(std::mem::size_of::<NoStats>(), 0);
    assert_eq!(std::mem::size_of::<RawAdaptive<NoStats>>(), 16);
    assert_eq!(std::mem::size_of::<RawFutex<NoStats>>(), 4);
    assert_eq!(std::mem::size_of::<RawTicket<NoStats>>(), 16);
    assert_eq!(std::mem::size_of::<RawMcs<NoStats>>(), 16);
}
