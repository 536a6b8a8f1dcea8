//! Calibrated busy work: the "work" of the duty-cycle workload (seed 001's
//! futextest runs a fixed number of instructions inside and outside the
//! lock).

use std::hint::black_box;
use std::time::Instant;

/// Iterations of [`spin_work`] per nanosecond on this machine.
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    /// Loop iterations per nanosecond.
    pub iterations_per_ns: f64,
}

/// Burns `iterations` of a dependent arithmetic loop.
///
/// Never inlined: one copy of the loop serves the calibration and every
/// lock. Inlined into each lock's worker, the loop took each copy's code
/// alignment, and the same iterations lasted 1940 ns under one lock and
/// 2020-2040 under another (medians, `duty` P=4000 D=50): a lock's
/// critical section was longer than another's, and the limit was
/// calibrated on a third copy.
#[inline(never)]
pub fn spin_work(iterations: u64) {
    let mut x = black_box(1u64);
    for _ in 0..iterations {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    black_box(x);
}

impl Calibration {
    /// Measures the loop's speed (the best of several 2 ms runs, so a
    /// preemption during calibration does not skew it).
    pub fn measure() -> Calibration {
        let mut iterations = 1_000u64;
        // Grow until one run takes about 2 ms.
        loop {
            let t = Instant::now();
            spin_work(iterations);
            if t.elapsed().as_micros() >= 2_000 {
                break;
            }
            iterations *= 2;
        }
        let best_ns = (0..5)
            .map(|_| {
                let t = Instant::now();
                spin_work(iterations);
                t.elapsed().as_nanos() as f64
            })
            .fold(f64::INFINITY, f64::min);
        Calibration { iterations_per_ns: iterations as f64 / best_ns }
    }

    /// Iterations that take about `ns` nanoseconds.
    pub fn iterations_for_ns(&self, ns: u64) -> u64 {
        (ns as f64 * self.iterations_per_ns).round() as u64
    }
}
