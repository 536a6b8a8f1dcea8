//! Calibrated busy work: the "work" of the duty-cycle workload (seed 001's
//! futextest runs a fixed number of instructions inside and outside the
//! lock).

use std::time::Instant;

/// Iterations of [`spin_work`] per nanosecond on this machine.
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    /// Loop iterations per nanosecond.
    pub iterations_per_ns: f64,
}

/// Burns `iterations` of a dependent arithmetic loop, held in a register.
///
/// The value passes through an empty `asm!` block each iteration, which
/// keeps the compiler from folding the loop without sending the value
/// through memory: with `black_box` (which stores the value and loads it
/// back), the loop's speed depended on where its caller's stack frame
/// put that slot, so the same iterations ran at a different speed under
/// each lock. In `duty` P=1000 D=1 at one thread, where no lock waits,
/// the locks read 72-101% of the limit with the loop inlined into each
/// worker, and 71-95% with one copy called by all; a loop that does not
/// touch memory runs at the speed of its multiply chain wherever it is.
/// Never inlined: one copy serves the calibration and every lock.
#[inline(never)]
pub fn spin_work(iterations: u64) {
    let mut x = 1u64;
    for _ in 0..iterations {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        opaque(&mut x);
    }
}

/// Makes `x` opaque to the optimiser while it stays in a register.
#[inline(always)]
fn opaque(x: &mut u64) {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    // SAFETY: an empty template that reads and writes only the register
    // it is given, touching neither memory nor the stack nor flags.
    unsafe {
        std::arch::asm!("/* {0} */", inout(reg) *x, options(nomem, nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        *x = std::hint::black_box(*x);
    }
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
