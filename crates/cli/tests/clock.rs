//! Served condvars' timed waits against a jump of the wall clock. Alone in
//! its test binary: the jump (25 s forward, then back) would end the
//! wall-clock waits of tests running beside it. Setting the clock needs
//! root; without it the test says so and checks nothing.

mod common;

use common::{compile, library, ALGORITHMS};
use std::process::Command;

/// A wait on a CLOCK_REALTIME condvar ends when the wall clock is set past
/// its deadline, as glibc's does (the kernel follows the clock), and a
/// CLOCK_MONOTONIC condvar's wait does not. The served wait converted the
/// deadline to the monotonic clock once, at the call, and slept through
/// the jump to its full 20 s.
#[test]
fn a_realtime_condvar_wait_ends_when_the_wall_clock_passes_its_deadline() {
    let subjects = compile("subjects");
    let run = |algorithm: Option<&str>| {
        let mut command = Command::new("timeout");
        command.arg("60").arg(&subjects).arg("clock_jump");
        if let Some(algorithm) = algorithm {
            command.env("LD_PRELOAD", library()).env("LOCKMETER_LOCK", algorithm);
        }
        let output = command.output().unwrap();
        assert!(output.status.success(), "{algorithm:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    };
    let glibc = run(None);
    if glibc == "unprivileged" {
        eprintln!("not checked: setting the wall clock needs root");
        return;
    }
    for (who, says) in std::iter::once(("glibc", glibc)).chain(ALGORITHMS.iter().map(|&a| (a, run(Some(a))))) {
        let ms: i64 = says
            .strip_prefix("realtime ETIMEDOUT after ")
            .and_then(|rest| rest.strip_suffix(" ms, monotonic waiting"))
            .and_then(|ms| ms.parse().ok())
            .unwrap_or_else(|| panic!("{who}: {says}"));
        assert!((0..1000).contains(&ms), "{who}: the realtime wait ended {ms} ms after the jump");
    }
}
