//! `lockmeter oncpu` and `lockmeter run --oncpu`, as a user and a script
//! see them. Loading BPF programs needs root: without it the tests check
//! only what an unprivileged user gets, and say so.

use lockmeter_stats::profile::Profile;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn lockmeter(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockmeter")).args(args).output().unwrap()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

const PIN_DIR: &str = "/run/lockmeter";

/// The tests pin and unpin the system-wide table: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn enable_status_disable_through_the_command_line() {
    let _alone = alone();
    if !is_root() {
        let status = lockmeter(&["oncpu", "status", "--sample", "10ms"]);
        assert!(text(&status).contains("this user"), "{}", text(&status));
        let enable = lockmeter(&["oncpu", "enable"]);
        assert_eq!(enable.status.code(), Some(1), "{}", text(&enable));
        eprintln!("SKIPPED (not root): enable/disable; checked that status explains and enable fails cleanly");
        return;
    }
    if Path::new(PIN_DIR).exists() {
        eprintln!("SKIPPED: a system-wide table is pinned at {PIN_DIR}; this test would remove it");
        return;
    }
    let disabled = lockmeter(&["oncpu", "disable"]);
    assert!(disabled.status.success(), "disable with nothing loaded is not an error: {}", text(&disabled));
    assert!(text(&disabled).contains("was not loaded"), "{}", text(&disabled));

    let status = lockmeter(&["oncpu", "status", "--sample", "10ms"]);
    assert_eq!(status.status.code(), Some(1), "status exits 1 when not loaded: {}", text(&status));
    assert!(text(&status).contains("not loaded"), "{}", text(&status));

    let bad_group = lockmeter(&["oncpu", "enable", "--group", "no-such-group-here"]);
    assert_eq!(bad_group.status.code(), Some(2), "{}", text(&bad_group));
    assert_eq!(String::from_utf8_lossy(&bad_group.stderr).lines().count(), 1, "{}", text(&bad_group));
    assert!(!Path::new(PIN_DIR).exists(), "a refused enable loads nothing");

    // Two enables at once: both succeed and the table is loaded (each
    // used to clear the other's half-made pins, one exiting 0 with
    // nothing loaded).
    let racing: Vec<_> = (0..2)
        .map(|_| Command::new(env!("CARGO_BIN_EXE_lockmeter")).args(["oncpu", "enable", "--group", "daemon"]).spawn().unwrap())
        .collect();
    for mut enable in racing {
        assert!(enable.wait().unwrap().success());
    }
    let loaded = lockmeter(&["oncpu", "status", "--sample", "10ms"]);
    assert_eq!(loaded.status.code(), Some(0), "{}", text(&loaded));
    // Without --group, the group it has is kept, and said.
    let again = lockmeter(&["oncpu", "enable"]);
    assert!(again.status.success() && text(&again).contains("already loaded"), "{}", text(&again));
    assert!(text(&again).contains("group daemon"), "{}", text(&again));
    let enabled = lockmeter(&["oncpu", "enable", "--group", "root"]);
    assert!(enabled.status.success() && text(&enabled).contains("group root"), "{}", text(&enabled));

    let status = lockmeter(&["oncpu", "status", "--sample", "200ms"]);
    let shown = text(&status);
    assert_eq!(status.status.code(), Some(0), "{shown}");
    assert!(shown.contains("loaded (program"), "{shown}");
    assert!(shown.contains("mode 0660"), "{shown}");
    assert!(shown.contains("ns per run"), "{shown}");
    assert!(shown.contains("this user: can map it"), "{shown}");

    // The link gone (the program detached), a table still pinned is not
    // in use, and status says so.
    std::fs::remove_file(Path::new(PIN_DIR).join("oncpu_link")).unwrap();
    let detached = lockmeter(&["oncpu", "status", "--sample", "10ms"]);
    assert_eq!(detached.status.code(), Some(1), "{}", text(&detached));
    assert!(text(&detached).contains("no program writes it"), "{}", text(&detached));
    // Nor does a program take it: its slots are frozen as the last switch
    // left them (an exited thread read running for ever).
    let (served, profile) = served_hold(false, None);
    assert!(served.status.success(), "{}", text(&served));
    let oncpu = profile.and_then(|p| p.oncpu).expect("adaptive's profile says which table it used");
    assert_eq!(oncpu.table, "none");
    assert!(oncpu.absent_because.as_deref().is_some_and(|why| why.contains("link is gone")), "{oncpu:?}");

    let disabled = lockmeter(&["oncpu", "disable"]);
    assert!(disabled.status.success() && text(&disabled).contains("unpinned"), "{}", text(&disabled));
    assert!(!Path::new(PIN_DIR).exists(), "disable leaves nothing pinned");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains(PIN_DIR), "disable unmounts the table's filesystem:\n{mounts}");
    let status = lockmeter(&["oncpu", "status", "--sample", "10ms"]);
    assert_eq!(status.status.code(), Some(1), "{}", text(&status));

    // Files left at the pins, not BPF objects: said so, not taken for a
    // permission problem of root's.
    std::fs::create_dir(PIN_DIR).unwrap();
    for name in ["oncpu_slots", "oncpu_link"] {
        std::fs::write(Path::new(PIN_DIR).join(name), "").unwrap();
    }
    let stale = lockmeter(&["oncpu", "status", "--sample", "10ms"]);
    std::fs::remove_dir_all(PIN_DIR).unwrap();
    assert_eq!(stale.status.code(), Some(1), "{}", text(&stale));
    assert!(text(&stale).contains("is not a pinned BPF link") && text(&stale).contains("is not a pinned BPF table"), "{}", text(&stale));
    assert!(!text(&stale).contains("permission denied"), "{}", text(&stale));
}

fn subjects() -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/subjects.c");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lockmeter-oncpu-test.{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let binary = dir.join("subjects");
    let status = Command::new("gcc")
        .args(["-g", "-O0", "-pthread", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
        .expect("gcc runs (scripts/test.sh installs it)");
    assert!(status.success());
    binary
}

/// `hold`: main holds a lock asleep for 200 ms while a thread waits;
/// `wrapper` runs it through another program that executes it.
fn served_hold(oncpu: bool, wrapper: Option<&str>) -> (Output, Option<Profile>) {
    let subjects = subjects();
    let file = subjects.with_file_name(format!("hold.{oncpu}.{}.json", wrapper.is_some()));
    let mut args = vec!["run", "--lock", "adaptive", "--format", "json", "-o", file.to_str().unwrap()];
    if oncpu {
        args.push("--oncpu");
    }
    args.push("--");
    args.extend(wrapper);
    args.extend([subjects.to_str().unwrap(), "hold"]);
    let output = lockmeter(&args);
    (output, Profile::load(&file).ok())
}

#[test]
fn run_oncpu_hands_the_program_a_private_table() {
    let _alone = alone();
    if !is_root() {
        let (output, _) = served_hold(true, None);
        assert_eq!(output.status.code(), Some(1), "{}", text(&output));
        assert!(text(&output).contains("CAP_BPF"), "says what is missing: {}", text(&output));
        eprintln!("SKIPPED (not root): checked that --oncpu fails cleanly without privilege");
        return;
    }
    let (output, profile) = served_hold(true, None);
    assert!(output.status.success(), "{}", text(&output));
    let oncpu = profile.expect("a profile").oncpu.expect("the profile says how spins were decided");
    assert_eq!(oncpu.table, "handed", "{oncpu:?}");
    assert!(oncpu.spins_by_table >= 1, "the waiter's spin on the sleeping owner was the table's call: {oncpu:?}");
    assert_eq!(oncpu.spins_by_cpu_clock, 0, "{oncpu:?}");

    // A wrapper that executes the program keeps the pid the table records.
    let (output, profile) = served_hold(true, Some("/usr/bin/env"));
    assert!(output.status.success(), "{}", text(&output));
    let oncpu = profile.expect("a profile").oncpu.expect("the profile says how spins were decided");
    assert_eq!(oncpu.table, "handed", "through env(1): {oncpu:?}");

    // bash as CMD takes it too (bash's own getenv, which std's reads go
    // through, found nothing once the library had set a variable).
    let file = subjects().with_file_name("bash.json");
    let output = lockmeter(&["run", "--lock", "adaptive", "--oncpu", "--format", "json", "-o", file.to_str().unwrap(), "--", "bash", "-c", "true"]);
    assert!(output.status.success(), "{}", text(&output));
    let oncpu = Profile::load(&file).expect("bash's profile").oncpu.expect("adaptive served: the profile says");
    assert_eq!(oncpu.table, "handed", "{oncpu:?}");

    // A process of the tree that executes after its parent ended comes to
    // lockmeter (the tree's subreaper), so its parent is lockmeter as
    // CMD's is; the table, which records CMD, is still not its.
    let subjects = subjects();
    let file = subjects.with_file_name("orphan_hold.json");
    let output = lockmeter(&["run", "--lock", "adaptive", "--oncpu", "--format", "json", "-o", file.to_str().unwrap(), "--", subjects.to_str().unwrap(), "orphan_hold"]);
    assert!(output.status.success(), "{}", text(&output));
    let orphan = std::fs::read_dir(file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p != &file && p.file_name().unwrap().to_string_lossy().starts_with("orphan_hold."))
        .and_then(|p| Profile::load(&p).ok())
        .expect("the orphan's profile");
    let oncpu = orphan.oncpu.expect("adaptive served: the profile says");
    assert_eq!(oncpu.table, "none", "{oncpu:?}");
    assert!(oncpu.absent_because.as_deref().is_some_and(|w| w.contains("records the process lockmeter started")), "{oncpu:?}");

    // Nothing of the private table outlives the run.
    assert!(!Path::new(PIN_DIR).exists());

    if !Path::new(PIN_DIR).exists() {
        let (output, profile) = served_hold(false, None);
        assert!(output.status.success(), "{}", text(&output));
        let oncpu = profile.expect("a profile").oncpu.expect("adaptive served: the profile says");
        assert_eq!(oncpu.table, "none", "{oncpu:?}");
        assert!(oncpu.absent_because.as_deref().is_some_and(|w| w.contains("no system-wide table")), "{oncpu:?}");
        assert_eq!(oncpu.spins_by_table, 0, "{oncpu:?}");
    }
}
