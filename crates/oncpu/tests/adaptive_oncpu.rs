//! `adaptive` with the table stops spinning the moment its owner sleeps
//! inside the critical section; without it, the CPU-clock fallback needs a
//! few probes to notice.

mod common;

use lockmeter_locks::oracle;
use lockmeter_locks::RawAdaptive;
use lockmeter_stats::{Counts, SpinsSnapshot};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ROUNDS: u32 = 200;

/// The owner takes the lock and sleeps 1 ms inside; once it is asleep the
/// waiter asks for the lock. Returns the waiter's spins.
fn owner_sleeps_inside() -> SpinsSnapshot {
    let lock = Arc::new(RawAdaptive::<Counts>::new());
    let round = Arc::new(AtomicU32::new(0)); // odd: the owner holds the lock
    let owner = {
        let (lock, round) = (lock.clone(), round.clone());
        std::thread::spawn(move || {
            for r in 0..ROUNDS {
                while round.load(Ordering::Acquire) != 2 * r {
                    std::thread::yield_now();
                }
                lock.lock();
                round.store(2 * r + 1, Ordering::Release);
                std::thread::sleep(Duration::from_millis(1));
                // SAFETY: locked just above by this thread.
                unsafe { lock.unlock() };
            }
        })
    };
    for r in 0..ROUNDS {
        while round.load(Ordering::Acquire) != 2 * r + 1 {
            std::thread::yield_now();
        }
        // Let the owner get into its sleep.
        std::thread::sleep(Duration::from_micros(200));
        lock.lock();
        // SAFETY: locked just above by this thread.
        unsafe { lock.unlock() };
        round.store(2 * r + 2, Ordering::Release);
    }
    owner.join().unwrap();
    lock.recorder().snapshot().spins
}

fn mean_spin_ns(spins: &SpinsSnapshot) -> f64 {
    spins.cycles as f64 / lockmeter_locks::clock::cycles_per_ns() / spins.total().max(1) as f64
}

#[test]
fn spinning_stops_when_the_owner_sleeps() {
    let Some(private) = common::private_table() else { return };
    let table: &'static _ = Box::leak(Box::new(private.table().expect("maps the table")));

    oracle::install_source(table);
    let with_table = owner_sleeps_inside();
    oracle::remove_source();
    let without = owner_sleeps_inside();

    let (with_ns, without_ns) = (mean_spin_ns(&with_table), mean_spin_ns(&without));
    eprintln!("owner asleep 1 ms: spin per acquisition {with_ns:.0} ns with the table ({with_table:?}), {without_ns:.0} ns without ({without:?})");
    // A round whose waiter was delayed past the owner's sleep (a loaded
    // machine) finds the lock free and does not spin: most rounds spin.
    assert!(with_table.total() >= (ROUNDS / 2) as u64, "the waiter spun in most rounds: {with_table:?}");
    assert!(with_table.by_table * 10 >= with_table.total() * 9, "the table decided the spins: {with_table:?}");
    assert_eq!(without.by_table, 0, "without the table only the fallback decides: {without:?}");
    assert!(with_ns < 2_000.0, "with the table spinning ends at once ({with_ns:.0} ns)");
    assert!(with_ns < without_ns, "the table ends spins sooner than the fallback ({with_ns:.0} vs {without_ns:.0} ns)");
    assert!(without_ns < 100_000.0, "the fallback bounds the spin ({without_ns:.0} ns)");
}
