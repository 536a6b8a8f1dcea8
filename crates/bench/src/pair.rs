//! `pair`: what one uncontended lock+unlock pair costs, the price every
//! acquisition pays before any contention (a performance target of
//! `adaptive`), beside the floors: a bare test-and-set (one locked
//! instruction) and cas-floor (the two every lock that can sleep pays).
//!
//! One thread, no waiters: the number is the fast path alone, so it moves
//! with the machine's moment more than the contended workloads do. Every
//! lock is measured once per round, rounds rotate the order (A B C, then
//! B C A, ...), and the figure is the median over rounds, so a slow spell
//! hits every lock alike and no lock always runs first.

use crate::experiment::{Machine, Provenance};
use crate::locks::LockKind;
use crate::work::Calibration;
use crate::workloads::{median, uncontended_pair_ns};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::Duration;

/// Pairs timed to estimate a lock's cost before sizing its runs.
const ESTIMATE_PAIRS: u64 = 100_000;
/// Fewest pairs in a run, however slow the lock: a run must outlast the
/// clock's resolution many times over.
const MIN_PAIRS: u64 = 10_000;

/// What to measure.
pub struct PairExperiment {
    /// The locks, in report order.
    pub locks: Vec<LockKind>,
    /// About how long each lock's run lasts.
    pub run: Duration,
    /// Rounds; the figure is the median over them.
    pub repeat: usize,
}

/// One lock's cost.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PairPoint {
    /// Lock name.
    pub lock: String,
    /// Median over rounds, ns per lock+unlock pair.
    pub ns_per_pair: f64,
    /// Every round's value, in run order.
    pub ns_per_pair_runs: Vec<f64>,
    /// Pairs per run.
    pub pairs: u64,
}

impl PairPoint {
    /// The fastest and the slowest round.
    fn range(&self) -> (f64, f64) {
        let runs = self.ns_per_pair_runs.iter().copied();
        (runs.clone().fold(f64::INFINITY, f64::min), runs.fold(0.0, f64::max))
    }
}

/// A finished `pair` measurement: the JSON contract.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PairReport {
    /// The machine.
    pub machine: Machine,
    /// Always "pair".
    pub workload: String,
    /// About how long each run lasted, seconds.
    pub seconds_per_run: f64,
    /// Rounds.
    pub repeat: usize,
    /// One entry per lock, in the order asked.
    pub points: Vec<PairPoint>,
    /// How the run was made.
    #[serde(default)]
    pub provenance: Provenance,
}

impl PairExperiment {
    /// How many runs [`Self::run`] makes (for progress).
    pub fn total_runs(&self) -> usize {
        self.locks.len() * self.repeat
    }

    /// The length of each of its runs, in order (for progress).
    pub fn planned_runs(&self) -> Vec<Duration> {
        vec![self.run; self.total_runs()]
    }

    /// Measures every lock `repeat` times in rotating order; `progress`
    /// is called before each run.
    pub fn run(&self, calibration: &Calibration, progress: impl FnMut(&str)) -> Result<PairReport, String> {
        crate::variants::prepare(self.locks.iter().copied())?;
        let provenance = Provenance::start();
        // (A stop during the last run ends it too.)
        let measured = self.measure(progress).and_then(|m| crate::interrupt::check().map(|()| m));
        crate::variants::switch_for(LockKind::Glibc)?; // back to the defaults, whatever happened
        let (runs, pairs) = measured?;
        let points = self
            .locks
            .iter()
            .zip(runs)
            .zip(pairs)
            .map(|((lock, runs), pairs)| PairPoint {
                lock: lock.name().to_string(),
                ns_per_pair: median(&mut runs.clone()),
                ns_per_pair_runs: runs,
                pairs,
            })
            .collect();
        Ok(PairReport {
            machine: Machine::describe(calibration),
            workload: "pair".into(),
            seconds_per_run: self.run.as_secs_f64(),
            repeat: self.repeat,
            points,
            provenance: provenance.finish(false),
        })
    }

    /// Every lock's runs, in lock order, and the pairs in each run.
    fn measure(&self, mut progress: impl FnMut(&str)) -> Result<(Vec<Vec<f64>>, Vec<u64>), String> {
        let run_ns = self.run.as_nanos() as f64;
        let mut pairs = Vec::with_capacity(self.locks.len());
        for &lock in &self.locks {
            crate::variants::switch_for(lock)?;
            let estimate = uncontended_pair_ns(lock, ESTIMATE_PAIRS).max(0.1);
            pairs.push(((run_ns / estimate) as u64).max(MIN_PAIRS));
        }
        let mut runs: Vec<Vec<f64>> = vec![Vec::with_capacity(self.repeat); self.locks.len()];
        for round in 0..self.repeat {
            for step in 0..self.locks.len() {
                let i = (round + step) % self.locks.len();
                let lock = self.locks[i];
                crate::interrupt::check()?;
                progress(&format!("pair {} round {}/{}", lock.name(), round + 1, self.repeat));
                crate::variants::switch_for(lock)?;
                runs[i].push(uncontended_pair_ns(lock, pairs[i]));
            }
        }
        Ok((runs, pairs))
    }
}

impl PairReport {
    /// The fastest peer's point, if any peer was measured.
    pub fn fastest_peer(&self) -> Option<&PairPoint> {
        self.points
            .iter()
            .filter(|p| LockKind::is_peer_name(&p.lock))
            .min_by(|a, b| a.ns_per_pair.total_cmp(&b.ns_per_pair))
    }

    /// glibc's mutex's point, if it was measured.
    pub fn glibc(&self) -> Option<&PairPoint> {
        self.points.iter().find(|p| p.lock == LockKind::Glibc.name())
    }

    /// The table for people: a row per lock, its median and range, and
    /// its ratio to the fastest peer and to glibc's mutex.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{}; {} round(s) of ~{:.0} ms per lock, order rotating, medians\n",
            self.machine.summary(),
            self.repeat,
            self.seconds_per_run * 1e3
        );
        if let Some(note) = crate::experiment::noise_note(&self.provenance) {
            let _ = writeln!(out, "{note}");
        }
        out.push('\n');
        let fastest = self.fastest_peer();
        let glibc = self.glibc();
        out += "pair: ns per uncontended lock+unlock (ratios of ns: below 1.00x is faster)\n";
        // glibc's column only when glibc is not the fastest peer (its
        // name headed both columns).
        let glibc = glibc.filter(|g| fastest.is_none_or(|f| f.lock != g.lock));
        let mut header = format!(
            "{:<20} {:>8} {:>16} {:>18}",
            "lock",
            "ns/pair",
            "min..max",
            format!("vs {}", fastest.map_or("fastest peer", |p| p.lock.as_str()))
        );
        if glibc.is_some() {
            header += &format!(" {:>9}", "vs glibc");
        }
        out += header.trim_end();
        out += "\n";
        for p in &self.points {
            let (lo, hi) = p.range();
            let ratio = |base: &PairPoint| format!("{:.2}x", p.ns_per_pair / base.ns_per_pair);
            let mut row = format!(
                "{:<20} {:>8.2} {:>16} {:>18}",
                p.lock,
                p.ns_per_pair,
                format!("{lo:.2}..{hi:.2}"),
                fastest.map_or("-".to_string(), ratio)
            );
            if let Some(glibc) = glibc {
                row += &format!(" {:>9}", ratio(glibc));
            }
            out += &row;
            out += "\n";
        }
        out
    }

    /// One row per lock.
    pub fn csv(&self) -> String {
        let mut out = String::from("workload,lock,ns_per_pair,ns_per_pair_min,ns_per_pair_max,pairs,runs\n");
        for p in &self.points {
            let (lo, hi) = p.range();
            let _ = writeln!(out, "pair,{},{:.3},{lo:.3},{hi:.3},{},{}", p.lock, p.ns_per_pair, p.pairs, p.ns_per_pair_runs.len());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(locks: &[&str], repeat: usize) -> PairReport {
        let experiment = PairExperiment {
            locks: locks.iter().map(|l| l.parse().unwrap()).collect(),
            run: Duration::from_millis(2),
            repeat,
        };
        let mut steps = Vec::new();
        let report = experiment.run(&Calibration { iterations_per_ns: 1.0 }, |s| steps.push(s.to_string())).unwrap();
        assert_eq!(steps.len(), experiment.total_runs());
        report
    }

    #[test]
    fn every_lock_gets_every_round_and_the_median_is_of_its_own_runs() {
        let report = measured(&["tas-floor", "adaptive", "glibc", "std"], 3);
        let names: Vec<&str> = report.points.iter().map(|p| p.lock.as_str()).collect();
        assert_eq!(names, ["tas-floor", "adaptive", "glibc", "std"]);
        for p in &report.points {
            assert_eq!(p.ns_per_pair_runs.len(), 3);
            assert!(p.pairs >= MIN_PAIRS);
            assert_eq!(p.ns_per_pair, median(&mut p.ns_per_pair_runs.clone()));
            assert!(p.ns_per_pair > 0.0 && p.ns_per_pair < 10_000.0, "{}: {} ns", p.lock, p.ns_per_pair);
        }
        // tas-floor is not a peer: the fastest peer is glibc or std.
        let fastest = report.fastest_peer().unwrap();
        assert!(["glibc", "std"].contains(&fastest.lock.as_str()));
        let table = report.table();
        assert!(table.contains(&format!("vs {}", fastest.lock)), "{table}");
        assert!(table.lines().any(|l| l.starts_with("glibc") && l.trim_end().ends_with("1.00x")), "{table}");
        assert_eq!(report.csv().lines().count(), 5);
    }

    /// glibc the fastest peer (the only one here): one column for it, not
    /// two headed alike.
    #[test]
    fn glibc_as_the_fastest_peer_heads_one_column() {
        let report = measured(&["adaptive", "glibc"], 1);
        let table = report.table();
        assert_eq!(table.matches("vs glibc").count(), 1, "{table}");
        let header = table.lines().find(|l| l.starts_with("lock")).unwrap();
        let row = table.lines().find(|l| l.starts_with("adaptive")).unwrap();
        assert_eq!(header.split_whitespace().count(), 5, "{table}");
        assert_eq!(row.split_whitespace().count(), 4, "{table}");
    }

    #[test]
    fn without_peers_the_ratios_are_left_out() {
        let report = measured(&["adaptive", "ticket"], 1);
        assert!(report.fastest_peer().is_none());
        let table = report.table();
        assert!(table.contains("vs fastest peer"), "{table}");
        assert!(table.lines().filter(|l| l.starts_with("adaptive") || l.starts_with("ticket")).all(|l| l.trim_end().ends_with('-')));
    }
}
