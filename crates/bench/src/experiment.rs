//! `lockmeter bench`: the seeds' experiments as a grid of points (lock x
//! threads x workload parameters), run interleaved and repeated, each
//! point reported with the fields of the JSON contract.

use crate::locks::{BenchLock, LockKind, LockVisitor, Recording};
use crate::waits::WaitCounts;
use crate::work::{spin_work, Calibration};
use crate::workloads::median;
use lockmeter_locks::clock;
use lockmeter_stats::{CountsSnapshot, Snapshot};
use serde::{Deserialize, Serialize};
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Which experiment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Seed 001's futextest: a period of busy work, a duty share of it
    /// inside the lock.
    Duty,
    /// Seed 003's semaphore test: lock, bump a shared counter, unlock.
    Sem,
    /// Seed 000/002's test-mutex "V": create and remove entries in one
    /// shared directory; in memory (a map under the lock under test), or
    /// in a real directory (the kernel's locks).
    Dir {
        /// A real directory to create and unlink files in.
        fs: Option<PathBuf>,
    },
}

impl Workload {
    /// The workload's name in output.
    pub fn name(&self) -> &'static str {
        match self {
            Workload::Duty => "duty",
            Workload::Sem => "sem",
            Workload::Dir { .. } => "dir",
        }
    }
}

/// A whole experiment.
#[derive(Clone, Debug)]
pub struct Experiment {
    /// The workload.
    pub workload: Workload,
    /// Locks to compare.
    pub locks: Vec<LockKind>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Periods (duty only), ns.
    pub periods_ns: Vec<u64>,
    /// Duty shares (duty only), percent.
    pub duties_pct: Vec<u64>,
    /// Length of one run.
    pub run: Duration,
    /// Runs per point.
    pub repeat: usize,
    /// What our locks record: `Counts` gives spun/slept at a few plain
    /// stores per acquisition; `Full` adds wait and hold times (the
    /// lockmeter report) at the price of two cycle-counter reads.
    pub recording: Recording,
    /// Pin worker `i` to the `i mod n`-th CPU this process may use (on
    /// many-core machines, to keep the scheduler's placement out of the
    /// comparison); unpinned by default, as programs run.
    pub pin: bool,
}

/// One point of the grid.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Point {
    lock: LockKind,
    threads: usize,
    period_ns: Option<u64>,
    duty_pct: Option<u64>,
}

/// The machine a run was made on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    /// Online CPUs.
    pub cores: usize,
    /// From /proc/cpuinfo.
    pub cpu_model: String,
    /// `uname -r`.
    pub kernel: String,
    /// Whether cpuid reports a hypervisor.
    pub hypervisor: bool,
    /// Busy-work loop iterations per ns (the duty workload's calibration).
    pub work_iterations_per_ns: f64,
    /// Cycle counter ticks per ns (for wait times).
    pub cycles_per_ns: f64,
}

impl Machine {
    /// "2 cores, AMD EPYC, kernel 6.18.44, under a hypervisor": the first
    /// words of every table, since figures mean little without them.
    pub fn summary(&self) -> String {
        format!(
            "{} core{}, {}, kernel {}{}",
            self.cores,
            if self.cores == 1 { "" } else { "s" },
            self.cpu_model,
            self.kernel,
            if self.hypervisor { ", under a hypervisor" } else { "" }
        )
    }

    /// Describes this machine, with `calibration`.
    pub fn describe(calibration: &Calibration) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map_or_else(|| "unknown".to_string(), |m| m.trim().to_string());
        let hypervisor = cpuinfo.lines().any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"));
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").map_or_else(|_| "unknown".into(), |k| k.trim().to_string());
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            kernel,
            hypervisor,
            work_iterations_per_ns: calibration.iterations_per_ns,
            cycles_per_ns: clock::cycles_per_ns(),
        }
    }
}

/// How a run was made: enough to make it again, and to judge its noise.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Provenance {
    /// lockmeter's version.
    pub lockmeter_version: String,
    /// The command line that made the run.
    pub command_line: Vec<String>,
    /// When the run started, seconds since the Unix epoch.
    pub started_unix_s: u64,
    /// Whether the workers were pinned to CPUs (`--pin`).
    pub pinned: bool,
    /// The share of the CPUs' time a hypervisor gave to other guests
    /// during the run (the kernel's steal time), in per cent: time the
    /// workers were runnable and no CPU ran them, which no lock can help.
    /// Null where the kernel does not say.
    pub steal_pct: Option<f64>,
    /// The share of the CPUs' time other programs of this machine used
    /// during the run, in per cent: busy time that was not lockmeter's.
    /// Their threads took CPUs from the workers, so figures read lower and
    /// noisier (a scorecard beside a build met 1 target of 25). Null where
    /// the kernel does not say (and in reports saved before it was kept).
    #[serde(default)]
    pub others_pct: Option<f64>,
}

/// A run under way, for its [`Provenance`].
pub struct ProvenanceStart {
    started_unix_s: u64,
    cpu: Option<CpuTicks>,
    own: Option<u64>,
}

impl Provenance {
    /// Notes the start of a run.
    pub fn start() -> ProvenanceStart {
        let started_unix_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        ProvenanceStart { started_unix_s, cpu: CpuTicks::read(), own: own_ticks() }
    }
}

impl ProvenanceStart {
    /// The provenance of the run now ending.
    pub fn finish(&self, pinned: bool) -> Provenance {
        let (cpu, own) = (CpuTicks::read(), own_ticks());
        let (steal_pct, others_pct) = match (&self.cpu, &cpu) {
            (Some(before), Some(after)) if after.total.saturating_sub(before.total) >= MIN_SHARE_TICKS => {
                let share = |ticks: u64| 100.0 * ticks as f64 / (after.total - before.total) as f64;
                let others = match (self.own, own) {
                    (Some(own_before), Some(own_after)) => {
                        let busy = after.busy.saturating_sub(before.busy);
                        Some(share(busy.saturating_sub(own_after.saturating_sub(own_before))))
                    }
                    _ => None,
                };
                (Some(share(after.steal.saturating_sub(before.steal))), others)
            }
            _ => (None, None),
        };
        Provenance {
            lockmeter_version: env!("CARGO_PKG_VERSION").to_string(),
            // (args() panics on an argument that is not UTF-8, a file
            // name in Latin-1: after the whole run.)
            command_line: std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect(),
            started_unix_s: self.started_unix_s,
            pinned,
            steal_pct,
            others_pct,
        }
    }
}

/// The fewest ticks of the CPUs' time (10 ms each, per CPU) a run must
/// cover for its shares to be said: each count read is a tick out either
/// way, and lockmeter's own busy tick, counted before its own CPU time
/// reached one, read as other programs' (a 3 ms run on 2 CPUs read "other
/// programs used 100%"); over 50 ticks the error is 2-4%, below the 5% a
/// header notes. Shorter runs say nothing.
const MIN_SHARE_TICKS: u64 = 50;

/// lockmeter's own CPU time so far, in the ticks of /proc/stat: user and
/// system time of all its threads, /proc/self/stat's 14th and 15th fields
/// (counted after the command name's closing parenthesis, as a name may
/// hold spaces).
fn own_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// The whole machine's CPU time so far, in ticks, from /proc/stat's first
/// line: all of it, the part stolen, and the part busy (neither idle,
/// waiting for I/O, nor stolen).
#[derive(Clone, Copy)]
struct CpuTicks {
    total: u64,
    steal: u64,
    busy: u64,
}

impl CpuTicks {
    /// The CPUs this process may run on, summed (the time of the others,
    /// under taskset or in a container, is none of the run's: counted, a
    /// busy program on them read as competition, and one on ours was
    /// diluted by the CPUs idle elsewhere); the whole machine's where the
    /// set is not known.
    fn read() -> Option<CpuTicks> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let allowed = allowed_cpus();
        let ours = stat.lines().filter_map(|line| {
            let cpu: usize = line.strip_prefix("cpu")?.split_whitespace().next()?.parse().ok()?;
            allowed.contains(&cpu).then(|| Self::parse(line)).flatten()
        });
        let summed = ours.fold(None, |sum: Option<CpuTicks>, t| {
            Some(sum.map_or(t, |s| CpuTicks { total: s.total + t.total, steal: s.steal + t.steal, busy: s.busy + t.busy }))
        });
        summed.or_else(|| Self::parse(stat.lines().next()?))
    }

    /// "cpu  user nice system idle iowait irq softirq steal guest
    /// guest_nice" (guest time is counted in user time already), or a
    /// "cpuN" line of one CPU.
    fn parse(line: &str) -> Option<CpuTicks> {
        let fields = line.strip_prefix("cpu")?.trim_start_matches(|c: char| c.is_ascii_digit());
        let fields: Vec<u64> = fields.split_whitespace().map(|f| f.parse().ok()).collect::<Option<_>>()?;
        let steal = *fields.get(7)?;
        let total: u64 = fields.iter().take(8).sum();
        let (idle, iowait) = (*fields.get(3)?, *fields.get(4)?);
        Some(CpuTicks { total, steal, busy: total - idle - iowait - steal })
    }
}

/// A note for a table's header when a hypervisor took more than 1% of
/// the CPUs' time during the run, or other programs used more than 5% of
/// it: its figures are the noisier for it, and lower.
pub fn noise_note(provenance: &Provenance) -> Option<String> {
    let steal = provenance.steal_pct.filter(|&steal| steal > 1.0).map(|steal| format!("the hypervisor gave {steal:.1}% of the CPUs' time to other guests"));
    let others = provenance.others_pct.filter(|&others| others > 5.0).map(|others| format!("other programs used {others:.1}% of the CPUs' time"));
    let said: Vec<String> = [steal, others].into_iter().flatten().collect();
    (!said.is_empty()).then(|| format!("({} during the run: figures are the noisier for it)", said.join(", and ")))
}

/// A run's full statistics and the time they cover.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The lock's statistics.
    pub snapshot: Snapshot,
    /// From the start to the last worker's end, seconds: the holds of
    /// operations begun before the stop end after it, and over the run's
    /// length alone a lock always held read 100.6% busy.
    pub seconds: f64,
}

/// Wait-time summary of a point (sampled acquisitions of its median run).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WaitSummary {
    /// How many acquisitions were timed.
    pub samples: u64,
    /// Median wait, ns (the middle of its step: waits are counted in 32
    /// steps per power of two, see `waits.rs`).
    pub p50: f64,
    /// 99th percentile wait, ns (likewise).
    pub p99: f64,
    /// Longest timed wait, ns.
    pub max: f64,
    /// Share of the timed waits longer than 1 ms. A p99 can hide a
    /// bimodal tail: a lock whose waiters mostly spin briefly and now and
    /// then sleep for milliseconds reads microseconds or milliseconds
    /// depending on which side of 1% the sleepers fall; this tells how
    /// many waits were long at all.
    #[serde(default)]
    pub over_1ms_share: f64,
    /// Seed 000's table: `hist_log2_cycles[b]` waits took 2^b..2^(b+1) cycles.
    pub hist_log2_cycles: Vec<u64>,
}

/// Fairness of a point: operations of the least and most served thread.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PerThreadOps {
    /// Fewest operations of any thread.
    pub min: u64,
    /// Most operations of any thread.
    pub max: u64,
    /// The largest share of the run any thread spent blocked: neither on a
    /// CPU nor waiting for one (for a blocking lock, asleep in it). It
    /// tells the lock's unfairness from the scheduler's: when threads
    /// outnumber cores, each one's operations follow its CPU time, which
    /// the scheduler hands out unevenly, so a wide `max / min` with every
    /// thread blocked for a small share of the run is the scheduler's.
    /// Absent where the kernel keeps no per-thread schedstat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub most_blocked_share: Option<f64>,
    /// Fewest and most operations per millisecond on a CPU of any thread
    /// that got a CPU. A thread the lock keeps failing (woken again and
    /// again to lose, or spinning in vain) stands out here with a low
    /// rate. Where `max / min` of operations is wide and this ratio is
    /// narrow, the threads that did little were given little CPU: by the
    /// scheduler (runnable, waiting for a CPU) or by the lock (asleep in
    /// it), which `most_blocked_share` tells apart. Absent where the kernel
    /// keeps no per-thread schedstat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_cpu_ms: Option<OpsPerCpuMs>,
    /// Why the thread with the fewest operations did few: its figures
    /// against the median thread's. Absent where the kernel keeps no
    /// per-thread schedstat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub least_served: Option<LeastServed>,
}

/// The thread with the fewest operations against the median thread (the
/// one with the median number of operations), each figure as a ratio to
/// that thread's. Operations are time awake x CPU share of it x operations
/// per CPU-ms, so `ops` is the product of the three factors: time awake
/// (not blocked: a blocking lock that keeps the thread asleep shrinks
/// this), the share of that time the scheduler gave it a CPU, and
/// operations per CPU-ms (a lock that keeps it failing shrinks this).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct LeastServed {
    /// Its operations / the median thread's.
    pub ops: f64,
    /// Time on a CPU or waiting for one / the median thread's.
    pub awake: f64,
    /// CPU time as a share of its awake time / the median thread's.
    pub cpu_share: f64,
    /// Operations per CPU-ms / the median thread's.
    pub rate: f64,
}

/// Operations per millisecond on a CPU: the least and most of any thread.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct OpsPerCpuMs {
    /// The slowest thread's rate.
    pub min: f64,
    /// The fastest thread's rate.
    pub max: f64,
}

/// The result of one point: the JSON contract.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PointResult {
    /// duty, sem or dir.
    pub workload: String,
    /// Lock name.
    pub lock: String,
    /// Threads.
    pub threads: usize,
    /// Period (duty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_ns: Option<u64>,
    /// Duty share (duty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duty_pct: Option<u64>,
    /// Median over repeats.
    pub ops_per_sec: f64,
    /// Every repeat's value, in run order.
    pub ops_per_sec_runs: Vec<f64>,
    /// The physical limit (duty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ideal_ops_per_sec: Option<f64>,
    /// ops_per_sec / ideal_ops_per_sec (duty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub efficiency: Option<f64>,
    /// Operations per second of CPU time the process burned (median run).
    pub ops_per_cpu_sec: f64,
    /// Our locks: acquisitions in the median run (null for peers).
    pub acquisitions: Option<u64>,
    /// Our locks: acquisitions that waited.
    pub contended: Option<u64>,
    /// Our locks: acquisitions that waited without sleeping.
    pub spun: Option<u64>,
    /// Our locks: acquisitions that slept.
    pub slept: Option<u64>,
    /// `adaptive`'s spins on a running owner, by the source that decided
    /// each (on-CPU table, owner CPU clock, or none), and their mean length.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spins_on_owner: Option<SpinsOnOwner>,
    /// Wait times (median run); null where no acquisition was timed (the
    /// kernel's locks, under `dir --fs`), which a summary of zeros would
    /// have read as waits of 0 ns.
    pub wait_ns: Option<WaitSummary>,
    /// Fairness (median run).
    pub per_thread_ops: PerThreadOps,
    /// Full statistics of the median run (with `Recording::Full`).
    #[serde(skip)]
    pub stats: Option<Recorded>,
    /// Wall time of the median run, seconds: the run's length, or
    /// longer when the stop waited for a CPU.
    #[serde(default)]
    pub median_run_seconds: f64,
}

/// A finished experiment.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// The machine.
    pub machine: Machine,
    /// Workload name.
    pub workload: String,
    /// Seconds per run.
    pub seconds_per_run: f64,
    /// Runs per point.
    pub repeat: usize,
    /// Set when a stop (^C, SIGTERM) ended the run early: the runs per
    /// point asked for, of which `repeat` were done at every point (and
    /// the medians are theirs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_repeat: Option<usize>,
    /// One entry per point.
    pub points: Vec<PointResult>,
    /// How the run was made.
    #[serde(default)]
    pub provenance: Provenance,
}

/// Spins on a running owner, by who decided them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SpinsOnOwner {
    /// Spins whose verdict came from the on-CPU table.
    pub decided_by_table: u64,
    /// Spins whose verdict came from the owner's CPU clock.
    pub decided_by_cpu_clock: u64,
    /// Spins that ended before any source answered.
    pub undecided: u64,
    /// Mean length of a spin.
    pub mean_ns: f64,
}

/// What one run measured.
struct Run {
    seconds: f64,
    stats: Option<Recorded>,
    ops_per_sec: f64,
    ops_per_cpu_sec: f64,
    per_thread: Vec<u64>,
    /// How each thread spent the run, if the kernel says.
    per_thread_times: Vec<Option<ThreadShare>>,
    wait: Option<WaitSummary>,
    counts: Option<CountsSnapshot>,
    /// Every worker was pinned to its CPU (with `--pin`).
    pinned: bool,
}

/// Time one operation in this many (for `dir`, its first acquisition).
const SAMPLE_EVERY: u64 = 8;

impl Experiment {
    fn points(&self) -> Vec<Point> {
        let mut points = Vec::new();
        let (periods, duties): (Vec<Option<u64>>, Vec<Option<u64>>) = match self.workload {
            Workload::Duty => (
                self.periods_ns.iter().copied().map(Some).collect(),
                self.duties_pct.iter().copied().map(Some).collect(),
            ),
            _ => (vec![None], vec![None]),
        };
        let locks: Vec<LockKind> = match self.workload {
            // Real files exercise the kernel's locks, not ours: one series.
            Workload::Dir { fs: Some(_) } => vec![LockKind::Glibc],
            _ => self.locks.clone(),
        };
        for &period_ns in &periods {
            for &duty_pct in &duties {
                for &threads in &self.threads {
                    for &lock in &locks {
                        points.push(Point { lock, threads, period_ns, duty_pct });
                    }
                }
            }
        }
        points
    }

    /// Number of runs the experiment makes (for progress).
    pub fn total_runs(&self) -> usize {
        self.points().len() * self.repeat
    }

    /// The length of each of its runs, in order (for progress: a time
    /// left counted in runs read '~3s left' with 36 s of 3-second runs
    /// to go after 400 short ones).
    pub fn planned_runs(&self) -> Vec<Duration> {
        vec![self.run; self.total_runs()]
    }

    /// Runs every point `repeat` times, interleaved (every point runs once
    /// before any runs twice); `progress` is called before each run. A
    /// stop (see [`crate::interrupt`]) ends the run in progress and starts
    /// no other: the report then holds the rounds every point finished
    /// (`planned_repeat` says so), or, without one, is an error.
    pub fn run(&self, calibration: &Calibration, mut progress: impl FnMut(&str)) -> Result<Report, String> {
        can_start(self.threads.iter().copied().max().unwrap_or(1))?;
        let provenance = Provenance::start();
        let points = self.points();
        crate::variants::prepare(points.iter().map(|p| p.lock))?;
        let mut runs: Vec<Vec<Run>> = (0..points.len()).map(|_| Vec::new()).collect();
        // The rounds every point finished, none cut short by a stop.
        let mut complete = 0;
        'rounds: for repeat in 0..self.repeat {
            for (i, point) in points.iter().enumerate() {
                if crate::interrupt::requested().is_some() {
                    break 'rounds;
                }
                progress(&format!(
                    "{} {}{} {}, run {}/{}",
                    self.workload.name(),
                    self.lock_label(point.lock),
                    point.period_ns.map_or(String::new(), |p| format!(" P={p}ns D={}%", point.duty_pct.unwrap_or(0))),
                    crate::render::threads(point.threads),
                    repeat + 1,
                    self.repeat
                ));
                crate::variants::switch_for(point.lock)?;
                let run = self.run_point(point, calibration);
                crate::variants::switch_for(LockKind::Glibc)?; // back to the defaults
                match run {
                    Ok(run) => runs[i].push(run),
                    Err(_) if crate::interrupt::requested().is_some() => break 'rounds,
                    Err(error) => return Err(error),
                }
            }
            if crate::interrupt::cut_short() {
                break;
            }
            complete = repeat + 1;
        }
        if complete == 0 {
            crate::interrupt::check()?;
        }
        for point_runs in &mut runs {
            point_runs.truncate(complete);
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Said only where it held: a pin the kernel refused left the worker
        // where the scheduler put it.
        let pinned = self.pin && runs.iter().flatten().all(|run| run.pinned);
        let results = points
            .iter()
            .zip(runs)
            .map(|(point, runs)| summarise(&self.workload, point, runs, cores, self.lock_label(point.lock)))
            .collect();
        Ok(Report {
            machine: Machine::describe(calibration),
            workload: self.workload.name().to_string(),
            seconds_per_run: self.run.as_secs_f64(),
            repeat: complete,
            planned_repeat: (complete < self.repeat).then_some(self.repeat),
            points: results,
            provenance: provenance.finish(pinned),
        })
    }

    fn lock_label(&self, lock: LockKind) -> String {
        match self.workload {
            Workload::Dir { fs: Some(_) } => "kernel".to_string(),
            _ => lock.name().to_string(),
        }
    }

    fn run_point(&self, point: &Point, calibration: &Calibration) -> Result<Run, String> {
        struct Visit<'a> {
            experiment: &'a Experiment,
            point: &'a Point,
            calibration: &'a Calibration,
        }
        impl LockVisitor for Visit<'_> {
            type Output = Result<Run, String>;
            fn visit<L: BenchLock>(self, make: impl Fn() -> L + Send + Sync + Clone + 'static) -> Self::Output {
                let shared = Arc::new(Shared {
                    lock: OwnLines(make()),
                    counter: OwnLines(UnsafeCell::new(0)),
                    directory: OwnLines(UnsafeCell::new(HashMap::new())),
                });
                self.experiment.drive(shared, self.point, self.calibration)
            }
        }
        point.lock.recording(self.recording).visit(Visit { experiment: self, point, calibration })
    }

    fn drive<L: BenchLock>(&self, shared: Arc<Shared<L>>, point: &Point, calibration: &Calibration) -> Result<Run, String> {
        let body = match (&self.workload, point.period_ns, point.duty_pct) {
            (Workload::Duty, Some(period), Some(duty)) => {
                let inside_ns = (period * duty + 50) / 100;
                Body::Duty {
                    inside: calibration.iterations_for_ns(inside_ns),
                    outside: calibration.iterations_for_ns(period - inside_ns),
                }
            }
            (Workload::Sem, ..) => Body::Sem,
            (Workload::Dir { fs: None }, ..) => Body::DirInMemory,
            (Workload::Dir { fs: Some(path) }, ..) => {
                let metadata = std::fs::metadata(path).map_err(|e| format!("--fs {}: {e}", path.display()))?;
                if !metadata.is_dir() {
                    return Err(format!("--fs {}: not a directory", path.display()));
                }
                Body::DirFs(path.clone())
            }
            (Workload::Duty, ..) => return Err("duty needs a period and a duty share".into()),
        };
        let stop = Arc::new(Stop::default());
        // A wait over 1 ms, in cycles (see `WaitSummary::over_1ms_share`).
        let long_cycles = (1e6 * clock::cycles_per_ns()) as u64;
        // Workers check in at the gate, then wait for it to open; the clock
        // starts once all have checked in and before it opens, while every
        // worker is blocked: spawning 256 threads is not part of the run,
        // and this thread is not delayed by busy workers.
        let gate = Arc::new(StartGate::default());
        let mut workers = Vec::with_capacity(point.threads);
        let cpus = if self.pin { allowed_cpus() } else { Vec::new() };
        for index in 0..point.threads {
            let (shared, stop_flag, worker_gate, body) = (shared.clone(), stop.clone(), gate.clone(), body.clone());
            let cpu = (!cpus.is_empty()).then(|| cpus[index % cpus.len()]);
            let spawned = std::thread::Builder::new().spawn(move || {
                let pinned = cpu.is_some_and(pin_to);
                // Read before the gate: a worker that waits long for a CPU
                // once it opens was runnable all that time, not blocked.
                let started = ThreadTimes::now();
                let waits = WaitCounts::new(long_cycles);
                worker_gate.check_in_and_wait();
                stop_flag.begin();
                let (ops, waits) = worker(&shared, &body, index as u64, &stop_flag, waits)?;
                Ok::<_, String>((ops, waits, started.and_then(|s| s.share_since(stop_flag.started_ns.load(Ordering::Relaxed))), pinned))
            });
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(e) => {
                    stop.now();
                    gate.open();
                    for w in workers {
                        let _ = w.join();
                    }
                    return Err(format!("cannot start thread {} of {}: {e}", index + 1, point.threads));
                }
            }
        }
        gate.wait_for(point.threads);
        let cpu_before = process_cpu_seconds();
        stop.start(self.run);
        gate.open();
        // Looking every 20 ms for a stop asked of the whole bench; the
        // run's end is due its length after the first worker began.
        while crate::interrupt::requested().is_none() && !stop.is_raised() && !stop.is_due() {
            std::thread::sleep(Duration::from_nanos(stop.due_in_ns()).min(Duration::from_millis(20)));
        }
        if crate::interrupt::requested().is_some() && !stop.is_due() {
            crate::interrupt::note_cut_short();
        }
        stop.now();
        if crate::interrupt::requested().is_some() && !matches!(body, Body::DirFs(_)) {
            // The run is thrown away and lockmeter dies of the signal: its
            // workers need not be waited for. Each must take the lock once
            // more to see the stop, and behind a preempted holder of a
            // spinlock at 1024 threads on 2 cores that took seconds. (A
            // `dir --fs` worker is waited for: it removes the file it made.)
            drop(workers);
            return Err("interrupted".into());
        }
        let cpu = (process_cpu_seconds() - cpu_before).max(1e-9);
        let mut per_thread = Vec::with_capacity(point.threads);
        let mut per_thread_times = Vec::with_capacity(point.threads);
        let mut waits = WaitCounts::new(long_cycles);
        let mut pinned = true;
        for w in workers {
            let (ops, thread_waits, times, thread_pinned) = w.join().map_err(|_| "a benchmark thread panicked".to_string())??;
            per_thread.push(ops);
            per_thread_times.push(times);
            waits.merge(&thread_waits);
            pinned &= thread_pinned;
        }
        // The run ended at the stop: an operation counts only if it
        // entered its critical section before it. (Read after the joins
        // and the samples' summary, the clock took in their time too: 37
        // ms of 5.8 million samples in a 0.5 s `sem` run.)
        let elapsed = stop.run_seconds();
        let stats = shared.lock.stats().map(|snapshot| Recorded { snapshot, seconds: stop.seconds_since_start() });
        let wait = waits.summary(clock::cycles_per_ns());
        let ops: u64 = per_thread.iter().sum();
        Ok(Run {
            seconds: elapsed,
            stats,
            ops_per_sec: ops as f64 / elapsed,
            ops_per_cpu_sec: ops as f64 / cpu,
            per_thread,
            per_thread_times,
            wait,
            counts: shared.lock.counts(),
            pinned,
        })
    }
}

/// Whether `threads` threads can run at once here, tried before the
/// first run: a limit met at the largest count only (`ulimit -u`, `-v`)
/// ended the bench there, the runs before it lost.
fn can_start(threads: usize) -> Result<(), String> {
    let release = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let mut started = Vec::with_capacity(threads);
    let mut failed = None;
    for index in 0..threads {
        let release = release.clone();
        let waiting = std::thread::Builder::new().spawn(move || {
            let (released, wake) = &*release;
            let mut released = released.lock().unwrap_or_else(|e| e.into_inner());
            while !*released {
                released = wake.wait(released).unwrap_or_else(|e| e.into_inner());
            }
        });
        match waiting {
            Ok(handle) => started.push(handle),
            Err(e) => {
                failed = Some(format!(
                    "cannot run {threads} threads here (thread {}: {e}): lower --threads, or raise the limit that stopped it (ulimit -u, ulimit -v)",
                    index + 1
                ));
                break;
            }
        }
    }
    *release.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
    release.1.notify_all();
    for handle in started {
        let _ = handle.join();
    }
    failed.map_or(Ok(()), Err)
}

/// The end of a run: the flag workers look at before each critical
/// section, raised by this thread after the run's length or by the first
/// worker to see the deadline pass, whichever comes first. With hundreds
/// of busy workers on 2 cores, the controlling thread's wake-up waited
/// for a CPU: a 100 ms run of `spin` at 256 threads lasted 863 ms, and
/// one at 4096 threads 29.8 s.
///
/// The run begins when its first worker does: on a loaded machine every
/// worker of a 20 ms run waited longer than that for a CPU after the
/// gate opened, and the first to run found the run over (no operation).
#[derive(Default)]
struct Stop {
    stopped: AtomicBool,
    /// A worker has begun.
    begun: AtomicBool,
    run_ns: AtomicU64,
    /// CLOCK_MONOTONIC ns: when the run started (the gate opened, then
    /// the first worker began), when it is due to end, and when it was
    /// stopped (0 until it is).
    started_ns: AtomicU64,
    deadline_ns: AtomicU64,
    stopped_ns: AtomicU64,
}

impl Stop {
    /// The gate opens for a run of length `run`.
    fn start(&self, run: Duration) {
        let now = monotonic_ns();
        self.run_ns.store(run.as_nanos() as u64, Ordering::Relaxed);
        self.started_ns.store(now, Ordering::Relaxed);
        self.deadline_ns.store(now + run.as_nanos() as u64, Ordering::Relaxed);
    }

    /// A worker past the gate: the first starts the run's clock.
    fn begin(&self) {
        if self.begun.load(Ordering::Relaxed) {
            return;
        }
        let now = monotonic_ns();
        if !self.begun.swap(true, Ordering::Relaxed) {
            self.deadline_ns.store(now + self.run_ns.load(Ordering::Relaxed), Ordering::Relaxed);
            self.started_ns.store(now, Ordering::Relaxed);
        }
    }

    /// Whether the run has begun and its length has passed.
    fn is_due(&self) -> bool {
        self.begun.load(Ordering::Relaxed) && monotonic_ns() >= self.deadline_ns.load(Ordering::Relaxed)
    }

    /// How long until the run is due, ns (its whole length before it
    /// has begun).
    fn due_in_ns(&self) -> u64 {
        if !self.begun.load(Ordering::Relaxed) {
            return self.run_ns.load(Ordering::Relaxed);
        }
        self.deadline_ns.load(Ordering::Relaxed).saturating_sub(monotonic_ns())
    }

    fn is_raised(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    /// Stops the run now, unless it is stopped already.
    fn now(&self) {
        let now = monotonic_ns();
        if !self.stopped.swap(true, Ordering::Relaxed) {
            self.stopped_ns.store(now, Ordering::Relaxed);
        }
    }

    /// A worker's look at the clock, at `now` (monotonic ns): stops the
    /// run if it is past due, or if a stop was asked of the whole bench
    /// (the controlling thread, which also looks, may wait seconds for a
    /// CPU behind a thousand busy workers).
    fn check_deadline(&self, now: u64) {
        if now >= self.deadline_ns.load(Ordering::Relaxed) || crate::interrupt::requested().is_some() {
            self.now();
        }
    }

    /// From the start to the stop (after the workers are joined).
    fn run_seconds(&self) -> f64 {
        let (started, stopped) = (self.started_ns.load(Ordering::Relaxed), self.stopped_ns.load(Ordering::Relaxed));
        stopped.saturating_sub(started).max(1) as f64 * 1e-9
    }

    /// From the start to now.
    fn seconds_since_start(&self) -> f64 {
        monotonic_ns().saturating_sub(self.started_ns.load(Ordering::Relaxed)).max(1) as f64 * 1e-9
    }
}

fn monotonic_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime fills the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// A worker looks at the clock at most once in this many operations (a
/// vDSO clock read, about 20 ns: 0.1 ns an operation)...
const DEADLINE_CHECK_EVERY: u64 = 256;
/// ...and at least about this often, in ns, however slow its operations
/// are: every operation where an operation takes longer. (A fixed 256
/// operations is never, where a thread makes a few operations a run: `spin`
/// at 1024 threads, a few hundred each, and its 200 ms run lasted 3 s,
/// until the controlling thread got a CPU.)
const DEADLINE_CHECK_NS: u64 = 100_000;

/// When a worker looks at the clock next: an interval in operations that
/// doubles while looks come sooner than [`DEADLINE_CHECK_NS`] apart and
/// halves while they come later.
struct DeadlineLooks {
    every: u64,
    next: u64,
    last_ns: u64,
}

impl DeadlineLooks {
    fn new() -> Self {
        DeadlineLooks { every: 1, next: 0, last_ns: monotonic_ns() }
    }

    /// Looks at the clock if `ops` is due for a look; true if the run is
    /// over then. (Where operations are slow, a worker looks before each:
    /// one that sees the run over does not queue for the lock, which at
    /// 1024 `spin` threads drew the run's end out by seconds. Looked for
    /// before every operation, it cost a test-and-set's one-thread `sem`
    /// 15% of its rate.)
    #[inline]
    fn maybe_check(&mut self, ops: u64, stop: &Stop) -> bool {
        if ops < self.next {
            return false;
        }
        let now = monotonic_ns();
        stop.check_deadline(now);
        let since = now.saturating_sub(self.last_ns);
        if since < DEADLINE_CHECK_NS / 2 {
            self.every = (self.every * 2).min(DEADLINE_CHECK_EVERY);
        } else if since > DEADLINE_CHECK_NS {
            self.every = (self.every / 2).max(1);
        }
        self.last_ns = now;
        self.next = ops + self.every;
        stop.is_raised()
    }
}

/// Holds the workers until every one is ready, then lets them all go at
/// once. Each waits on a futex of its own reading, so opening is one wake
/// of all and leaving takes no lock: a gate built on a mutex and condvar
/// let the 256 woken workers out one at a time through the mutex, while
/// the first ones out already kept both CPUs busy, and some started the
/// run up to 2 s late (in a 3 s run), which the fairness figures then
/// counted against the lock under test.
#[derive(Default)]
struct StartGate {
    checked_in: std::sync::atomic::AtomicUsize,
    /// 0 while closed, 1 once open.
    open: std::sync::atomic::AtomicU32,
}

impl StartGate {
    fn check_in_and_wait(&self) {
        self.checked_in.fetch_add(1, Ordering::Release);
        while self.open.load(Ordering::Acquire) == 0 {
            // Returns at once if the gate opened meanwhile.
            lockmeter_locks::futex::wait(&self.open, 0, None);
        }
    }

    /// Until `workers` have checked in (set-up time, not measured).
    fn wait_for(&self, workers: usize) {
        while self.checked_in.load(Ordering::Acquire) < workers {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn open(&self) {
        self.open.store(1, Ordering::Release);
        lockmeter_locks::futex::wake(&self.open, u32::MAX);
    }
}

/// The lock and the data it protects, each on cache lines of their own,
/// the same for every lock. Left to the compiler and the allocator,
/// `sem`'s counter shared the lock's line for some locks (std,
/// parking_lot, glibc) and not for ours, the directory's header shared it
/// for ours, and each run's allocation moved the lock within its line.
struct Shared<L> {
    lock: OwnLines<L>,
    counter: OwnLines<UnsafeCell<u64>>,
    directory: OwnLines<UnsafeCell<HashMap<u64, u64>>>,
}

/// A value that starts a cache line and shares none.
#[repr(align(64))]
struct OwnLines<T>(T);

impl<T> std::ops::Deref for OwnLines<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

// SAFETY: `counter` and `directory` are only touched inside the lock's
// critical section.
unsafe impl<L: Sync> Sync for Shared<L> {}

#[derive(Clone)]
enum Body {
    Duty { inside: u64, outside: u64 },
    Sem,
    DirInMemory,
    DirFs(PathBuf),
}

/// One thread's loop; returns its operations and its timed waits, counted
/// in `waits`.
///
/// Waits are read inside the critical section but stored after it, so
/// recording never lengthens a hold. An operation whose acquisition comes
/// after `stop` is neither done nor counted: threads queued on the lock at
/// the end would otherwise each add one operation outside the run; its
/// wait, if timed, is (it began in the run, and a starved thread's last
/// wait is the longest it had: left out, 256 threads queued on a FIFO
/// lock for 100 µs sections read a p99 of 0).
///
/// Threads time their operations one in [`SAMPLE_EVERY`], each from its
/// own place in the count (`index`'s), so a thread that makes fewer than
/// that many is timed as often as any: counted from zero in every thread,
/// the starved threads, whose waits are the tail, were never timed.
fn worker<L: BenchLock>(shared: &Shared<L>, body: &Body, index: u64, stop: &Stop, mut waits: WaitCounts) -> Result<(u64, WaitCounts), String> {
    let mut ops = 0u64;
    let mut looks = DeadlineLooks::new();
    let phase = index % SAMPLE_EVERY;
    loop {
        if looks.maybe_check(ops, stop) {
            break;
        }
        // Not the first operation: the start is a stampede by design.
        let timed = ops > 0 && (ops + phase) % SAMPLE_EVERY == SAMPLE_EVERY - 1;
        let asked = if timed { clock::cycles() } else { 0 };
        // The cycle count at the start of the critical section, or None if
        // the run is over.
        let entered = |stop: &Stop| (!stop.is_raised()).then(|| if timed { clock::cycles() } else { 0 });
        let acquired = match body {
            Body::Duty { inside, outside } => {
                let entered = shared.lock.critical(|| {
                    let entered = entered(stop);
                    if entered.is_some() {
                        spin_work(*inside);
                    }
                    entered
                });
                if entered.is_some() {
                    spin_work(*outside);
                }
                entered
            }
            Body::Sem => shared.lock.critical(|| {
                let entered = entered(stop);
                if entered.is_some() {
                    // SAFETY: inside the critical section.
                    unsafe { *shared.counter.get() += 1 }
                }
                entered
            }),
            Body::DirInMemory => {
                // test-mutex "V": create an entry, then unlink it; each is
                // one directory operation under the directory's lock.
                let name = index << 40 | ops;
                let entered = shared.lock.critical(|| {
                    let entered = entered(stop);
                    if entered.is_some() {
                        // SAFETY: inside the critical section.
                        unsafe { (*shared.directory.get()).insert(name, ops) };
                    }
                    entered
                });
                if entered.is_some() {
                    shared.lock.critical(|| {
                        // SAFETY: inside the critical section.
                        unsafe { (*shared.directory.get()).remove(&name) };
                    });
                }
                entered
            }
            Body::DirFs(path) => {
                if stop.is_raised() {
                    None
                } else {
                    // The kernel's locks are not ours to time: no samples.
                    let file = path.join(format!("lockmeter-{}-{index}", std::process::id()));
                    std::fs::File::create(&file).map_err(|e| format!("creating {}: {e}", file.display()))?;
                    std::fs::remove_file(&file).map_err(|e| format!("removing {}: {e}", file.display()))?;
                    Some(0)
                }
            }
        };
        if timed && !matches!(body, Body::DirFs(_)) {
            // Past the deadline, the critical section left at once: now is
            // within a few ns of the acquisition.
            let entered = acquired.unwrap_or_else(clock::cycles);
            // A cycle counter that steps back (a migration between CPUs
            // whose counters differ) reads as no wait, not as 2^64.
            waits.record(entered.saturating_sub(asked));
        }
        if acquired.is_none() {
            break;
        }
        ops += 1;
    }
    Ok((ops, waits))
}

/// A thread's own clocks: wall time, CPU time (the thread CPU clock,
/// exact), and the kernel's account of its time runnable, waiting for a
/// CPU (`/proc/thread-self/schedstat`, complete whenever the thread runs,
/// as it does when it reads it). What is neither, the thread spent
/// blocked. (schedstat's own CPU time is brought up to date only at ticks
/// and switches, a few ms late for a running thread: it read a lone
/// thread, which cannot block on a lock, as blocked 14-19% of a 20 ms
/// run.)
struct ThreadTimes {
    /// CLOCK_MONOTONIC ns.
    wall_ns: u64,
    cpu_clock_ns: u64,
    runnable_ns: u64,
}

impl ThreadTimes {
    /// The clocks now: the wall clock first, so that a preemption while
    /// the others are read (with a thousand threads on 2 cores, a second
    /// or more) is counted in the runnable time it is, and never in a wall
    /// time nothing else accounts for (which read a bare test-and-set's
    /// threads, which never block, as blocked 37% of a run at 64 threads
    /// and 99.9% at 1024).
    fn now() -> Option<ThreadTimes> {
        let wall_ns = monotonic_ns();
        let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        let (_, runnable_ns) = parse_schedstat(&text)?;
        Some(ThreadTimes { wall_ns, cpu_clock_ns: thread_cpu_ns(), runnable_ns })
    }

    /// How the calling thread spent the wall time since `self`, or since
    /// `from_ns` (monotonic ns) if later: the run's start, for clocks read
    /// before the thread waited for it.
    fn share_since(&self, from_ns: u64) -> Option<ThreadShare> {
        let now = ThreadTimes::now()?;
        let wall = now.wall_ns.saturating_sub(self.wall_ns.max(from_ns)) as f64;
        let on_cpu_ns = now.cpu_clock_ns.saturating_sub(self.cpu_clock_ns);
        let runnable_ns = now.runnable_ns.saturating_sub(self.runnable_ns);
        let accounted = (on_cpu_ns + runnable_ns) as f64;
        (wall > 0.0).then(|| ThreadShare { blocked: ((wall - accounted) / wall).clamp(0.0, 1.0), on_cpu_ns, runnable_ns })
    }
}

/// A thread's run, as the kernel accounted it.
#[derive(Clone, Copy, Debug)]
struct ThreadShare {
    /// Share of the wall time spent blocked.
    blocked: f64,
    /// Time on a CPU (the thread CPU clock).
    on_cpu_ns: u64,
    /// Time runnable, waiting for a CPU.
    runnable_ns: u64,
}

/// The thread with the fewest operations against the median thread;
/// `None` unless the kernel accounted every thread.
fn least_served(ops: &[u64], times: &[Option<ThreadShare>]) -> Option<LeastServed> {
    let times = times.iter().copied().collect::<Option<Vec<ThreadShare>>>()?;
    let mut by_ops: Vec<usize> = (0..ops.len()).collect();
    by_ops.sort_by_key(|&i| ops[i]);
    // The upper middle: with two threads, the other one (the lower one,
    // the thread itself, read 1.00x at every factor).
    let (fewest, middle) = (*by_ops.first()?, by_ops[by_ops.len() / 2]);
    let awake = |i: usize| (times[i].on_cpu_ns + times[i].runnable_ns) as f64;
    let cpu_share = |i: usize| if awake(i) > 0.0 { times[i].on_cpu_ns as f64 / awake(i) } else { 0.0 };
    let rate = |i: usize| if times[i].on_cpu_ns > 0 { ops[i] as f64 / times[i].on_cpu_ns as f64 } else { 0.0 };
    let against_middle = |figure: &dyn Fn(usize) -> f64| {
        let reference = figure(middle);
        if reference > 0.0 { figure(fewest) / reference } else { 0.0 }
    };
    Some(LeastServed {
        ops: against_middle(&|i| ops[i] as f64),
        awake: against_middle(&awake),
        cpu_share: against_middle(&cpu_share),
        rate: against_middle(&rate),
    })
}

/// The least and most operations per CPU-millisecond of the threads that
/// got a CPU; `None` unless the kernel accounted every thread and one
/// got a CPU.
fn ops_per_cpu_ms(ops: &[u64], times: &[Option<ThreadShare>]) -> Option<OpsPerCpuMs> {
    let times = times.iter().copied().collect::<Option<Vec<ThreadShare>>>()?;
    let rates = ops
        .iter()
        .zip(&times)
        .filter(|(_, t)| t.on_cpu_ns > 0)
        .map(|(&ops, t)| ops as f64 * 1e6 / t.on_cpu_ns as f64);
    rates.fold(None, |range, rate| match range {
        None => Some(OpsPerCpuMs { min: rate, max: rate }),
        Some(r) => Some(OpsPerCpuMs { min: r.min.min(rate), max: r.max.max(rate) }),
    })
}

/// The calling thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer; the clock id is a constant the
    // kernel always supports.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `on-CPU-ns runnable-ns timeslices`, as schedstat has it.
fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some((fields.next()??, fields.next()??))
}

/// User plus system CPU time of the whole process.
fn process_cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: valid out-pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } != 0 {
        return 0.0;
    }
    // SAFETY: initialised by the successful call.
    let u = unsafe { usage.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // A mask of 1024 CPUs, twice as large while the kernel's is larger
    // (glibc's cpu_set_t stops at 1024: more CPUs read as none).
    let mut words = 16;
    loop {
        let mut mask = vec![0u64; words];
        // SAFETY: the kernel writes at most the given size into the mask.
        let written = unsafe { libc::syscall(libc::SYS_sched_getaffinity, 0, words * 8, mask.as_mut_ptr()) };
        if written > 0 {
            return (0..words * 64).filter(|&cpu| mask[cpu / 64] & (1 << (cpu % 64)) != 0).collect();
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) || words >= 1 << 16 {
            return Vec::new();
        }
        words *= 2;
    }
}

/// Pins the calling thread to `cpu`; false if the kernel refused (an
/// unpinned worker still measures correctly, but the report does not
/// say it was pinned).
fn pin_to(cpu: usize) -> bool {
    let mut mask = vec![0u64; cpu / 64 + 1];
    mask[cpu / 64] |= 1 << (cpu % 64);
    // SAFETY: the kernel reads the given size of the mask.
    unsafe { libc::syscall(libc::SYS_sched_setaffinity, 0, mask.len() * 8, mask.as_ptr()) == 0 }
}

fn summarise(workload: &Workload, point: &Point, runs: Vec<Run>, cores: usize, lock: String) -> PointResult {
    let ops_runs: Vec<f64> = runs.iter().map(|r| r.ops_per_sec).collect();
    let ops = median(&mut ops_runs.clone());
    // Details come from the run whose throughput is the median.
    let median_run = runs
        .iter()
        .min_by(|a, b| (a.ops_per_sec - ops).abs().total_cmp(&(b.ops_per_sec - ops).abs()))
        .expect("at least one run");
    let ideal = match (workload, point.period_ns, point.duty_pct) {
        (Workload::Duty, Some(period), Some(duty)) => {
            let by_threads = point.threads.min(cores) as f64 * 1e9 / period as f64;
            let critical_section_ns = period as f64 * duty as f64 / 100.0;
            let by_lock = if duty == 0 { f64::INFINITY } else { 1e9 / critical_section_ns };
            Some(by_threads.min(by_lock))
        }
        _ => None,
    };
    let counts = median_run.counts;
    PointResult {
        workload: workload.name().to_string(),
        lock,
        threads: point.threads,
        period_ns: point.period_ns,
        duty_pct: point.duty_pct,
        ops_per_sec: ops,
        ops_per_sec_runs: ops_runs,
        ideal_ops_per_sec: ideal,
        efficiency: ideal.map(|i| ops / i),
        ops_per_cpu_sec: median_run.ops_per_cpu_sec,
        acquisitions: counts.map(|c| c.acquisitions),
        contended: counts.map(|c| c.contended()),
        spun: counts.map(|c| c.spin),
        slept: counts.map(|c| c.sleep),
        spins_on_owner: counts.filter(|c| c.spins.total() > 0).map(|c| SpinsOnOwner {
            decided_by_table: c.spins.by_table,
            decided_by_cpu_clock: c.spins.by_clock,
            undecided: c.spins.undecided,
            mean_ns: c.spins.cycles as f64 / clock::cycles_per_ns() / c.spins.total() as f64,
        }),
        wait_ns: median_run.wait.clone(),
        per_thread_ops: PerThreadOps {
            min: median_run.per_thread.iter().copied().min().unwrap_or(0),
            max: median_run.per_thread.iter().copied().max().unwrap_or(0),
            most_blocked_share: median_run
                .per_thread_times
                .iter()
                .map(|t| t.map(|t| t.blocked))
                .collect::<Option<Vec<f64>>>()
                .and_then(|shares| shares.into_iter().reduce(f64::max)),
            per_cpu_ms: ops_per_cpu_ms(&median_run.per_thread, &median_run.per_thread_times),
            least_served: least_served(&median_run.per_thread, &median_run.per_thread_times),
        },
        stats: median_run.stats.clone(),
        median_run_seconds: median_run.seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A run's clock starts with its first worker, however late after
    /// the gate opened, and later workers do not move it.
    #[test]
    fn a_run_begins_with_its_first_worker() {
        let stop = Stop::default();
        stop.start(Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(30));
        assert!(!stop.is_due(), "due before any worker began");
        stop.begin();
        assert!(!stop.is_due() && stop.due_in_ns() > 10_000_000, "{} ns left", stop.due_in_ns());
        stop.check_deadline(monotonic_ns());
        assert!(!stop.is_raised());
        std::thread::sleep(Duration::from_millis(10));
        stop.begin();
        std::thread::sleep(Duration::from_millis(15));
        assert!(stop.is_due());
        stop.now();
        let seconds = stop.run_seconds();
        assert!((0.025..0.100).contains(&seconds), "{seconds} s from the first worker's start");
    }
    use lockmeter_locks::Algorithm;

    #[test]
    fn schedstat_gives_on_cpu_then_runnable_ns() {
        assert_eq!(parse_schedstat("922267 31 2\n"), Some((922267, 31)));
        assert_eq!(parse_schedstat("922267"), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
    }

    #[test]
    fn operations_per_cpu_ms_skip_threads_that_never_ran() {
        let share = |on_cpu_ns| Some(ThreadShare { blocked: 0.0, on_cpu_ns, runnable_ns: 0 });
        let range = ops_per_cpu_ms(&[100, 10, 0, 7], &[share(2_000_000), share(1_000_000), share(500_000), share(0)]).unwrap();
        assert_eq!((range.min, range.max), (0.0, 50.0));
        assert!(ops_per_cpu_ms(&[1, 2], &[share(1_000_000), None]).is_none());
    }

    /// The least served thread's factors: here it was awake half as long
    /// as the median thread, got a third of its CPU share, and ran at its
    /// rate: 1/6 of its operations.
    #[test]
    fn the_least_served_thread_is_explained_against_the_median() {
        let share = |on_cpu_ns, runnable_ns| Some(ThreadShare { blocked: 0.0, on_cpu_ns, runnable_ns });
        let ops = [600, 100, 900, 600];
        let times = [share(6_000, 0), share(1_000, 2_000), share(3_000, 0), share(6_000, 0)];
        let least = least_served(&ops, &times).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(least.ops, 1.0 / 6.0), "{least:?}");
        assert!(close(least.awake, 0.5), "{least:?}");
        assert!(close(least.cpu_share, 1.0 / 3.0), "{least:?}");
        assert!(close(least.rate, 1.0), "{least:?}");
        assert!(close(least.awake * least.cpu_share * least.rate, least.ops));
        assert!(least_served(&ops, &[share(1, 0), None, share(1, 0)]).is_none());
        let two = least_served(&[300, 100], &[share(3_000, 0), share(1_000, 0)]).unwrap();
        assert!(close(two.ops, 1.0 / 3.0), "two threads, against the other: {two:?}");
    }

    /// A bimodal tail: 98 short waits and 2 of several ms. The p99 lands
    /// on the long side, and the share over 1 ms says how many were long.
    #[test]
    fn the_share_of_waits_over_1_ms_counts_the_long_ones() {
        let cycles = |ns: f64| (ns * clock::cycles_per_ns()).round() as u64;
        let long = cycles(1e6);
        let mut waits = WaitCounts::new(long);
        (0..98).for_each(|i| waits.record(cycles(200.0 + i as f64)));
        [cycles(4e6), cycles(9e6)].into_iter().for_each(|w| waits.record(w));
        let summary = waits.summary(clock::cycles_per_ns()).unwrap();
        assert_eq!(summary.samples, 100);
        assert!((summary.over_1ms_share - 0.02).abs() < 1e-12, "{summary:?}");
        assert!(summary.p99 > 1e6, "{summary:?}");
        let mut short = WaitCounts::new(long);
        (0..10).for_each(|_| short.record(cycles(999_000.0)));
        assert_eq!(short.summary(clock::cycles_per_ns()).unwrap().over_1ms_share, 0.0);
    }

    #[test]
    fn a_sleeping_thread_is_blocked_and_a_spinning_one_is_not() {
        if ThreadTimes::now().is_none() {
            eprintln!("SKIPPED: this kernel keeps no /proc/thread-self/schedstat");
            return;
        }
        let sleeper = std::thread::spawn(|| {
            let start = ThreadTimes::now().unwrap();
            std::thread::sleep(Duration::from_millis(80));
            start.share_since(0).unwrap()
        });
        let spinner = std::thread::spawn(|| {
            let start = ThreadTimes::now().unwrap();
            let until = Instant::now() + Duration::from_millis(80);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            start.share_since(0).unwrap()
        });
        let (asleep, spinning) = (sleeper.join().unwrap(), spinner.join().unwrap());
        assert!(asleep.blocked > 0.5, "a thread asleep for the whole window was blocked {:.2} of it", asleep.blocked);
        // Waiting for a CPU (on a busy machine) is not being blocked.
        assert!(spinning.blocked < 0.2, "a spinning thread was blocked {:.2} of the window", spinning.blocked);
        assert!(
            spinning.on_cpu_ns > 10 * asleep.on_cpu_ns.max(1_000),
            "on a CPU: spinning {} ns, asleep {} ns",
            spinning.on_cpu_ns,
            asleep.on_cpu_ns
        );
    }

    /// Steal is the eighth field of /proc/stat's first line, out of the
    /// first eight (guest time is in user time already); a run the
    /// hypervisor took more than 1% of says so in its table's header.
    #[test]
    fn steal_and_other_programs_are_read_and_noted_past_their_thresholds() {
        let ticks = CpuTicks::parse("cpu  100 0 50 800 10 0 5 35 20 0").unwrap();
        assert_eq!((ticks.total, ticks.steal, ticks.busy), (1000, 35, 155));
        let one = CpuTicks::parse("cpu1 10 0 5 80 1 0 0 4 0 0").unwrap();
        assert_eq!((one.total, one.steal, one.busy), (100, 4, 15));
        assert!(CpuTicks::parse("intr 1 2 3").is_none());
        let with = |steal, others| Provenance { steal_pct: steal, others_pct: others, ..Default::default() };
        assert!(noise_note(&with(Some(3.5), None)).unwrap().contains("3.5% of the CPUs' time to other guests"));
        assert!(noise_note(&with(Some(0.4), Some(4.0))).is_none() && noise_note(&with(None, None)).is_none());
        let both = noise_note(&with(Some(2.0), Some(40.0))).unwrap();
        assert!(both.contains("2.0% of the CPUs' time to other guests, and other programs used 40.0%"), "{both}");
        assert!(CpuTicks::read().is_some(), "this kernel's /proc/stat");
        assert!(own_ticks().is_some(), "this kernel's /proc/self/stat");
    }

    /// A program busy on a CPU beside a run reads as other programs' use:
    /// the real /proc, not a parsed line.
    #[test]
    fn a_busy_program_beside_a_run_is_seen() {
        let start = Provenance::start();
        let mut busy = std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(600));
        let provenance = start.finish(false);
        busy.kill().unwrap();
        busy.wait().unwrap();
        // One busy program of `cores` CPUs, give or take the machine's own
        // work and the ticks' granularity.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let others = provenance.others_pct.expect("read from /proc");
        assert!(others > 50.0 / cores && others <= 100.0, "{others}% with one busy program on {cores} CPUs");
    }

    /// A run too short for the ticks to tell says nothing of other
    /// programs or the hypervisor (a busy tick of lockmeter's own, before
    /// its CPU time counted one, read as other programs' 100%).
    #[test]
    fn a_run_too_short_for_the_ticks_says_nothing() {
        // A third of the ticks needed, over the CPUs the run may use.
        let cpus = allowed_cpus().len().max(1) as u64;
        let run = Duration::from_millis(10 * MIN_SHARE_TICKS / 3 / cpus);
        let start = Provenance::start();
        let began = Instant::now();
        while began.elapsed() < run {
            std::hint::spin_loop();
        }
        let provenance = start.finish(false);
        assert_eq!((provenance.others_pct, provenance.steal_pct), (None, None), "{provenance:?}");
    }

    /// A worker that sees the deadline pass stops the run then, and the
    /// run lasts its length: the controlling thread, which may wait long
    /// for a CPU with many workers, is not needed to end it.
    #[test]
    fn a_worker_past_the_deadline_stops_the_run_on_time() {
        let stop = Stop::default();
        stop.start(Duration::from_millis(20));
        let began = Instant::now();
        while !stop.is_raised() {
            stop.check_deadline(monotonic_ns());
            assert!(began.elapsed() < Duration::from_secs(5), "never stopped");
        }
        let seconds = stop.run_seconds();
        // (Up to 100 ms: a loaded machine preempted this thread 18 ms.)
        assert!((0.020..0.100).contains(&seconds), "{seconds} s for a 20 ms run");
        // A later stop changes nothing: the run ended at the first.
        std::thread::sleep(Duration::from_millis(5));
        stop.now();
        assert_eq!(stop.run_seconds(), seconds);
    }

    /// The CPUs allowed are read, a pin to one of them holds, and one to a
    /// CPU the machine does not have is refused and says so.
    #[test]
    fn pins_hold_or_say_they_did_not() {
        let allowed = allowed_cpus();
        assert!(!allowed.is_empty());
        let last = *allowed.last().unwrap();
        let (pinned, now_allowed, refused) = std::thread::spawn(move || (pin_to(last), allowed_cpus(), pin_to(1 << 20))).join().unwrap();
        assert!(pinned && now_allowed == [last], "{now_allowed:?}");
        assert!(!refused);
    }

    /// A worker whose operations are slow looks at the clock at each
    /// one, and one whose operations are fast every 256: a thread that
    /// makes a few operations a run still ends it on time (at 1024
    /// threads `spin`'s workers made a few hundred each, never 256, and a
    /// 200 ms run lasted until the controlling thread got a CPU, 3 s).
    #[test]
    fn slow_operations_look_at_the_clock_each_time() {
        let stop = Stop::default();
        stop.start(Duration::from_millis(20));
        let mut looks = DeadlineLooks::new();
        let mut ops = 0;
        while !stop.is_raised() {
            looks.maybe_check(ops, &stop);
            std::thread::sleep(Duration::from_millis(2));
            ops += 1;
            assert!(ops < 100, "never stopped");
        }
        let seconds = stop.run_seconds();
        // (A look every 256 operations: 512 ms. Up to 100 ms here: a
        // loaded machine's sleeps overrun.)
        assert!((0.020..0.100).contains(&seconds), "{seconds} s, {ops} operations of 2 ms for a 20 ms run");
        assert_eq!(looks.every, 1);
        let fast = Stop::default();
        fast.start(Duration::from_secs(60));
        let mut looks = DeadlineLooks::new();
        for ops in 0..1_000_000 {
            looks.maybe_check(ops, &fast);
        }
        assert_eq!(looks.every, DEADLINE_CHECK_EVERY);
    }

    fn experiment(recording: Recording) -> Experiment {
        Experiment {
            workload: Workload::Sem,
            locks: vec![LockKind::Ours { algorithm: Algorithm::Adaptive, recording: Recording::Off }, LockKind::ParkingLot],
            threads: vec![3],
            periods_ns: vec![],
            duties_pct: vec![],
            run: Duration::from_millis(30),
            // Odd, so the median is one run's figure.
            repeat: 3,
            recording,
            pin: false,
        }
    }

    /// Starved threads are timed as often as the others: 64 threads each
    /// making a few 100 µs operations on a FIFO lock in 30 ms, most of whose
    /// waits are milliseconds long. Each counting its own operations from
    /// zero, one in 8 from the 8th, they were never timed (a p99 of 0 at
    /// 256 threads); and each timed wait still under way at the deadline
    /// counts.
    #[test]
    fn threads_with_few_operations_are_timed_too() {
        let experiment = Experiment {
            workload: Workload::Duty,
            locks: vec![LockKind::Ours { algorithm: Algorithm::Ticket, recording: Recording::Off }],
            threads: vec![64],
            periods_ns: vec![100_000],
            duties_pct: vec![100],
            run: Duration::from_millis(30),
            repeat: 1,
            recording: Recording::Counts,
            pin: false,
        };
        let report = experiment.run(&Calibration::measure(), |_| {}).unwrap();
        let point = &report.points[0];
        let ops = (point.ops_per_sec * point.median_run_seconds).round() as u64;
        let wait = point.wait_ns.as_ref().expect("timed waits");
        // One in 8 of the operations after each thread's first, and of the
        // waits the deadline cut (one a thread), give or take the phases.
        let expected = (ops.saturating_sub(64) + 64) / 8;
        assert!(wait.samples + 4 >= expected, "{} timed of {ops} operations by 64 threads", wait.samples);
        // Those at the gate wait for the line ahead of them.
        assert!(wait.p99 > 1e6, "64 threads in line for 100 µs sections: {wait:?}");
    }

    /// Every operation of `sem` is one acquisition: the lock's own count
    /// (when it keeps one) matches the harness's count of operations in the
    /// same run; full recording also yields the lockmeter statistics.
    #[test]
    fn recorded_acquisitions_match_operations() {
        let calibration = Calibration::measure();
        for recording in [Recording::Counts, Recording::Full] {
            let mut steps = 0;
            let report = experiment(recording).run(&calibration, |_| steps += 1).unwrap();
            assert_eq!(steps, 6, "2 locks x 3 repeats");
            let ours = &report.points[0];
            let ops = ours.ops_per_sec * ours.median_run_seconds;
            let acquisitions = ours.acquisitions.unwrap() as f64;
            // Each thread's last acquisition sees the stop and does no
            // operation: at most one uncounted acquisition per thread.
            let extra = acquisitions - ops.round();
            assert!((0.0..=3.0).contains(&extra), "{acquisitions} acquisitions vs {ops} operations");
            assert_eq!(ours.stats.is_some(), recording == Recording::Full);
            assert!(report.points[1].acquisitions.is_none(), "a peer cannot tell");
        }
    }
}
