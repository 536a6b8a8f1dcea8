//! Cycle counter for statistics and spin budgets.
//!
//! Seed 000 measures acquisition time in cycles (its histogram bins are
//! log2 cycles), so the statistics use the time-stamp counter; spin budgets
//! are specified in nanoseconds and converted once with a calibration made
//! on first use (50 µs against the monotonic clock). Where there is no TSC,
//! "cycles" are nanoseconds and the conversion factor is 1.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The current cycle count (TSC on x86-64, nanoseconds elsewhere).
#[inline(always)]
pub fn cycles() -> u64 {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    {
        // SAFETY: rdtsc is available on every x86-64 CPU and has no side effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(all(not(target_arch = "x86_64"), not(loom)))]
    {
        monotonic_ns()
    }
    // Under loom time must be deterministic: a counter that every reading
    // advances, so "time has passed" is always true and no budget measured
    // in real time is ever reached within a model execution.
    #[cfg(loom)]
    {
        static TICKS: AtomicU64 = AtomicU64::new(1);
        TICKS.fetch_add(1, Ordering::Relaxed)
    }
}

#[cfg(all(not(target_arch = "x86_64"), not(loom)))]
fn monotonic_ns() -> u64 {
    use std::sync::OnceLock;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Cycles per nanosecond, as 32.32 fixed point; 0 until calibrated.
static CYCLES_PER_NS_FIXED: AtomicU64 = AtomicU64::new(0);

/// Cycles per nanosecond of this machine's cycle counter.
pub fn cycles_per_ns() -> f64 {
    let fixed = CYCLES_PER_NS_FIXED.load(Ordering::Relaxed);
    if fixed != 0 {
        return fixed as f64 / (1u64 << 32) as f64;
    }
    calibrate()
}

#[cold]
fn calibrate() -> f64 {
    let ratio = if cfg!(all(target_arch = "x86_64", not(loom))) {
        let window = Duration::from_micros(50);
        let t0 = Instant::now();
        let c0 = cycles();
        let mut t1 = Instant::now();
        while t1 - t0 < window {
            std::hint::spin_loop();
            t1 = Instant::now();
        }
        let c1 = cycles();
        (c1 - c0) as f64 / (t1 - t0).as_nanos() as f64
    } else {
        1.0
    };
    let fixed = ((ratio * (1u64 << 32) as f64) as u64).max(1);
    CYCLES_PER_NS_FIXED.store(fixed, Ordering::Relaxed);
    ratio
}

/// Converts nanoseconds to cycles.
pub fn ns_to_cycles(ns: u64) -> u64 {
    (ns as f64 * cycles_per_ns()) as u64
}

/// Converts cycles to nanoseconds.
pub fn cycles_to_ns(cycles: u64) -> u64 {
    (cycles as f64 / cycles_per_ns()) as u64
}

/// A busy-wait's time budget, checked on every iteration of a spin loop.
pub(crate) struct SpinBudget {
    start: u64,
    limit: u64,
    #[cfg(loom)]
    iterations: u32,
}

impl SpinBudget {
    pub(crate) fn new(limit_cycles: u64) -> Self {
        SpinBudget {
            start: cycles(),
            limit: limit_cycles,
            #[cfg(loom)]
            iterations: 0,
        }
    }

    /// Cycles spent since the budget was opened.
    pub(crate) fn elapsed(&self) -> u64 {
        cycles().wrapping_sub(self.start)
    }

    /// True once the budget is spent (under loom, after a couple of
    /// iterations: see `sync::MODEL_SPIN_LIMIT`).
    pub(crate) fn exhausted(&mut self) -> bool {
        if let Some(limit) = crate::sync::MODEL_SPIN_LIMIT {
            #[cfg(loom)]
            {
                self.iterations += 1;
                return self.iterations > limit;
            }
            #[cfg(not(loom))]
            let _ = limit;
        }
        self.elapsed() > self.limit
    }
}
