//! The lockmeter report of seed 004: one row per lock (and, indented, per
//! call site), columns UTIL, CON, HOLD mean(max), WAIT mean(max), TOTAL,
//! NOWAIT, SPIN, SLEEP, REJECT, NAME. SLEEP is ours: an algorithm of this
//! toolkit knows whether a waiter slept or spun.

use crate::lock_stats::{cycles_to_ns, Snapshot};
use std::fmt::Write as _;

/// One row of the report.
pub struct Row<'a> {
    /// Lock or call-site name.
    pub name: &'a str,
    /// Its statistics.
    pub stats: &'a Snapshot,
    /// Indent as a call site under the lock above.
    pub call_site: bool,
}

/// The report's column header.
pub fn header() -> String {
    format!(
        "{:>7} {:>7} {:>18} {:>18} {:>10} {:>10} {:>9} {:>9} {:>7}  NAME",
        "UTIL", "CON", "HOLD mean(max)", "WAIT mean(max)", "TOTAL", "NOWAIT", "SPIN", "SLEEP", "REJECT"
    )
}

/// Renders `rows` under the header; `elapsed_ns` is the observation time
/// (UTIL's denominator).
pub fn render(rows: &[Row<'_>], elapsed_ns: f64) -> String {
    let mut out = header();
    out.push('\n');
    for row in rows {
        let s = row.stats;
        let wait = if s.contended() == 0 && s.timed_out == 0 {
            format!("{:>18}", "0us")
        } else {
            format!("{:>18}", mean_max(s.wait_mean_ns(), cycles_to_ns(s.wait_max_cycles)))
        };
        let _ = writeln!(
            out,
            "{:>6.2}% {:>6.2}% {:>18} {} {:>10} {:>10} {:>9} {:>9} {:>7}  {}{}",
            s.utilisation_percent(elapsed_ns),
            s.contention_percent(),
            mean_max(s.hold_mean_ns(), cycles_to_ns(s.hold_max_cycles)),
            wait,
            s.acquisitions,
            s.no_wait,
            s.spin,
            s.sleep,
            s.rejected,
            if row.call_site { "  " } else { "" },
            row.name
        );
    }
    out
}

/// "5.2us(  2014us)": seed 004's mean(max) in microseconds.
fn mean_max(mean_ns: f64, max_ns: f64) -> String {
    format!("{}({:>7})", micros(mean_ns), micros(max_ns))
}

/// Microseconds, one decimal below 10 µs (as seed 004 prints them).
pub fn micros(ns: f64) -> String {
    let us = ns / 1000.0;
    if us < 10.0 {
        format!("{us:.1}us")
    } else {
        format!("{us:.0}us")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_match_seed_004_style() {
        assert_eq!(micros(5_200.0), "5.2us");
        assert_eq!(micros(3_344_000.0), "3344us");
        assert_eq!(micros(0.0), "0.0us");
    }

    #[test]
    fn rows_render_counts_and_names() {
        let s = Snapshot { acquisitions: 36515, no_wait: 36068, spin: 400, sleep: 47, ..Default::default() };
        let text = render(&[Row { name: "kernel_flag", stats: &s, call_site: false }], 1e9);
        let line = text.lines().nth(1).unwrap();
        assert!(line.ends_with("kernel_flag"), "{line}");
        assert!(line.contains("36515") && line.contains("36068") && line.contains(" 400 ") && line.contains(" 47 "));
        assert!(line.contains("1.22%"), "CON = 447/36515: {line}");
    }
}
