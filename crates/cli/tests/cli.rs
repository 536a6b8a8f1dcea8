//! The `lockmeter` binary as a user runs it.

use std::process::Command;

fn lockmeter() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockmeter"))
}

#[test]
fn help_describes_the_product_and_lists_every_algorithm() {
    let out = lockmeter().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Measure lock contention"), "{text}");
    for name in ["adaptive", "futex", "futex-tid", "pi", "ticket", "mcs", "spin"] {
        assert!(text.contains(&format!("  {name} ")), "--help lacks {name}:\n{text}");
    }
    assert!(text.contains("demo"));
}

#[test]
fn algorithms_lists_names_and_advice() {
    let out = lockmeter().arg("algorithms").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 7);
    assert!(text.lines().next().unwrap().starts_with("adaptive"));
}

/// A stdout that refuses the results (a full disk) is an error line and
/// exit 1, not a panic (exit 101), whichever command prints.
#[test]
fn a_stdout_that_cannot_be_written_is_an_error_not_a_panic() {
    for args in [vec!["algorithms"], vec!["bench", "sem", "--locks", "glibc", "--threads", "1", "--seconds", "20ms", "--repeat", "1"]] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let out = lockmeter().args(&args).stdout(full).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.lines().any(|l| l == "lockmeter: error: writing to stdout: No space left on device"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// A stdout closed at start (`>&-`) is an error, not a silent success:
/// the runtime reopens it on /dev/null, and every result went there with
/// exit 0. A bench says so before its run; a redirection to /dev/null
/// is the user's choice and stands (a first check, by /dev/null opened
/// read-write, refused Python's DEVNULL).
#[test]
fn a_closed_stdout_is_an_error_and_dev_null_is_not() {
    use std::os::unix::process::CommandExt;
    let closed = |args: &[&str]| {
        let mut command = lockmeter();
        command.args(args);
        // SAFETY: close is async-signal-safe; the child's own stdout.
        unsafe {
            command.pre_exec(|| {
                libc::close(1);
                Ok(())
            })
        };
        command.output().unwrap()
    };
    for args in [&["algorithms"][..], &["--help"], &["bench", "sem", "--help"], &["--version"]] {
        let out = closed(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("lockmeter: error: writing to stdout: Bad file descriptor"), "{args:?}: {err}");
    }
    let out = closed(&["bench", "pair", "--quick"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end(), "lockmeter: error: stdout is closed: give -o FILE for the report", "before the run");
    let out = closed(&["bench", "pair", "--quick", "-o", "/dev/stdout"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end(), "lockmeter: error: stdout is closed: give -o FILE for the report", "before the run");
    // -o /dev/null is the device, not the closed stdout the runtime put
    // it on (it was refused); `run` says so before CMD runs, and CMD
    // gets the closed stdout too (not the runtime's /dev/null).
    assert!(closed(&["bench", "pair", "--quick", "-o", "/dev/null"]).status.success());
    let out = closed(&["run", "-o", "/dev/stdout", "--", "sh", "-c", "echo ran >&2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!((out.status.code(), err.trim_end()), (Some(2), "lockmeter: error: cannot write /dev/stdout: stdout is closed"), "before CMD ran");
    let scratch = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("closed-stdout-{}.json", std::process::id()));
    let out = closed(&["run", "-o", scratch.to_str().unwrap(), "--", "sh", "-c", "echo hi"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("I/O error") || err.contains("Bad file descriptor"), "CMD's echo fails as without lockmeter: {err}");
    let _ = std::fs::remove_file(&scratch);
    // /dev/null opened by the caller, write-only or read-write (Python's
    // DEVNULL), is a stdout.
    for read in [false, true] {
        let null = std::fs::OpenOptions::new().read(read).write(true).open("/dev/null").unwrap();
        assert!(lockmeter().arg("algorithms").stdout(null).status().unwrap().success(), "read-write {read}");
    }
}

#[test]
fn bad_input_is_one_line_and_non_zero() {
    let out = lockmeter().args(["demo", "--run", "soon"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("'soon' is not a duration"), "{err}");
    let out = lockmeter().arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A usage error names what is wrong: the missing argument, the
/// mistyped option (not run as the command: it used to come back as
/// "--frame: command not found", exit 127); with no command at all, the
/// help, on stderr, and still exit 2.
#[test]
fn usage_errors_name_what_is_missing_or_wrong() {
    let one_line = |args: &[&str], needle: &str| {
        let out = lockmeter().args(args).output().unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    };
    one_line(&["report"], "not provided: <FILES>");
    one_line(&["run", "--frame", "3", "--", "true"], "unexpected argument '--frame'");
    one_line(&["advise", "--bogus", "--", "true"], "unexpected argument '--bogus'");
    // The help that has the rest is the subcommand's own.
    one_line(&["run", "--bogus", "--", "true"], "(see lockmeter run --help)");
    one_line(&["bogus"], "(see lockmeter --help)");
    // What clap's message says below its first line stays on the line:
    // the values allowed, and what was meant.
    one_line(&["run", "--format", "jsn", "--", "true"], "; possible values: table, json, csv, folded, pprof, flamegraph; did you mean 'json' (see");
    one_line(&["run", "--frame", "3", "--", "true"], "did you mean '--frames'");
    // An option of any value given none lists no values ("possible values: ").
    one_line(&["run", "-o", "", "--", "true"], "but none was supplied (see lockmeter run --help)");
    one_line(&["bnch"], "unrecognized subcommand 'bnch'; did you mean 'bench' (see lockmeter --help)");
    // Bounds no run could honour or report (1us read "stalled 0 ms"; a
    // 0 s sample printed "0 ns per run" as if measured).
    one_line(&["torture", "--stall", "1us"], "must be 1ms or more");
    one_line(&["oncpu", "status", "--sample", "0s"], "must be 1ms or more");
    one_line(&["oncpu", "status", "--sample", "1ns"], "must be 1ms or more");
    let out = lockmeter().output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8(out.stderr).unwrap().contains("Usage: lockmeter <COMMAND>"));
    // So does a bench without its workload: the help lists them.
    let out = lockmeter().arg("bench").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("Usage: lockmeter bench <COMMAND>") && err.contains("  scorecard "), "{err}");
    // A plot file that cannot be written is found before the work: the
    // program (10 s of sleep a round) never runs. (advise used to run
    // every round, warn and exit 0; the demo to run, then fail.)
    let started = std::time::Instant::now();
    one_line(&["advise", "--plot", "/no-such-dir/a.svg", "--", "sleep", "10"], "directory /no-such-dir does not exist");
    one_line(&["advise", "--plot", "ratios.txt", "--", "sleep", "10"], "must end in .svg or .png");
    // A negative figure is a bad value, not an unknown option (whose tip,
    // '-- -1', would have made it CMD).
    one_line(&["advise", "--repeat", "-1", "--", "sleep", "10"], "invalid value '-1' for '--repeat <REPEAT>': not a count (a whole number without a sign)");
    one_line(&["torture", "--seconds", "-1s"], "'-1s' is not a duration");
    one_line(&["demo", "--run", "1ns"], "must be 1ms or more");
    one_line(&["demo", "--quick", "--plot", "/no-such-dir/x.svg"], "directory /no-such-dir does not exist");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "checked before running");
    // What follows CMD is CMD's, dashes and all.
    let out = lockmeter().args(["run", "-o", "/dev/null", "--", "sh", "-c", "exit 3", "--flag"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
}

/// The demo runs end to end and shows every section: pair costs, both
/// contention scenarios with every lock, our reports and the histogram.
#[test]
fn quick_demo_shows_every_section() {
    let plot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lockmeter-demo-{}.svg", std::process::id()));
    let out = lockmeter().args(["demo", "--quick", "--plot"]).arg(&plot).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let svg = std::fs::read_to_string(&plot).expect("the demo draws its plot");
    assert!(svg.contains("<svg") && svg.contains("parking_lot"));
    std::fs::remove_file(&plot).unwrap();
    // The advise section's plot, beside it, when that section ran.
    let _ = std::fs::remove_file(plot.with_file_name(format!("lockmeter-demo-{}-advise.svg", std::process::id())));
    for section in [
        "1. Uncontended lock+unlock pair",
        "2. Contention: microsecond critical sections",
        "3. The lockmeter report of our locks, microsecond",
        "4. Contention: oversubscribed",
        "5. The lockmeter report of our locks, oversubscribed",
        "6. Wait histogram",
        "7. Scaling: seed 003's semaphore test",
        "8. Profiling an unmodified program",
        "9. Curing it?",
        "10. A hung program",
        "11. Reliability",
        "12. Kernel-assisted spinning",
    ] {
        assert!(text.contains(section), "missing '{section}':\n{text}");
    }
    for lock in ["adaptive", "ticket", "mcs", "glibc-adaptive", "glibc-pi", "parking_lot", "std", "tas-floor"] {
        assert!(text.contains(lock), "missing {lock}");
    }
    assert!(text.contains("UTIL") && text.contains("NOWAIT") && text.contains("#occurrence"));
    // The hung program's report says what it was stuck on.
    // (The held time shows when that hold was in the timed sample.)
    let now = text.lines().find(|l| l.trim_start().starts_with("now: held by 1 thread")).unwrap_or_default();
    assert!(text.contains("written at signal SIGALRM") && now.contains("; 4 threads waiting ("), "{text}");
    // The advise section names the program as the reader knows it, not the
    // temporary copy the demo deletes when it ends.
    assert!(text.contains("lockmeter advise: cache 4 100000 ("), "advise names the bundled program:\n{text}");
    assert!(!text.contains("-- /"), "no temporary path to copy:\n{text}");
    // And says how to build it, the demo's copy being gone.
    assert!(text.contains("(`cache` is built from crates/cli/demo/cache.c: cc -O2 -pthread -o cache crates/cli/demo/cache.c)"), "{text}");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert!(text.contains("adaptive-oncpu"), "root runs adaptive with the on-CPU table:\n{text}");
    } else {
        assert!(text.contains("skipped: adaptive-oncpu"), "without privilege the section says why:\n{text}");
    }
}

/// The demo builds its program in a private directory of its own, and
/// leaves nothing there when it ends, its compiler failing included (it
/// left the source behind; the directory, named by the pid, could be
/// another user's). (Killed by a signal, it leaves the directory.)
#[test]
fn the_demo_leaves_no_files_in_the_temporary_directory() {
    let tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lockmeter-demo-tmp-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let plot = tmp.with_extension("svg");
    let out = lockmeter().args(["demo", "--quick", "--plot"]).arg(&plot).env("TMPDIR", &tmp).env("CC", "false").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("(skipped: false could not compile the bundled cache.c)"));
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    std::fs::remove_dir(&tmp).unwrap();
    let _ = std::fs::remove_file(&plot);
}

/// The demo's plots are drawn by default, but a working directory that
/// takes no file only loses them, with a warning (the demo refused to run).
#[test]
fn demo_without_a_writable_directory_runs_without_its_plots() {
    let out = lockmeter().current_dir("/proc").args(["demo", "--quick", "--run", "10ms"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("warning: no plots: cannot write lockmeter-demo.svg"), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("7. Scaling") && text.contains("9. Curing it?") && !text.contains("Plot:"), "{text}");
}

/// advise's plot is drawn by default, but a working directory that takes
/// no file only loses the plot, with a warning: the verdict still comes
/// (it used to refuse to run at all).
#[test]
fn advise_without_a_writable_directory_gives_its_verdict_without_the_plot() {
    let out = lockmeter().current_dir("/proc").args(["advise", "--locks", "adaptive", "--repeat", "1", "--", "true"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("warning: no plot: cannot write lockmeter-advise.svg"), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("lockmeter advise: true (1 round, 2 variants"), "{stdout}");
    // Profiled once first: `true` takes no pthread lock, and the verdict
    // says so rather than judge the library's start-up.
    assert!(stdout.contains("Profiled once first: it took no pthread lock."), "{stdout}");
    assert!(stdout.contains("Keep glibc's locks: true took no pthread lock when profiled"), "{stdout}");
}

/// advise runs CMD many times: its stdin is empty, or --input FILE read
/// afresh by every run (stdin was /dev/null, silently: `sort < file`
/// measured sorting nothing).
#[test]
fn advise_gives_every_run_the_input_file() {
    let dir = std::env::temp_dir().join(format!("lockmeter-cli-test.{}.input", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("input.txt");
    std::fs::write(&input, "hello\n").unwrap();
    let check = ["sh", "-c", "read line && [ \"$line\" = hello ]"];
    let advise = |extra: &[&str]| {
        lockmeter().current_dir("/proc").args(["advise", "--locks", "futex", "--repeat", "2"]).args(extra).arg("--").args(check).output().unwrap()
    };
    let with_input = advise(&["--input", input.to_str().unwrap()]);
    assert!(with_input.status.success(), "{}", String::from_utf8_lossy(&with_input.stderr));
    let without = advise(&[]);
    let err = String::from_utf8_lossy(&without.stderr);
    assert_eq!(without.status.code(), Some(1), "{err}");
    assert!(err.contains("it ended with exit status 1"), "{err}");
    let missing = advise(&["--input", dir.join("missing").to_str().unwrap()]);
    let err = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(2), "{err}");
    assert!(err.contains("--input") && err.contains("No such file or directory"), "{err}");
    // A stream would feed the first run alone (a FIFO's open would block).
    let piped = advise(&["--input", "/dev/stdin"]);
    let err = String::from_utf8_lossy(&piped.stderr);
    assert_eq!(piped.status.code(), Some(2), "{err}");
    assert!(err.contains("not a regular file"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// advise's profiled run keeps the user's preloads, as its rounds do: an
/// allocator preloaded beside the library takes pthread mutexes of its
/// own (jemalloc: 233 in `true`), which it read as none.
#[test]
fn advise_profiles_with_the_users_preloads() {
    let jemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
    assert!(std::path::Path::new(jemalloc).exists(), "scripts/test.sh installs libjemalloc2");
    let out = lockmeter()
        .current_dir("/proc")
        .env("LD_PRELOAD", jemalloc)
        .args(["advise", "--locks", "futex", "--repeat", "1", "--", "true"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Profiled once first: ") && !stdout.contains("it took no pthread lock"), "{stdout}");
}

/// Without --repeat, advise runs as many rounds as a recommendation needs:
/// with all seven of ours, a clean sweep of 5 rounds by one of them is a
/// 20% chance, so the default of 5 could never recommend anything.
#[test]
fn advise_runs_enough_rounds_to_recommend_by_default() {
    for (locks, rounds) in [("all", "8 rounds, 8 variants"), ("adaptive", "5 rounds, 2 variants")] {
        let out = lockmeter().current_dir("/proc").args(["advise", "--locks", locks, "--", "true"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("lockmeter advise: true ({rounds}")), "{locks}: {text}");
    }
}

/// advise times CMD to its end, not to the end of its output: a process
/// it leaves running with the pipes open (`sleep 1 &`) read a second for
/// every variant. The metric is the last match in stdout, then in stderr
/// (the two were joined with nothing between them: "12" and "34" read
/// 1234), from the first group that took part in the match.
#[test]
fn advise_times_cmd_and_reads_the_metric_from_its_own_stream() {
    let out = lockmeter()
        .current_dir("/proc")
        .args(["advise", "--locks", "futex", "--repeat", "1", "--metric", "ops/s: (x)?([0-9]+)", "--"])
        .args(["sh", "-c", "sleep 2 & echo ops/s: 5; printf 'ops/s: 12'; echo 34 warnings >&2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let glibc = text.lines().find(|l| l.starts_with("glibc")).unwrap_or_else(|| panic!("{text}"));
    let fields: Vec<&str> = glibc.split_whitespace().collect();
    let wall: f64 = fields[1].parse().unwrap();
    assert!(wall < 1.0, "timed to CMD's end, not its background child's: {glibc}");
    assert_eq!(fields[5], "12.000", "the last match, in stdout: {glibc}");
}

/// A variant far slower than glibc is stopped (its process group
/// killed) and runs no more: a spinlock oversubscribed ran a program 200
/// times as long, and a default advise of all seven lasted hours.
#[test]
fn advise_stops_a_variant_far_slower_than_glibc() {
    let dir = std::env::temp_dir().join(format!("lockmeter-cli-test.{}.slow", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("pid");
    let script = format!("if [ \"$LOCKMETER_LOCK\" = spin ]; then echo $$ >> {}; exec sleep 30; fi", pid_file.display());
    let started = std::time::Instant::now();
    let out = lockmeter()
        .current_dir("/proc")
        .args(["advise", "--locks", "futex,spin", "--repeat", "3", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "{:?}", started.elapsed());
    let spin = text.lines().find(|l| l.starts_with("spin")).unwrap_or_else(|| panic!("{text}"));
    assert!(spin.contains("stopped in round 1: ") && spin.contains("not run again, in no verdict"), "{spin}");
    assert!(text.lines().any(|l| l.starts_with("futex ") && l.contains('x')), "futex measured: {text}");
    let pids = std::fs::read_to_string(&pid_file).unwrap();
    assert_eq!(pids.lines().count(), 1, "spin ran once: {pids}");
    let program: i32 = pids.trim().parse().unwrap();
    // SAFETY: probing a pid with signal 0.
    assert!(unsafe { libc::kill(program, 0) } != 0, "the stopped program was left running");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stop (SIGTERM) of advise is passed on to the program running, no
/// other run starts, its scratch directory goes, and advise dies of it
/// (the program ran on, orphaned, and advise's files stayed).
#[test]
fn advise_stops_with_the_program_it_runs() {
    use std::os::unix::process::ExitStatusExt as _;
    let (child, program, dir) = advise_running("stop", "", "exec sleep 30");
    let advise = child.id();
    // SAFETY: signalling the child just spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.signal(), Some(libc::SIGTERM), "{stderr}");
    assert!(stderr.contains("interrupted after 0 of 10 runs; nothing written"), "{stderr}");
    // SAFETY: probing a pid with signal 0.
    let alive = unsafe { libc::kill(program, 0) } == 0;
    assert!(!alive, "the program was left running");
    let leftover: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("lockmeter-run.{advise}.")))
        .collect();
    assert!(leftover.is_empty(), "scratch left: {leftover:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stop after some rounds: the rounds complete are judged, the table
/// says how many, nothing is written, and advise dies of the stop (it
/// showed nothing of the runs done).
#[test]
fn advise_stopped_after_some_rounds_judges_those() {
    use std::os::unix::process::ExitStatusExt as _;
    let dir = std::env::temp_dir().join(format!("lockmeter-cli-test.{}.partial", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let runs = dir.join("runs");
    let plot = dir.join("advise.svg");
    let script = format!("echo $$ >> {}; sleep 0.2", runs.display());
    let child = lockmeter()
        .args(["advise", "--locks", "futex", "--repeat", "5", "--plot"])
        .arg(&plot)
        .args(["--", "sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The profiled run, then two rounds of two runs, and the sixth begun.
    let started = std::time::Instant::now();
    while std::fs::read_to_string(&runs).map_or(0, |r| r.lines().count()) < 6 {
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "the rounds never ran");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: signalling the child just spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.signal(), Some(libc::SIGTERM), "{stderr}");
    let complete: usize = stdout
        .split("stopped: the first ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of the rounds complete: {stdout}"));
    assert!((2..5).contains(&complete), "{stdout}");
    assert!(stdout.contains("of 5 rounds, 2 variants"), "{stdout}");
    let futex_row = stdout.lines().find(|l| l.starts_with("futex ")).unwrap_or_else(|| panic!("no futex row: {stdout}"));
    assert!(futex_row.contains('x'), "futex's row has no ratio: {futex_row}");
    assert!(
        ["Keep glibc's locks", "No recommendation", "Recommendation"].iter().any(|verdict| stdout.contains(verdict)),
        "no verdict: {stdout}"
    );
    let said = format!("stopped after {complete} of 5 rounds; the table above judges those; {} not written", plot.display());
    assert!(stderr.contains(&said), "{stderr}");
    assert!(!plot.exists(), "a plot was written after the stop");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `advise` of a shell script that runs `first`, writes its pid, then
/// runs `rest`, once the pid is written: advise, the script's pid, and
/// the scratch directory.
fn advise_running(name: &str, first: &str, rest: &str) -> (std::process::Child, i32, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("lockmeter-cli-test.{}.{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("pid");
    let script = format!("{first} echo $$ > {}; {rest}", pid_file.display());
    let child = lockmeter()
        .current_dir("/proc")
        .args(["advise", "--locks", "futex", "--repeat", "5", "--no-plot", "--", "sh", "-c", &script])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !pid_file.exists() || std::fs::read_to_string(&pid_file).unwrap().trim().is_empty() {
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "the program never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let program = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    (child, program, dir)
}

/// A program that ignores the stop: the first is passed on and said, the
/// second kills the program's group as advise dies (it left the program
/// running, re-parented to init).
#[test]
fn a_second_stop_kills_a_program_that_ignores_the_first() {
    use std::os::unix::process::ExitStatusExt as _;
    let (child, program, dir) = advise_running("stubborn", "trap '' TERM;", "sleep 30; sleep 30");
    for _ in 0..2 {
        // SAFETY: signalling the child just spawned.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.signal(), Some(libc::SIGTERM), "{stderr}");
    assert!(stderr.contains("stopping: waiting for the program to end (stop again to kill it)"), "{stderr}");
    // Killed; reaped by whoever inherits it (a zombie answers signal 0).
    let gone = || std::fs::read_to_string(format!("/proc/{program}/stat")).map_or(true, |stat| stat.contains(") Z "));
    let waited = std::time::Instant::now();
    while !gone() {
        assert!(waited.elapsed() < std::time::Duration::from_secs(5), "the program was left running");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A variant under which CMD fails is left out, and the others are
/// measured and judged: one failure (pi refusing an unlock glibc allows)
/// threw every round of the rest away. The status says CMD failed.
#[test]
fn advise_leaves_out_a_variant_that_fails_and_judges_the_rest() {
    let out = lockmeter()
        .current_dir("/proc")
        .args(["advise", "--locks", "adaptive,futex", "--repeat", "2", "--"])
        .args(["sh", "-c", "if [ \"$LOCKMETER_LOCK\" = futex ]; then echo broken >&2; exit 4; fi; echo fine"])
        .output()
        .unwrap();
    let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{text}{err}");
    assert!(text.lines().any(|l| l.starts_with("adaptive") && l.contains("x [")), "adaptive measured: {text}");
    let futex = text.lines().find(|l| l.starts_with("futex")).unwrap_or_else(|| panic!("{text}"));
    assert!(futex.contains("failed in round 1: under futex it ended with exit status 4: broken; not run again"), "{futex}");
    // (The plot's warning first: /proc takes no file.)
    assert!(err.trim_end().ends_with("failed under futex (see its row above)") && err.lines().filter(|l| l.contains("error")).count() == 1, "{err}");
}

/// The count of lock operations advise makes first, when it cannot be
/// made, says why: its line was left out, as if nothing were wrong.
#[test]
fn advise_says_when_it_could_not_count_the_lock_operations() {
    let out = lockmeter()
        .current_dir("/proc")
        .env("TMPDIR", "/nonexistent-dir")
        .args(["advise", "--locks", "futex", "--repeat", "1", "--no-plot", "--", "true"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Profiled once first: its lock operations could not be counted (cannot create a directory in /nonexistent-dir"), "{text}");
}
