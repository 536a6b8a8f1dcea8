//! `lockmeter bench`: the seeds' experiments, our locks against the peers.

use crate::args::{check_plot_path, check_writable, write_atomically};
use crate::progress::Progress;
use crate::run::Failure;
use lockmeter_bench::experiment::{Experiment, Workload};
use lockmeter_bench::work::Calibration;
use lockmeter_bench::{plot, render, LockKind, Recording};
use lockmeter_bench::experiment::Report;
use lockmeter_bench::pair::PairExperiment;
use lockmeter_bench::scorecard::Scorecard;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table per panel, for people.
    Table,
    /// Every point with every field, for programs.
    Json,
    /// One row per point.
    Csv,
}

/// The workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadName {
    /// Seed 001's futextest: a period of busy work, a duty share inside the lock.
    Duty,
    /// Seed 003's test: lock, bump a shared counter, unlock, as fast as possible.
    Sem,
    /// Seed 000/002's test-mutex "V": create and unlink entries in one shared directory.
    Dir,
    /// One thread, no contention: ns per lock+unlock pair, beside the floors (tas-floor, cas-floor).
    Pair,
    /// Every performance target of `adaptive`, measured here and judged (the README's runs in one go).
    Scorecard,
}

/// Everything `bench` was asked.
pub struct Options {
    pub workload: WorkloadName,
    pub locks: Option<Vec<LockKind>>,
    pub threads: Option<Vec<usize>>,
    pub seconds: Option<Duration>,
    pub repeat: Option<usize>,
    pub periods: Option<Vec<u64>>,
    pub duties: Option<Vec<u64>>,
    pub format: Format,
    pub output: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub plot_histogram: Option<PathBuf>,
    pub histogram_threads: Option<usize>,
    pub fs: Option<PathBuf>,
    pub quick: bool,
    /// Pin worker i to the i-th allowed CPU.
    pub pin: bool,
}

/// Checks option combinations clap cannot express; a usage error.
pub fn validate(o: &Options) -> Result<(), String> {
    match o.workload {
        WorkloadName::Scorecard => reject(
            o,
            &["--locks", "--period", "--duty", "--fs", "--plot", "--plot-histogram", "--histogram-threads"],
            "does not apply to the scorecard (it runs its own experiments)",
        )?,
        WorkloadName::Pair => reject(
            o,
            &["--threads", "--period", "--duty", "--fs", "--plot", "--plot-histogram", "--histogram-threads", "--pin"],
            "does not apply to the pair workload (one thread, no contention)",
        )?,
        _ => {}
    }
    if o.fs.is_some() && o.workload != WorkloadName::Dir {
        return Err("--fs only applies to the dir workload".into());
    }
    if (o.periods.is_some() || o.duties.is_some()) && o.workload != WorkloadName::Duty {
        return Err("--period and --duty only apply to the duty workload".into());
    }
    // Fail before a long run, not after it.
    for path in [&o.plot, &o.plot_histogram].into_iter().flatten() {
        check_plot_path(path)?;
    }
    if let Some(output) = &o.output {
        // Writable as a file, not only in an existing directory: a
        // directory named as the file, or one that takes no file, was
        // found after the run, which then went to stdout.
        check_writable(output)?;
    }
    if let Some(fs) = &o.fs {
        if !fs.is_dir() {
            return Err(format!("--fs {}: not a directory", fs.display()));
        }
    }
    if let Some(t) = o.histogram_threads {
        if o.plot_histogram.is_none() {
            return Err("--histogram-threads chooses what --plot-histogram draws: give --plot-histogram FILE too".into());
        }
        let threads = workload_threads(o);
        if !threads.contains(&t) {
            let list: Vec<String> = threads.iter().map(usize::to_string).collect();
            return Err(format!("--histogram-threads {t} is not one of the thread counts run ({})", list.join(",")));
        }
    }
    if o.fs.is_some() && o.locks.is_some() {
        return Err("--locks does not apply with --fs (the kernel's locks are measured, not ours)".into());
    }
    Ok(())
}

/// An error naming the first of `options` that was given.
fn reject(o: &Options, options: &[&str], why: &str) -> Result<(), String> {
    let given = [
        ("--locks", o.locks.is_some()),
        ("--threads", o.threads.is_some()),
        ("--period", o.periods.is_some()),
        ("--duty", o.duties.is_some()),
        ("--fs", o.fs.is_some()),
        ("--plot", o.plot.is_some()),
        ("--plot-histogram", o.plot_histogram.is_some()),
        ("--histogram-threads", o.histogram_threads.is_some()),
        ("--pin", o.pin),
    ];
    match given.iter().find(|(name, given)| *given && options.contains(name)) {
        Some((name, _)) => Err(format!("{name} {why}")),
        None => Ok(()),
    }
}

pub fn run(o: Options) -> Result<(), String> {
    let threads = workload_threads(&o);
    let workload = match o.workload {
        WorkloadName::Duty => Workload::Duty,
        WorkloadName::Sem => Workload::Sem,
        WorkloadName::Dir => Workload::Dir { fs: o.fs },
        WorkloadName::Pair => return run_pair(o),
        WorkloadName::Scorecard => return run_scorecard(o),
    };
    // --quick: a sub-second smoke run that still exercises every field.
    let experiment = Experiment {
        workload,
        locks: o.locks.unwrap_or_else(|| LockKind::ours().chain(LockKind::PEERS).collect()),
        threads,
        periods_ns: o.periods.unwrap_or_else(|| if o.quick { vec![1000] } else { vec![1000, 10000] }),
        duties_pct: o.duties.unwrap_or_else(|| if o.quick { vec![8] } else { vec![1, 8, 32] }),
        run: o.seconds.unwrap_or(if o.quick { Duration::from_millis(20) } else { Duration::from_millis(500) }),
        repeat: o.repeat.unwrap_or(if o.quick { 1 } else { 3 }),
        recording: Recording::Counts,
        pin: o.pin,
    };
    let report = with_progress(experiment.total_runs(), |calibration, progress| experiment.run(calibration, progress))?;
    let text = render_as(
        o.format,
        || render::table(&report),
        || render::csv(&report),
        || serde_json::to_string_pretty(&report),
    )?;
    emit(&text, o.output.as_deref())?;
    draw_plots(&report, o.plot.as_deref(), o.plot_histogram.as_deref(), o.histogram_threads)
}

/// The thread counts of a duty, sem or dir run: --threads, or the
/// defaults (fewer with --quick).
fn workload_threads(o: &Options) -> Vec<usize> {
    o.threads.clone().unwrap_or_else(|| if o.quick { vec![1, 4] } else { vec![1, 2, 4, 8, 16, 64, 256] })
}

/// `lockmeter bench pair`: the uncontended pair, every lock in rotating
/// rounds.
fn run_pair(o: Options) -> Result<(), String> {
    let experiment = PairExperiment {
        locks: o.locks.unwrap_or_else(|| {
            LockKind::FLOORS.into_iter().chain(LockKind::ours()).chain(LockKind::PEERS).collect()
        }),
        run: o.seconds.unwrap_or(if o.quick { Duration::from_millis(5) } else { Duration::from_millis(100) }),
        repeat: o.repeat.unwrap_or(if o.quick { 1 } else { 7 }),
    };
    let report = with_progress(experiment.total_runs(), |calibration, progress| experiment.run(calibration, progress))?;
    let text = render_as(o.format, || report.table(), || report.csv(), || serde_json::to_string_pretty(&report))?;
    emit(&text, o.output.as_deref())
}

/// `lockmeter bench scorecard`: the README's performance runs, judged.
fn run_scorecard(o: Options) -> Result<(), String> {
    let scorecard = Scorecard {
        threads: o.threads.unwrap_or_else(|| if o.quick { vec![1, 2, 4, 16, 64] } else { vec![1, 2, 4, 16, 64, 256] }),
        run: o.seconds.unwrap_or(if o.quick { Duration::from_millis(20) } else { Duration::from_millis(500) }),
        fairness_run: if o.quick { Duration::from_millis(50) } else { Duration::from_secs(3) },
        repeat: o.repeat.unwrap_or(if o.quick { 1 } else { 3 }),
        pair_rounds: o.repeat.unwrap_or(if o.quick { 1 } else { 7 }),
        pin: o.pin,
    };
    let report = with_progress(scorecard.total_runs(), |calibration, progress| scorecard.run(calibration, progress))?;
    let table = || {
        let smoke = if o.quick { "--quick: a smoke run, whose verdicts measure nothing worth quoting\n" } else { "" };
        format!("{smoke}{}", report.table())
    };
    let text = render_as(o.format, table, || report.csv(), || serde_json::to_string_pretty(&report))?;
    emit(&text, o.output.as_deref())
}

/// Runs an experiment of `total_runs` runs on a freshly calibrated
/// machine, with a progress line.
fn with_progress<R>(
    total_runs: usize,
    run: impl FnOnce(&Calibration, &mut dyn FnMut(&str)) -> Result<R, String>,
) -> Result<R, String> {
    let calibration = Calibration::measure();
    let mut progress = Progress::new(total_runs);
    let report = run(&calibration, &mut |step| progress.step(step));
    progress.finish();
    report
}

/// A report in `format`, from its three renderings.
fn render_as(
    format: Format,
    table: impl FnOnce() -> String,
    csv: impl FnOnce() -> String,
    json: impl FnOnce() -> serde_json::Result<String>,
) -> Result<String, String> {
    Ok(match format {
        Format::Table => table(),
        Format::Csv => csv(),
        Format::Json => json().map_err(|e| e.to_string())? + "\n",
    })
}

/// Writes `text` to `output` (atomically), or to stdout.
fn emit(text: &str, output: Option<&Path>) -> Result<(), String> {
    match output {
        Some(path) => {
            if let Err(e) = write_atomically(path, text.as_bytes()) {
                // Keep the results of a long run: print them instead.
                print!("{text}");
                return Err(e);
            }
        }
        None => print!("{text}"),
    }
    Ok(())
}

/// Draws the requested plots of `report`.
fn draw_plots(report: &Report, throughput: Option<&Path>, histogram: Option<&Path>, threads: Option<usize>) -> Result<(), String> {
    if let Some(path) = throughput {
        plot::throughput(report, path).map_err(|e| format!("{}: {e}", path.display()))?;
        say!("lockmeter: wrote {}", path.display());
    }
    if let Some(path) = histogram {
        let threads = threads.unwrap_or_else(|| report.points.iter().map(|p| p.threads).max().unwrap_or(1));
        plot::histogram(report, threads, path).map_err(|e| format!("{}: {e}", path.display()))?;
        say!("lockmeter: wrote {}", path.display());
    }
    Ok(())
}

/// `lockmeter plot`: the plots of a saved JSON report. What was asked
/// (the files, the report, the locks) is a usage error (exit 2); a plot
/// that then cannot be drawn, a runtime one (exit 1).
pub fn plot_saved(
    report: &Path,
    throughput: Option<&Path>,
    histogram: Option<&Path>,
    threads: Option<usize>,
    locks: Option<&str>,
) -> Result<(), Failure> {
    if throughput.is_none() && histogram.is_none() {
        return Err(Failure::usage("nothing to draw: give --throughput FILE and/or --histogram FILE"));
    }
    for path in [throughput, histogram].into_iter().flatten() {
        check_plot_path(path).map_err(Failure::usage)?;
    }
    let text = std::fs::read_to_string(report).map_err(|e| Failure::usage(format!("reading {}: {e}", report.display())))?;
    let mut report = parse_saved_report(&text).map_err(|why| Failure::usage(format!("reading {}: {why}", report.display())))?;
    if let Some(locks) = locks {
        let wanted: Vec<&str> = locks.split(',').map(str::trim).filter(|l| !l.is_empty()).collect();
        if let Some(missing) = wanted.iter().find(|l| !report.points.iter().any(|p| p.lock == **l)) {
            return Err(Failure::usage(format!("--locks: '{missing}' is not in the report")));
        }
        report.points.retain(|p| wanted.contains(&p.lock.as_str()));
    }
    draw_plots(&report, throughput, histogram, threads).map_err(Failure::runtime)
}

/// A saved `bench --format json` report of a workload with threads (the
/// pair's has nothing to plot against threads, and the scorecard's holds
/// several experiments).
fn parse_saved_report(text: &str) -> Result<Report, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not a lockmeter bench JSON report ({e})"))?;
    if value.get("workload").and_then(|w| w.as_str()) == Some("pair") {
        return Err("a pair report has nothing to plot against threads (plot a duty, sem or dir report)".into());
    }
    if value.get("checks").is_some() {
        return Err("a scorecard report holds several experiments (plot a duty, sem or dir report)".into());
    }
    serde_json::from_value(value).map_err(|e| format!("not a lockmeter bench JSON report ({e})"))
}
