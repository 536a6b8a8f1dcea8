//! The per-lock counters: a [`Recorder`] any algorithm can carry.

use crate::histogram::{bin_of, Histogram, BINS};
use lockmeter_locks::clock;
use lockmeter_locks::{AcquireKind, Recorder};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters of one lock, updated with relaxed atomics by the lock's users.
pub struct LockStats {
    acquisitions: AtomicU64,
    no_wait: AtomicU64,
    spin: AtomicU64,
    sleep: AtomicU64,
    rejected: AtomicU64,
    timed_out: AtomicU64,
    wait_total: AtomicU64,
    wait_max: AtomicU64,
    timed_out_wait_total: AtomicU64,
    timed_out_wait_max: AtomicU64,
    hold_total: AtomicU64,
    hold_max: AtomicU64,
    /// Cycle stamp of the current acquisition (written by the holder only).
    held_since: AtomicU64,
    wait_histogram: [AtomicU64; BINS],
}

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);

/// Adds to a counter that only the lock holder writes: the lock orders the
/// writers, so a plain load and store suffice (no locked instruction on
/// the lock's fast path).
#[inline]
fn holder_add(counter: &AtomicU64, amount: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(amount), Relaxed);
}

/// Raises a maximum that only the lock holder writes.
#[inline]
fn holder_max(maximum: &AtomicU64, value: u64) {
    if value > maximum.load(Relaxed) {
        maximum.store(value, Relaxed);
    }
}

/// Counters written by the holder (`acquired` and `releasing` run with the
/// lock held) use plain loads and stores; those written by threads that do
/// not hold the lock (`rejected`, `timed_out`) use atomic read-modify-writes
/// and are kept apart, so the two kinds never race on one counter.
impl Recorder for LockStats {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = LockStats {
        acquisitions: ZERO,
        no_wait: ZERO,
        spin: ZERO,
        sleep: ZERO,
        rejected: ZERO,
        timed_out: ZERO,
        wait_total: ZERO,
        wait_max: ZERO,
        timed_out_wait_total: ZERO,
        timed_out_wait_max: ZERO,
        hold_total: ZERO,
        hold_max: ZERO,
        held_since: ZERO,
        wait_histogram: [ZERO; BINS],
    };
    const ENABLED: bool = true;

    #[inline]
    fn acquired(&self, kind: AcquireKind, wait_cycles: u64) {
        holder_add(&self.acquisitions, 1);
        match kind {
            AcquireKind::NoWait => holder_add(&self.no_wait, 1),
            AcquireKind::Spin | AcquireKind::Sleep => {
                holder_add(if kind == AcquireKind::Spin { &self.spin } else { &self.sleep }, 1);
                holder_add(&self.wait_total, wait_cycles);
                holder_max(&self.wait_max, wait_cycles);
                holder_add(&self.wait_histogram[bin_of(wait_cycles)], 1);
            }
        }
        self.held_since.store(clock::cycles(), Relaxed);
    }

    #[inline]
    fn rejected(&self) {
        self.rejected.fetch_add(1, Relaxed);
    }

    #[inline]
    fn timed_out(&self, wait_cycles: u64) {
        self.timed_out.fetch_add(1, Relaxed);
        self.timed_out_wait_total.fetch_add(wait_cycles, Relaxed);
        self.timed_out_wait_max.fetch_max(wait_cycles, Relaxed);
    }

    #[inline]
    fn releasing(&self) {
        let held = clock::cycles().wrapping_sub(self.held_since.load(Relaxed));
        holder_add(&self.hold_total, held);
        holder_max(&self.hold_max, held);
    }
}

impl Default for LockStats {
    fn default() -> Self {
        Self::INIT
    }
}

impl LockStats {
    /// A consistent-enough copy of the counters (each counter is exact;
    /// counters read while the lock is in use may be from slightly
    /// different instants).
    pub fn snapshot(&self) -> Snapshot {
        let mut wait_histogram = Histogram::default();
        for (dst, src) in wait_histogram.counts.iter_mut().zip(self.wait_histogram.iter()) {
            *dst = src.load(Relaxed);
        }
        Snapshot {
            acquisitions: self.acquisitions.load(Relaxed),
            no_wait: self.no_wait.load(Relaxed),
            spin: self.spin.load(Relaxed),
            sleep: self.sleep.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            timed_out: self.timed_out.load(Relaxed),
            wait_total_cycles: self.wait_total.load(Relaxed) + self.timed_out_wait_total.load(Relaxed),
            wait_max_cycles: self.wait_max.load(Relaxed).max(self.timed_out_wait_max.load(Relaxed)),
            hold_total_cycles: self.hold_total.load(Relaxed),
            hold_max_cycles: self.hold_max.load(Relaxed),
            wait_histogram,
        }
    }
}

/// The statistics of one lock (or call site) at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Successful acquisitions (TOTAL).
    pub acquisitions: u64,
    /// Acquired on the fast path without waiting (NOWAIT).
    pub no_wait: u64,
    /// Acquired after waiting without sleeping (SPIN).
    pub spin: u64,
    /// Acquired after sleeping in the kernel (SLEEP).
    pub sleep: u64,
    /// Trylock attempts that found the lock held (REJECT).
    pub rejected: u64,
    /// Timed lock attempts that gave up.
    pub timed_out: u64,
    /// Cycles spent waiting, over all contended acquisitions and timeouts.
    pub wait_total_cycles: u64,
    /// The longest single wait, in cycles.
    pub wait_max_cycles: u64,
    /// Cycles the lock was held, over all acquisitions.
    pub hold_total_cycles: u64,
    /// The longest single hold, in cycles.
    pub hold_max_cycles: u64,
    /// Contended waits, log2 cycles (seed 000).
    pub wait_histogram: Histogram,
}

impl Snapshot {
    /// Acquisitions that had to wait (seed 000's #contentions).
    pub fn contended(&self) -> u64 {
        self.spin + self.sleep
    }

    /// CON: share of acquisitions that had to wait, in percent.
    pub fn contention_percent(&self) -> f64 {
        percent(self.contended(), self.acquisitions)
    }

    /// Mean wait, in nanoseconds, over the waits it totals: contended
    /// acquisitions and timed attempts that gave up.
    pub fn wait_mean_ns(&self) -> f64 {
        cycles_to_ns(self.wait_total_cycles) / (self.contended() + self.timed_out).max(1) as f64
    }

    /// Mean hold, in nanoseconds.
    pub fn hold_mean_ns(&self) -> f64 {
        cycles_to_ns(self.hold_total_cycles) / self.acquisitions.max(1) as f64
    }

    /// UTIL: share of `elapsed_ns` the lock was held, in percent.
    pub fn utilisation_percent(&self, elapsed_ns: f64) -> f64 {
        if elapsed_ns <= 0.0 {
            return 0.0;
        }
        100.0 * cycles_to_ns(self.hold_total_cycles) / elapsed_ns
    }

    /// Adds another snapshot (e.g. per-call-site rows into a lock row).
    pub fn merge(&mut self, other: &Snapshot) {
        self.acquisitions += other.acquisitions;
        self.no_wait += other.no_wait;
        self.spin += other.spin;
        self.sleep += other.sleep;
        self.rejected += other.rejected;
        self.timed_out += other.timed_out;
        self.wait_total_cycles += other.wait_total_cycles;
        self.wait_max_cycles = self.wait_max_cycles.max(other.wait_max_cycles);
        self.hold_total_cycles += other.hold_total_cycles;
        self.hold_max_cycles = self.hold_max_cycles.max(other.hold_max_cycles);
        self.wait_histogram.merge(&other.wait_histogram);
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// Cycles to nanoseconds with this machine's calibration.
pub(crate) fn cycles_to_ns(cycles: u64) -> f64 {
    cycles as f64 / clock::cycles_per_ns()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mean divides the waits' total by the waits it totals: a timed
    /// attempt that gave up counts in both.
    #[test]
    fn mean_wait_counts_the_waits_that_gave_up() {
        let snapshot = Snapshot {
            acquisitions: 1,
            spin: 1,
            timed_out: 1,
            wait_total_cycles: clock::ns_to_cycles(4_000),
            ..Snapshot::default()
        };
        let mean = snapshot.wait_mean_ns();
        assert!((1_900.0..2_100.0).contains(&mean), "{mean} ns: one wait acquired, one gave up, 4 µs in all");
    }
}
