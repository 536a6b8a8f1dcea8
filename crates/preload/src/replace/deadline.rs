//! Timed locks' deadlines as programs give them: an absolute time on
//! CLOCK_REALTIME or CLOCK_MONOTONIC. The lock algorithms time their waits
//! on the monotonic clock, so a deadline is converted; one on the wall
//! clock is converted again every [`WALL_CLOCK_SLICE`] of waiting, so that
//! the wait follows the clock when it is set, as glibc's timed locks do
//! (their kernel waits follow it exactly; this is at most a slice late),
//! but for the FIFO locks' (see [`follows_wall_clock`]).

use lockmeter_locks::Algorithm;
use std::time::{Duration, Instant};

/// How long a timed lock with a wall-clock deadline waits before it reads
/// the wall clock again: set forward past the deadline meanwhile, the lock
/// times out at most this late; set back, it waits on.
pub const WALL_CLOCK_SLICE: Duration = Duration::from_millis(100);

/// Whether `algorithm`'s timed lock may wait by the wall clock in slices.
/// Not the FIFO locks': a waiter leaves its place in line at each look and
/// queues again at the tail. Behind a line longer than a slice it never
/// reached the head: an `mcs` timed lock of 2 s behind five threads
/// holding 30 ms each timed out 3 times in 3, where a plain lock got the
/// lock within 0.14 s. And a ticket given up at each look stays in the line until
/// the holder's unlock passes it, so the line outgrows the CPUs and the
/// waiter's next slice waits at the gate, and closes it (with the gate's
/// naps at 200 µs then, a lock held 5 s cost such a waiter 389 ms of CPU
/// and 14,940 context switches, against 0 ms and 1 converted once; the
/// naps grow now, but the waiter still leaves its place in line at every
/// look). Their wall-clock deadlines are converted once, at the call, and
/// a later jump of the clock does not move them.
pub fn follows_wall_clock(algorithm: Algorithm) -> bool {
    !matches!(algorithm, Algorithm::Ticket | Algorithm::Mcs)
}

/// What is left until `at` on `clock` (CLOCK_REALTIME or CLOCK_MONOTONIC),
/// zero once passed; EINVAL for nanoseconds out of range.
pub fn left(clock: libc::clockid_t, at: libc::timespec) -> Result<Duration, libc::c_int> {
    if !(0..1_000_000_000).contains(&at.tv_nsec) {
        return Err(libc::EINVAL);
    }
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock and out-pointer.
    unsafe { libc::clock_gettime(clock, &mut now) };
    let as_ns = |t: libc::timespec| t.tv_sec as i128 * 1_000_000_000 + t.tv_nsec as i128;
    Ok(Duration::from_nanos((as_ns(at) - as_ns(now)).clamp(0, i128::from(u64::MAX)) as u64))
}

/// `at` on `clock` as the same time on CLOCK_MONOTONIC (one passed: now),
/// for a futex wait that cannot take the wall clock; EINVAL for
/// nanoseconds out of range.
pub fn on_monotonic(clock: libc::clockid_t, at: libc::timespec) -> Result<libc::timespec, libc::c_int> {
    Ok(monotonic_in(left(clock, at)?))
}

/// The CLOCK_MONOTONIC time `left` from now.
pub fn monotonic_in(left: Duration) -> libc::timespec {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock and out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    // At most 2^64 ns (584 years) ahead: no overflow.
    let nanos = now.tv_nsec + left.subsec_nanos() as libc::c_long;
    libc::timespec { tv_sec: now.tv_sec + left.as_secs() as libc::time_t + nanos / 1_000_000_000, tv_nsec: nanos % 1_000_000_000 }
}

/// Takes a lock by `at` on `clock` with `lock_until`, the lock's timed
/// lock (a monotonic deadline; false when it passed first), in slices if
/// `sliced` and `clock` is the wall clock, else in one wait. Ok(true) when
/// taken, Ok(false) when `at` passed first (a time before the epoch has,
/// whatever its nanoseconds say, as glibc's mutexes read it), Err(EINVAL)
/// for a bad timespec or clock. (A deadline centuries away is a timed
/// wait as long: the futex takes it.)
pub fn lock_by(
    clock: libc::clockid_t,
    at: libc::timespec,
    sliced: bool,
    mut lock_until: impl FnMut(Instant) -> bool,
) -> Result<bool, libc::c_int> {
    if clock != libc::CLOCK_REALTIME && clock != libc::CLOCK_MONOTONIC {
        return Err(libc::EINVAL);
    }
    if at.tv_sec < 0 {
        return Ok(false);
    }
    let mut remaining = left(clock, at)?;
    loop {
        let slice = if sliced && clock == libc::CLOCK_REALTIME { remaining.min(WALL_CLOCK_SLICE) } else { remaining };
        if lock_until(Instant::now() + slice) {
            return Ok(true);
        }
        remaining = left(clock, at)?;
        if remaining.is_zero() {
            return Ok(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_ms(clock: libc::clockid_t, ms: i64) -> libc::timespec {
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid clock and out-pointer.
        unsafe { libc::clock_gettime(clock, &mut now) };
        let ns = now.tv_sec * 1_000_000_000 + now.tv_nsec + ms * 1_000_000;
        libc::timespec { tv_sec: ns / 1_000_000_000, tv_nsec: ns % 1_000_000_000 }
    }

    /// A lock that is never free: records the deadlines it was given.
    fn never_free(deadlines: &mut Vec<Instant>) -> impl FnMut(Instant) -> bool + '_ {
        |deadline| {
            deadlines.push(deadline);
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            false
        }
    }

    #[test]
    fn a_wall_clock_wait_looks_at_the_clock_every_slice() {
        let mut deadlines = Vec::new();
        let start = Instant::now();
        let taken = lock_by(libc::CLOCK_REALTIME, in_ms(libc::CLOCK_REALTIME, 350), true, never_free(&mut deadlines));
        assert_eq!(taken, Ok(false));
        assert!((3..=4).contains(&deadlines.len()), "100 + 100 + 100 + about 50 ms: {}", deadlines.len());
        assert!(deadlines.windows(2).all(|w| w[1] - w[0] <= WALL_CLOCK_SLICE + Duration::from_millis(20)));
        assert!(start.elapsed() >= Duration::from_millis(350));
    }

    #[test]
    fn a_monotonic_wait_and_an_unsliced_one_are_one_wait() {
        for (clock, sliced) in [(libc::CLOCK_MONOTONIC, true), (libc::CLOCK_REALTIME, false)] {
            let mut deadlines = Vec::new();
            let taken = lock_by(clock, in_ms(clock, 250), sliced, never_free(&mut deadlines));
            assert_eq!(taken, Ok(false));
            assert_eq!(deadlines.len(), 1);
        }
    }

    #[test]
    fn a_wall_clock_time_on_the_monotonic_clock_is_as_far_away() {
        let ns = |t: libc::timespec| t.tv_sec as i128 * 1_000_000_000 + t.tv_nsec as i128;
        let now = in_ms(libc::CLOCK_MONOTONIC, 0);
        let at = on_monotonic(libc::CLOCK_REALTIME, in_ms(libc::CLOCK_REALTIME, 1500)).unwrap();
        assert!((0..1_000_000_000).contains(&at.tv_nsec));
        assert!((1_490_000_000..1_510_000_000).contains(&(ns(at) - ns(now))), "{} ns ahead", ns(at) - ns(now));
        let passed = on_monotonic(libc::CLOCK_REALTIME, in_ms(libc::CLOCK_REALTIME, -50)).unwrap();
        assert!((0..10_000_000).contains(&(ns(passed) - ns(now))), "a passed time is now");
    }

    #[test]
    fn a_passed_deadline_is_tried_once_and_bad_ones_are_refused() {
        let mut tries = 0;
        assert_eq!(lock_by(libc::CLOCK_REALTIME, in_ms(libc::CLOCK_REALTIME, -5), true, |_| {
            tries += 1;
            false
        }), Ok(false));
        assert_eq!(tries, 1);
        let before_epoch = libc::timespec { tv_sec: -1, tv_nsec: 2_000_000_000 };
        assert_eq!(lock_by(libc::CLOCK_REALTIME, before_epoch, true, |_| true), Ok(false));
        let bad = libc::timespec { tv_sec: 1, tv_nsec: 1_000_000_000 };
        assert_eq!(lock_by(libc::CLOCK_REALTIME, bad, true, |_| true), Err(libc::EINVAL));
        assert_eq!(lock_by(libc::CLOCK_PROCESS_CPUTIME_ID, in_ms(libc::CLOCK_REALTIME, 5), true, |_| true), Err(libc::EINVAL));
    }
}
