//! The measurements: uncontended pair cost and a contended duty cycle.

use crate::locks::{BenchLock, LockKind, LockVisitor};
use crate::work::{spin_work, Calibration};
use lockmeter_stats::Snapshot;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Nanoseconds per uncontended lock+unlock pair: `pairs` pairs on one
/// thread, timed as a whole.
pub fn uncontended_pair_ns(kind: LockKind, pairs: u64) -> f64 {
    struct Pairs(u64);
    impl LockVisitor for Pairs {
        type Output = f64;
        fn visit<L: BenchLock>(self, make: impl Fn() -> L + Send + Sync + Clone + 'static) -> f64 {
            let lock = make();
            // Warm the lock and the code path.
            for _ in 0..self.0 / 10 {
                lock.critical(|| black_box(()));
            }
            let t = Instant::now();
            for _ in 0..self.0 {
                lock.critical(|| black_box(()));
            }
            t.elapsed().as_nanos() as f64 / self.0 as f64
        }
    }
    kind.visit(Pairs(pairs))
}

/// A contended duty-cycle run: each thread loops over a period of
/// `period_ns` of busy work, `duty_percent` of it inside the lock.
#[derive(Clone, Copy, Debug)]
pub struct DutyCycle {
    /// Threads contending for the one lock.
    pub threads: usize,
    /// Length of one loop iteration's work, in nanoseconds.
    pub period_ns: u64,
    /// Share of the period spent inside the lock, in percent.
    pub duty_percent: u64,
    /// How long to run.
    pub duration: Duration,
}

/// What one duty-cycle run measured.
#[derive(Clone, Debug)]
pub struct DutyResult {
    /// Critical sections completed per second, all threads together.
    pub ops_per_sec: f64,
    /// The physical limit: min(min(threads, cores) / period, 1 / CS).
    pub ideal_ops_per_sec: f64,
    /// Operations of each thread.
    pub per_thread: Vec<u64>,
    /// The lock's statistics, for locks that record them.
    pub stats: Option<Snapshot>,
    /// Wall time of the measured interval.
    pub elapsed: Duration,
}

impl DutyResult {
    /// ops_per_sec / ideal_ops_per_sec.
    pub fn efficiency(&self) -> f64 {
        self.ops_per_sec / self.ideal_ops_per_sec
    }

    /// max/min of per-thread operations (infinite if a thread starved).
    pub fn fairness_spread(&self) -> f64 {
        let max = self.per_thread.iter().copied().max().unwrap_or(0) as f64;
        let min = self.per_thread.iter().copied().min().unwrap_or(0) as f64;
        if min == 0.0 {
            f64::INFINITY
        } else {
            max / min
        }
    }
}

impl DutyCycle {
    /// Runs the workload on a `kind` lock.
    pub fn run(&self, kind: LockKind, calibration: &Calibration) -> DutyResult {
        struct Visit<'a>(&'a DutyCycle, &'a Calibration);
        impl LockVisitor for Visit<'_> {
            type Output = DutyResult;
            fn visit<L: BenchLock>(self, make: impl Fn() -> L + Send + Sync + Clone + 'static) -> DutyResult {
                self.0.run_on(Arc::new(make()), self.1)
            }
        }
        kind.visit(Visit(self, calibration))
    }

    fn run_on<L: BenchLock>(&self, lock: Arc<L>, calibration: &Calibration) -> DutyResult {
        let cs_ns = self.period_ns * self.duty_percent / 100;
        let inside = calibration.iterations_for_ns(cs_ns);
        let outside = calibration.iterations_for_ns(self.period_ns - cs_ns);
        let stop = Arc::new(AtomicBool::new(false));
        let start = Arc::new(Barrier::new(self.threads + 1));
        let workers: Vec<_> = (0..self.threads)
            .map(|_| {
                let (lock, stop, start) = (lock.clone(), stop.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let mut ops = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        lock.critical(|| spin_work(inside));
                        spin_work(outside);
                        ops += 1;
                    }
                    ops
                })
            })
            .collect();
        // Start the clock before releasing the workers (see experiment.rs).
        let t = Instant::now();
        start.wait();
        std::thread::sleep(self.duration);
        stop.store(true, Ordering::Relaxed);
        let per_thread: Vec<u64> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        let elapsed = t.elapsed();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let by_threads = self.threads.min(cores) as f64 / (self.period_ns as f64 * 1e-9);
        let by_lock = if cs_ns == 0 { f64::INFINITY } else { 1e9 / cs_ns as f64 };
        DutyResult {
            ops_per_sec: per_thread.iter().sum::<u64>() as f64 / elapsed.as_secs_f64(),
            ideal_ops_per_sec: by_threads.min(by_lock),
            per_thread,
            stats: lock.stats(),
            elapsed,
        }
    }
}

/// The median of `values` (which must not be empty).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Recording;
    use lockmeter_locks::Algorithm;

    #[test]
    fn every_lock_kind_runs_a_duty_cycle() {
        let calibration = Calibration::measure();
        let kinds = LockKind::ours().chain(LockKind::PEERS).chain([
            LockKind::Ours { algorithm: Algorithm::Adaptive, recording: Recording::Full },
        ]);
        for kind in kinds {
            let r = DutyCycle { threads: 3, period_ns: 2_000, duty_percent: 25, duration: Duration::from_millis(40) }
                .run(kind, &calibration);
            assert_eq!(r.per_thread.len(), 3);
            assert!(r.ops_per_sec > 0.0, "{kind}: no progress");
            assert!(r.ideal_ops_per_sec > 0.0 && r.ideal_ops_per_sec.is_finite());
            assert_eq!(r.stats.is_some(), matches!(kind, LockKind::Ours { recording: Recording::Full, .. }), "{kind}");
            if let Some(s) = r.stats {
                assert_eq!(s.acquisitions, r.per_thread.iter().sum::<u64>(), "{kind}: every op counted once");
            }
        }
    }

    #[test]
    fn pair_costs_are_positive_and_names_parse() {
        for kind in LockKind::ours().chain(LockKind::PEERS).chain([LockKind::TasFloor]) {
            assert!(uncontended_pair_ns(kind, 10_000) > 0.0);
            assert_eq!(kind.name().parse::<LockKind>(), Ok(kind));
        }
        assert!("nope".parse::<LockKind>().is_err());
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
