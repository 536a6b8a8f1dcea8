//! Reports made up for unit tests: points with the fields a test sets
//! and neutral values elsewhere.

use crate::experiment::{Machine, PerThreadOps, PointResult, Report, WaitSummary};
use crate::work::Calibration;

/// A `sem` point of `lock` at `threads` with `ops` ops/s, from one run.
pub fn point(lock: &str, threads: usize, ops: f64) -> PointResult {
    PointResult {
        workload: "sem".into(),
        lock: lock.into(),
        threads,
        period_ns: None,
        duty_pct: None,
        ops_per_sec: ops,
        ops_per_sec_runs: vec![ops],
        ideal_ops_per_sec: None,
        efficiency: None,
        ops_per_cpu_sec: ops,
        acquisitions: None,
        contended: None,
        spun: None,
        slept: None,
        spins_on_owner: None,
        wait_ns: Some(WaitSummary { samples: 1, p50: 0.0, p99: 0.0, max: 0.0, over_1ms_share: 0.0, hist_log2_cycles: vec![1] }),
        per_thread_ops: PerThreadOps { min: 1, max: 1, most_blocked_share: None, per_cpu_ms: None, least_served: None },
        stats: None,
        median_run_seconds: 0.5,
    }
}

/// A `sem` report of `points`, one run per point.
pub fn report(points: Vec<PointResult>) -> Report {
    Report {
        machine: Machine::describe(&Calibration { iterations_per_ns: 1.0 }),
        workload: "sem".into(),
        seconds_per_run: 0.5,
        repeat: 1,
        planned_repeat: None,
        points,
        provenance: Default::default(),
    }
}
