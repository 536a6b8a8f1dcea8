//! Cycle counter for statistics and spin budgets.
//!
//! Seed 000 measures acquisition time in cycles (its histogram bins are
//! log2 cycles), so the statistics use the time-stamp counter; spin budgets
//! are specified in nanoseconds and converted once with a calibration made
//! on first use (the best pinned of four 25 µs rounds against the
//! monotonic clock). Where there is no TSC,
//! "cycles" are nanoseconds and the conversion factor is 1.
//!
//! The small readers and conversions here are `#[inline]`: the locks are
//! generic over their recorder, so their spin loops are compiled in the
//! crate that uses them, and without the attribute every iteration called
//! these across the crate boundary (`sem` at 16 threads, medians of 8
//! alternated runs: 31.8 Mops/s with the calls, 34.7 without).

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
    // in real time is ever reached within a model execution. One counter
    // per execution (a plain atomic, not a modelled one: reading the clock
    // is no scheduling point): a process-wide one was advanced by the
    // models other test threads ran meanwhile, and a budget could run out
    // in one exploration of a model and not in the next ("Is the model
    // fully deterministic?", once in CI).
    #[cfg(loom)]
    {
        loom::lazy_static! {
            static ref TICKS: AtomicU64 = AtomicU64::new(1);
        }
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
#[inline]
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
        // The round whose counter readings are best pinned in time: a
        // preemption can only loosen one (see `calibration_round`).
        (0..CALIBRATION_ROUNDS)
            .map(|_| calibration_round(Duration::from_micros(25)))
            .min_by_key(|&(_, looseness)| looseness)
            .map_or(1.0, |(ratio, _)| ratio)
    } else {
        1.0
    };
    let fixed = ((ratio * (1u64 << 32) as f64) as u64).max(1);
    CYCLES_PER_NS_FIXED.store(fixed, Ordering::Relaxed);
    ratio
}

const CALIBRATION_ROUNDS: usize = 4;

/// Cycles per ns over `window`, and how loosely that is known: the cycle
/// counter is read between two readings of the monotonic clock at each
/// end, and the two gaps are the looseness. A thread preempted (or a vCPU
/// stalled) between two of the readings widens a gap and skews the ratio
/// by as much; kept for the process's life, a skewed ratio would scale
/// every spin budget and bound with it.
fn calibration_round(window: Duration) -> (f64, Duration) {
    let (before0, c0, after0) = (Instant::now(), cycles(), Instant::now());
    let mut now = after0;
    while now - after0 < window {
        std::hint::spin_loop();
        now = Instant::now();
    }
    let (before1, c1, after1) = (Instant::now(), cycles(), Instant::now());
    // Between the midpoints of the two brackets.
    let span = ((before1 - before0) + (after1 - after0)) / 2;
    let ratio = c1.saturating_sub(c0) as f64 / span.as_nanos().max(1) as f64;
    (ratio, (after0 - before0) + (after1 - before1))
}

/// Converts nanoseconds to cycles.
#[inline]
pub fn ns_to_cycles(ns: u64) -> u64 {
    (ns as f64 * cycles_per_ns()) as u64
}

/// Converts cycles to nanoseconds.
#[inline]
pub fn cycles_to_ns(cycles: u64) -> u64 {
    (cycles as f64 / cycles_per_ns()) as u64
}

/// Length of one spin-loop hint (`pause`), in picoseconds; 0 until measured.
static PAUSE_PS: AtomicU64 = AtomicU64::new(0);

/// How many spin-loop hints last about `ns` nanoseconds (at least one).
///
/// Spin decisions are tuned in time, but a pause is not a unit of time: it
/// lasts ~10 ns on some x86 cores and ~50 ns on others (and 140 cycles on
/// Skylake), so a backoff counted in pauses would wait five times longer
/// on one machine than on the next. The length is measured on first use.
#[inline]
pub fn pauses_in(ns: u64) -> u32 {
    let mut ps = PAUSE_PS.load(Ordering::Relaxed);
    if ps == 0 {
        ps = measure_pause_ps();
    }
    (ns.saturating_mul(1000) / ps).clamp(1, u32::MAX as u64) as u32
}

#[cold]
fn measure_pause_ps() -> u64 {
    let ps = if cfg!(loom) {
        10_000 // under loom a pause is a model yield: any fixed value will do
    } else {
        // The shortest of a few rounds: a preemption can only lengthen one.
        const ROUND: u32 = 200;
        let shortest = (0..5)
            .map(|_| {
                let start = Instant::now();
                for _ in 0..ROUND {
                    std::hint::spin_loop();
                }
                start.elapsed()
            })
            .min()
            .unwrap_or_default();
        (shortest.as_nanos() as u64 * 1000 / ROUND as u64).max(1)
    };
    PAUSE_PS.store(ps, Ordering::Relaxed);
    ps
}

/// A busy-wait's time budget, checked on every iteration of a spin loop.
pub(crate) struct SpinBudget {
    start: u64,
    limit: u64,
    /// The counter's value at the last check.
    last: u64,
    #[cfg(loom)]
    iterations: u32,
}

impl SpinBudget {
    #[inline]
    pub(crate) fn new(limit_cycles: u64) -> Self {
        let start = cycles();
        SpinBudget {
            start,
            limit: limit_cycles,
            last: start,
            #[cfg(loom)]
            iterations: 0,
        }
    }

    /// Cycles spent since the budget was opened.
    #[inline]
    pub(crate) fn elapsed(&self) -> u64 {
        cycles().wrapping_sub(self.start)
    }

    /// Adds `cycles` to the budget, for time spent on something else.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn extend(&mut self, cycles: u64) {
        self.limit = self.limit.saturating_add(cycles);
    }

    /// True once the budget is spent (under loom, after a couple of
    /// iterations: see `sync::MODEL_SPIN_LIMIT`).
    #[inline]
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
        self.last = cycles();
        self.last.wrapping_sub(self.start) > self.limit
    }

    /// The counter as [`Self::exhausted`] last read it (when opened, if
    /// never checked): a time stamp that costs nothing more to take.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn last_reading(&self) -> u64 {
        self.last
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The calibration on first use agrees with the counter's rate over a
    /// span 400 times longer.
    #[test]
    fn the_calibration_agrees_with_a_long_measurement() {
        let calibrated = cycles_per_ns();
        let (start, c0) = (Instant::now(), cycles());
        std::thread::sleep(Duration::from_millis(20));
        let (c1, end) = (cycles(), Instant::now());
        let measured = (c1 - c0) as f64 / (end - start).as_nanos() as f64;
        assert!((calibrated / measured - 1.0).abs() < 0.02, "calibrated {calibrated} cycles/ns, measured {measured}");
    }

    /// Pauses counted for a span last about that span, whatever a pause
    /// costs on this core (a preemption can only lengthen the run, so only
    /// the lower bound is checked).
    #[test]
    fn pauses_in_a_span_last_about_that_span() {
        assert_eq!(pauses_in(0), 1, "always at least one pause");
        let count = pauses_in(20_000);
        let start = Instant::now();
        for _ in 0..count {
            std::hint::spin_loop();
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_micros(10), "{count} pauses for 20 µs took {took:?}");
        assert!(pauses_in(40_000) >= 2 * count - 1, "the count scales with the span");
    }
}

/// `RawMutexTimed::try_lock_for` of a lock with a deadline wait
/// (`until`) and an untimed one (`forever`): a timeout too long to add
/// to now (`Duration::MAX`) waits without a deadline, as parking_lot's
/// does (the sum panicked).
#[cfg(not(loom))]
#[inline]
pub(crate) fn lock_for(timeout: Duration, until: impl FnOnce(Instant) -> bool, forever: impl FnOnce()) -> bool {
    match Instant::now().checked_add(timeout) {
        Some(deadline) => until(deadline),
        None => {
            forever();
            true
        }
    }
}

/// `try_take` until it succeeds or `deadline` passes, with sleeps growing
/// from 1 µs to 1 ms between tries: false if the deadline passed. For a
/// timed lock that cannot wait in line (correct, not fair).
pub(crate) fn poll_until(deadline: Instant, mut try_take: impl FnMut() -> bool) -> bool {
    let mut pause = std::time::Duration::from_micros(1);
    loop {
        if try_take() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(std::time::Duration::from_millis(1));
    }
}

/// `lock_api::RawMutexTimed` for a lock with an inherent `lock_until` (a
/// deadline wait) and `lock`; each use says what a timed-out attempt
/// leaves behind.
macro_rules! timed_by_deadline {
    ($lock:ident) => {
        #[cfg(not(loom))]
        // SAFETY: as for the lock's RawMutex, whose acquisitions these are
        // (with the use's comment on a timed-out attempt).
        unsafe impl<R: $crate::record::Recorder> lock_api::RawMutexTimed for $lock<R> {
            type Duration = std::time::Duration;
            type Instant = std::time::Instant;

            fn try_lock_for(&self, timeout: std::time::Duration) -> bool {
                $crate::clock::lock_for(timeout, |deadline| self.lock_until(deadline), || self.lock())
            }
            fn try_lock_until(&self, deadline: std::time::Instant) -> bool {
                self.lock_until(deadline)
            }
        }
    };
}
pub(crate) use timed_by_deadline;
