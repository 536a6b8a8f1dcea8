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

/// The values of one row, whatever they were measured by.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Columns {
    /// UTIL, percent.
    pub util_pct: f64,
    /// CON, percent.
    pub con_pct: f64,
    /// HOLD mean and max, nanoseconds.
    pub hold_ns: (f64, f64),
    /// WAIT mean and max, nanoseconds; `None` when nothing waited.
    pub wait_ns: Option<(f64, f64)>,
    /// TOTAL.
    pub total: u64,
    /// NOWAIT.
    pub nowait: u64,
    /// SPIN; `None` when the lock cannot tell (printed `-`).
    pub spin: Option<u64>,
    /// SLEEP; `None` when unknown.
    pub sleep: Option<u64>,
    /// REJECT.
    pub reject: u64,
}

impl Columns {
    /// The columns of a lock's snapshot over `elapsed_ns`.
    pub fn of_snapshot(s: &Snapshot, elapsed_ns: f64) -> Columns {
        let waited = s.contended() != 0 || s.timed_out != 0;
        Columns {
            util_pct: s.utilisation_percent(elapsed_ns),
            con_pct: s.contention_percent(),
            hold_ns: (s.hold_mean_ns(), cycles_to_ns(s.hold_max_cycles)),
            wait_ns: waited.then(|| (s.wait_mean_ns(), cycles_to_ns(s.wait_max_cycles))),
            total: s.acquisitions,
            nowait: s.no_wait,
            spin: Some(s.spin),
            sleep: Some(s.sleep),
            reject: s.rejected,
        }
    }
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
        out.push_str(&render_line(&Columns::of_snapshot(row.stats, elapsed_ns), row.name, usize::from(row.call_site)));
        out.push('\n');
    }
    out
}

/// One report line (no newline): `indent` levels of two spaces before the name.
pub fn render_line(c: &Columns, name: &str, indent: usize) -> String {
    render_cells(c, name, indent, &[true; 9])
}

/// Which of the nine value columns (UTIL .. REJECT) a call-site row fills:
/// a waiting site has no hold, a holding site no wait.
pub const WAITER_CELLS: [bool; 9] = [false, false, false, true, true, false, true, true, true];
/// See [`WAITER_CELLS`].
pub const HOLDER_CELLS: [bool; 9] = [false, true, true, false, true, true, false, false, false];

/// A lock's line with the columns marked in `meaningless` read `-`: a
/// condvar is never held (its UTIL and HOLD read 0.00% and 0.0us(0.0us),
/// as if measured).
pub fn render_line_without(c: &Columns, name: &str, indent: usize, meaningless: &[bool; 9]) -> String {
    let shown = meaningless.map(|m| !m);
    lay_out(c, name, indent, &shown, "-")
}

/// A report line showing only the columns marked in `shown`.
pub fn render_cells(c: &Columns, name: &str, indent: usize, shown: &[bool; 9]) -> String {
    lay_out(c, name, indent, shown, "")
}

/// A line of the columns marked in `shown`, the others `absent`,
/// right-aligned in their place.
fn lay_out(c: &Columns, name: &str, indent: usize, shown: &[bool; 9], absent: &str) -> String {
    let wait = match c.wait_ns {
        None => "0us".to_string(),
        Some((mean, max)) => mean_max(mean, max),
    };
    let known = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    let cells = [
        format!("{:>6.2}%", c.util_pct),
        format!("{:>6.2}%", c.con_pct),
        format!("{:>18}", mean_max(c.hold_ns.0, c.hold_ns.1)),
        format!("{wait:>18}"),
        format!("{:>10}", c.total),
        format!("{:>10}", c.nowait),
        format!("{:>9}", known(c.spin)),
        format!("{:>9}", known(c.sleep)),
        format!("{:>7}", c.reject),
    ];
    let mut line = String::new();
    for (i, (cell, &show)) in cells.iter().zip(shown).enumerate() {
        if i > 0 {
            line.push(' ');
        }
        if show {
            line.push_str(cell);
        } else {
            let _ = write!(line, "{absent:>width$}", width = cell.chars().count());
        }
    }
    line.push_str("  ");
    line.push_str(&"  ".repeat(indent));
    line.push_str(name);
    line
}

/// "5.2us(  2014us)": seed 004's mean(max) in microseconds.
fn mean_max(mean_ns: f64, max_ns: f64) -> String {
    format!("{}({:>7})", micros(mean_ns), micros(max_ns))
}

/// Microseconds, one decimal below 10 µs (as seed 004 prints them), three
/// below 0.1 µs: a critical section of a few tens of ns (a counter's) read
/// 0.0us, as if never held. From a second on, seconds: a hold of 1.1 s
/// read "1100114us" and pushed every column after it out of line.
pub fn micros(ns: f64) -> String {
    let us = ns / 1000.0;
    if us > 0.0 && us < 0.1 {
        format!("{us:.3}us")
    } else if us < 10.0 {
        format!("{us:.1}us")
    } else if us.round() < 1_000_000.0 {
        format!("{us:.0}us")
    } else {
        format!("{:.2}s", us / 1_000_000.0)
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
        assert_eq!(micros(35.0), "0.035us", "a short hold is not nothing");
        assert_eq!(micros(99.0), "0.099us");
        assert_eq!(micros(100.0), "0.1us");
        // Seconds from a second on, so that a cell keeps its width.
        assert_eq!(micros(999_999_000.0), "999999us");
        assert_eq!(micros(999_999_600.0), "1.00s");
        assert_eq!(micros(1_100_114_000.0), "1.10s");
        let line = |hold_ns: f64| {
            let c = Columns { hold_ns: (hold_ns / 2.0, hold_ns), wait_ns: Some((hold_ns, hold_ns)), ..Columns::default() };
            render_line(&c, "l", 0).len()
        };
        assert_eq!(line(1_100_114_000.0), line(5_000.0), "every column in its place");
        assert_eq!(line(999_999_000.0), line(5_000.0));
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
