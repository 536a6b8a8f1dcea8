//! Loading the program for a test, or saying why the test is skipped.

use lockmeter_oncpu::loader::Private;

/// A private table recording this process, or `None` (with a message on
/// stderr) when this user may not load BPF programs. Any other failure is
/// a test failure.
pub fn private_table() -> Option<Private> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: loading the on-CPU program needs root (or CAP_BPF and CAP_PERFMON)");
        return None;
    }
    match Private::load(std::process::id()) {
        Ok(p) => Some(p),
        Err(e) if e.is_permission() => {
            eprintln!("SKIPPED: {e}");
            None
        }
        Err(e) => panic!("loading the on-CPU program as root failed: {e}"),
    }
}

/// This thread's kernel id.
#[allow(dead_code)] // not every test binary uses it
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}
