//! A run's timed waits, counted in room fixed before the run starts:
//! waits under 64 cycles one value each, longer ones in 32 steps per power
//! of two (a step spans at most 1/32 of the waits it counts, so a
//! percentile read from it is within about 3% of the exact one), the
//! longest and the number over 1 ms exactly (kept raw in blocks of 1024,
//! counted as a block fills). Kept as raw samples, one in
//! eight acquisitions, a one-thread `sem` run held 19 million a second: a
//! 5 s run took 2.6 GB and 4 s to sort, and the vector grew inside the
//! run.

use crate::experiment::WaitSummary;
use lockmeter_stats::Histogram;

/// Waits below this many cycles are counted one value each.
const EXACT: u64 = 1 << FIRST_POWER;
const FIRST_POWER: u32 = 6;
/// Steps per power of two, as bits.
const STEP_BITS: u32 = 5;
const STEPS: usize = 1 << STEP_BITS;
const BUCKETS: usize = EXACT as usize + (64 - FIRST_POWER as usize) * STEPS;
/// Waits kept raw before they are counted.
const RAW: usize = 1024;

/// One thread's (or a whole run's) timed waits, in cycles.
pub struct WaitCounts {
    counts: Vec<u64>,
    /// Waits not counted yet, the first `pending` of them.
    raw: Vec<u64>,
    pending: usize,
    longest: u64,
    /// Waits longer than `long_cycles`.
    long: u64,
    long_cycles: u64,
}

/// The bucket that counts a wait of `cycles`.
#[inline]
fn bucket(cycles: u64) -> usize {
    if cycles < EXACT {
        return cycles as usize;
    }
    let power = 63 - cycles.leading_zeros();
    let step = (cycles >> (power - STEP_BITS)) as usize & (STEPS - 1);
    EXACT as usize + (power - FIRST_POWER) as usize * STEPS + step
}

/// The least and the most cycles `bucket` counts.
fn bounds(bucket: usize) -> (u64, u64) {
    if bucket < EXACT as usize {
        return (bucket as u64, bucket as u64);
    }
    let above = bucket - EXACT as usize;
    let power = FIRST_POWER + (above / STEPS) as u32;
    let width = 1u64 << (power - STEP_BITS);
    let low = (1u64 << power) + (above % STEPS) as u64 * width;
    (low, low + (width - 1))
}

impl WaitCounts {
    /// Empty, its room allocated and written now (a worker's first
    /// allocation and page faults inside a run waited behind preempted
    /// threads, and read as the lock blocking it); waits longer than
    /// `long_cycles` are counted apart.
    // Written, not `vec![0; n]`: zeroed memory from the system is
    // faulted in at its first write, inside the run.
    #[allow(clippy::slow_vector_initialization)]
    pub fn new(long_cycles: u64) -> WaitCounts {
        let mut counts = Vec::with_capacity(BUCKETS);
        counts.resize(BUCKETS, 0);
        let mut raw = Vec::with_capacity(RAW);
        raw.resize(RAW, 0);
        WaitCounts { counts, raw, pending: 0, longest: 0, long: 0, long_cycles }
    }

    /// Counts one wait: kept raw until a block of them is full, then
    /// counted in one pass. (Counted one by one, between the timed
    /// operations' clock reads, it cost `sem` at one thread a tenth of its
    /// rate; a store and a count cost what the vector of samples did.)
    #[inline(always)]
    pub fn record(&mut self, cycles: u64) {
        // SAFETY: `pending` stays below RAW: the block is counted as soon
        // as it is full.
        unsafe { *self.raw.get_unchecked_mut(self.pending) = cycles };
        self.pending += 1;
        if self.pending == RAW {
            self.count_pending();
        }
    }

    /// Counts the block of raw waits.
    #[inline(never)]
    fn count_pending(&mut self) {
        for &cycles in &self.raw[..self.pending] {
            self.counts[bucket(cycles)] += 1;
            self.long += u64::from(cycles > self.long_cycles);
            self.longest = self.longest.max(cycles);
        }
        self.pending = 0;
    }

    /// Adds `other`'s waits to these.
    pub fn merge(&mut self, other: &WaitCounts) {
        for &cycles in &other.raw[..other.pending] {
            self.record(cycles);
        }
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.longest = self.longest.max(other.longest);
        self.long += other.long;
    }

    /// How many waits were counted.
    fn samples(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The wait at quantile `q`, in cycles: the middle of the step that
    /// holds it (no more than the longest wait).
    fn quantile(&self, q: f64) -> u64 {
        let samples = self.samples();
        let rank = ((q * samples as f64).ceil() as u64).clamp(1, samples);
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let (low, high) = bounds(bucket);
                return (low + (high - low) / 2).min(self.longest);
            }
        }
        self.longest
    }

    /// The summary, none if no wait was timed.
    pub fn summary(&mut self, cycles_per_ns: f64) -> Option<WaitSummary> {
        self.count_pending();
        let samples = self.samples();
        if samples == 0 {
            return None;
        }
        let ns = |cycles: u64| cycles as f64 / cycles_per_ns;
        let mut histogram = Histogram::default();
        for (bucket, &count) in self.counts.iter().enumerate().filter(|(_, &count)| count > 0) {
            // A step lies within one power of two: its bin is its least
            // value's.
            histogram.counts[lockmeter_stats::histogram::bin_of(bounds(bucket).0)] += count;
        }
        let last = histogram.counts.iter().rposition(|&c| c > 0).map_or(0, |b| b + 1);
        Some(WaitSummary {
            samples,
            p50: ns(self.quantile(0.50)),
            p99: ns(self.quantile(0.99)),
            max: ns(self.longest),
            over_1ms_share: self.long as f64 / samples as f64,
            hist_log2_cycles: histogram.counts[..last].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value falls in a bucket whose bounds hold it, each bucket
    /// within one power of two and at most 1/32 of its least value wide;
    /// the buckets tile the values in order.
    #[test]
    fn buckets_tile_the_values() {
        let mut values: Vec<u64> = (0..5000).collect();
        values.extend((6..64).flat_map(|p| [1u64 << p, (1 << p) - 1, (1 << p) + 1, (1 << p) + (1 << p) / 3]));
        values.push(u64::MAX);
        for v in values {
            let b = bucket(v);
            let (low, high) = bounds(b);
            assert!(b < BUCKETS && low <= v && v <= high, "{v} in bucket {b}: {low}..={high}");
            assert_eq!(63 - (low | 1).leading_zeros(), 63 - (high | 1).leading_zeros(), "{b}: one power of two");
            assert!((high - low) <= low / 32, "{b}: {low}..={high}");
        }
        for b in 1..BUCKETS {
            assert_eq!(bounds(b).0, bounds(b - 1).1 + 1, "bucket {b} follows the last");
        }
    }

    /// Percentiles within a step of the exact ones; the longest wait, the
    /// long ones and the log2 table exact; merging adds up.
    #[test]
    fn the_summary_reads_as_the_samples_do() {
        let samples: Vec<u64> = (1..=10_000u64).map(|i| i * i % 9_973 * 37 + i % 50).collect();
        let mut sorted = samples.clone();
        sorted.sort_unstable();
        let (mut first, mut second) = (WaitCounts::new(200_000), WaitCounts::new(200_000));
        for (i, &s) in samples.iter().enumerate() {
            if i % 3 == 0 { &mut first } else { &mut second }.record(s);
        }
        first.merge(&second);
        let summary = first.summary(1.0).unwrap();
        let exact = |q: f64| sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1] as f64;
        for (read, q) in [(summary.p50, 0.5), (summary.p99, 0.99)] {
            assert!((read - exact(q)).abs() <= exact(q) / 32.0, "q {q}: {read} against {}", exact(q));
        }
        assert_eq!(summary.samples, 10_000);
        assert_eq!(summary.max, *sorted.last().unwrap() as f64);
        let long = sorted.iter().filter(|&&s| s > 200_000).count();
        assert_eq!(summary.over_1ms_share, long as f64 / 10_000.0);
        let mut log2 = Histogram::default();
        samples.iter().for_each(|&s| log2.record(s));
        let last = log2.counts.iter().rposition(|&c| c > 0).unwrap() + 1;
        assert_eq!(summary.hist_log2_cycles, log2.counts[..last]);
        assert!(WaitCounts::new(1).summary(1.0).is_none(), "nothing timed, no summary of zeros");
    }
}
