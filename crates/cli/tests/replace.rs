//! Replace mode: the conformance suite (tests/c/conformance.c) under
//! glibc's own locks and under every algorithm, through LD_PRELOAD alone
//! and through `lockmeter run --lock`; and the profile a served program
//! gets.

mod common;

use common::{compile, library, scratch, ALGORITHMS};
use lockmeter_stats::profile::Profile;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn conformance() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| compile("conformance"))
}

fn subjects() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| compile("subjects"))
}

fn assert_conforms(output: &std::process::Output, what: &str) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // (The status: a crash leaves no message, and stdout's buffer is lost;
    // the suite's sections on stderr say where it stopped.)
    assert!(output.status.success() && stdout.starts_with("ok: "), "{what}: {}: {stdout}{stderr}", output.status);
}

#[test]
fn the_suite_holds_for_glibc_itself() {
    let output = Command::new(conformance()).output().unwrap();
    assert_conforms(&output, "glibc");
}

/// Profiled, glibc's locks keep glibc's semantics.
#[test]
fn the_suite_holds_for_glibc_profiled() {
    let output = Command::new(env!("CARGO_BIN_EXE_lockmeter")).args(["run", "-o", "/dev/null", "--"]).arg(conformance()).output().unwrap();
    assert_conforms(&output, "glibc, profiled");
}

/// Preloaded with neither mode (as a program linked with the library for
/// its C ABI runs), the mutex calls go to glibc's own functions.
#[test]
fn the_suite_holds_for_glibc_with_the_library_idle() {
    let output = Command::new(conformance())
        .env("LD_PRELOAD", library())
        .env_remove("LOCKMETER_LOCK")
        .env_remove("LOCKMETER_OUTPUT")
        .output()
        .unwrap();
    assert_conforms(&output, "glibc, library idle");
}

#[test]
fn every_algorithm_serves_pthreads_conformantly() {
    for algorithm in ALGORITHMS {
        let output = Command::new(conformance())
            .env("LD_PRELOAD", library())
            .env("LOCKMETER_LOCK", algorithm)
            .output()
            .unwrap();
        assert_conforms(&output, algorithm);
    }
}

#[test]
fn a_child_forked_before_any_lock_holds_its_locks_under_its_own_id() {
    // The first lock is taken in the fork's own prepare handler. The
    // thread-id cache's first read registers the handler that clears it in
    // a child, and one registered inside a fork misses that fork: the child
    // kept the parent's id, and under `pi` its lock word named the parent
    // and its unlock aborted.
    for algorithm in ALGORITHMS {
        let mut child = Command::new(subjects())
            .arg("fork_first")
            .env("LD_PRELOAD", library())
            .env("LOCKMETER_LOCK", algorithm)
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("{algorithm}: the child hung");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(status.success(), "{algorithm}: {status}");
    }
}

/// What the subject program says on stdout run with `args` (within a
/// minute, and successfully), served by `algorithm` or by glibc (None).
fn subject_says(args: &[&str], algorithm: Option<&str>) -> String {
    let mut command = Command::new("timeout");
    command.arg("60").arg(subjects()).args(args);
    if let Some(algorithm) = algorithm {
        command.env("LD_PRELOAD", library()).env("LOCKMETER_LOCK", algorithm);
    }
    let output = command.output().unwrap();
    // (The status: a crash leaves no message.)
    assert!(output.status.success(), "{algorithm:?}: {}: {}{}", output.status, String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// Destroying a condvar a thread still waits on, never woken (undefined in
/// POSIX), blocks the destroying thread, as glibc's destroy does, without
/// keeping a CPU busy: it yielded in a loop for ever (about 500 ms of CPU
/// in the subject's 500 ms).
#[test]
fn destroying_a_condvar_with_a_waiter_never_woken_blocks_without_spinning() {
    for algorithm in std::iter::once(None).chain(ALGORITHMS.iter().map(Some)) {
        let says = subject_says(&["destroy_waited"], algorithm.copied());
        let ms: u64 = says
            .strip_prefix("destroying thread used ")
            .and_then(|rest| rest.strip_suffix(" ms of CPU"))
            .and_then(|ms| ms.parse().ok())
            .unwrap_or_else(|| panic!("{algorithm:?}: {says}"));
        assert!(ms < 100, "{algorithm:?}: the destroying thread used {ms} ms of CPU in 500 ms");
    }
}

/// Where a sandbox refuses the futex's wall-clock timeouts (a seccomp
/// filter answering ENOSYS), a condvar's timed wait on CLOCK_REALTIME
/// converts its deadline to the monotonic clock and times out once, on
/// time: taking the failed system call for a wake-up, it returned 0 at
/// once, and a program's wait loop spun past its deadline (millions of
/// calls in 2 s). glibc aborts there, so only the served waits are run.
#[test]
fn a_sandbox_refusing_wall_clock_futex_timeouts_still_times_out() {
    for algorithm in ALGORITHMS {
        let says = subject_says(&["realtime_futex_refused"], Some(algorithm));
        let ms: u64 = says
            .strip_prefix("ETIMEDOUT after 1 calls, ")
            .and_then(|rest| rest.strip_suffix(" ms"))
            .and_then(|ms| ms.parse().ok())
            .unwrap_or_else(|| panic!("{algorithm}: {says}"));
        assert!((195..1000).contains(&ms), "{algorithm}: a 200 ms wait timed out after {ms} ms");
    }
}

/// `pthread_cond_destroy` is not a cancellation point: a thread cancelled
/// while its destroy waits for a woken waiter to leave (that waiter in a
/// signal handler for 1 s) comes out of the destroy and is cancelled at
/// its next cancellation point. The destroy's nap was glibc's nanosleep,
/// a cancellation point, and the thread was cancelled inside it.
#[test]
fn a_thread_waiting_in_condvar_destroy_is_not_cancelled_there() {
    for algorithm in std::iter::once(None).chain(ALGORITHMS.iter().map(Some)) {
        let says = subject_says(&["destroy_cancelled"], algorithm.copied());
        assert!(says.starts_with("destroy returned 1,"), "{algorithm:?}: {says}");
    }
}

/// A thread cancelled at any one instruction of a condvar wait (each
/// trapped in turn: see the subject) is cancelled, with the mutex held in
/// its cleanup handler, and the program lives on. The served wait read
/// `errno` through a `std::io::Error` that it dropped, while asynchronous
/// cancellation was on: a cancellation landing in the drop glue, on an
/// instruction its exception table does not list, could not unwind, and
/// glibc aborted the program without a word (the conformance suite's
/// `cancellation_anywhere_in_a_wait`, 500 cancellations at random, died
/// of SIGABRT now and then, under any algorithm; this subject aborted
/// under every one).
#[test]
fn a_cancellation_at_any_instruction_of_a_condvar_wait_unwinds() {
    for algorithm in std::iter::once(None).chain(ALGORITHMS.iter().map(Some)) {
        let says = subject_says(&["cancel_stepped"], algorithm.copied());
        let points = says.split(" of ").nth(1).and_then(|rest| rest.split(',').next()).and_then(|n| n.parse::<u32>().ok());
        let points = points.unwrap_or_else(|| panic!("{algorithm:?}: {says}"));
        assert!(points > 0 || !cfg!(target_arch = "x86_64"), "{algorithm:?}: {says}");
        assert_eq!(says, format!("cancelled {points} of {points}, held {points}"), "{algorithm:?}");
    }
}

/// A mutex held across two forks, untouched in the child between them (a
/// daemon's double fork), is still held in the grandchild, as glibc's
/// are: another thread finds all three types busy (it found them free).
/// The forking thread then unlocks them (glibc's error-checking and
/// recursive ones still name its id in the grandparent, and refuse it,
/// EPERM), and they are free.
#[test]
fn a_mutex_held_across_two_forks_stays_held() {
    let run = |algorithm| subject_says(&["fork_twice"], algorithm);
    assert_eq!(run(None), "busy 7, unlocks 0 1 1 1, then busy 6", "glibc");
    for algorithm in ALGORITHMS {
        assert_eq!(run(Some(algorithm)), "busy 7, unlocks 0 0 0 0, then busy 0", "{algorithm}");
    }
}

/// A fork while another thread makes a child's first use of its mutexes
/// (bringing each over from the parent, held by the forking thread): every
/// mutex the forking thread held is still held in the grandchild. A fork
/// that landed mid-way left the grandchild a mutex marked as being brought
/// over by a thread it does not have, which it reset to free: 20-30 rounds
/// of 200 found one free under `futex`, `ticket`, `mcs` and `spin`.
#[test]
fn a_fork_amid_another_threads_first_uses_keeps_the_held_mutexes_held() {
    let run = |algorithm| subject_says(&["fork_mid_refresh", "100"], algorithm);
    assert_eq!(run(None), "free 0 in 0 of 100 rounds", "glibc");
    for algorithm in ALGORITHMS {
        assert_eq!(run(Some(algorithm)), "free 0 in 0 of 100 rounds", "{algorithm}");
    }
}

/// A library's own fork handlers, registered from its constructor before
/// lockmeter's: its child handler unlocks, in the child, before lockmeter
/// has started the child's generation. Under `pi` the word still named the
/// thread's id in the parent, the kernel refused the unlock (EPERM), and
/// the child's next lock waited for ever.
#[test]
fn a_library_that_locks_across_fork_from_its_constructor_works_in_the_child() {
    let dir = scratch("atfork");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/atfork.c");
    let gcc = |args: &[&str], libraries: &[&str]| {
        let status =
            Command::new("gcc").args(["-O1", "-pthread", "-Wall", "-Wextra", "-Werror"]).args(args).arg(&source).args(libraries).status().unwrap();
        assert!(status.success(), "atfork.c compiles: {args:?}");
    };
    let (shared, program) = (dir.join("libatfork.so"), dir.join("atfork"));
    gcc(&["-shared", "-fPIC", "-DATFORK_LIBRARY", "-o", shared.to_str().unwrap()], &[]);
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    gcc(&["-o", program.to_str().unwrap()], &[&format!("-L{}", dir.display()), &rpath, "-latfork"]);
    for algorithm in ALGORITHMS {
        let child = Command::new("timeout")
            .args(["10"])
            .arg(&program)
            .env("LD_PRELOAD", library())
            .env("LOCKMETER_LOCK", algorithm)
            .output()
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&child.stdout), String::from_utf8_lossy(&child.stderr));
        assert!(child.status.success(), "{algorithm}: {}\n{stdout}{stderr}", child.status);
        assert_eq!(stdout, "parent 0\nchild 0\nparent after child 0, child status 0\n", "{algorithm}: {stderr}");
        assert!(stderr.is_empty(), "{algorithm}: {stderr}");
    }
}

/// `--no-profile` serves CMD's mutexes as `--lock` does and records
/// nothing: no report, CMD's output and status only (recording cost a
/// served `cache` a quarter of its operations a second).
#[test]
fn lockmeter_run_lock_no_profile_serves_and_reports_nothing() {
    let run = |options: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_lockmeter")).arg("run").args(options).arg("--").arg(subjects()).arg("lock_word").output().unwrap()
    };
    let served = run(&["--lock", "adaptive", "--no-profile"]);
    assert_eq!(served.status.code(), Some(3), "CMD's status");
    assert_eq!(String::from_utf8_lossy(&served.stdout), "tid\n", "the mutex's word names its owner: served");
    assert!(served.stderr.is_empty(), "no report: {}", String::from_utf8_lossy(&served.stderr));
    let profiled = run(&["--lock", "adaptive"]);
    assert_eq!(String::from_utf8_lossy(&profiled.stdout), "tid\n");
    assert!(String::from_utf8_lossy(&profiled.stderr).contains("UTIL"), "profiled, the report");
    let glibc = run(&[]);
    assert_eq!(String::from_utf8_lossy(&glibc.stdout), "1\n", "glibc's own mutex");
    // Without an algorithm there is nothing to serve, and nothing asked;
    // nor are the options that shape a profile.
    assert_eq!(run(&["--no-profile"]).status.code(), Some(2));
    for shaping in [["--sort", "hold"], ["--min-wait", "1ms"], ["--format", "json"]] {
        let refused = run(&["--lock", "adaptive", "--no-profile", shaping[0], shaping[1]]);
        assert_eq!(refused.status.code(), Some(2), "{shaping:?}");
    }
}

/// Served and profiled: the report says how each wait was spent, and a
/// lock that never spins (futex) shows no spins. (A wait whose lock was
/// free again at the algorithm's first try is neither: it used to count
/// as a spin, and `--lock futex` showed thousands.)
#[test]
fn lockmeter_run_lock_serves_and_profiles() {
    for algorithm in ["ticket", "futex"] {
        let dir = scratch(&format!("run-{algorithm}"));
        let output = Command::new(env!("CARGO_BIN_EXE_lockmeter"))
            .args(["run", "--lock", algorithm, "--format", "json", "-o"])
            .arg(dir.join("p.json"))
            .arg("--")
            .arg(conformance())
            .output()
            .unwrap();
        assert_conforms(&output, &format!("lockmeter run --lock {algorithm}"));
        let profile = Profile::load(&dir.join("p.json")).unwrap();
        assert_eq!(profile.mode, format!("replace:{algorithm}"));
        let mutexes: Vec<_> = profile.used_locks().filter(|l| l.kind == lockmeter_stats::profile::Kind::Mutex).collect();
        assert!(mutexes.iter().any(|l| l.name == "static_adaptive"), "served static mutexes are profiled");
        let (mut spun, mut slept) = (0, 0);
        for lock in &mutexes {
            let c = &lock.counters;
            if lock.name.starts_with("robust") {
                continue;
            }
            let (spin, sleep) = (c.spin.expect("a served mutex knows how it waited"), c.sleep.unwrap());
            if algorithm == "futex" {
                assert_eq!(spin, 0, "{}: futex never spins", lock.name);
            }
            spun += spin;
            slept += sleep;
        }
        // The conformance program contends: ticket's waiters spin for
        // their turn and some sleep (how many depends on what else the
        // machine runs), futex's all sleep.
        match algorithm {
            "ticket" => assert!(spun > 0 && slept > 0, "ticket: {spun} spun, {slept} slept"),
            _ => assert!(slept > 0, "futex: {slept} slept"),
        }
    }
}

#[test]
fn an_unknown_algorithm_fails_fast() {
    let output = Command::new(conformance()).env("LD_PRELOAD", library()).env("LOCKMETER_LOCK", "bogus").output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(127), "{stderr}");
    assert_eq!(stderr.lines().count(), 1);
    assert!(stderr.contains("LOCKMETER_LOCK=\"bogus\" is not an algorithm"), "{stderr}");
    assert!(output.stdout.is_empty(), "the program did not run on glibc's locks instead");
}

#[test]
fn advise_compares_the_algorithms_and_draws_the_ratios() {
    let dir = scratch("advise");
    let subjects = subjects();
    let plot = dir.join("ratios.svg");
    let output = Command::new(env!("CARGO_BIN_EXE_lockmeter"))
        .args(["advise", "--repeat", "2", "--locks", "adaptive,ticket", "--metric", "(never printed)?", "--plot"])
        .arg(&plot)
        .arg("--")
        .arg(subjects)
        .args(["trylock"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // A metric that matches the empty string is not a number.
    assert_eq!(output.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("not a number"), "{stderr}");

    let output = Command::new(env!("CARGO_BIN_EXE_lockmeter"))
        .args(["advise", "--repeat", "2", "--locks", "adaptive,ticket", "--plot"])
        .arg(&plot)
        .arg("--")
        .arg(subjects)
        .args(["trylock"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("Profiled once first: ") && stdout.contains(" pthread lock acquisitions, "), "{stdout}");
    for row in ["glibc ", "adaptive ", "ticket "] {
        assert!(stdout.lines().any(|l| l.starts_with(row)), "a row for {row}:\n{stdout}");
    }
    assert!(
        stdout.contains("Recommendation:") || stdout.contains("No recommendation") || stdout.contains("Keep glibc's locks"),
        "{stdout}"
    );
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.contains("<svg") && svg.contains("adaptive"), "the plot names the variants");
}

/// A metric of 0 under glibc leaves nothing to divide by: one line and
/// exit 1 (the ratios read NaN, and the verdict said 0 of 0 rounds).
#[test]
fn advise_refuses_a_metric_it_cannot_compare() {
    let output = Command::new(env!("CARGO_BIN_EXE_lockmeter"))
        .args(["advise", "--repeat", "1", "--locks", "adaptive", "--metric", "rate: ([0-9.]+)", "--"])
        .args(["sh", "-c", "if [ -n \"$LOCKMETER_LOCK\" ]; then echo rate: 5; else echo rate: 0; fi"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--metric read \"0\" under glibc") && stderr.lines().count() == 1, "{stderr}");
}

#[test]
fn advise_stops_on_a_failing_program() {
    let output = Command::new(env!("CARGO_BIN_EXE_lockmeter"))
        .args(["advise", "--repeat", "1", "--locks", "adaptive", "--"])
        .arg(subjects())
        .args(["status", "3"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains("exit status 3") && stderr.lines().count() == 1, "{stderr}");
}
