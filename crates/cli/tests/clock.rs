//! Served condvars' timed waits against a jump of the wall clock. Alone in
//! its test binary: the jump (25 s forward, then back) would end the
//! wall-clock waits of tests running beside it. Setting the clock needs
//! root; without it the test says so and checks nothing.

mod common;

use common::{compile, library, ALGORITHMS};
use std::process::Command;

/// A wait on a CLOCK_REALTIME condvar, and a timed lock of a mutex with a
/// CLOCK_REALTIME deadline, end when the wall clock is set past their
/// deadlines, as glibc's do (the kernel follows the clock), and waits on
/// CLOCK_MONOTONIC do not. The served waits converted the deadline to the
/// monotonic clock once, at the call, and slept through the jump to their
/// full 20 s. (The served timed lock reads the wall clock again every
/// 100 ms, but for `ticket`'s, which converts once; the condvar's wait
/// ends at the jump, as glibc's.)
#[test]
fn realtime_waits_end_when_the_wall_clock_passes_their_deadline() {
    let subjects = compile("subjects");
    let run = |algorithm: Option<&str>| {
        let mut command = Command::new("timeout");
        command.arg("60").arg(&subjects).arg("clock_jump");
        if let Some(algorithm) = algorithm {
            command.env("LD_PRELOAD", library()).env("LOCKMETER_LOCK", algorithm);
        }
        let wall_clock_ahead = wall_clock_ahead_of_monotonic();
        let output = command.output().unwrap();
        // A subject that died between its jump and its jump back left the
        // wall clock 25 s fast: set it back.
        let left_ahead = wall_clock_ahead_of_monotonic() - wall_clock_ahead;
        if left_ahead.abs() > 10.0 {
            set_wall_clock_back(left_ahead);
        }
        assert!(output.status.success(), "{algorithm:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    };
    let glibc = run(None);
    if glibc == "unprivileged" {
        eprintln!("not checked: setting the wall clock needs root");
        return;
    }
    for (who, says) in std::iter::once(("glibc", glibc)).chain(ALGORITHMS.iter().map(|&a| (a, run(Some(a))))) {
        let ended_after_ms = |kind: &str| -> i64 {
            says.split("; ")
                .find_map(|part| part.strip_prefix(&format!("{kind}: realtime ETIMEDOUT after ")))
                .and_then(|rest| rest.strip_suffix(" ms, monotonic waiting"))
                .and_then(|ms| ms.parse().ok())
                .unwrap_or_else(|| panic!("{who}: {says}"))
        };
        if who == "ticket" || who == "mcs" {
            // The FIFO locks' timed locks convert a wall-clock deadline
            // once, at the call (see `follows_wall_clock`): the jump does
            // not end them.
            assert!(says.ends_with("; mutex: realtime waiting after -1 ms, monotonic waiting"), "{who}: {says}");
            assert!((0..1000).contains(&ended_after_ms("cond")), "{who}: {says}");
            continue;
        }
        for kind in ["cond", "mutex"] {
            let ms = ended_after_ms(kind);
            assert!((0..1000).contains(&ms), "{who}: the realtime {kind} wait ended {ms} ms after the jump");
        }
        eprintln!("{who}: {says}");
    }
}

fn clock_seconds(clock: libc::clockid_t) -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock and out-pointer.
    unsafe { libc::clock_gettime(clock, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// How far the wall clock reads ahead of the monotonic one, in seconds.
fn wall_clock_ahead_of_monotonic() -> f64 {
    clock_seconds(libc::CLOCK_REALTIME) - clock_seconds(libc::CLOCK_MONOTONIC)
}

fn set_wall_clock_back(seconds: f64) {
    let now = clock_seconds(libc::CLOCK_REALTIME) - seconds;
    let t = libc::timespec { tv_sec: now as libc::time_t, tv_nsec: (now.fract() * 1e9) as libc::c_long };
    // SAFETY: a valid clock and timespec.
    let set = unsafe { libc::clock_settime(libc::CLOCK_REALTIME, &t) };
    assert_eq!(set, 0, "the wall clock, left {seconds:.1} s fast by the subject, could not be set back");
}
