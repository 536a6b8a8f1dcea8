//! The report for people (a table per panel) and for programs (CSV; JSON
//! is the serde form of [`Report`]).

use crate::experiment::{PointResult, Report, WaitSummary};
use crate::locks::LockKind;
use std::fmt::Write as _;

/// The points of one panel: same workload parameters, all locks and threads.
pub fn panels(report: &Report) -> Vec<(Option<u64>, Option<u64>, Vec<&PointResult>)> {
    let mut panels: Vec<(Option<u64>, Option<u64>, Vec<&PointResult>)> = Vec::new();
    for p in &report.points {
        match panels.iter_mut().find(|(period, duty, _)| *period == p.period_ns && *duty == p.duty_pct) {
            Some(panel) => panel.2.push(p),
            None => panels.push((p.period_ns, p.duty_pct, vec![p])),
        }
    }
    panels
}

/// A panel's title.
pub fn panel_title(workload: &str, period: Option<u64>, duty: Option<u64>) -> String {
    match (period, duty) {
        (Some(p), Some(d)) => format!("{workload} P={p}ns D={d}%"),
        _ => workload.to_string(),
    }
}

fn distinct<T: PartialEq + Copy>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// One table per panel: a row per lock, a column per thread count; each
/// cell the median ops/s in millions, and for `duty` the efficiency. Where
/// threads contend, two more: fairness (most / fewest operations of any
/// thread) and the 99th-percentile wait.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}; work loop {:.3} iterations/ns; {} run(s) of {} per point, medians{}{}",
        report.machine.summary(),
        report.machine.work_iterations_per_ns,
        report.repeat,
        run_length(report.seconds_per_run),
        report.planned_repeat.map_or(String::new(), |planned| format!(" (stopped: {planned} were asked for)")),
        // (Said: a pinned run's figures differ from an unpinned one's, and
        // the header was all that came with a pasted table.)
        if report.provenance.pinned { "; workers pinned to CPUs (--pin)" } else { "" }
    );
    for note in [overran(report), crate::experiment::noise_note(&report.provenance)].into_iter().flatten() {
        let _ = writeln!(out, "{note}");
    }
    for (period, duty, points) in panels(report) {
        let title = panel_title(&report.workload, period, duty);
        let with_efficiency = points.iter().any(|p| p.efficiency.is_some());
        let heading = format!("{title}: Mops/s{}", if with_efficiency { " (share of the physical limit)" } else { "" });
        grid(&mut out, &heading, &points, if with_efficiency { 15 } else { 9 }, |p| match p.efficiency {
            Some(e) => format!("{} ({:>3.0}%)", mops(p.ops_per_sec), 100.0 * e),
            None => mops(p.ops_per_sec),
        });
        against_best_peer(&mut out, &title, &points);
        // A rate is work per CPU-second times CPUs kept busy: a lock that
        // leaves a CPU idle (its waiters asleep while others could run)
        // shows here, one that burns CPUs spinning in the rate alone.
        let heading = format!("{title}: CPUs kept busy (the process's CPU time over the run's, of {})", report.machine.cores);
        grid(&mut out, &heading, &points, 9, |p| {
            if p.ops_per_cpu_sec > 0.0 { format!("{:.2}", p.ops_per_sec / p.ops_per_cpu_sec) } else { String::from("-") }
        });
        if points.iter().any(|p| p.threads > 1) {
            let heading = format!("{title}: fairness, most / fewest operations of any thread");
            grid(&mut out, &heading, &points, 9, |p| match p.per_thread_ops.min {
                0 => "inf".to_string(),
                min => format!("{:.1}x", p.per_thread_ops.max as f64 / min as f64),
            });
            if points.iter().any(|p| p.per_thread_ops.most_blocked_share.is_some()) {
                let heading = format!("{title}: fairness, largest share of the run any thread spent blocked");
                grid(&mut out, &heading, &points, 9, |p| {
                    p.per_thread_ops.most_blocked_share.map_or(String::from("-"), |b| format!("{:.0}%", 100.0 * b))
                });
            }
            if points.iter().any(|p| p.per_thread_ops.per_cpu_ms.is_some()) {
                let heading = format!("{title}: fairness per CPU time, most / fewest operations per ms on a CPU");
                grid(&mut out, &heading, &points, 9, |p| match p.per_thread_ops.per_cpu_ms {
                    None => String::from("-"),
                    Some(r) if r.min <= 0.0 => String::from("inf"),
                    Some(r) => format!("{:.1}x", r.max / r.min),
                });
            }
            if points.iter().any(|p| p.per_thread_ops.least_served.is_some()) {
                let heading = format!(
                    "{title}: fairness, the thread with the fewest operations against the median thread: \
                     operations = time awake x CPU share of it x operations per CPU-ms"
                );
                grid(&mut out, &heading, &points, 21, |p| match p.per_thread_ops.least_served {
                    None => String::from("-"),
                    Some(l) => format!("{:.2}={:.2}x{:.2}x{:.2}", l.ops, l.awake, l.cpu_share, l.rate),
                });
            }
            let heading = format!("{title}: wait p99 in us (1 in 8 acquisitions)");
            // "-" where no wait was timed (the kernel's locks under --fs).
            let timed = |p: &PointResult, cell: fn(&WaitSummary) -> String| p.wait_ns.as_ref().map_or("-".to_string(), cell);
            grid(&mut out, &heading, &points, 9, |p| timed(p, |w| format!("{:.1}", w.p99 / 1e3)));
            let heading = format!("{title}: waits over 1 ms, % of the timed acquisitions");
            grid(&mut out, &heading, &points, 9, |p| timed(p, |w| format!("{:.2}", 100.0 * w.over_1ms_share)));
        }
    }
    out
}

/// Where our locks and peers ran side by side: each of ours against the
/// best peer at the same thread count (ours / its ops/s), and which peer
/// that was. The targets are stated as these ratios, and ones near 1.0
/// need three decimals (0.998x is a miss that two would print as 1.00x).
fn against_best_peer(out: &mut String, title: &str, points: &[&PointResult]) {
    let is_ours = |p: &PointResult| p.lock.parse::<LockKind>().is_ok_and(LockKind::is_ours);
    let ours = distinct(points.iter().filter(|p| is_ours(p)).map(|p| p.lock.as_str()));
    if ours.is_empty() || !points.iter().any(|p| LockKind::is_peer_name(&p.lock)) {
        return;
    }
    let threads = distinct(points.iter().map(|p| p.threads));
    let best: Vec<Option<&PointResult>> = threads.iter().map(|&t| best_peer(points, t)).collect();
    const WIDTH: usize = 15;
    let _ = writeln!(out, "\n{title}: against the best peer at each thread count (ops/s ratio)");
    let labels = label_width(points);
    row(out, ("lock \\ threads", labels), threads.iter().map(usize::to_string), WIDTH);
    let against = |lock: &str, cell: &dyn Fn(&PointResult, &PointResult) -> String| {
        threads
            .iter()
            .zip(&best)
            .map(|(t, best)| match (points.iter().find(|p| p.lock == lock && p.threads == *t), best) {
                (Some(o), Some(b)) if b.ops_per_sec > 0.0 => cell(o, b),
                _ => String::from("-"),
            })
            .collect::<Vec<_>>()
    };
    for &lock in &ours {
        row(out, (lock, labels), against(lock, &|o, b| format!("{:.3}x", o.ops_per_sec / b.ops_per_sec)).into_iter(), WIDTH);
    }
    row(out, ("(best peer)", labels), best.iter().map(|b| b.map_or("-", |b| b.lock.as_str()).to_string()), WIDTH);
    // A median ratio near its target says little alone on a noisy
    // machine: the spread of the rounds says how near.
    let rounds = points.iter().map(|p| p.ops_per_sec_runs.len()).min().unwrap_or(0);
    if rounds < 2 {
        return;
    }
    let _ = writeln!(out, "\n{title}: against the best peer, lowest and highest of the {rounds} rounds");
    row(out, ("lock \\ threads", labels), threads.iter().map(usize::to_string), WIDTH);
    for &lock in &ours {
        let range = |o: &PointResult, b: &PointResult| {
            lowest_and_highest(&round_ratios(o, b)).map_or(String::from("-"), |(low, high)| format!("{low:.3}-{high:.3}"))
        };
        row(out, (lock, labels), against(lock, &range).into_iter(), WIDTH);
    }
}

/// One lock's throughput against another's round by round: the i-th runs
/// of the two points, which `bench` makes in the same round of its
/// interleaved runs (every point once before any twice), so a slow spell
/// of the machine falls on both.
pub fn round_ratios(ours: &PointResult, theirs: &PointResult) -> Vec<f64> {
    ours.ops_per_sec_runs.iter().zip(&theirs.ops_per_sec_runs).filter(|(_, t)| **t > 0.0).map(|(o, t)| o / t).collect()
}

/// The lowest and the highest of `values`, if any.
pub fn lowest_and_highest(values: &[f64]) -> Option<(f64, f64)> {
    let first = *values.first()?;
    Some(values.iter().fold((first, first), |(low, high), &v| (low.min(v), high.max(v))))
}

/// The peer with the highest throughput among `points` at `threads`.
pub fn best_peer<'a>(points: &[&'a PointResult], threads: usize) -> Option<&'a PointResult> {
    points
        .iter()
        .copied()
        .filter(|p| p.threads == threads && LockKind::is_peer_name(&p.lock))
        .max_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec))
}

/// The width of a table's first column: its longest lock name and a gap,
/// and at least the header's.
fn label_width(points: &[&PointResult]) -> usize {
    points.iter().map(|p| p.lock.len() + 2).max().unwrap_or(0).max(16)
}

/// One line of a table: `label` in `label_width`, then `cells`
/// right-aligned in `width`.
fn row(out: &mut String, (label, label_width): (&str, usize), cells: impl Iterator<Item = String>, width: usize) {
    let _ = write!(out, "{label:<label_width$}");
    for cell in cells {
        let _ = write!(out, "{cell:>width$}");
    }
    out.push('\n');
}

/// A note when some runs lasted well past the length asked (a quarter
/// more): with many threads on few cores, nothing that could stop the
/// run got a CPU for a while (neither this process's timer nor a worker
/// that looks at the clock), and the header's length would mislead
/// (ops/s divide by the time run).
fn overran(report: &Report) -> Option<String> {
    let longest = report.points.iter().max_by(|a, b| a.median_run_seconds.total_cmp(&b.median_run_seconds))?;
    (longest.median_run_seconds > 1.25 * report.seconds_per_run).then(|| {
        format!(
            "(runs lasted up to {} at {}: the stop waited for a CPU; ops/s divide by the time they ran)",
            run_length(longest.median_run_seconds),
            threads(longest.threads)
        )
    })
}

/// `value` with at least `decimals` decimals, and more (up to 6) while it
/// would print as `other`, a threshold or the figure it is compared with,
/// that it is not: a verdict never sits beside two figures that read the
/// same (an efficiency of 89.96% printed "90.0%" beside its "no").
pub fn beside(value: f64, other: f64, decimals: usize) -> String {
    let mut decimals = decimals;
    while decimals < 6 && value != other && format!("{value:.decimals$}") == format!("{other:.decimals$}") {
        decimals += 1;
    }
    format!("{value:.decimals$}")
}

/// A run's length as given: milliseconds below a second ("4 ms", not
/// the "0.00 s" two decimals of a second made of it), seconds above.
fn run_length(seconds: f64) -> String {
    let (value, unit) = if seconds < 1.0 { (seconds * 1e3, "ms") } else { (seconds, "s") };
    // Three significant digits, without trailing zeros.
    let decimals = if value >= 100.0 { 0 } else if value >= 10.0 { 1 } else { 2 };
    let text = format!("{value:.decimals$}");
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { &text };
    format!("{text} {unit}")
}

/// Operations per second as Mops/s with four significant digits: with a
/// fixed three decimals, the 0.02 Mops/s of 36 µs critical sections would
/// print with two, and ratios read off the table would round by 5%.
fn mops(ops_per_sec: f64) -> String {
    let m = ops_per_sec / 1e6;
    let decimals = if m > 0.0 { (3 - m.log10().floor() as i32).clamp(0, 6) as usize } else { 3 };
    format!("{m:.decimals$}")
}

/// One table: a row per lock, a column per thread count, `cell` of each
/// point; "-" where a lock has no point. Columns are `width` wide, or
/// wider where a cell needs it (a fairness spread of 143089.7x), so that
/// two cells never run together.
fn grid(out: &mut String, heading: &str, points: &[&PointResult], width: usize, cell: impl Fn(&PointResult) -> String) {
    let threads = distinct(points.iter().map(|p| p.threads));
    let locks = distinct(points.iter().map(|p| p.lock.as_str()));
    let rows: Vec<(&str, Vec<String>)> = locks
        .into_iter()
        .map(|lock| {
            let cells = threads
                .iter()
                .map(|t| points.iter().find(|p| p.lock == lock && p.threads == *t).map_or(String::from("-"), |p| cell(p)))
                .collect();
            (lock, cells)
        })
        .collect();
    let width = rows.iter().flat_map(|(_, cells)| cells.iter().map(|c| c.len() + 1)).fold(width, usize::max);
    let _ = writeln!(out, "\n{heading}");
    let labels = label_width(points);
    row(out, ("lock \\ threads", labels), threads.iter().map(usize::to_string), width);
    for (lock, cells) in rows {
        row(out, (lock, labels), cells.into_iter(), width);
    }
}

/// The CSV header (stable column names).
pub const CSV_HEADER: &str = "workload,lock,threads,period_ns,duty_pct,ops_per_sec,ideal_ops_per_sec,efficiency,\
ops_per_cpu_sec,acquisitions,contended,spun,slept,wait_p50_ns,wait_p99_ns,wait_max_ns,wait_samples,\
per_thread_ops_min,per_thread_ops_max,per_thread_most_blocked_share,\
per_thread_ops_per_cpu_ms_min,per_thread_ops_per_cpu_ms_max,\
least_served_ops,least_served_awake,least_served_cpu_share,least_served_rate,wait_over_1ms_share,median_run_seconds";

/// One CSV row per point; empty fields where a value does not apply.
pub fn csv(report: &Report) -> String {
    fn opt<T: ToString>(v: Option<T>) -> String {
        v.map_or(String::new(), |v| v.to_string())
    }
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for p in &report.points {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{:.1},{},{},{:.1},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.4}",
            p.workload,
            p.lock,
            p.threads,
            opt(p.period_ns),
            opt(p.duty_pct),
            p.ops_per_sec,
            opt(p.ideal_ops_per_sec.map(|v| format!("{v:.1}"))),
            opt(p.efficiency.map(|v| format!("{v:.4}"))),
            p.ops_per_cpu_sec,
            opt(p.acquisitions),
            opt(p.contended),
            opt(p.spun),
            opt(p.slept),
            opt(p.wait_ns.as_ref().map(|w| format!("{:.1}", w.p50))),
            opt(p.wait_ns.as_ref().map(|w| format!("{:.1}", w.p99))),
            opt(p.wait_ns.as_ref().map(|w| format!("{:.1}", w.max))),
            p.wait_ns.as_ref().map_or(0, |w| w.samples),
            p.per_thread_ops.min,
            p.per_thread_ops.max,
            opt(p.per_thread_ops.most_blocked_share.map(|b| format!("{b:.4}"))),
            opt(p.per_thread_ops.per_cpu_ms.map(|r| format!("{:.2}", r.min))),
            opt(p.per_thread_ops.per_cpu_ms.map(|r| format!("{:.2}", r.max))),
            opt(p.per_thread_ops.least_served.map(|l| format!("{:.4}", l.ops))),
            opt(p.per_thread_ops.least_served.map(|l| format!("{:.4}", l.awake))),
            opt(p.per_thread_ops.least_served.map(|l| format!("{:.4}", l.cpu_share))),
            opt(p.per_thread_ops.least_served.map(|l| format!("{:.4}", l.rate))),
            opt(p.wait_ns.as_ref().map(|w| format!("{:.5}", w.over_1ms_share))),
            p.median_run_seconds
        );
    }
    out
}

/// "1 thread", "4 threads".
pub fn threads(n: usize) -> String {
    if n == 1 { "1 thread".to_string() } else { format!("{n} threads") }
}

#[cfg(test)]
mod tests {
    use super::{mops, run_length, table};
    use crate::fixtures::{point, report};

    /// Where no wait was timed (the kernel's locks under --fs), the wait
    /// columns say so rather than read 0.0.
    #[test]
    fn untimed_waits_read_as_a_dash() {
        let mut kernel = point("kernel", 2, 1e5);
        kernel.wait_ns = None;
        let mut timed = point("std", 2, 1e5);
        timed.wait_ns.as_mut().unwrap().p99 = 2500.0;
        let text = table(&report(vec![kernel, timed]));
        let p99 = text.split("wait p99 in us").nth(1).unwrap();
        let row = |lock: &str| p99.lines().find(|l| l.starts_with(lock)).unwrap().split_whitespace().nth(1).unwrap().to_string();
        assert_eq!((row("kernel"), row("std")), ("-".to_string(), "2.5".to_string()), "{text}");
    }

    #[test]
    fn runs_that_overran_are_noted_under_the_header() {
        let mut long = point("std", 1024, 1e6);
        long.median_run_seconds = 0.37;
        let mut short = point("std", 2, 1e6);
        short.median_run_seconds = 0.05;
        let mut overran = report(vec![short.clone(), long]);
        overran.seconds_per_run = 0.05;
        let text = table(&overran);
        assert!(text.lines().nth(1).unwrap().starts_with("(runs lasted up to 370 ms at 1024 threads"), "{text}");
        let mut on_time = report(vec![short]);
        on_time.seconds_per_run = 0.05;
        assert!(!table(&on_time).contains("runs lasted"));
    }

    /// A pinned run says so in its header: a table pasted alone keeps it.
    #[test]
    fn a_pinned_run_says_so_in_its_header() {
        let mut pinned = report(vec![point("std", 2, 1e6)]);
        assert!(!table(&pinned).lines().next().unwrap().contains("pinned"));
        pinned.provenance.pinned = true;
        assert!(table(&pinned).lines().next().unwrap().ends_with("; workers pinned to CPUs (--pin)"));
    }

    /// A run a stop ended early says in its header how many runs per
    /// point its medians are of, and how many were asked for.
    #[test]
    fn a_stopped_run_says_so_in_its_header() {
        let mut stopped = report(vec![point("std", 2, 1e6)]);
        stopped.planned_repeat = Some(3);
        let header = table(&stopped).lines().next().unwrap().to_string();
        assert!(header.ends_with("1 run(s) of 500 ms per point, medians (stopped: 3 were asked for)"), "{header}");
    }

    #[test]
    fn run_lengths_read_as_given() {
        assert_eq!(run_length(0.004), "4 ms");
        assert_eq!(run_length(0.5), "500 ms");
        assert_eq!(run_length(0.0125), "12.5 ms");
        assert_eq!(run_length(3.0), "3 s");
        assert_eq!(run_length(1.5), "1.5 s");
        assert_eq!(run_length(0.095709), "95.7 ms");
    }

    /// A fairness spread wider than the column widens it: the cells of
    /// neighbouring thread counts used to run together ("1.2x143089.7x").
    #[test]
    fn a_wide_cell_widens_its_table_and_never_touches_its_neighbour() {
        let mut spread = point("ticket", 16, 1e6);
        spread.per_thread_ops.min = 10;
        spread.per_thread_ops.max = 1_430_897;
        let text = table(&report(vec![point("ticket", 4, 1e6), spread, point("std", 4, 1e6), point("std", 16, 1e6)]));
        let heading = "fairness, most / fewest operations of any thread";
        let rows: Vec<&str> = text.lines().skip_while(|l| !l.contains(heading)).skip(1).take(3).collect();
        assert_eq!(rows[1].split_whitespace().collect::<Vec<_>>(), ["ticket", "1.0x", "143089.7x"], "{text}");
        let ends: Vec<usize> = rows.iter().map(|r| r.len()).collect();
        assert!(ends.iter().all(|&e| e == ends[0]), "columns stay aligned: {rows:?}");
    }

    #[test]
    fn throughput_prints_with_four_significant_digits() {
        assert_eq!(mops(42_928_000.0), "42.93");
        assert_eq!(mops(1_877_000.0), "1.877");
        assert_eq!(mops(456_200.0), "0.4562");
        assert_eq!(mops(21_430.0), "0.02143");
        assert_eq!(mops(102_300_000.0), "102.3");
        assert_eq!(mops(0.0), "0.000");
    }
}
