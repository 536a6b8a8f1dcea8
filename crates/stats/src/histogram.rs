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
/// Rows run from the lowest to the highest non-empty bin of any column. A
/// column is the seed's 24 characters wide, or wider where its title needs
/// it: titles are printed whole (a caller shortens what would be too long).
pub fn render_side_by_side(titles: &[&str], histograms: &[&Histogram]) -> String {
    let mut out = String::new();
    let lowest = histograms.iter().filter_map(|h| h.counts.iter().position(|&c| c > 0)).min();
    let highest = histograms.iter().filter_map(|h| h.counts.iter().rposition(|&c| c > 0)).max();
    let (Some(lowest), Some(highest)) = (lowest, highest) else {
        return "(no waits recorded)\n".to_string();
    };
    const COUNT: usize = 16;
    const SHARE: usize = 8;
    let widths: Vec<usize> = titles.iter().map(|title| (title.chars().count() + 2).max(COUNT + SHARE)).collect();
    let _ = write!(out, "{:<8}", "");
    for (title, width) in titles.iter().zip(&widths) {
        let _ = write!(out, "{title:<width$}");
    }
    out.push('\n');
    let _ = write!(out, "{:<8}", "bin");
    for width in &widths {
        let _ = write!(out, "{:<COUNT$}{:<share$}", "#occurrence", "%", share = width - COUNT);
    }
    out.push('\n');
    for bin in lowest..=highest {
        let _ = write!(out, "{bin:<8}");
        for (h, width) in histograms.iter().zip(&widths) {
            let total = h.total().max(1);
            let count = h.counts[bin];
            let share = format!("{:.2}%", 100.0 * count as f64 / total as f64);
            let _ = write!(out, "{count:<COUNT$}{share:<width$}", width = width - COUNT);
        }
        out.push('\n');
    }
    // The last column's padding would end every line in spaces.
    out.lines().map(|line| format!("{}\n", line.trim_end())).collect()
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

    /// A title longer than the seed's column is printed whole, and its
    /// column widens so that every row's cells stay under their title.
    #[test]
    fn a_long_title_widens_its_column() {
        let mut h = Histogram::default();
        h.record(1 << 13);
        let long = "connection_pool_statistics_mutex";
        let text = render_side_by_side(&[long, "q"], &[&h, &h]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains(long), "{text}");
        let second_title = lines[0].find(" q").unwrap() + 1;
        assert_eq!(second_title, 8 + long.len() + 2, "{text}");
        assert_eq!(lines[1].rfind("#occurrence"), Some(second_title), "{text}");
        assert_eq!(lines[2].rfind("1 "), Some(second_title), "{text}");
        assert!(lines.iter().all(|line| !line.ends_with(' ')), "{text}");
    }
}
