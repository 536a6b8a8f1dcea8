//! `lockmeter torture`: every real algorithm passes, the busted lock is
//! caught, and the same torture through the pthread API passes under
//! replace mode for every algorithm.

use std::path::{Path, PathBuf};
use std::process::Command;

fn lockmeter() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockmeter"))
}

#[test]
fn every_algorithm_survives_a_short_torture() {
    let output = lockmeter().args(["torture", "--seconds", "300ms", "--threads", "2,8", "--seed", "11"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    for algorithm in ["adaptive", "futex", "futex-tid", "pi", "ticket", "mcs", "spin"] {
        let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with(&format!("{algorithm} "))).collect();
        assert_eq!(rows.len(), 2, "{algorithm} at 2 and 8 threads:\n{stdout}");
        assert!(rows.iter().all(|r| r.ends_with("  ok")), "{stdout}");
    }
}

#[test]
fn the_busted_lock_fails_and_names_the_violation_and_seed() {
    for seed in ["1", "2", "3"] {
        let output = lockmeter().args(["torture", "--lock", "busted", "--seconds", "3s", "--seed", seed]).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(&format!("(seed {seed})")) && stderr.contains("exclusion"), "{stderr}");
    }
}

/// A row comes as its run ends, not after the last run (minutes of
/// silence, and ^C lost the rows done).
#[test]
fn each_row_comes_as_its_run_ends() {
    use std::io::BufRead as _;
    let mut child = lockmeter()
        .args(["torture", "--lock", "adaptive,futex,ticket", "--threads", "2", "--seconds", "1s", "--seed", "3"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.by_ref().map(Result::unwrap).find(|l| l.starts_with("adaptive ")).expect("adaptive's row");
    let row_came = std::time::Instant::now();
    assert!(first.ends_with("  ok"), "{first}");
    assert!(child.wait().unwrap().success());
    // The two runs after it last 2 s.
    let before_the_end = row_came.elapsed();
    assert!(before_the_end > std::time::Duration::from_millis(1500), "adaptive's row came {before_the_end:?} before the end");
    assert_eq!(lines.map(Result::unwrap).filter(|l| l.starts_with("futex ") || l.starts_with("ticket ")).count(), 2);
}

/// A stop ends the run in progress at once: lockmeter says so and dies
/// of the signal, with the rows of the runs that finished (killed
/// outright, it left its progress line and no word).
#[test]
fn a_stop_ends_the_torture_at_once_and_says_so() {
    use std::os::unix::process::ExitStatusExt as _;
    let child = lockmeter()
        .args(["torture", "--lock", "adaptive,ticket", "--seconds", "10"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let stopped = std::time::Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let output = child.wait_with_output().unwrap();
    assert!(stopped.elapsed() < std::time::Duration::from_secs(5), "took {:?} after the stop", stopped.elapsed());
    assert_eq!(output.status.signal(), Some(libc::SIGTERM));
    assert!(String::from_utf8_lossy(&output.stderr).contains("torture interrupted"), "{}", String::from_utf8_lossy(&output.stderr));
}

/// A stop keeps the runs that ended in JSON too (nothing was printed,
/// and the message said they were above), and one asked while
/// thousands of spinning threads start ends it at once (the starting
/// took a minute first).
#[test]
fn a_stop_keeps_the_json_of_the_runs_that_ended_and_cuts_the_starting_short() {
    use std::os::unix::process::ExitStatusExt as _;
    let stop_after = |args: &[&str], after_ms: u64| {
        let child = lockmeter().args(args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(after_ms));
        let stopped = std::time::Instant::now();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.signal(), Some(libc::SIGINT));
        (output, stopped.elapsed())
    };
    let (output, _) = stop_after(&["torture", "--lock", "futex,adaptive,mcs", "--seconds", "300ms", "--threads", "2", "--format", "json"], 800);
    let outcomes: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));
    let ended = outcomes.as_array().unwrap().len();
    assert!((1..3).contains(&ended), "{ended} runs kept");
    // The threads started before the stop still spin to their end: 0.2-1.4
    // s on an idle machine, 9.6 s once beside this file's other tests;
    // waiting for every start took over 30 s at 4096 threads.
    let (output, took) = stop_after(&["torture", "--lock", "spin", "--seconds", "60s", "--threads", "4096"], 300);
    assert!(took < std::time::Duration::from_secs(20), "took {took:?} after the stop: {}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn json_output_has_one_outcome_per_run() {
    let output = lockmeter()
        .args(["torture", "--lock", "adaptive,ticket", "--seconds", "200ms", "--threads", "3", "--format", "json", "--seed", "5"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let outcomes: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let outcomes = outcomes.as_array().unwrap();
    assert_eq!(outcomes.len(), 2);
    for outcome in outcomes {
        assert_eq!(outcome["threads"], 3);
        assert_eq!(outcome["seed"], 5);
        assert!(outcome["violation"].is_null());
        assert!(outcome["acquisitions"].as_u64().unwrap() > 0 && outcome["tokens"].as_u64().unwrap() > 0);
        assert!(outcome["spin"].is_u64() && outcome["sleep"].is_u64() && outcome["spread"].is_f64());
    }
}

fn c_torture() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_c_torture).clone()
}

fn build_c_torture() -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/torture.c");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lockmeter-torture-test.{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let binary = dir.join("torture");
    let status = Command::new("gcc").args(["-O1", "-pthread", "-Wall", "-Wextra", "-Werror", "-o"]).arg(&binary).arg(&source).status().unwrap();
    assert!(status.success());
    binary
}

#[test]
fn the_pthread_torture_passes_under_every_served_algorithm() {
    let binary = c_torture();
    for algorithm in ["adaptive", "futex", "futex-tid", "pi", "ticket", "mcs", "spin"] {
        let output = lockmeter()
            .args(["run", "--lock", algorithm, "--min-wait", "60min", "--"])
            .arg(&binary)
            .args(["6", "0.3", "17"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success() && stdout.starts_with("torture: ok"), "{algorithm}: {stdout}{}", String::from_utf8_lossy(&output.stderr));
    }
}

#[test]
fn busted_never_serves_a_program() {
    let output = lockmeter().args(["run", "--lock", "busted", "--", "true"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("deliberately broken"));
    let library = Path::new(env!("CARGO_BIN_EXE_lockmeter")).parent().unwrap().join("liblockmeter.so");
    let output = Command::new(c_torture()).env("LD_PRELOAD", library).env("LOCKMETER_LOCK", "busted").output().unwrap();
    assert_eq!(output.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&output.stderr).contains("never serves a program"));
}
