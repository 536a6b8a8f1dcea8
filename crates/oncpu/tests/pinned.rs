//! The system-wide table: enable, status, disable leave nothing behind.

use lockmeter_oncpu::loader::{disable, enable, program_loaded, status, Enabled};
use lockmeter_oncpu::{Table, PINNED_LINK, PINNED_TABLE, PIN_DIR};
use std::path::Path;
use std::time::Duration;

#[test]
fn enable_status_disable_leave_nothing_behind() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: pinning the on-CPU table needs root");
        return;
    }
    if Path::new(PIN_DIR).exists() {
        eprintln!("SKIPPED: a system-wide table is pinned at {PIN_DIR}; this test would remove it");
        return;
    }
    assert!(!disable().expect("disable when nothing is loaded is not an error"));

    assert_eq!(enable(None).unwrap(), Enabled::Loaded);
    assert_eq!(enable(None).unwrap(), Enabled::AlreadyLoaded, "a second enable is idempotent");
    let s = status(Duration::from_millis(200));
    assert!(s.loaded, "{s:?}");
    let (_, mode) = s.access.expect("the table is pinned");
    assert_eq!(mode & 0o007, 0, "never world-accessible: {mode:o}");
    let sample = s.sample.expect("the program's runs can be sampled");
    assert!(sample.runs > 0, "context switches happened in 200 ms: {sample:?}");

    // A process mapping it is listed as a user.
    let table = Table::open_pinned(Path::new(PINNED_TABLE)).expect("root maps the pinned table");
    let s = status(Duration::from_millis(10));
    assert!(s.users.iter().any(|&(pid, _)| pid == std::process::id()), "{:?}", s.users);
    let program = s.program_id.unwrap();

    assert!(disable().unwrap());
    for path in [PINNED_LINK, PINNED_TABLE, PIN_DIR] {
        assert!(!Path::new(path).exists(), "{path} left behind");
    }
    assert!(!program_loaded(program), "program {program} still loaded after disable");
    // The table this process still maps was cleared: unknown, not frozen.
    assert_eq!(table.state(std::process::id()), lockmeter_locks::oracle::OwnerState::Unknown);
    let s = status(Duration::from_millis(10));
    assert!(!s.loaded && s.reason.as_deref().is_some_and(|r| r.contains("not loaded")), "{s:?}");
}

