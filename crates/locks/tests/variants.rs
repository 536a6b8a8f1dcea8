//! The experiment switches (seed 000's bail-out off, seed 003's backoff
//! off) change when waiters spin, never whether the lock excludes. A test
//! binary of its own: the switches are process-wide.

use lockmeter_locks::{config, RawAdaptive, RawTicket};
use std::cell::UnsafeCell;
use std::sync::Arc;

struct Counter<L> {
    lock: L,
    value: UnsafeCell<u64>,
}

// SAFETY: `value` is only touched with `lock` held.
unsafe impl<L: Sync> Sync for Counter<L> {}

fn hammer<L: lock_api::RawMutex + Send + Sync + 'static>(threads: u64, rounds: u64) -> u64 {
    let counter = Arc::new(Counter { lock: L::INIT, value: UnsafeCell::new(0) });
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let counter = counter.clone();
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    counter.lock.lock();
                    // SAFETY: the lock is held; a non-atomic read-modify-write
                    // loses updates if exclusion ever fails.
                    unsafe {
                        let v = std::ptr::read_volatile(counter.value.get());
                        std::ptr::write_volatile(counter.value.get(), v + 1);
                    }
                    // SAFETY: locked above by this thread.
                    unsafe { counter.lock.unlock() };
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    // SAFETY: every worker has finished.
    unsafe { *counter.value.get() }
}

#[test]
fn locks_exclude_with_the_experiment_switches_off() {
    config::set_bail_on_owner_change(false);
    config::set_proportional_backoff(false);
    assert!(!config::bail_on_owner_change() && !config::proportional_backoff());
    assert_eq!(hammer::<RawAdaptive>(8, 20_000), 160_000, "adaptive without the bail-out");
    assert_eq!(hammer::<RawTicket>(8, 5_000), 40_000, "ticket without backoff");
    config::set_bail_on_owner_change(true);
    config::set_proportional_backoff(true);
    config::set_spinner_backoff(false);
    config::set_owner_return_grace(false);
    assert_eq!(hammer::<RawAdaptive>(8, 20_000), 160_000, "adaptive without backoff or grace");
    config::set_spinner_backoff(true);
    config::set_owner_return_grace(true);
    assert_eq!(hammer::<RawAdaptive>(4, 10_000), 40_000);
}
