//! `lockmeter bench`: the seeds' experiments, our locks against the peers.

use crate::args::{self, check_plot_path, check_writable, write_atomically, write_plot};
use crate::progress::Progress;
use crate::run::Failure;
use lockmeter_bench::experiment::{self, Experiment};
use lockmeter_bench::work::Calibration;
use lockmeter_bench::{interrupt, plot, render, LockKind, Recording};
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

impl Format {
    /// The format a file's name asks for, if any.
    fn of_file_name(path: &Path) -> Option<Format> {
        let name = path.file_name()?.to_str()?.to_ascii_lowercase();
        [(".json", Format::Json), (".csv", Format::Csv)].into_iter().find(|(suffix, _)| name.ends_with(suffix)).map(|(_, format)| format)
    }
}

/// The workloads, each a subcommand with the options it takes.
#[derive(clap::Subcommand)]
pub enum Workload {
    /// Seed 001's futextest: a period of busy work, a duty share of it inside the lock.
    ///
    /// Every thread loops: P ns of work, D% of it holding the lock, the rest
    /// outside. Each point reads as a share of its physical limit, a period
    /// on every core but one critical section at a time:
    /// min(min(threads, cores) / P, 1 / (P x D%)) operations a ns.
    /// Short sections (P=1000, D=1-32) are where a lock's own cost shows;
    /// sections of microseconds (P=4000-40000, D=50-90) are seed 002's
    /// case for spinning while the owner runs. With the defaults (12
    /// locks, 7 thread counts, 6 panels, 3 runs of 0.5 s each) a run takes
    /// about 13 minutes: narrow --locks, --threads, --period or --duty.
    ///
    /// Examples:
    ///   lockmeter bench duty --locks adaptive,peers --threads 2,16 --period 20000 --duty 50
    ///   lockmeter bench duty --threads 64,256 --period 1000 --duty 8 --seconds 3s
    #[command(verbatim_doc_comment)]
    Duty {
        #[command(flatten)]
        contended: ContendedArgs,
        /// Periods in ns, 100 or more [default: 1000,10000; --quick: 1000].
        #[arg(long, value_parser = args::period_list, allow_hyphen_values = true)]
        period: Option<args::List<u64>>,
        /// Shares of the period inside the lock, in percent [default: 1,8,32; --quick: 8].
        #[arg(long, value_parser = args::duty_list, allow_hyphen_values = true)]
        duty: Option<args::List<u64>>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Seed 003's test: lock, bump a shared counter, unlock, as fast as possible.
    ///
    /// The lock is all there is: its hand-over cost and how its waiters
    /// load the lock's cache line decide the rate (the ticket lock's
    /// proportional backoff is seed 003's answer).
    ///
    /// Example:
    ///   lockmeter bench sem --locks ticket,ticket-nobackoff,spin,peers --format json -o sem.json --plot sem.svg
    #[command(verbatim_doc_comment)]
    Sem {
        #[command(flatten)]
        contended: ContendedArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Seed 000/002's test-mutex "V": create and unlink entries in one shared directory.
    ///
    /// A short critical section (an in-memory directory's insert and
    /// remove) that the owner re-takes at once: seed 000's case for a
    /// spinner that stops when the lock changes owner (adaptive against
    /// adaptive-nobail). With --fs, real files in a real directory: the
    /// kernel's own locks, as the original test did.
    ///
    /// Examples:
    ///   lockmeter bench dir --locks adaptive,adaptive-nobail,peers --threads 1,2,4,16,64,256
    ///   lockmeter bench dir --fs /tmp/scratch --threads 1,2,4
    #[command(verbatim_doc_comment)]
    Dir {
        #[command(flatten)]
        contended: ContendedArgs,
        /// Create and unlink real files in this directory (measures the
        /// kernel's locks, as the original test-mutex did; no --locks).
        #[arg(long, value_name = "PATH")]
        fs: Option<PathBuf>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// One thread, no contention: ns per lock+unlock pair, beside the floors.
    ///
    /// Every lock once per round, in rotating order, medians over the
    /// rounds; beside two floors, tas-floor (a bare test-and-set: an
    /// exchange and a store) and cas-floor (the two locked instructions
    /// every lock that can sleep pays), and against the fastest peer and
    /// glibc.
    ///
    /// Example:
    ///   lockmeter bench pair --locks tas-floor,cas-floor,adaptive,peers --repeat 11
    #[command(verbatim_doc_comment)]
    #[command(mut_arg("seconds", |a| a.help("Length of each lock's run in a round, e.g. 100ms [default: 100ms; --quick: 5ms]")))]
    #[command(mut_arg("repeat", |a| a.help("Rounds; medians are over these [default: 7; --quick: 1]")))]
    Pair {
        /// Locks: names, or the groups ours, peers, all, and the floors
        /// tas-floor and cas-floor [default: the floors and all].
        #[arg(long, value_parser = args::lock_list)]
        locks: Option<args::List<LockKind>>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Every performance target of `adaptive`, measured here and judged.
    ///
    /// Runs the README's performance experiments (every workload, fairness
    /// in 3 s runs, the pair) and judges each of adaptive's targets from
    /// them: a line per target, measured and met or not (about 13 minutes
    /// with the defaults on 2 cores). A miss shows its range over the
    /// rounds (each round's runs of the two locks against each other), and
    /// reads no* if some round met it wherever it missed: within the
    /// run-to-run spread, which more rounds settle; no† if no lock could
    /// meet it here (past the workload's physical limit, or under
    /// cas-floor for the pair). A target whose thread counts are not in
    /// --threads reads n/a and is not counted. Fairness is judged at 64
    /// and 256 threads, or, on a machine where those do not outnumber
    /// the CPUs, at the two largest --threads counts that do.
    ///
    /// Examples:
    ///   lockmeter bench scorecard --repeat 5
    ///   lockmeter bench scorecard --threads 1,2,4,16,64,256,1024 --pin
    #[command(verbatim_doc_comment)]
    #[command(mut_arg("seconds", |a| a.help("Length of the workloads' runs [default: 500ms; --quick: 20ms]; the fairness runs last 3 s, the pair's at most 100 ms")))]
    #[command(mut_arg("repeat", |a| a.help("Runs per point, and the pair's rounds [default: 3, the pair 7; --quick: 1]")))]
    #[command(mut_arg("quick", |a| a.help("A smoke run, about 10 s: one round of short runs at fewer points; checks the output, measures nothing worth quoting")))]
    Scorecard {
        /// Thread counts, 1 to 4096 [default: 1,2,4,16,64,256; --quick: 1,2,4,16,64].
        #[arg(long, value_parser = args::thread_list, allow_hyphen_values = true)]
        threads: Option<args::List<usize>>,
        /// Pin worker i to the (i mod n)-th CPU this process may use (for
        /// many-core machines; combine with taskset to choose the CPUs).
        #[arg(long)]
        pin: bool,
        #[command(flatten)]
        run: RunArgs,
    },
}

/// The options of the workloads that contend: duty, sem, dir.
#[derive(clap::Args)]
pub struct ContendedArgs {
    /// Locks: names, or the groups ours, peers, all [default: all]. Also
    /// tas-floor and cas-floor (bare pairs of one and two locked
    /// instructions, the floors) and variants that switch one decision:
    /// adaptive-oncpu (the BPF on-CPU table; root), adaptive-nobail (keeps
    /// spinning when the owner changes, seed 000), adaptive-nobackoff (the
    /// spinner reads the word without pausing), adaptive-eager (the spinner
    /// gives a releasing owner no grace), adaptive-idlesleep (a waiter
    /// sleeps when its spin ends even if its CPU would go idle),
    /// ticket-nobackoff (no proportional backoff, seed 003).
    #[arg(long, value_parser = args::lock_list)]
    locks: Option<args::List<LockKind>>,
    /// Thread counts, 1 to 4096 [default: 1,2,4,8,16,64,256; --quick: 1,4].
    #[arg(long, value_parser = args::thread_list, allow_hyphen_values = true)]
    threads: Option<args::List<usize>>,
    /// Plot throughput against threads (for duty, a panel per period and duty) to
    /// FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Plot the acquisition-time histogram of every lock (seed 000) to
    /// FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE")]
    plot_histogram: Option<PathBuf>,
    /// Thread count whose histogram --plot-histogram draws [default: the largest].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=4096), allow_hyphen_values = true)]
    histogram_threads: Option<u64>,
    /// Pin worker i to the (i mod n)-th CPU this process may use (for
    /// many-core machines; combine with taskset to choose the CPUs).
    #[arg(long)]
    pin: bool,
}

/// The options every workload takes.
#[derive(clap::Args)]
pub struct RunArgs {
    /// Length of each run, e.g. 500ms or 2s, 1ms or more [default: 500ms; --quick: 20ms].
    #[arg(long, value_parser = args::millisecond_or_more, allow_hyphen_values = true)]
    seconds: Option<Duration>,
    /// Runs per point; medians are over these [default: 3; --quick: 1].
    /// A point's rate is the median run's; its other figures (counts,
    /// waits, per-thread spread) come from that run, or with an even
    /// count (whose median is the mean of the middle two) from the nearer
    /// of the two: pick an odd count.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100), allow_hyphen_values = true)]
    repeat: Option<u64>,
    /// Output format [default: what -o's name ends in, .json or .csv;
    /// else table].
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Write the output to FILE (atomically) instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// Also save the whole report as JSON to FILE (atomically), whatever
    /// --format prints: one run for people to read and programs (and
    /// `lockmeter plot`) to load.
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
    /// A smoke run, under a second: one round of short runs at fewer
    /// points; checks the output, measures nothing worth quoting.
    #[arg(long)]
    quick: bool,
}

/// Which workload `Options` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadName {
    Duty,
    Sem,
    Dir,
    Pair,
    Scorecard,
}

impl Options {
    /// The options of a command line.
    pub fn new(workload: Workload) -> Options {
        let (name, contended, run, periods, duties, fs) = match workload {
            Workload::Duty { contended, period, duty, run } => (WorkloadName::Duty, contended, run, period, duty, None),
            Workload::Sem { contended, run } => (WorkloadName::Sem, contended, run, None, None, None),
            Workload::Dir { contended, fs, run } => (WorkloadName::Dir, contended, run, None, None, fs),
            Workload::Pair { locks, run } => {
                let contended = ContendedArgs { locks, threads: None, plot: None, plot_histogram: None, histogram_threads: None, pin: false };
                (WorkloadName::Pair, contended, run, None, None, None)
            }
            Workload::Scorecard { threads, pin, run } => {
                let contended = ContendedArgs { locks: None, threads, plot: None, plot_histogram: None, histogram_threads: None, pin };
                (WorkloadName::Scorecard, contended, run, None, None, None)
            }
        };
        Options {
            workload: name,
            locks: contended.locks.map(|l| l.0),
            threads: contended.threads.map(|l| l.0),
            seconds: run.seconds,
            repeat: run.repeat.map(|r| r as usize),
            periods: periods.map(|l| l.0),
            duties: duties.map(|l| l.0),
            // A table written to x.json could not be read back by `plot`.
            format: run.format.or_else(|| run.output.as_deref().and_then(Format::of_file_name)).unwrap_or(Format::Table),
            output: run.output,
            save: run.save,
            plot: contended.plot,
            plot_histogram: contended.plot_histogram,
            histogram_threads: contended.histogram_threads.map(|t| t as usize),
            fs,
            quick: run.quick,
            pin: contended.pin,
        }
    }
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
    pub save: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub plot_histogram: Option<PathBuf>,
    pub histogram_threads: Option<usize>,
    pub fs: Option<PathBuf>,
    pub quick: bool,
    /// Pin worker i to the i-th allowed CPU.
    pub pin: bool,
}

/// A duty, sem or dir run's length: by default, and with --quick.
const SECONDS: Duration = Duration::from_millis(500);
const QUICK_SECONDS: Duration = Duration::from_millis(20);

/// Checks option combinations clap cannot express; a usage error.
pub fn validate(o: &Options) -> Result<(), String> {
    // Fail before a long run, not after it.
    for path in [&o.plot, &o.plot_histogram].into_iter().flatten() {
        check_plot_path(path)?;
    }
    let to_stdout = o.output.as_deref().is_none_or(|output| matches!(args::destination(output), Ok(args::Destination::Descriptor(1))));
    if to_stdout && args::stdout_was_closed() {
        // Before the run, not after it.
        return Err("stdout is closed: give -o FILE for the report".into());
    }
    for output in [&o.output, &o.save].into_iter().flatten() {
        // Writable as a file, not only in an existing directory: a
        // directory named as the file, or one that takes no file, was
        // found after the run, which then went to stdout.
        check_writable(output)?;
    }
    if let Some(fs) = &o.fs {
        if !fs.is_dir() {
            return Err(format!("--fs {}: not a directory", fs.display()));
        }
        // A directory that takes no file (/proc, one read-only) was found
        // after the calibration, as the first run's error.
        let probe = fs.join(format!(".lockmeter-probe-{}", std::process::id()));
        // (A name of its own, never an existing file's: not truncated,
        // no link followed.)
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&probe) {
            Ok(_) => {
                let _ = std::fs::remove_file(&probe);
            }
            Err(e) => return Err(format!("--fs {}: no file can be made there ({})", fs.display(), lockmeter_stats::profile::io_reason(&e))),
        }
    }
    // A run counts the periods done by its end: one in flight then is
    // counted whole, so a run must hold many (a 1 s period in a 100 ms run
    // read 998% of the limit).
    let seconds = o.seconds.unwrap_or(if o.quick { QUICK_SECONDS } else { SECONDS });
    let longest_period = match o.workload {
        WorkloadName::Duty => duty_periods(o).into_iter().max(),
        WorkloadName::Scorecard => Some(lockmeter_bench::scorecard::LONGEST_PERIOD_NS),
        _ => None,
    };
    if let Some(longest) = longest_period {
        let shortest_run = Duration::from_nanos(longest) * 100;
        if shortest_run > seconds {
            if o.workload == WorkloadName::Scorecard {
                return Err(format!(
                    "the scorecard's longest period, {longest} ns, is longer than a hundredth of the run ({seconds:?}): give --seconds {shortest_run:?} or more"
                ));
            }
            // (The default periods, up to 10 µs, fit in the shortest run,
            // 1 ms.)
            return Err(format!("--period {longest} is longer than a hundredth of the run ({seconds:?}): give a longer --seconds or a shorter period"));
        }
    }
    // Two outputs to one file: the second replaced the first, silently.
    let outputs: Vec<(&str, &PathBuf)> = [("-o", &o.output), ("--save", &o.save), ("--plot", &o.plot), ("--plot-histogram", &o.plot_histogram)]
        .into_iter()
        .filter_map(|(name, path)| path.as_ref().map(|p| (name, p)))
        .collect();
    for (i, (name, path)) in outputs.iter().enumerate() {
        if let Some((other, _)) = outputs[..i].iter().find(|(_, p)| args::same_file_name(p, path)) {
            return Err(format!("{other} and {name} both name {}: give each its own file", path.display()));
        }
    }
    // Two outputs through one descriptor: `--save /dev/stdout` beside the
    // table or CSV on stdout ran the JSON and the table together.
    let descriptor = |path: &PathBuf| match args::destination(path) {
        Ok(args::Destination::Descriptor(fd)) => Some(fd),
        _ => None,
    };
    let report_fd = o.output.as_ref().map_or(Some(1), descriptor);
    for (name, path) in &outputs {
        let shared = descriptor(path).filter(|&fd| Some(fd) == report_fd && (*name != "-o"));
        if shared.is_some() {
            let report = o.output.as_ref().map_or_else(|| "stdout".to_string(), |p| format!("-o {}", p.display()));
            return Err(format!("{name} {} is where the report goes ({report}): give it a file of its own", path.display()));
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
    if o.fs.is_some() && o.plot_histogram.is_some() {
        return Err("--plot-histogram has nothing to draw with --fs (the kernel's locks are not timed)".into());
    }
    if o.fs.is_some() && o.locks.is_some() {
        return Err("--locks does not apply with --fs (the kernel's locks are measured, not ours)".into());
    }
    Ok(())
}

pub fn run(o: Options) -> Result<(), String> {
    let threads = workload_threads(&o);
    let periods_ns = duty_periods(&o);
    let workload = match o.workload {
        WorkloadName::Duty => experiment::Workload::Duty,
        WorkloadName::Sem => experiment::Workload::Sem,
        WorkloadName::Dir => experiment::Workload::Dir { fs: o.fs },
        WorkloadName::Pair => return run_pair(o),
        WorkloadName::Scorecard => return run_scorecard(o),
    };
    // --quick: a sub-second smoke run that still exercises every field.
    let experiment = Experiment {
        workload,
        locks: o.locks.unwrap_or_else(|| LockKind::ours().chain(LockKind::PEERS).collect()),
        threads,
        periods_ns,
        duties_pct: o.duties.unwrap_or_else(|| if o.quick { vec![8] } else { vec![1, 8, 32] }),
        run: o.seconds.unwrap_or(if o.quick { QUICK_SECONDS } else { SECONDS }),
        repeat: o.repeat.unwrap_or(if o.quick { 1 } else { 3 }),
        recording: Recording::Counts,
        pin: o.pin,
    };
    let report = with_progress(experiment.planned_runs(), |calibration, progress| experiment.run(calibration, progress))?;
    let text = render_as(
        o.format,
        || render::table(&report),
        || render::csv(&report),
        || serde_json::to_string_pretty(&report),
    )?;
    if let Some(planned) = report.planned_repeat {
        // Stopped after some rounds: what they measured is shown (a long
        // run stopped near its end had shown nothing), and no file is
        // written, as a stop asks.
        out!("{text}");
        let files: Vec<String> =
            [&o.output, &o.save, &o.plot, &o.plot_histogram].into_iter().flatten().map(|path| path.display().to_string()).collect();
        let unwritten = if files.is_empty() { String::new() } else { format!("; {} not written", files.join(", ")) };
        return Err(format!("stopped after {} of {planned} runs per point; the report above is theirs{unwritten}", report.repeat));
    }
    let saved = save(|| serde_json::to_string_pretty(&report), o.save.as_deref());
    emit(&text, o.output.as_deref())?;
    draw_plots(&report, o.plot.as_deref(), o.plot_histogram.as_deref(), o.histogram_threads)?;
    saved
}

/// The periods of a duty run: --period, or the defaults (one with
/// --quick).
fn duty_periods(o: &Options) -> Vec<u64> {
    o.periods.clone().unwrap_or_else(|| if o.quick { vec![1000] } else { vec![1000, 10000] })
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
    let report = with_progress(experiment.planned_runs(), |calibration, progress| experiment.run(calibration, progress))?;
    let saved = save(|| serde_json::to_string_pretty(&report), o.save.as_deref());
    let text = render_as(o.format, || report.table(), || report.csv(), || serde_json::to_string_pretty(&report))?;
    emit(&text, o.output.as_deref())?;
    saved
}

/// `lockmeter bench scorecard`: the README's performance runs, judged.
fn run_scorecard(o: Options) -> Result<(), String> {
    let scorecard = Scorecard {
        threads: o.threads.unwrap_or_else(|| if o.quick { vec![1, 2, 4, 16, 64] } else { vec![1, 2, 4, 16, 64, 256] }),
        run: o.seconds.unwrap_or(if o.quick { QUICK_SECONDS } else { SECONDS }),
        fairness_run: if o.quick { Duration::from_millis(50) } else { Duration::from_secs(3) },
        repeat: o.repeat.unwrap_or(if o.quick { 1 } else { 3 }),
        pair_rounds: o.repeat.unwrap_or(if o.quick { 1 } else { 7 }),
        pin: o.pin,
        quick: o.quick,
    };
    let report = with_progress(scorecard.planned_runs(), |calibration, progress| scorecard.run(calibration, progress))?;
    let saved = save(|| serde_json::to_string_pretty(&report), o.save.as_deref());
    let text = render_as(o.format, || report.table(), || report.csv(), || serde_json::to_string_pretty(&report))?;
    emit(&text, o.output.as_deref())?;
    saved
}

/// Runs an experiment of the `planned` runs on a freshly calibrated
/// machine, with a progress line.
fn with_progress<R>(
    planned: Vec<std::time::Duration>,
    run: impl FnOnce(&Calibration, &mut dyn FnMut(&str)) -> Result<R, String>,
) -> Result<R, String> {
    let total_runs = planned.len();
    // ^C, SIGTERM and SIGHUP end the run in progress at once and start
    // no other: the workers finish the operation they are in (a `dir
    // --fs` file made is removed), the progress line is cleared, and
    // lockmeter dies of the signal; a second one ends it there and then.
    crate::stop::install();
    let calibration = Calibration::measure();
    let mut progress = Progress::planned(planned);
    let mut started: usize = 0;
    let report = run(&calibration, &mut |step| {
        started += 1;
        progress.step(step)
    });
    progress.finish();
    if interrupt::requested().is_some() && report.is_err() {
        let finished = started.saturating_sub(usize::from(interrupt::cut_short()));
        return Err(format!("interrupted after {finished} of {total_runs} runs; nothing written"));
    }
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

/// Writes `report` as JSON to `path`, if one is given (before the output:
/// a stdout that refuses the table loses nothing saved; and a save that
/// fails, a directory removed meanwhile, still lets the output and plots
/// be written, its error said after them).
fn save(json: impl FnOnce() -> serde_json::Result<String>, path: Option<&Path>) -> Result<(), String> {
    let Some(path) = path else { return Ok(()) };
    let json = json().map_err(|e| e.to_string())? + "\n";
    write_atomically(path, json.as_bytes())?;
    say!("lockmeter: saved {}", path.display());
    Ok(())
}

/// Writes `text` to `output` (atomically), or to stdout.
fn emit(text: &str, output: Option<&Path>) -> Result<(), String> {
    match output {
        Some(path) => {
            if let Err(e) = write_atomically(path, text.as_bytes()) {
                // Keep the results of a long run: print them instead.
                out!("{text}");
                return Err(e);
            }
        }
        None => out!("{text}"),
    }
    Ok(())
}

/// Draws the requested plots of `report`.
fn draw_plots(report: &Report, throughput: Option<&Path>, histogram: Option<&Path>, threads: Option<usize>) -> Result<(), String> {
    if let Some(path) = throughput {
        write_plot(path, |image| plot::throughput(report, image))?;
        say!("lockmeter: wrote {}", path.display());
    }
    if let Some(path) = histogram {
        let threads = threads.unwrap_or_else(|| report.points.iter().map(|p| p.threads).max().unwrap_or(1));
        write_plot(path, |image| plot::histogram(report, threads, image))?;
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
    if let (Some(a), Some(b)) = (throughput, histogram) {
        // The second replaced the first, silently.
        if args::same_file_name(a, b) {
            return Err(Failure::usage(format!("--throughput and --histogram both name {}: give each its own file", b.display())));
        }
    }
    let text = std::fs::read_to_string(report)
        .map_err(|e| Failure::usage(format!("reading {}: {}", report.display(), lockmeter_stats::profile::io_reason(&e))))?;
    let mut report = parse_saved_report(&text).map_err(|why| Failure::usage(format!("reading {}: {why}", report.display())))?;
    // (A report of no points drew a title over nothing, and said done.)
    if report.points.is_empty() {
        return Err(Failure::usage("nothing to draw: the report has no points"));
    }
    // As `bench` takes them: an option that would change nothing is a
    // mistake to say (an empty --locks drew no lines, --threads without a
    // histogram was dropped).
    if threads.is_some() && histogram.is_none() {
        return Err(Failure::usage("--threads chooses what --histogram draws: give --histogram FILE too"));
    }
    if let Some(t) = threads {
        // As bench's --histogram-threads (exit 2), not a plot that fails.
        let mut counts: Vec<usize> = report.points.iter().map(|p| p.threads).collect();
        counts.sort_unstable();
        counts.dedup();
        if !counts.contains(&t) {
            let list: Vec<String> = counts.iter().map(usize::to_string).collect();
            return Err(Failure::usage(format!("--threads {t} is not one of the report's thread counts ({})", list.join(","))));
        }
    }
    if let Some(locks) = locks {
        let wanted = crate::args::list_items(locks).map_err(|e| Failure::usage(format!("--locks: {e}")))?;
        if wanted.is_empty() {
            return Err(Failure::usage("--locks: no locks given"));
        }
        if let Some(missing) = wanted.iter().find(|l| !report.points.iter().any(|p| p.lock == **l)) {
            return Err(Failure::usage(format!("--locks: '{missing}' is not in the report")));
        }
        report.points.retain(|p| wanted.contains(&p.lock.as_str()));
    }
    draw_plots(&report, throughput, histogram, threads).map_err(Failure::runtime)
}

/// Whether `path` holds a saved bench report (`--save`, `--format json`)
/// rather than a profile: a JSON object with a machine and points (or a
/// scorecard's checks), and no profile's `format`.
pub fn is_saved_report(path: &Path) -> bool {
    // A regular file only: a pipe (`<(cat p.json)`) read here would be
    // empty to the profile's reader after it.
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let Ok(text) = std::fs::read_to_string(path) else { return false };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else { return false };
    value.get("format").is_none() && value.get("machine").is_some() && (value.get("points").is_some() || value.get("checks").is_some())
}

/// `lockmeter report` of a saved bench report: its table, CSV or JSON
/// again, as the run printed it (a saved report read 'not a valid
/// lockmeter profile').
pub fn report_saved(path: &Path, format: crate::run::Format, output: Option<&Path>) -> Result<(), Failure> {
    use crate::run::Format as Rendered;
    let format = match format {
        Rendered::Table => Format::Table,
        Rendered::Csv => Format::Csv,
        Rendered::Json => Format::Json,
        other => {
            let name = format!("{other:?}").to_lowercase();
            return Err(Failure::usage(format!("{}: a bench report renders as table, csv or json, not {name}", path.display())));
        }
    };
    if let Some(output) = output {
        check_writable(output).map_err(Failure::usage)?;
    }
    let unreadable = |e: String| Failure::usage(format!("reading {}: {e}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| unreadable(lockmeter_stats::profile::io_reason(&e)))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| unreadable(e.to_string()))?;
    let malformed = |e: serde_json::Error| unreadable(format!("not a lockmeter bench report ({e})"));
    let text = if value.get("checks").is_some() {
        let report: lockmeter_bench::scorecard::ScorecardReport = serde_json::from_value(value).map_err(malformed)?;
        render_as(format, || report.table(), || report.csv(), || serde_json::to_string_pretty(&report))
    } else if value.get("workload").and_then(|w| w.as_str()) == Some("pair") {
        let report: lockmeter_bench::pair::PairReport = serde_json::from_value(value).map_err(malformed)?;
        render_as(format, || report.table(), || report.csv(), || serde_json::to_string_pretty(&report))
    } else {
        let report: Report = serde_json::from_value(value).map_err(malformed)?;
        render_as(format, || render::table(&report), || render::csv(&report), || serde_json::to_string_pretty(&report))
    }
    .map_err(Failure::runtime)?;
    emit(&text, output).map_err(Failure::runtime)
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
