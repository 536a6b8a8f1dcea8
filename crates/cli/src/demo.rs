//! `lockmeter demo`: everything lockmeter can do, on this machine, in under
//! a minute.

use crate::progress::Progress;
use lockmeter_bench::experiment::{Experiment, PointResult, Workload};
use lockmeter_bench::work::Calibration;
use lockmeter_bench::workloads::{median, uncontended_pair_ns};
use lockmeter_bench::{LockKind, Recording};
use lockmeter_stats::histogram::render_side_by_side;
use lockmeter_stats::profile::{render_table, TableOptions};
use lockmeter_stats::report::{self, Row};
use std::time::Duration;

/// How much to measure.
pub struct Settings {
    /// Interleaved rounds of every measurement.
    pub rounds: u32,
    /// Length of one contended run.
    pub run: Duration,
    /// Lock+unlock pairs per uncontended measurement.
    pub pairs: u64,
    /// Where to draw the scaling plot (the advise plot goes beside it);
    /// `None`: no plots.
    pub plot: Option<std::path::PathBuf>,
}

/// The scaling sweep: seed 003's semaphore test over thread counts, for a
/// few locks, drawn as a plot.
fn scaling_sweep(settings: &Settings) -> Experiment {
    let names = ["adaptive", "ticket", "mcs", "spin", "glibc", "glibc-adaptive", "std", "parking_lot"];
    Experiment {
        workload: Workload::Sem,
        locks: names.iter().map(|n| n.parse().expect("known lock")).collect(),
        threads: vec![1, 2, 4, 16, 64],
        periods_ns: vec![],
        duties_pct: vec![],
        run: settings.run / 3,
        repeat: settings.rounds as usize,
        recording: Recording::Counts,
        pin: false,
    }
}

/// A contended scenario of the demo: one point of `lockmeter bench duty`.
struct Scenario {
    title: &'static str,
    why: &'static str,
    threads: usize,
    period_ns: u64,
    duty_percent: u64,
}

const SCENARIOS: [Scenario; 2] = [
    Scenario {
        title: "microsecond critical sections",
        why: "2 threads, each loop 20 us of work with 10 us inside the lock: seed 002's case for \
              spinning while the owner runs (count-limited spinners give up and pay a sleep and a wake-up)",
        threads: 2,
        period_ns: 20_000,
        duty_percent: 50,
    },
    Scenario {
        title: "oversubscribed, short critical sections",
        why: "16 threads on the machine's cores, each loop 1 us of work with 0.32 us inside the lock \
              (futextest's period/duty-cycle workload, seed 001)",
        threads: 16,
        period_ns: 1_000,
        duty_percent: 32,
    },
];

impl Scenario {
    fn experiment(&self, locks: Vec<LockKind>, settings: &Settings, repeat: usize, recording: Recording) -> Experiment {
        Experiment {
            workload: Workload::Duty,
            locks,
            threads: vec![self.threads],
            periods_ns: vec![self.period_ns],
            duties_pct: vec![self.duty_percent],
            run: settings.run,
            repeat,
            recording,
            pin: false,
        }
    }
}

fn all_locks() -> Vec<LockKind> {
    LockKind::ours().chain(LockKind::PEERS).collect()
}

pub fn run(settings: &Settings) -> Result<(), String> {
    crate::stop::install();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    outln!("lockmeter demo: our locks and the peers, side by side in one process, on {cores} cores.");
    outln!(
        "Every lock runs once before any runs twice ({} round{}); figures are medians over rounds.\n",
        settings.rounds,
        if settings.rounds == 1 { "" } else { "s" }
    );
    let calibration = Calibration::measure();
    // glibc skips atomic instructions while a process has a single thread;
    // a lock benchmark is about multi-threaded programs, so make this one.
    let (keep_alive, idle_thread) = idle_thread();

    // The floors first (one and two locked instructions), and adaptive
    // once more with statistics on, to show what recording costs.
    let pair_locks: Vec<LockKind> = LockKind::FLOORS
        .into_iter()
        .chain(all_locks())
        .chain([LockKind::Ours { algorithm: lockmeter_locks::Algorithm::Adaptive, recording: Recording::Full }])
        .collect();
    let ours: Vec<LockKind> = LockKind::ours().collect();
    let rounds = settings.rounds as usize;
    // Throughput runs count how our locks acquired; one more run of each of
    // ours records full statistics for the lockmeter report.
    let throughput: Vec<Experiment> =
        SCENARIOS.iter().map(|s| s.experiment(all_locks(), settings, rounds, Recording::Counts)).collect();
    let recorded: Vec<Experiment> = SCENARIOS.iter().map(|s| s.experiment(ours.clone(), settings, 1, Recording::Full)).collect();
    let sweep = scaling_sweep(settings);
    let steps = rounds * pair_locks.len()
        + throughput.iter().chain(&recorded).map(Experiment::total_runs).sum::<usize>()
        + sweep.total_runs();
    let mut progress = Progress::new(steps);

    let mut pair_ns: Vec<Vec<f64>> = vec![Vec::new(); pair_locks.len()];
    for _ in 0..rounds {
        for (i, &kind) in pair_locks.iter().enumerate() {
            progress.step(&format!("uncontended {}", kind.label()));
            pair_ns[i].push(uncontended_pair_ns(kind, settings.pairs));
        }
    }
    let mut results = Vec::new();
    for (scenario, (timed, recording)) in SCENARIOS.iter().zip(throughput.iter().zip(&recorded)) {
        let mut step = |what: &str| progress.step(&format!("{}: {what}", scenario.title));
        let points = timed.run(&calibration, &mut step)?.points;
        let stats = recording.run(&calibration, &mut step)?.points;
        results.push((points, stats));
    }
    let scaling = sweep.run(&calibration, |what| progress.step(&format!("scaling: {what}")))?;
    // (A stop leaves the sweep the rounds it finished: the demo shows
    // nothing of a run it did not finish.)
    lockmeter_bench::interrupt::check()?;
    progress.finish();
    drop(keep_alive);
    let _ = idle_thread.join();

    print_pairs(&pair_locks, &mut pair_ns);
    let names: Vec<String> = ours.iter().map(|k| k.name().to_string()).collect();
    for (s, (scenario, (points, stats))) in SCENARIOS.iter().zip(&results).enumerate() {
        print_scenario(2 * s + 2, scenario, points);
        outln!("{}. The lockmeter report of our locks, {} (one recording run each)\n", 2 * s + 3, scenario.title);
        // Each row over the time its own statistics cover (UTIL's
        // denominator).
        for (i, (name, point)) in names.iter().zip(stats).enumerate() {
            let recorded = point.stats.as_ref().ok_or("a recording run returned no statistics")?;
            let text = report::render(&[Row { name, stats: &recorded.snapshot, call_site: false }], recorded.seconds * 1e9);
            let mut lines = text.lines();
            let header = lines.next().unwrap_or_default();
            if i == 0 {
                outln!("{header}");
            }
            for line in lines {
                outln!("{line}");
            }
        }
        outln!();
    }

    let (first, (_, stats)) = (&SCENARIOS[0], &results[0]);
    outln!(
        "{}. Wait histogram, {} (acquisition time = 2^bin cycles, seed 000's format)\n",
        2 * SCENARIOS.len() + 2,
        first.title
    );
    let picked: Vec<&PointResult> = stats.iter().filter(|p| ["adaptive", "futex", "ticket"].contains(&p.lock.as_str())).collect();
    let titles: Vec<&str> = picked.iter().map(|p| p.lock.as_str()).collect();
    let histograms: Vec<_> = picked.iter().filter_map(|p| p.stats.as_ref().map(|s| &s.snapshot.wait_histogram)).collect();
    out!("{}", render_side_by_side(&titles, &histograms));
    outln!();

    outln!(
        "{}. Scaling: seed 003's semaphore test (lock, bump a counter, unlock) from 1 to 64 threads",
        2 * SCENARIOS.len() + 3
    );
    outln!("{}", lockmeter_bench::render::table(&scaling).lines().skip(1).collect::<Vec<_>>().join("\n"));
    outln!(
        "   (runs of {:?}: at 64 threads on few cores, adaptive keeps the lock among a few running threads and the",
        sweep.run
    );
    outln!("    rest take turns milliseconds apart, so a thread may get one turn or none in a run this short and the");
    outln!("    fairness rows say little there; `lockmeter bench sem --threads 64 --seconds 3s` measures it)");
    if let Some(plot) = &settings.plot {
        crate::args::write_plot(plot, |image| lockmeter_bench::plot::throughput(&scaling, image))?;
        outln!("\nPlot: {} (throughput against threads, a line per lock; thick lines are ours)", plot.display());
    }
    outln!();
    profile_a_program(2 * SCENARIOS.len() + 4, settings.plot.as_deref());
    not_stopped()?;
    let tortured = torture_every_lock(2 * SCENARIOS.len() + 7);
    not_stopped()?;
    kernel_assisted_spinning(2 * SCENARIOS.len() + 8, settings, &calibration);
    not_stopped()?;
    outln!("Next: `lockmeter run -- YOUR_PROGRAM` profiles your own program's locks (--format json|csv|folded|pprof|flamegraph),");
    outln!("`lockmeter run --lock adaptive -- YOUR_PROGRAM` serves them with ours, `lockmeter advise -- YOUR_PROGRAM` tries them all;");
    outln!("`lockmeter bench duty|sem|dir|pair` runs the seeds' experiments in full, with JSON, CSV and plots;");
    outln!("`lockmeter bench scorecard` judges every performance target of adaptive on this machine;");
    outln!("`lockmeter algorithms` says when to pick each lock; include/lockmeter.h uses them from C;");
    outln!("`lockmeter run --oncpu --lock adaptive -- YOUR_PROGRAM` or `sudo lockmeter oncpu enable` gives adaptive the on-CPU table.");
    tortured
}

/// Section: `adaptive` with and without the on-CPU table (needs root; says
/// why when it cannot load the program).
fn kernel_assisted_spinning(number: usize, settings: &Settings, calibration: &Calibration) {
    outln!("{number}. Kernel-assisted spinning: adaptive asking a BPF on-CPU table whether the owner runs, against its CPU-clock fallback");
    outln!("   (16 threads, each loop 20 us of work with 10 us inside the lock; `lockmeter oncpu --help` explains the table)\n");
    let experiment = Experiment {
        workload: Workload::Duty,
        locks: vec![
            LockKind::Ours { algorithm: lockmeter_locks::Algorithm::Adaptive, recording: Recording::Counts },
            LockKind::Variant { variant: lockmeter_bench::Variant::AdaptiveOnCpu, recording: Recording::Counts },
        ],
        threads: vec![16],
        periods_ns: vec![20_000],
        duties_pct: vec![50],
        run: settings.run,
        repeat: settings.rounds as usize,
        recording: Recording::Counts,
        pin: false,
    };
    let points = match experiment.run(calibration, |_| {}) {
        Ok(_) if lockmeter_bench::interrupt::requested().is_some() => return,
        Ok(report) => report.points,
        Err(e) => {
            outln!("   skipped: {e}\n");
            return;
        }
    };
    outln!(
        "{:<16}{:>9}{:>12}  {:>22}{:>22}{:>12}",
        "lock", "Mops/s", "Mops/CPU-s", "spins decided by table", "by owner's CPU clock", "mean spin"
    );
    for p in &points {
        let spins = p.spins_on_owner.as_ref();
        outln!(
            "{:<16}{:>9.3}{:>12.3}  {:>22}{:>22}{:>9.0} ns",
            p.lock,
            p.ops_per_sec / 1e6,
            p.ops_per_cpu_sec / 1e6,
            spins.map_or(0, |s| s.decided_by_table),
            spins.map_or(0, |s| s.decided_by_cpu_clock),
            spins.map_or(0.0, |s| s.mean_ns)
        );
    }
    outln!();
}

/// Section: a short `lockmeter torture` of every algorithm, and of the
/// broken lock it must catch. `Err` if a lock failed (or `busted` was not
/// caught): the demo then ends non-zero, after its last section.
fn torture_every_lock(number: usize) -> Result<(), String> {
    use lockmeter_bench::torture::{self, Config, Subject};
    outln!("{number}. Reliability: `lockmeter torture`, every algorithm for 300 ms at 4 threads, then `busted`\n");
    let options = crate::torture::Options {
        subjects: lockmeter_locks::Algorithm::ALL.iter().map(|&a| Subject::Ours(a)).collect(),
        threads: vec![4],
        duration: std::time::Duration::from_millis(300),
        seed: 1,
        stall: std::time::Duration::from_secs(5),
        json: false,
    };
    let mut failure = None;
    match crate::torture::torture(&options) {
        // Stopped: nothing more is shown (the demo ends after this section).
        _ if crate::stop::requested().is_some() => return Ok(()),
        Ok(true) => {}
        Ok(false) => failure = Some(format!("a lock failed its torture (section {number})")),
        Err(e) => outln!("   (torture failed to run: {e})"),
    }
    let busted = torture::run(&Config {
        subject: Subject::Busted,
        threads: 4,
        duration: std::time::Duration::from_secs(5),
        seed: 1,
        stall: std::time::Duration::from_secs(5),
    });
    if crate::stop::requested().is_some() {
        return Ok(());
    }
    match busted.violation {
        Some(violation) => outln!("\nbusted (a deliberately broken lock) was caught: {violation}\n"),
        None => {
            outln!("\nbusted was NOT caught: the torture is broken\n");
            failure.get_or_insert_with(|| format!("the torture did not catch busted (section {number})"));
        }
    }
    failure.map_or(Ok(()), Err)
}

/// The bundled program `lockmeter run` is shown on.
const CACHE_SOURCE: &str = include_str!("../demo/cache.c");

/// Compiles the bundled cache program with the system's C compiler, in
/// `dir`: a private directory of this run's (in one named by the pid, a
/// directory another user made first was used, its files written through
/// and its program run, as root for the demo's last section).
fn build_cache_program(dir: &std::path::Path) -> Result<std::path::PathBuf, String> {
    let source = dir.join("cache.c");
    let binary = dir.join("cache");
    std::fs::write(&source, CACHE_SOURCE).map_err(|e| format!("cannot write {}: {e}", source.display()))?;
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = std::process::Command::new(&compiler)
        .args(["-O2", "-g", "-pthread", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
        .map_err(|e| format!("cannot run the C compiler {compiler}: {e}"))?;
    if !status.success() {
        return Err(format!("{compiler} could not compile the bundled cache.c"));
    }
    Ok(binary)
}

/// Section: `lockmeter run` on the bundled cache program.
fn profile_a_program(number: usize, plot: Option<&std::path::Path>) {
    outln!("{number}. Profiling an unmodified program: `lockmeter run -- cache 4 200000` (a bundled C program: 4 threads");
    outln!("   look keys up behind one global mutex, count hits under another, read a config rwlock)\n");
    // Removed when this section ends, however it ends.
    let scratch = match crate::run::scratch_dir("lockmeter-demo") {
        Ok(scratch) => scratch,
        Err(failure) => {
            outln!("   (skipped: {})\n", failure.message);
            return;
        }
    };
    let binary = match build_cache_program(&scratch.0) {
        Ok(binary) => binary,
        Err(e) => {
            outln!("   (skipped: {e})\n");
            return;
        }
    };
    let command: Vec<std::ffi::OsString> = vec![binary.clone().into(), "4".into(), "200000".into()];
    match crate::run::profile_captured(&command, None) {
        Ok((status, stdout, Some(profile))) if status.success() => {
            let options = TableOptions { sites_per_role: 2, histograms: 2, ..TableOptions::default() };
            out!("{}", render_table(&profile, &options));
            outln!("\n   The program's own report, profiled: {}", String::from_utf8_lossy(&stdout).trim());
            if let Ok(bare) = std::process::Command::new(&binary).args(["4", "200000"]).output() {
                outln!("   and without lockmeter:             {}", String::from_utf8_lossy(&bare.stdout).trim());
            }
            outln!();
        }
        Ok((status, _, _)) => outln!("   (the program failed under the profiler: {status})\n"),
        Err(failure) => outln!("   (skipped: {})\n", failure.message),
    }
    if crate::stop::requested().is_some() {
        return;
    }
    cure_a_program(number + 1, &binary, plot);
    if crate::stop::requested().is_some() {
        return;
    }
    profile_a_hung_program(number + 2, &binary);
}

/// An error once a stop (^C, SIGTERM) came: the demo ends there, its
/// scratch files removed (a section's results cut short are not shown).
fn not_stopped() -> Result<(), String> {
    match crate::stop::requested() {
        Some(_) => Err("interrupted; the demo's files removed".into()),
        None => Ok(()),
    }
}

/// Section: a hung program, stopped by its watchdog: the profile shows
/// what it was stuck on.
fn profile_a_hung_program(number: usize, binary: &std::path::Path) {
    outln!("{number}. A hung program: `lockmeter run -- cache 4 200000 48 hang`: its maintenance thread forgets to");
    outln!("   unlock the config rwlock, every worker blocks, and a watchdog alarm ends it 0.3 s in; the report's");
    outln!("   `now:` rows say what was held and waited for as it died\n");
    let command: Vec<std::ffi::OsString> = vec![binary.into(), "4".into(), "200000".into(), "48".into(), "hang".into()];
    match crate::run::profile_captured(&command, None) {
        Ok((_, _, Some(profile))) => {
            let options = TableOptions { sites_per_role: 1, histograms: 0, ..TableOptions::default() };
            out!("{}", render_table(&profile, &options));
            outln!();
        }
        Ok((status, _, None)) => outln!("   (the program wrote no profile: {status})\n"),
        Err(failure) => outln!("   (skipped: {})\n", failure.message),
    }
}

/// Where the demo's advise section draws, beside the scaling plot:
/// lockmeter-demo.svg -> lockmeter-demo-advise.svg.
pub fn advise_plot(plot: &std::path::Path) -> std::path::PathBuf {
    plot.with_file_name(format!(
        "{}-advise.{}",
        plot.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        plot.extension().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "svg".into())
    ))
}

/// Section: `lockmeter advise` on the same program. Seven rounds: a
/// recommendation needs the winner ahead in enough paired rounds that
/// chance is unlikely (three can never be enough), and two of our locks
/// keep the section within the demo's minute.
fn cure_a_program(number: usize, binary: &std::path::Path, plot: Option<&std::path::Path>) {
    outln!("{number}. Curing it? `lockmeter advise --locks adaptive,futex --repeat 7 --metric '([0-9]+) ops/s' -- cache 4 100000`:");
    outln!("   the same program under glibc's locks and served by ours (replace mode: its pthread mutexes and");
    outln!("   condvars run on our algorithms), interleaved, judged by the throughput it reports\n");
    let options = crate::advise::Options {
        command: vec![binary.into(), "4".into(), "100000".into()],
        shown_as: "cache 4 100000".into(),
        variants: crate::advise::variants("adaptive,futex").expect("known algorithms"),
        repeat: 7,
        metric: regex::Regex::new("([0-9]+) ops/s").ok(),
        plot: plot.map(advise_plot),
        input: None,
    };
    match crate::advise::advise(&options) {
        Err(_) if crate::stop::requested().is_some() => return,
        Err(failure) => outln!("   (skipped: {})", failure.message),
        // The line to try names a program built in the demo's scratch
        // directory, gone when the demo ends.
        Ok(()) => outln!("(`cache` is built from crates/cli/demo/cache.c: cc -O2 -pthread -o cache crates/cli/demo/cache.c)"),
    }
    outln!();
}

fn print_pairs(locks: &[LockKind], samples: &mut [Vec<f64>]) {
    outln!("1. Uncontended lock+unlock pair, ns per pair\n");
    let medians: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
    let glibc = locks.iter().position(|&k| k == LockKind::Glibc).map(|i| medians[i]);
    outln!("{:<16} {:>9} {:>10}", "lock", "ns/pair", "vs glibc");
    for (kind, ns) in locks.iter().zip(medians.iter()) {
        let ratio = glibc.map_or(String::from("-"), |g| format!("{:.2}x", ns / g));
        outln!("{:<16} {:>9.1} {:>10}", kind.label(), ns, ratio);
    }
    outln!();
}

fn print_scenario(number: usize, scenario: &Scenario, points: &[PointResult]) {
    outln!("{number}. Contention: {}", scenario.title);
    outln!("   {}\n", scenario.why);
    outln!("{:<16} {:>10} {:>10} {:>11} {:>13} {:>11}", "lock", "Mops/s", "of limit", "vs best", "fairness", "per CPU-ms");
    let is_peer = |p: &PointResult| p.lock.parse::<lockmeter_locks::Algorithm>().is_err();
    let best_peer = points.iter().filter(|p| is_peer(p)).map(|p| p.ops_per_sec).fold(0.0, f64::max);
    for p in points {
        let fairness = match p.per_thread_ops.min {
            0 => "starved".to_string(),
            min => format!("{:.1}x", p.per_thread_ops.max as f64 / min as f64),
        };
        let per_cpu = match p.per_thread_ops.per_cpu_ms {
            None => "-".to_string(),
            Some(r) if r.min <= 0.0 => "starved".to_string(),
            Some(r) => format!("{:.1}x", r.max / r.min),
        };
        outln!(
            "{:<16} {:>10.3} {:>9.0}% {:>10.2}x {:>13} {:>11}",
            p.lock,
            p.ops_per_sec / 1e6,
            100.0 * p.efficiency.unwrap_or(0.0),
            p.ops_per_sec / best_peer.max(f64::MIN_POSITIVE),
            fairness,
            per_cpu
        );
    }
    outln!("   (\"of limit\": of min(min(threads, cores) / period, 1 / critical section); \"vs best\": against the best peer;");
    outln!("    fairness: most / fewest operations of any thread; per CPU-ms: the same per ms each thread ran,");
    outln!("    low for a thread the lock keeps failing, even where the CPUs were shared out unevenly)\n");
}

/// A thread that waits for its sender to be dropped.
fn idle_thread() -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        let _ = rx.recv();
    });
    (tx, handle)
}
