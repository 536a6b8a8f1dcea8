//! `lockmeter torture`: the torture of `lockmeter_bench::torture` for every
//! chosen lock and thread count, with a table or JSON, and an exit status a
//! script can trust (0 clean, 1 with the violation and the seed).

use crate::progress::Progress;
use lockmeter_bench::torture::{self, Config, Outcome, Subject};
use lockmeter_locks::Algorithm;
use std::time::Duration;

/// Parses `--lock`: an algorithm, `all` (every real one) or `busted`.
pub fn subjects(text: &str) -> Result<Vec<Subject>, String> {
    let mut out = Vec::new();
    for name in crate::args::list_items(text)? {
        match name {
            "all" => out.extend(Algorithm::ALL.iter().map(|&a| Subject::Ours(a))),
            "busted" => out.push(Subject::Busted),
            other => out.push(Subject::Ours(other.parse::<Algorithm>().map_err(|e| format!("{e}, or all, or busted"))?)),
        }
    }
    if out.is_empty() {
        return Err("no lock given".into());
    }
    // Each once, in the order first named (as --threads keeps its counts).
    let mut seen = Vec::new();
    out.retain(|subject| {
        let first = !seen.contains(subject);
        seen.push(*subject);
        first
    });
    Ok(out)
}

/// What `torture` was asked.
pub struct Options {
    pub subjects: Vec<Subject>,
    pub threads: Vec<usize>,
    pub duration: Duration,
    pub seed: u64,
    pub stall: Duration,
    pub json: bool,
}

/// "10 us", "300 ms", "5 s", "1.5 s".
fn seconds(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{} us", d.as_micros())
    } else if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{} s", (d.as_secs_f64() * 10.0).round() / 10.0)
    }
}

fn row(o: &Outcome) -> String {
    let known = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    format!(
        "{:<10} {:>7} {:>12.0} {:>21} {:>8} {:>12} {:>10} {:>10} {:>9}  {}",
        o.lock,
        o.threads,
        o.per_second,
        format!("{}..{}", o.per_thread_min, o.per_thread_max),
        o.spread.map_or_else(|| "inf".to_string(), |s| format!("{s:.1}x")),
        format!("{:.1} ms", o.longest_wait_ns as f64 / 1e6),
        known(o.spin),
        known(o.sleep),
        o.tokens,
        if o.violation.is_some() { "FAILED" } else { "ok" }
    )
}

/// Runs every (lock, threads) torture; Ok(true) when all were clean. The
/// table comes a row per run as each ends (a run of minutes said nothing
/// until the last had ended, and ^C lost the rows done); JSON, one
/// document, at the end.
pub fn torture(options: &Options) -> Result<bool, String> {
    use std::io::Write as _;
    if !options.json {
        outln!(
            "lockmeter torture: seed {}, {} per run; writers lock, trylock and timed-lock at random and check exclusion on shadow data,",
            options.seed,
            seconds(options.duration)
        );
        outln!("producers and consumers pass numbered tokens through condvars, a watchdog fails a thread stalled {}\n", seconds(options.stall));
        outln!(
            "{:<10} {:>7} {:>12} {:>21} {:>8} {:>12} {:>10} {:>10} {:>9}  result",
            "lock", "threads", "acq/s", "per-thread min..max", "spread", "longest wait", "spin", "sleep", "tokens"
        );
    }
    let mut progress = Progress::new(options.subjects.len() * options.threads.len());
    let mut outcomes = Vec::new();
    for &subject in &options.subjects {
        for &threads in &options.threads {
            progress.step(&format!("{} at {}, {}", subject.name(), lockmeter_bench::render::threads(threads), seconds(options.duration)));
            let config = Config { subject, threads, duration: options.duration, seed: options.seed, stall: options.stall };
            let outcome = torture::run(&config);
            // A stop asked of the process (the demo's ^C) cut the run
            // short: its figures are not a result.
            if lockmeter_bench::interrupt::requested().is_some() {
                progress.finish();
                // The runs that ended are kept, in JSON as in the table
                // (JSON came only at the end, and a stop lost every run).
                if options.json {
                    outln!("{}", serde_json::to_string_pretty(&outcomes).map_err(|e| e.to_string())?);
                }
                return Err("interrupted".into());
            }
            if !options.json {
                progress.finish();
                outln!("{}", row(&outcome));
                let _ = std::io::stdout().flush();
            }
            outcomes.push(outcome);
        }
    }
    progress.finish();
    if options.json {
        outln!("{}", serde_json::to_string_pretty(&outcomes).map_err(|e| e.to_string())?);
    }
    let mut clean = true;
    for outcome in outcomes.iter().filter(|o| o.violation.is_some()) {
        clean = false;
        say!(
            "lockmeter: torture failed: {} at {} (seed {}): {}",
            outcome.lock,
            lockmeter_bench::render::threads(outcome.threads),
            outcome.seed,
            outcome.violation.as_deref().unwrap_or_default()
        );
    }
    Ok(clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lock_is_tortured_once_in_the_order_first_named() {
        let named = subjects("mcs,adaptive,mcs,all").unwrap();
        assert_eq!(named.len(), Algorithm::ALL.len());
        assert_eq!(named[..2], [Subject::Ours(Algorithm::Mcs), Subject::Ours(Algorithm::Adaptive)]);
    }
}
