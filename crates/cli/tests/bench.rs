//! The `lockmeter bench` contract, checked on quick runs: the fields other
//! tools rely on are present and their numbers are sane.

use serde_json::Value;
use std::process::Command;

fn lockmeter() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockmeter"))
}

fn run_json(args: &[&str]) -> Value {
    let out = lockmeter().args(args).args(["--quick", "--format", "json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// Checks every point's fields and their consistency.
fn check_points(report: &Value, workload: &str, locks: usize, threads: &[u64]) {
    let machine = &report["machine"];
    assert!(machine["cores"].as_u64().unwrap() >= 1);
    for key in ["cpu_model", "kernel"] {
        assert!(machine[key].is_string(), "machine.{key}");
    }
    assert!(machine["hypervisor"].is_boolean());
    assert!(machine["work_iterations_per_ns"].as_f64().unwrap() > 0.0);
    let points = report["points"].as_array().unwrap();
    assert_eq!(points.len(), locks * threads.len(), "one point per lock and thread count");
    for p in points {
        let lock = p["lock"].as_str().unwrap();
        assert_eq!(p["workload"], workload);
        assert!(threads.contains(&p["threads"].as_u64().unwrap()));
        let ops = p["ops_per_sec"].as_f64().unwrap();
        assert!(ops > 0.0, "{lock}: ops > 0");
        let runs = p["ops_per_sec_runs"].as_array().unwrap();
        assert!(!runs.is_empty() && runs.iter().all(|r| r.as_f64().unwrap() > 0.0));
        assert!(p["ops_per_cpu_sec"].as_f64().unwrap() > 0.0);
        let wait = &p["wait_ns"];
        let (p50, p99, max) = (wait["p50"].as_f64().unwrap(), wait["p99"].as_f64().unwrap(), wait["max"].as_f64().unwrap());
        assert!(p50 <= p99 && p99 <= max, "{lock}: p50 {p50} <= p99 {p99} <= max {max}");
        let long = wait["over_1ms_share"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&long), "{lock}: a share of waits over 1 ms, {long}");
        assert!(long == 0.0 || max > 1e6, "{lock}: waits over 1 ms ({long}) but the longest was {max} ns");
        let histogram: u64 = wait["hist_log2_cycles"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).sum();
        assert_eq!(histogram, wait["samples"].as_u64().unwrap(), "{lock}: the histogram sums to its samples");
        assert!(histogram > 0, "{lock}: some acquisitions were timed");
        let fairness = &p["per_thread_ops"];
        assert!(fairness["min"].as_u64().unwrap() <= fairness["max"].as_u64().unwrap());
        if let Some(blocked) = fairness.get("most_blocked_share") {
            let blocked = blocked.as_f64().unwrap();
            assert!((0.0..=1.0).contains(&blocked), "{lock}: a share of the run: {blocked}");
        }
        if let Some(rate) = fairness.get("per_cpu_ms") {
            let (min, max) = (rate["min"].as_f64().unwrap(), rate["max"].as_f64().unwrap());
            assert!(0.0 <= min && min <= max && max > 0.0, "{lock}: operations per CPU-ms {min}..{max}");
        }
        if let Some(least) = fairness.get("least_served") {
            let ops = least["ops"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&ops), "{lock}: the fewest operations are at most the median's: {ops}");
            for factor in ["awake", "cpu_share", "rate"] {
                assert!(least[factor].as_f64().unwrap() >= 0.0, "{lock}: {factor}");
            }
        }
        let variants = ["adaptive-oncpu", "adaptive-nobail", "ticket-nobackoff"];
        let ours = lock.parse::<lockmeter_locks::Algorithm>().is_ok() || variants.contains(&lock);
        for key in ["acquisitions", "contended", "spun", "slept"] {
            assert_eq!(p[key].is_u64(), ours, "{lock}: {key} is a number for ours, null for peers");
        }
        if ours {
            let contended = p["contended"].as_u64().unwrap();
            assert_eq!(contended, p["spun"].as_u64().unwrap() + p["slept"].as_u64().unwrap());
            assert!(contended <= p["acquisitions"].as_u64().unwrap());
            assert!(p["acquisitions"].as_u64().unwrap() > 0);
        }
    }
}

#[test]
fn duty_reports_every_field_for_every_lock() {
    let report = run_json(&["bench", "duty", "--locks", "all", "--threads", "1,3"]);
    assert_eq!(report["workload"], "duty");
    check_points(&report, "duty", 12, &[1, 3]);
    for p in report["points"].as_array().unwrap() {
        assert_eq!(p["period_ns"], 1000);
        assert_eq!(p["duty_pct"], 8);
        let ideal = p["ideal_ops_per_sec"].as_f64().unwrap();
        let threads = p["threads"].as_f64().unwrap();
        // min(min(threads, cores) / P, 1 / CS) with P = 1 us, CS = 80 ns.
        let cores = report["machine"]["cores"].as_f64().unwrap();
        assert!((ideal - (threads.min(cores) * 1e6).min(1e9 / 80.0)).abs() < 1.0);
        let efficiency = p["efficiency"].as_f64().unwrap();
        assert!((efficiency - p["ops_per_sec"].as_f64().unwrap() / ideal).abs() < 1e-9);
    }
}

/// A lone thread never blocks on its lock: its share of the run blocked
/// reads (about) none. Computed with the kernel's CPU time, brought up to
/// date only at ticks, it read 8-15% of a 20 ms run, every run. A machine
/// loaded hundreds of threads deep can hold a thread off its CPU in ways
/// the kernel does not count as runnable (24% once): one round of three
/// must read none.
#[test]
fn a_lone_thread_is_not_read_as_blocked() {
    if !std::path::Path::new("/proc/thread-self/schedstat").exists() {
        return;
    }
    let mut rounds = Vec::new();
    for _ in 0..3 {
        let report = run_json(&["bench", "sem", "--locks", "ticket,pi,adaptive", "--threads", "1"]);
        let blocked: Vec<String> = report["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["lock"].as_str().unwrap().to_string(), p["per_thread_ops"]["most_blocked_share"].as_f64().unwrap()))
            .filter(|(_, share)| *share >= 0.02)
            .map(|(lock, share)| format!("{lock} {:.1}%", share * 100.0))
            .collect();
        if blocked.is_empty() {
            return;
        }
        rounds.push(blocked);
    }
    panic!("at 1 thread, blocked in every round: {rounds:?}");
}

/// A run lasts what `--seconds` says: the clock stops with the workers,
/// not after the samples are summarised (which added 7% to a 0.5 s `sem`
/// run at one thread, the most for the fastest lock).
#[test]
fn a_run_is_timed_from_start_to_stop() {
    // One second at one thread: about 12 million samples, whose summary
    // added 70 ms; 35 ms are left for the timing thread to wake late on a
    // busy machine.
    let report = run_json(&["bench", "sem", "--locks", "adaptive", "--threads", "1", "--seconds", "1s", "--repeat", "1"]);
    let p = &report["points"][0];
    // One acquisition per operation (and one more that saw the stop).
    let seconds = p["acquisitions"].as_f64().unwrap() / p["ops_per_sec"].as_f64().unwrap();
    assert!((1.0..1.035).contains(&seconds), "a 1 s run lasted {seconds} s by its rate");
    // How it was made: the command line, version and start, and the
    // hypervisor's share of the CPUs meanwhile.
    let provenance = &report["provenance"];
    assert_eq!(provenance["command_line"][1], "bench");
    assert!(provenance["command_line"].as_array().unwrap().iter().any(|a| a == "--seconds"), "{provenance}");
    assert_eq!(provenance["lockmeter_version"], env!("CARGO_PKG_VERSION"));
    assert!(provenance["started_unix_s"].as_u64().unwrap() > 1_700_000_000, "{provenance}");
    assert!(provenance["steal_pct"].as_f64().is_some_and(|s| (0.0..=100.0).contains(&s)), "{provenance}");
    // The JSON says how long the run lasted, as the rate divides by it.
    let lasted = p["median_run_seconds"].as_f64().unwrap();
    assert!((seconds - lasted).abs() < 1e-3, "the median run lasted {lasted} s; its rate says {seconds} s");
}

#[test]
fn sem_and_dir_report_the_contract_without_duty_fields() {
    for workload in ["sem", "dir"] {
        let report = run_json(&["bench", workload, "--locks", "adaptive,ticket,glibc,parking_lot", "--threads", "2"]);
        check_points(&report, workload, 4, &[2]);
        for p in report["points"].as_array().unwrap() {
            assert!(p.get("period_ns").is_none() && p.get("efficiency").is_none());
        }
    }
}

/// ^C (or SIGTERM) ends the run in progress and starts no other: no file
/// of `--fs` left behind (each worker finishes the operation it is in),
/// no file written, and lockmeter dies of the signal. (Killed mid-run,
/// 27-48 of 64 workers' files stayed in the directory.) The rounds every
/// point finished are shown, in the format asked for, and said to be
/// all there is (a long run stopped near its end had shown nothing);
/// stopped in the first round, one line says how far it got.
#[test]
fn an_interrupted_bench_stops_cleanly() {
    use std::os::unix::process::ExitStatusExt;
    for (signal, seconds, repeat) in [(libc::SIGINT, "300ms", "30"), (libc::SIGTERM, "5s", "2")] {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lockmeter-interrupt-{}-{signal}-{repeat}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.with_extension("json");
        let child = lockmeter()
            .args(["bench", "dir", "--fs", dir.to_str().unwrap(), "--threads", "64", "--seconds", seconds, "--repeat", repeat, "-o"])
            .arg(&out)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Inside the first 5 s run; past the first 300 ms one (and the
        // calibration before it), on a loaded machine too.
        std::thread::sleep(std::time::Duration::from_millis(if repeat == "2" { 1000 } else { 2500 }));
        // SAFETY: signalling the child just spawned.
        unsafe { libc::kill(child.id() as i32, signal) };
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        // Killed by it, as a shell loop needs to see to stop.
        assert_eq!(output.status.signal(), Some(signal), "{stderr}");
        if repeat == "2" {
            assert_eq!(stderr.trim_end(), "lockmeter: interrupted after 0 of 2 runs; nothing written");
            assert!(output.stdout.is_empty());
        } else {
            let report: Value = serde_json::from_slice(&output.stdout).expect("the rounds done, as JSON");
            let done = report["repeat"].as_u64().unwrap();
            assert!((1..30).contains(&done) && report["planned_repeat"] == 30, "{report}");
            assert_eq!(report["points"][0]["ops_per_sec_runs"].as_array().unwrap().len() as u64, done);
            let said = format!("lockmeter: stopped after {done} of 30 runs per point; the report above is theirs; {} not written", out.display());
            assert_eq!(stderr.trim_end(), said);
        }
        assert!(!out.exists(), "no report");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "files left in --fs: {left:?}");
    }
}

/// A thread count the machine's limits cannot start fails before the
/// first run, saying which limit to raise (it failed at its own run, the
/// runs before it lost).
#[test]
fn a_thread_count_past_the_limits_fails_before_any_run() {
    let binary = env!("CARGO_BIN_EXE_lockmeter");
    // 4 GB of address space: 4096 threads' stacks do not fit.
    let output = Command::new("sh")
        .args(["-c", &format!("ulimit -v 4000000 && exec {binary} bench sem --locks glibc --threads 1,4096 --seconds 50ms --format json")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("lockmeter: error: cannot run 4096 threads here (thread ") && stderr.contains("ulimit -v"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(output.stdout.is_empty());
}

/// One run gives the table to read and the JSON to keep (a 13-minute
/// scorecard had to run twice for both), the JSON the same report the
/// table shows, and one `plot` loads.
#[test]
fn save_keeps_the_json_beside_the_table() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lockmeter-save-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for workload in ["sem", "pair"] {
        let saved = dir.join(format!("{workload}.json"));
        let out = lockmeter().args(["bench", workload, "--quick", "--locks", "adaptive,glibc", "--save"]).arg(&saved).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let table = String::from_utf8(out.stdout).unwrap();
        let report: Value = serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).expect("JSON saved");
        assert_eq!(report["workload"], workload);
        let adaptive = report["points"].as_array().unwrap().iter().find(|p| p["lock"] == "adaptive").expect("adaptive saved");
        let figure = if workload == "pair" { format!("{:.2}", adaptive["ns_per_pair"].as_f64().unwrap()) } else { String::from("adaptive") };
        assert!(table.lines().any(|l| l.starts_with("adaptive") && l.contains(&figure)), "the table of the same run: {table}");
        // `report` renders it again, as the run printed it.
        let again = lockmeter().arg("report").arg(&saved).output().unwrap();
        assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
        assert_eq!(String::from_utf8(again.stdout).unwrap(), table);
    }
    // What `report` cannot do with a bench report is said (exit 2): the
    // profile-only options were ignored, and a bench report beside a
    // profile read "not a valid lockmeter profile"; nor is an input
    // overwritten by the output (a CSV had replaced the report).
    let sem = dir.join("sem.json");
    let kept = std::fs::read(&sem).unwrap();
    for (args, needle) in [
        (vec!["--sort", "hold"], "--sort, --min-wait and --merge choose the rows of a profile"),
        (vec!["--merge"], "--sort, --min-wait and --merge choose the rows of a profile"),
        (vec![dir.join("pair.json").to_str().unwrap()], "is a bench report, which renders alone"),
        (vec!["--format", "csv", "-o", sem.to_str().unwrap()], "is the input"),
    ] {
        let out = lockmeter().arg("report").arg(&sem).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle) && err.lines().count() == 1, "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(&sem).unwrap(), kept, "the report left as it was");
    // A descriptor is no file to collide with (both were refused once).
    let piped = lockmeter().args(["bench", "pair", "--quick", "--locks", "glibc", "-o", "/dev/stdout", "--save"]).arg(dir.join("new.json")).output().unwrap();
    assert!(piped.status.success() && dir.join("new.json").exists(), "{}", String::from_utf8_lossy(&piped.stderr));
    let plotted = lockmeter().arg("plot").arg(dir.join("sem.json")).arg("--throughput").arg(dir.join("sem.svg")).output().unwrap();
    assert!(plotted.status.success(), "{}", String::from_utf8_lossy(&plotted.stderr));
}

#[test]
fn dir_on_a_real_directory_measures_the_kernel() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lockmeter-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = run_json(&["bench", "dir", "--fs", dir.to_str().unwrap(), "--threads", "2"]);
    let points = report["points"].as_array().unwrap();
    assert_eq!(points.len(), 1);
    assert_eq!(points[0]["lock"], "kernel");
    assert!(points[0]["ops_per_sec"].as_f64().unwrap() > 0.0);
    // The kernel's locks are not timed: no wait figures, rather than
    // waits of 0 ns.
    assert!(points[0]["wait_ns"].is_null(), "{}", points[0]);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "every file created was unlinked");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn csv_table_and_plots() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lockmeter-plots-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("out.csv");
    let (svg, png) = (dir.join("t.svg"), dir.join("h.png"));
    let out = lockmeter()
        .args(["bench", "duty", "--quick", "--locks", "adaptive,glibc", "--format", "csv", "-o"])
        .arg(&csv)
        .arg("--plot")
        .arg(&svg)
        .arg("--plot-histogram")
        .arg(&png)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert!(header.contains(&"ops_per_sec") && header.contains(&"wait_p99_ns") && header.contains(&"wait_over_1ms_share"));
    // How long each run lasted (an overrun said in the table's header
    // was lost in the CSV).
    assert_eq!(header.last(), Some(&"median_run_seconds"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 4, "2 locks x 2 thread counts");
    assert!(rows.iter().all(|r| r.split(',').count() == header.len()));
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert!(svg_text.contains("<svg") && svg_text.contains("adaptive") && svg_text.contains("glibc"));
    let png_bytes = std::fs::read(&png).unwrap();
    assert_eq!(&png_bytes[..8], b"\x89PNG\r\n\x1a\n");
    // Without --format, -o's name chooses (a table went to x.json, which
    // `plot` then refused).
    let (json, csv) = (dir.join("named.json"), dir.join("named.csv"));
    for file in [&json, &csv] {
        let out = lockmeter().args(["bench", "sem", "--quick", "--locks", "adaptive", "--threads", "1", "-o"]).arg(file).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).expect("JSON in named.json");
    assert_eq!(saved["workload"], "sem");
    assert!(std::fs::read_to_string(&csv).unwrap().starts_with("workload,"), "CSV in named.csv");
    let table = lockmeter().args(["bench", "sem", "--quick", "--locks", "adaptive"]).output().unwrap();
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.contains("lock \\ threads") && table.contains("adaptive"), "{table}");
    // Contended points also get fairness and tail tables; a one-thread
    // point has nothing to be fair about, but still a cell.
    let fairness = table.split("fairness, most / fewest operations of any thread").nth(1).expect(&table);
    let row = fairness.lines().find(|l| l.starts_with("adaptive")).expect(&table);
    assert_eq!(row.split_whitespace().filter(|c| c.ends_with('x') || *c == "inf").count(), 2, "{table}");
    assert!(table.contains("wait p99 in us"), "{table}");
    assert!(table.contains("waits over 1 ms, % of the timed acquisitions"), "{table}");
    if std::path::Path::new("/proc/thread-self/schedstat").exists() {
        assert!(table.contains("largest share of the run any thread spent blocked"), "{table}");
        assert!(table.contains("fairness per CPU time, most / fewest operations per ms on a CPU"), "{table}");
        assert!(table.contains("the thread with the fewest operations against the median thread"), "{table}");
    }
    // Only our locks: no peer to compare with, no ratio table.
    assert!(!table.contains("against the best peer"), "{table}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every point's CPUs kept busy, in the table, is its rate over its rate
/// per CPU-second from the same run: at most about one for one thread,
/// and no more than the machine has for four (a little over: the
/// process's CPU time takes in the threads' start and stop, long beside
/// a --quick run; no lower bound, as other tests may take the CPUs).
#[test]
fn the_table_gives_the_cpus_each_lock_kept_busy() {
    let dir = std::env::temp_dir().join(format!("lockmeter-busy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("busy.json");
    let out = lockmeter().args(["bench", "sem", "--quick", "--locks", "adaptive", "--threads", "1,4", "--save"]).arg(&json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    let busy = table.split("CPUs kept busy (the process's CPU time over the run's, of ").nth(1).expect(&table);
    let row = busy.lines().find(|l| l.starts_with("adaptive")).expect(&table);
    let cells: Vec<f64> = row.split_whitespace().skip(1).map(|c| c.parse().expect(&table)).collect();
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let points = saved["points"].as_array().unwrap();
    assert_eq!((cells.len(), points.len()), (2, 2), "{table}");
    for (cell, point) in cells.iter().zip(points) {
        let busy = point["ops_per_sec"].as_f64().unwrap() / point["ops_per_cpu_sec"].as_f64().unwrap();
        assert_eq!(format!("{cell:.2}"), format!("{busy:.2}"), "{table}\n{point}");
    }
    let cores = std::thread::available_parallelism().unwrap().get() as f64;
    assert!(cells[0] > 0.0 && cells[0] <= 1.3, "one thread: {table}");
    assert!(cells[1] > 0.0 && cells[1] <= 4f64.min(cores) * 1.5, "four threads: {table}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Beside peers, each of our locks gets its ratio to the best peer at each
/// thread count, computed from the throughput table, and the peer's name.
#[test]
fn the_table_gives_ours_against_the_best_peer() {
    let out = lockmeter().args(["bench", "sem", "--quick", "--locks", "adaptive,ticket,std,parking_lot"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    let mops = |lock: &str| -> Vec<f64> {
        let section = table.split("sem: Mops/s").nth(1).expect(&table);
        let row = section.lines().find(|l| l.starts_with(lock)).expect(&table);
        row.split_whitespace().skip(1).map(|c| c.parse().unwrap()).collect()
    };
    let section = table.split("against the best peer at each thread count").nth(1).expect(&table);
    let best_row: Vec<&str> = section.lines().find(|l| l.starts_with("(best peer)")).expect(&table).split_whitespace().skip(2).collect();
    assert_eq!(best_row.len(), 2, "{table}");
    for lock in ["adaptive", "ticket"] {
        let row = section.lines().find(|l| l.starts_with(lock)).expect(&table);
        let ratios: Vec<f64> = row.split_whitespace().skip(1).map(|c| c.trim_end_matches('x').parse().unwrap()).collect();
        for (i, ratio) in ratios.iter().enumerate() {
            let best = mops(best_row[i])[i];
            assert!(mops("std")[i] <= best && mops("parking_lot")[i] <= best, "{table}");
            // The table's Mops/s are rounded to four digits.
            assert!((ratio - mops(lock)[i] / best).abs() < 0.01, "{lock}: {ratio} against {} / {best}\n{table}", mops(lock)[i]);
        }
    }
    assert!(!section.split("\n\n").next().unwrap().lines().any(|l| l.starts_with("std ") || l.starts_with("parking_lot ")), "{table}");
    // One round: no spread to show.
    assert!(!table.contains("lowest and highest of the"), "{table}");
}

/// With several rounds, the ratios' spread over the rounds follows: each
/// of ours, its lowest and highest round against the best peer.
#[test]
fn the_table_gives_the_ratios_range_over_the_rounds() {
    let out = lockmeter().args(["bench", "sem", "--quick", "--repeat", "3", "--locks", "adaptive,std,parking_lot"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    let section = table.split("sem: against the best peer, lowest and highest of the 3 rounds").nth(1).expect(&table);
    let rows: Vec<&str> = section.split("\n\n").next().unwrap().lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(rows.len(), 2, "the header and adaptive's row: {table}");
    let cells: Vec<(f64, f64)> = rows[1]
        .split_whitespace()
        .skip(1)
        .map(|cell| {
            let (low, high) = cell.split_once('-').expect(&table);
            (low.parse().unwrap(), high.parse().unwrap())
        })
        .collect();
    assert_eq!(cells.len(), 2, "one per thread count: {table}");
    assert!(cells.iter().all(|(low, high)| 0.0 < *low && low <= high), "{table}");
}

/// `scorecard`: every target judged from the experiments it ran, which
/// come with it; a check's verdict agrees with the figures it shows.
#[test]
fn the_scorecard_judges_every_target_from_its_own_runs() {
    let report = run_json(&["bench", "scorecard"]);
    // A smoke run says so wherever it is shown: saved and shown again, its
    // table lost the warning.
    assert_eq!(report["quick"], true);
    let saved = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lockmeter-quick-scorecard-{}.json", std::process::id()));
    std::fs::write(&saved, report.to_string()).unwrap();
    let shown = lockmeter().arg("report").arg(&saved).output().unwrap();
    let _ = std::fs::remove_file(&saved);
    assert!(String::from_utf8_lossy(&shown.stdout).starts_with("--quick: a smoke run"), "{}", String::from_utf8_lossy(&shown.stdout));
    let checks = report["checks"].as_array().unwrap();
    let targets: Vec<&str> = checks.iter().map(|c| c["target"].as_str().unwrap()).collect();
    for expected in [
        "uncontended pair <= 1.0x the fastest peer",
        "uncontended pair <= 0.85x glibc",
        "duty P=4000 D=50%: 2 threads >= 1.5x the best peer",
        "duty P=40000 D=90%: 2 threads >= 90% of the limit",
        "duty P=10000 D=32%: >= 0.97x the best peer at every count",
        "sem: >= 0.97x the best peer at every count",
        "dir: >= 0.97x the best peer at every count",
        "fairness 64 threads, 50 ms runs: max/min <= 10x at >= 0.95x",
        "tail P=20000 D=50% 16 threads: p99 wait <= the best peer's",
        "sem: ticket > ticket-nobackoff at 2 and oversubscribed",
        "dir: adaptive > adaptive-nobail at 64 and 256",
    ] {
        assert!(targets.contains(&expected), "{expected} missing from {targets:?}");
    }
    // Every target, a count not run among them (256 threads, past the
    // quick run's): judged n/a, not left out.
    assert_eq!(checks.len(), 25, "{targets:?}");
    let unrun = checks.iter().find(|c| c["target"].as_str().unwrap().starts_with("fairness 256 threads")).expect("fairness at 256 threads judged");
    assert_eq!(unrun["not_measured"], true, "{unrun}");
    // Five workloads' runs and the fairness runs, every lock of each.
    let reports = report["reports"].as_array().unwrap();
    let workloads: Vec<&str> = reports.iter().map(|r| r["workload"].as_str().unwrap()).collect();
    assert_eq!(workloads, ["duty", "duty", "duty", "sem", "dir", "duty"]);
    let sem = &reports[3]["points"];
    let ops = |lock: &str, threads: u64| {
        sem.as_array().unwrap().iter().find(|p| p["lock"] == lock && p["threads"] == threads).unwrap()["ops_per_sec"].as_f64().unwrap()
    };
    let sem_check = checks.iter().find(|c| c["target"] == "sem: >= 0.97x the best peer at every count").unwrap();
    let all_above = [1, 2, 4, 16, 64].iter().all(|&t| {
        let best = ["glibc", "glibc-adaptive", "glibc-pi", "std", "parking_lot"].iter().map(|l| ops(l, t)).fold(0.0, f64::max);
        ops("adaptive", t) / best >= 0.97
    });
    assert_eq!(sem_check["met"].as_bool().unwrap(), all_above, "{sem_check}");
    // Only a miss can be one within the rounds' spread.
    for check in checks {
        assert!(!(check["met"].as_bool().unwrap() && check["within_spread"].as_bool().unwrap()), "{check}");
    }
    assert_eq!(report["pair"]["points"].as_array().unwrap().len(), 8, "tas-floor, cas-floor, adaptive and the five peers");
    // A target past the machine's limit is a miss, never a met one.
    for check in checks {
        assert!(!(check["met"].as_bool().unwrap() && check["past_the_limit"].as_bool().unwrap()), "{check}");
    }
}

/// `pair`: one point per lock, in the order asked, each the median of its
/// own rounds; the table compares with the fastest peer and glibc.
#[test]
fn pair_reports_the_uncontended_cost_of_every_lock() {
    let report = run_json(&["bench", "pair", "--locks", "tas-floor,adaptive,glibc,std", "--repeat", "3"]);
    assert_eq!(report["workload"], "pair");
    assert_eq!(report["repeat"], 3);
    assert!(report["machine"]["cores"].as_u64().unwrap() >= 1);
    let points = report["points"].as_array().unwrap();
    let names: Vec<&str> = points.iter().map(|p| p["lock"].as_str().unwrap()).collect();
    assert_eq!(names, ["tas-floor", "adaptive", "glibc", "std"]);
    for p in points {
        let mut runs: Vec<f64> = p["ns_per_pair_runs"].as_array().unwrap().iter().map(|r| r.as_f64().unwrap()).collect();
        assert_eq!(runs.len(), 3);
        runs.sort_by(f64::total_cmp);
        assert_eq!(p["ns_per_pair"].as_f64().unwrap(), runs[1], "{}: the median of its runs", p["lock"]);
        assert!(runs[0] > 0.0);
    }
    // glibc's mutex pays its atomic instructions: the process has a second
    // thread while the pair is timed (single-threaded, glibc skips them and
    // reads a fraction of the floor's cost).
    // (The fastest of each lock's runs: a run slowed by other work on the
    // machine reads high, never low; medians failed beside a build.)
    let ns = |lock: &str| {
        let runs = points.iter().find(|p| p["lock"] == lock).unwrap()["ns_per_pair_runs"].as_array().unwrap().clone();
        runs.iter().map(|r| r.as_f64().unwrap()).fold(f64::INFINITY, f64::min)
    };
    assert!(ns("glibc") > 0.9 * ns("tas-floor"), "glibc {} ns against tas-floor {} ns", ns("glibc"), ns("tas-floor"));

    let out = lockmeter().args(["bench", "pair", "--quick", "--locks", "adaptive,glibc,std"]).output().unwrap();
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("ns/pair") && table.contains("vs glibc"), "{table}");
    let glibc_row = table.lines().find(|l| l.starts_with("glibc")).unwrap();
    assert!(glibc_row.trim_end().ends_with("1.00x"), "{table}");
    let csv = lockmeter().args(["bench", "pair", "--quick", "--locks", "adaptive", "--format", "csv"]).output().unwrap();
    let csv = String::from_utf8(csv.stdout).unwrap();
    assert!(csv.starts_with("workload,lock,ns_per_pair,"), "{csv}");
    assert!(csv.lines().nth(1).unwrap().starts_with("pair,adaptive,"), "{csv}");
}

#[test]
fn bad_options_are_one_line_errors_with_exit_code_2() {
    for (args, expected) in [
        (vec!["bench", "duty", "--locks", "fastest"], "unknown lock 'fastest'"),
        (vec!["bench", "duty", "--threads", "0"], "threads must be between 1"),
        (vec!["bench", "duty", "--seconds", "-1s"], "not a duration"),
        (vec!["bench", "duty", "--seconds", "0"], "must be 1ms or more"),
        // A run of a microsecond counted no operation and read "inf".
        (vec!["bench", "sem", "--seconds", "1us"], "must be 1ms or more"),
        (vec!["bench", "duty", "--threads", "-1"], "'-1' is not a whole number of threads"),
        (vec!["bench", "duty", "--threads", "1,,2"], "'1,,2' has an empty item"),
        (vec!["bench", "duty", "--histogram-threads", "0"], "0 is not in 1..=4096"),
        // Two outputs to one file: the second replaced the first.
        (vec!["bench", "sem", "-o", "same.svg", "--plot", "same.svg"], "-o and --plot both name same.svg"),
        (vec!["bench", "sem", "--plot", "x.svg", "--plot-histogram", "./x.svg"], "--plot and --plot-histogram both name ./x.svg"),
        (vec!["bench", "pair", "-o", "r.json", "--save", "r.json"], "-o and --save both name r.json"),
        // However spelled (the tests run in the crate's directory).
        (vec!["bench", "pair", "-o", "src/../r.json", "--save", "r.json"], "-o and --save both name r.json"),
        (vec!["bench", "sem", "--duty", "8"], "unexpected argument '--duty' found (see lockmeter bench sem --help)"),
        (vec!["bench", "tea"], "unrecognized subcommand 'tea' (see lockmeter bench --help)"),
        // A saved report is shown by lockmeter's own report and plot.
        (vec!["bench", "report", "x.json"], "unrecognized subcommand 'report'; a saved report is `lockmeter report FILE` (see lockmeter bench --help)"),
        (vec!["bench", "duty", "--seconds", "100000000000000000000"], "too long"),
        (vec!["bench", "duty", "-o", "/nonexistent-dir/out.json"], "cannot write /nonexistent-dir/out.json: No such file"),
        // Found before the run, which used to go to stdout after it.
        (vec!["bench", "duty", "-o", "/tmp"], "cannot write /tmp: it is a directory"),
        (vec!["bench", "dir", "--fs", "/nonexistent-dir"], "not a directory"),
        // The JSON and the table ran together on stdout.
        (vec!["bench", "sem", "--save", "/dev/stdout", "--format", "csv"], "--save /dev/stdout is where the report goes (stdout)"),
        (vec!["bench", "sem", "-o", "/dev/stderr", "--save", "/dev/fd/2"], "--save /dev/fd/2 is where the report goes (-o /dev/stderr)"),
        // Before the calibration, not as the first run's error (exit 1).
        (vec!["bench", "dir", "--fs", "/proc"], "--fs /proc: no file can be made there"),
        // A period the run holds few of (a 1 s one in 100 ms read 998%).
        (vec!["bench", "duty", "--period", "1000000", "--seconds", "50ms"], "--period 1000000 is longer than a hundredth of the run (50ms)"),
        (vec!["bench", "scorecard", "--seconds", "2ms"], "the scorecard's longest period, 40000 ns, is longer than a hundredth of the run (2ms): give --seconds 4ms or more"),
        (vec!["bench", "duty", "--threads", "2", "--plot-histogram", "h.svg", "--histogram-threads", "4"], "not one of the thread counts run (2)"),
        // Against the default counts too, before the run, not after it.
        (vec!["bench", "sem", "--quick", "--plot-histogram", "h.svg", "--histogram-threads", "3"], "not one of the thread counts run (1,4)"),
        (vec!["bench", "duty", "--histogram-threads", "4"], "give --plot-histogram FILE too"),
        (vec!["bench", "dir", "--fs", "/tmp", "--locks", "adaptive"], "--locks does not apply with --fs"),
        // Before the run: it used to fail after it.
        (vec!["bench", "dir", "--fs", "/tmp", "--plot-histogram", "h.svg"], "--plot-histogram has nothing to draw with --fs"),
        (vec!["bench", "pair", "--threads", "2"], "unexpected argument '--threads' found (see lockmeter bench pair --help)"),
        (vec!["bench", "pair", "--plot", "pair.svg"], "unexpected argument '--plot'"),
        (vec!["bench", "pair", "--pin"], "unexpected argument '--pin'"),
        (vec!["bench", "scorecard", "--locks", "adaptive"], "unexpected argument '--locks' found (see lockmeter bench scorecard --help)"),
        (vec!["bench", "dir", "--period", "1000"], "unexpected argument '--period'"),
    ] {
        let out = lockmeter().args(&args).output().unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
    }
    let out = lockmeter().args(["bench", "duty", "--quick", "--plot", "/tmp/plot.gif", "--locks", "adaptive"]).output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(err.contains("must end in .svg or .png"), "{err}");
}

#[test]
fn plot_redraws_a_saved_report_and_rejects_other_files() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lockmeter-replot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("sem.json");
    let out = lockmeter()
        .args(["bench", "sem", "--quick", "--locks", "adaptive,std", "--format", "json", "-o"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (svg, png) = (dir.join("again.svg"), dir.join("hist.png"));
    let out = lockmeter().arg("plot").arg(&json).arg("--throughput").arg(&svg).arg("--histogram").arg(&png).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_to_string(&svg).unwrap().contains("adaptive"));
    assert_eq!(&std::fs::read(&png).unwrap()[..4], b"\x89PNG");
    // Chosen locks only.
    let only = dir.join("only.svg");
    let out = lockmeter().arg("plot").arg(&json).arg("--histogram").arg(&only).args(["--locks", "std"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&only).unwrap();
    assert!(text.contains("std") && !text.contains("adaptive"), "only std is drawn");
    let out = lockmeter().arg("plot").arg(&json).arg("--histogram").arg(&only).args(["--locks", "ticket"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("'ticket' is not in the report"));
    // A link named as the plot is followed and stays a link.
    let (link, real) = (dir.join("link.svg"), dir.join("real.svg"));
    std::os::unix::fs::symlink("real.svg", &link).unwrap();
    let out = lockmeter().arg("plot").arg(&json).arg("--throughput").arg(&link).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link was replaced by the plot");
    assert!(std::fs::read_to_string(&real).unwrap().contains("adaptive"));
    // A link to a FIFO: the plot goes through it to its reader, and the
    // FIFO stays one (drawn beside the FIFO and renamed, it became a
    // regular file; through a link to /dev/null, as root, the device was
    // replaced).
    let (fifo, to_fifo) = (dir.join("plot.fifo"), dir.join("to-fifo.svg"));
    let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink(&fifo, &to_fifo).unwrap();
    let reader = std::thread::spawn({
        let fifo = fifo.clone();
        move || std::fs::read_to_string(fifo).unwrap()
    });
    let out = lockmeter().arg("plot").arg(&json).arg("--throughput").arg(&to_fifo).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // (Checked first: a reader of a replaced FIFO waits for ever.)
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&std::fs::metadata(&fifo).unwrap().file_type()), "the FIFO was replaced");
    assert!(reader.join().unwrap().contains("adaptive"), "the plot reached the FIFO's reader");
    // Both plots to one file: the second replaced the first.
    let twice = lockmeter().arg("plot").arg(&json).arg("--throughput").arg(&svg).arg("--histogram").arg(dir.join(".").join("again.svg")).output().unwrap();
    assert_eq!(twice.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&twice.stderr).contains("--throughput and --histogram both name"), "{}", String::from_utf8_lossy(&twice.stderr));
    // Bad input is a one-line usage error (exit 2), found before drawing:
    // a plot file nobody can write or draw, a pair report (nothing to
    // plot against threads), a truncated report (not a panic).
    let usage_error = |args: &[&std::ffi::OsStr], needle: &str| {
        let out = lockmeter().arg("plot").args(args).output().unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    };
    let nowhere = dir.join("no-such-dir").join("t.svg");
    usage_error(&[json.as_ref(), "--throughput".as_ref(), nowhere.as_ref()], "no-such-dir does not exist");
    usage_error(&[json.as_ref(), "--throughput".as_ref(), dir.join("t.pdf").as_ref()], "must end in .svg or .png");
    usage_error(&[json.as_ref(), "--throughput".as_ref(), svg.as_ref(), "--locks".as_ref(), "".as_ref()], "--locks: no locks given");
    // A name lost between two commas, as every list says it.
    usage_error(&[json.as_ref(), "--throughput".as_ref(), svg.as_ref(), "--locks".as_ref(), "adaptive,,glibc".as_ref()], "has an empty item");
    usage_error(&[json.as_ref(), "--throughput".as_ref(), svg.as_ref(), "--threads".as_ref(), "2".as_ref()], "give --histogram FILE too");
    // A count the report does not have: a usage error, as bench's own
    // --histogram-threads (it was exit 1).
    usage_error(&[json.as_ref(), "--histogram".as_ref(), svg.as_ref(), "--threads".as_ref(), "3".as_ref()], "--threads 3 is not one of the report's thread counts");
    // The system's reason without its errno number.
    let missing = dir.join("missing.json");
    usage_error(&[missing.as_ref(), "--throughput".as_ref(), svg.as_ref()], "No such file or directory");
    let out = lockmeter().arg("plot").arg(&missing).arg("--throughput").arg(&svg).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("os error"));
    let pair = dir.join("pair.json");
    let out = lockmeter().args(["bench", "pair", "--quick", "--format", "json", "-o"]).arg(&pair).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    usage_error(&[pair.as_ref(), "--throughput".as_ref(), svg.as_ref()], "a pair report has nothing to plot");
    // A report of no points (it drew a title over nothing, exit 0).
    let mut empty: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    empty["points"] = serde_json::json!([]);
    let empty_file = dir.join("empty.json");
    std::fs::write(&empty_file, empty.to_string()).unwrap();
    usage_error(&[empty_file.as_ref(), "--throughput".as_ref(), svg.as_ref()], "nothing to draw: the report has no points");
    let bytes = std::fs::read(&json).unwrap();
    std::fs::write(&json, &bytes[..bytes.len() / 2]).unwrap();
    usage_error(&[json.as_ref(), "--throughput".as_ref(), svg.as_ref()], "not a lockmeter bench JSON report");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The variants run beside their plain locks, named as asked; adaptive's
/// spins say who decided them.
#[test]
fn variants_run_beside_their_locks() {
    let report = run_json(&["bench", "sem", "--locks", "adaptive,adaptive-nobail,ticket,ticket-nobackoff", "--threads", "4"]);
    check_points(&report, "sem", 4, &[4]);
    let names: Vec<&str> = report["points"].as_array().unwrap().iter().map(|p| p["lock"].as_str().unwrap()).collect();
    assert_eq!(names, ["adaptive", "adaptive-nobail", "ticket", "ticket-nobackoff"]);
    for p in report["points"].as_array().unwrap() {
        if let Some(spins) = p.get("spins_on_owner") {
            assert!(p["lock"].as_str().unwrap().starts_with("adaptive"), "only adaptive spins on an owner: {p}");
            assert_eq!(spins["decided_by_table"], 0, "no table was asked for: {p}");
        }
    }
}

#[test]
fn each_workload_has_its_own_help_with_only_its_options() {
    let help = |workload: &str| {
        let out = lockmeter().args(["bench", workload, "--help"]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{workload}");
        String::from_utf8(out.stdout).unwrap()
    };
    let duty = help("duty");
    assert!(duty.starts_with("Seed 001's futextest"), "{duty}");
    assert!(duty.contains("--period") && duty.contains("--duty") && !duty.contains("--fs"), "{duty}");
    let dir = help("dir");
    assert!(dir.contains("--fs") && !dir.contains("--period"), "{dir}");
    let pair = help("pair");
    assert!(pair.contains("tas-floor") && pair.contains("[default: 7"), "{pair}");
    assert!(!pair.contains("--threads") && !pair.contains("--plot") && !pair.contains("--pin"), "{pair}");
    let scorecard = help("scorecard");
    assert!(scorecard.contains("no†") && scorecard.contains("--threads") && !scorecard.contains("--locks"), "{scorecard}");
    // The overview names every workload.
    let out = lockmeter().args(["bench", "--help"]).output().unwrap();
    let overview = String::from_utf8(out.stdout).unwrap();
    for workload in ["duty", "sem", "dir", "pair", "scorecard"] {
        assert!(overview.contains(&format!("  {workload} ")), "{workload}:\n{overview}");
    }
}
