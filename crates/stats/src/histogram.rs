//! Log2-cycle histograms, as in seed 000: bin `b` counts waits of
//! 2^b to 2^(b+1)-1 cycles (bin 0 also counts a wait of 0 cycles).

use std::fmt::Write as _;

/// Number of bins: enough for any 64-bit cycle count.
pub const BINS: usize = 64;

/// The bin of a wait of `cycles` cycles.
#[inline]
pub fn bin_of(cycles: u64) -> usize {
    (63 - (cycles | 1).leading_zeros()) as usize
}

/// A plain (non-atomic) log2 histogram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    /// `counts[b]` waits took 2^b..2^(b+1) cycles.
    pub counts: [u64; BINS],
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: [0; BINS] }
    }
}

impl Histogram {
    /// Counts one wait.
    pub fn record(&mut self, cycles: u64) {
        self.counts[bin_of(cycles)] += 1;
    }

    /// Total number of waits counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
    }

    /// The smallest bin whose cumulative count reaches `quantile` (0..=1).
    pub fn quantile_bin(&self, quantile: f64) -> Option<usize> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let target = (quantile * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (bin, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= target {
                return Some(bin);
            }
        }
        Some(BINS - 1)
    }
}

/// Renders histograms side by side in seed 000's layout:
///
/// ```text
///  bin     #occurrence     %       #occurrence     %
///  11      2               0.00%   120             0.24%
/// ```
/// Rows run from the lowest to the highest non-empty bin of any column.
pub fn render_side_by_side(titles: &[&str], histograms: &[&Histogram]) -> String {
    let mut out = String::new();
    let lowest = histograms.iter().filter_map(|h| h.counts.iter().position(|&c| c > 0)).min();
    let highest = histograms.iter().filter_map(|h| h.counts.iter().rposition(|&c| c > 0)).max();
    let (Some(lowest), Some(highest)) = (lowest, highest) else {
        return "(no waits recorded)\n".to_string();
    };
    let _ = write!(out, "{:<8}", "");
    for title in titles {
        let _ = write!(out, "{title:<24}");
    }
    out.push('\n');
    let _ = write!(out, "{:<8}", "bin");
    for _ in titles {
        let _ = write!(out, "{:<16}{:<8}", "#occurrence", "%");
    }
    out.push('\n');
    for bin in lowest..=highest {
        let _ = write!(out, "{bin:<8}");
        for h in histograms {
            let total = h.total().max(1);
            let count = h.counts[bin];
            let _ = write!(out, "{:<16}{:<8}", count, format!("{:.2}%", 100.0 * count as f64 / total as f64));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_are_log2_of_cycles() {
        assert_eq!(bin_of(0), 0);
        assert_eq!(bin_of(1), 0);
        assert_eq!(bin_of(2), 1);
        assert_eq!(bin_of(3), 1);
        assert_eq!(bin_of(4), 2);
        assert_eq!(bin_of((1 << 26) + 5), 26);
        assert_eq!(bin_of(u64::MAX), 63);
    }

    #[test]
    fn quantiles_and_rendering() {
        let mut h = Histogram::default();
        for c in [1 << 13, 1 << 13, 1 << 14, 1 << 20] {
            h.record(c);
        }
        assert_eq!(h.quantile_bin(0.5), Some(13));
        assert_eq!(h.quantile_bin(0.99), Some(20));
        let text = render_side_by_side(&["adaptive"], &[&h]);
        assert!(text.contains("13      2               50.00%"), "{text}");
        assert!(text.lines().count() == 2 + 8, "bins 13..=20 plus two header lines:\n{text}");
    }
}
