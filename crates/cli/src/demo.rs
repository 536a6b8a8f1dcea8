//! `lockmeter demo`: everything lockmeter can do, on this machine, in under
//! a minute.

use crate::progress::Progress;
use lockmeter_bench::work::Calibration;
use lockmeter_bench::workloads::{median, uncontended_pair_ns, DutyCycle, DutyResult};
use lockmeter_bench::{LockKind, Recording};
use lockmeter_stats::histogram::render_side_by_side;
use lockmeter_stats::report::{self, Row};
use lockmeter_stats::Snapshot;
use std::time::Duration;

/// How much to measure.
pub struct Settings {
    /// Interleaved rounds of every measurement.
    pub rounds: u32,
    /// Length of one contended run.
    pub run: Duration,
    /// Lock+unlock pairs per uncontended measurement.
    pub pairs: u64,
}

/// A contended scenario of the demo.
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

fn all_locks() -> Vec<LockKind> {
    LockKind::ours().chain(LockKind::PEERS).collect()
}

pub fn run(settings: &Settings) -> Result<(), String> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("lockmeter demo: our locks and the peers, side by side in one process, on {cores} cores.");
    println!(
        "Every lock runs once before any runs twice ({} round{}); figures are medians over rounds.\n",
        settings.rounds,
        if settings.rounds == 1 { "" } else { "s" }
    );
    let calibration = Calibration::measure();
    // glibc skips atomic instructions while a process has a single thread;
    // a lock benchmark is about multi-threaded programs, so make this one.
    let (_keep_alive, idle_thread) = idle_thread();

    // tas-floor first (the floor), and adaptive once more with statistics
    // on, to show what recording costs.
    let pair_locks: Vec<LockKind> = std::iter::once(LockKind::TasFloor)
        .chain(all_locks())
        .chain([LockKind::Ours { algorithm: lockmeter_locks::Algorithm::Adaptive, recording: Recording::Full }])
        .collect();
    let contended_locks = all_locks();
    let ours: Vec<LockKind> = LockKind::ours().collect();
    let steps = settings.rounds as usize * (pair_locks.len() + SCENARIOS.len() * contended_locks.len())
        + SCENARIOS.len() * ours.len();
    let mut progress = Progress::new(steps);

    // 1. Uncontended pair cost.
    let mut pair_ns: Vec<Vec<f64>> = vec![Vec::new(); pair_locks.len()];
    for _ in 0..settings.rounds {
        for (i, &kind) in pair_locks.iter().enumerate() {
            progress.step(&format!("uncontended {kind}"));
            pair_ns[i].push(uncontended_pair_ns(kind, settings.pairs));
        }
    }

    // 2. Contended scenarios, interleaved; then one statistics-recording
    //    run of each of ours (recording is kept out of the timed rounds).
    let mut results: Vec<Vec<Vec<DutyResult>>> = Vec::new();
    let mut recorded: Vec<Vec<(Snapshot, Duration)>> = Vec::new();
    for scenario in &SCENARIOS {
        let workload = DutyCycle {
            threads: scenario.threads,
            period_ns: scenario.period_ns,
            duty_percent: scenario.duty_percent,
            duration: settings.run,
        };
        let mut per_lock: Vec<Vec<DutyResult>> = vec![Vec::new(); contended_locks.len()];
        for _ in 0..settings.rounds {
            for (i, &kind) in contended_locks.iter().enumerate() {
                progress.step(&format!("{}: {kind}", scenario.title));
                per_lock[i].push(workload.run(kind, &calibration));
            }
        }
        results.push(per_lock);
        let mut snapshots = Vec::new();
        for &kind in &ours {
            progress.step(&format!("{}: {kind} with statistics", scenario.title));
            let r = workload.run(kind.recording(Recording::Full), &calibration);
            snapshots.push((r.stats.ok_or("a recording lock returned no statistics")?, r.elapsed));
        }
        recorded.push(snapshots);
    }
    progress.finish();

    print_pairs(&pair_locks, &mut pair_ns);
    let names: Vec<String> = ours.iter().map(|k| k.name().to_string()).collect();
    for (s, scenario) in SCENARIOS.iter().enumerate() {
        print_scenario(2 * s + 2, scenario, &contended_locks, &results[s]);
        println!("{}. The lockmeter report of our locks, {} (one recording run each)\n", 2 * s + 3, scenario.title);
        let rows: Vec<Row<'_>> = names
            .iter()
            .zip(recorded[s].iter())
            .map(|(name, (stats, _))| Row { name, stats, call_site: false })
            .collect();
        let elapsed = recorded[s].first().map_or(1.0, |(_, e)| e.as_nanos() as f64);
        print!("{}", report::render(&rows, elapsed));
        println!();
    }
    let last = 2 * SCENARIOS.len();
    let histogram_scenario = &SCENARIOS[0];
    println!(
        "{}. Wait histogram, {} (acquisition time = 2^bin cycles, seed 000's format)\n",
        last + 2,
        histogram_scenario.title
    );
    let wanted = ["adaptive", "futex", "ticket"];
    let picked: Vec<(&str, &Snapshot)> = ours
        .iter()
        .zip(recorded[0].iter())
        .filter(|(k, _)| wanted.contains(&k.name()))
        .map(|(k, (s, _))| (k.name(), s))
        .collect();
    let titles: Vec<&str> = picked.iter().map(|(n, _)| *n).collect();
    let histograms: Vec<_> = picked.iter().map(|(_, s)| &s.wait_histogram).collect();
    print!("{}", render_side_by_side(&titles, &histograms));
    println!();
    drop(_keep_alive);
    let _ = idle_thread.join();
    println!("Next: `lockmeter algorithms` says when to pick each lock; include/lockmeter.h uses them from C.");
    Ok(())
}

fn print_pairs(locks: &[LockKind], samples: &mut [Vec<f64>]) {
    println!("1. Uncontended lock+unlock pair, ns per pair\n");
    let medians: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
    let glibc = locks.iter().position(|&k| k == LockKind::Glibc).map(|i| medians[i]);
    println!("{:<16} {:>9} {:>10}", "lock", "ns/pair", "vs glibc");
    for (kind, ns) in locks.iter().zip(medians.iter()) {
        let ratio = glibc.map_or(String::from("-"), |g| format!("{:.2}x", ns / g));
        println!("{:<16} {:>9.1} {:>10}", kind.label(), ns, ratio);
    }
    println!();
}

fn print_scenario(number: usize, scenario: &Scenario, locks: &[LockKind], results: &[Vec<DutyResult>]) {
    println!("{number}. Contention: {}", scenario.title);
    println!("   {}\n", scenario.why);
    println!(
        "{:<16} {:>10} {:>10} {:>11} {:>13}",
        "lock", "Mops/s", "of limit", "vs best", "fairness"
    );
    let mut ops: Vec<f64> = results.iter().map(|r| median(&mut r.iter().map(|x| x.ops_per_sec).collect::<Vec<_>>())).collect();
    let best_peer = locks
        .iter()
        .zip(ops.iter())
        .filter(|(k, _)| !k.is_ours())
        .map(|(_, &o)| o)
        .fold(0.0, f64::max);
    for (i, kind) in locks.iter().enumerate() {
        let efficiency = median(&mut results[i].iter().map(|x| x.efficiency()).collect::<Vec<_>>());
        let fairness = median(&mut results[i].iter().map(|x| x.fairness_spread()).collect::<Vec<_>>());
        let fairness = if fairness.is_finite() { format!("{fairness:.1}x") } else { "starved".into() };
        println!(
            "{:<16} {:>10.3} {:>9.0}% {:>10.2}x {:>13}",
            kind.name(),
            ops[i] / 1e6,
            100.0 * efficiency,
            ops[i] / best_peer.max(f64::MIN_POSITIVE),
            fairness
        );
    }
    ops.clear();
    println!("   (\"of limit\": of min(min(threads, cores) / period, 1 / critical section); \"vs best\": against the best peer;");
    println!("    fairness: most / fewest operations of any thread)\n");
}

/// A thread that waits for its sender to be dropped.
fn idle_thread() -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        let _ = rx.recv();
    });
    (tx, handle)
}
