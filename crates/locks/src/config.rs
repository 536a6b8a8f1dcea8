//! Run-time switches, read once from the environment and changeable through
//! this API without rebuilding (seed 002's `NO_MUTEX_SPIN` sched feature).
//!
//! - `LOCKMETER_SPIN=0` turns optimistic spinning off in `adaptive`, `mcs`
//!   and `ticket`: waiters go straight to sleep.
//! - `LOCKMETER_HANDOFF_US=N` sets how long an `adaptive` waiter may be
//!   passed over by barging threads before the lock is handed to it
//!   (default 1000 µs).
//!
//! More switches exist for experiments that remove one decision to measure
//! what it is worth (`lockmeter bench`'s `adaptive-nobail`,
//! `ticket-nobackoff`, `adaptive-nobackoff`, `adaptive-eager`,
//! `adaptive-idlesleep`); production
//! code leaves them on:
//! - [`set_bail_on_owner_change`]: `adaptive` stops spinning when the lock
//!   changes owner (seed 000);
//! - [`set_proportional_backoff`]: `ticket` waits `factor x ahead` pauses
//!   between checks (seed 003);
//! - [`set_spinner_backoff`]: `adaptive`'s spinner backs off between reads;
//! - [`set_owner_return_grace`]: `adaptive`'s spinner lets a releasing
//!   owner take the lock back before competing for it;
//! - [`set_spin_while_a_cpu_would_idle`]: an `adaptive` waiter about to
//!   sleep spins again instead while no thread waits for a CPU.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

const UNREAD: u8 = 0;
const ON: u8 = 1;
const OFF: u8 = 2;

static SPINNING: AtomicU8 = AtomicU8::new(UNREAD);
static BAIL_ON_OWNER_CHANGE: AtomicBool = AtomicBool::new(true);
static PROPORTIONAL_BACKOFF: AtomicBool = AtomicBool::new(true);
static SPINNER_BACKOFF: AtomicBool = AtomicBool::new(true);
static OWNER_RETURN_GRACE: AtomicBool = AtomicBool::new(true);
static SPIN_WHILE_A_CPU_WOULD_IDLE: AtomicBool = AtomicBool::new(true);
/// Handoff bound in nanoseconds; `u64::MAX` means "not read yet".
static HANDOFF_NS: AtomicU64 = AtomicU64::new(u64::MAX);

/// The default starvation bound of `adaptive`.
pub const DEFAULT_HANDOFF_BOUND: Duration = Duration::from_millis(1);

/// Whether waiters may spin before sleeping.
#[inline]
pub fn spinning_enabled() -> bool {
    match SPINNING.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => read_spinning(),
    }
}

#[cold]
fn read_spinning() -> bool {
    let on = spinning_from(variable(c"LOCKMETER_SPIN"));
    let _ = SPINNING.compare_exchange(UNREAD, if on { ON } else { OFF }, Ordering::Relaxed, Ordering::Relaxed);
    on
}

/// An environment variable's value, read without allocating: a switch is
/// first read inside a lock operation, which can be an allocator's own
/// (jemalloc takes pthread mutexes inside `malloc`), where allocating again
/// recursed (`std::env::var` copies the name and the value).
fn variable(name: &std::ffi::CStr) -> Option<&'static str> {
    // SAFETY: a NUL-terminated name; getenv returns null or a string of the
    // environment, which the program is not to free while it is in use.
    let value = unsafe { libc::getenv(name.as_ptr()) };
    if value.is_null() {
        return None;
    }
    // SAFETY: as above.
    unsafe { std::ffi::CStr::from_ptr(value) }.to_str().ok()
}

/// `LOCKMETER_SPIN`'s meaning: on unless it says 0, off or false.
fn spinning_from(value: Option<&str>) -> bool {
    !matches!(value, Some("0" | "off" | "false"))
}

/// Reads the switches `LOCKMETER_SPIN` and `LOCKMETER_HANDOFF_US` now,
/// from `lookup` (a variable's value by name), instead of through the
/// program's `getenv` when first needed. For a library loaded into a
/// program that replaces `getenv` with its own (bash does), called while
/// the process's environment is still the one it was started with. A
/// switch not set there is left to be read when first needed (a program
/// may still set it before its first lock).
pub fn read_environment_from(lookup: impl Fn(&str) -> Option<String>) {
    if let Some(spin) = lookup("LOCKMETER_SPIN") {
        set_spinning(spinning_from(Some(&spin)));
    }
    if let Some(bound) = lookup("LOCKMETER_HANDOFF_US") {
        set_handoff_bound(handoff_bound_from(Some(&bound)));
    }
}

/// Turns optimistic spinning on or off for every lock in the process.
pub fn set_spinning(enabled: bool) {
    SPINNING.store(if enabled { ON } else { OFF }, Ordering::Relaxed);
}

/// How long an `adaptive` waiter may be passed over before the lock is
/// handed to it directly.
pub fn handoff_bound() -> Duration {
    let ns = HANDOFF_NS.load(Ordering::Relaxed);
    if ns != u64::MAX {
        return Duration::from_nanos(ns);
    }
    read_handoff_bound()
}

#[cold]
fn read_handoff_bound() -> Duration {
    let bound = handoff_bound_from(variable(c"LOCKMETER_HANDOFF_US"));
    let _ = HANDOFF_NS.compare_exchange(u64::MAX, stored_ns(bound), Ordering::Relaxed, Ordering::Relaxed);
    Duration::from_nanos(stored_ns(bound))
}

/// `LOCKMETER_HANDOFF_US`'s meaning: microseconds, or the default.
fn handoff_bound_from(value: Option<&str>) -> Duration {
    value.and_then(|v| v.trim().parse::<u64>().ok()).map(Duration::from_micros).unwrap_or(DEFAULT_HANDOFF_BOUND)
}

/// Sets the `adaptive` starvation bound for every lock in the process.
pub fn set_handoff_bound(bound: Duration) {
    HANDOFF_NS.store(stored_ns(bound), Ordering::Relaxed);
}

/// `bound` in ns as stored: saturated below `u64::MAX` (which means "not
/// read yet"), so a bound of centuries, meaning "never hand over", stays
/// one instead of wrapping to an arbitrary short one.
fn stored_ns(bound: Duration) -> u64 {
    u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX).min(u64::MAX - 1)
}

/// Whether an `adaptive` spinner stops when the lock changes owner.
#[inline]
pub fn bail_on_owner_change() -> bool {
    BAIL_ON_OWNER_CHANGE.load(Ordering::Relaxed)
}

/// Experiments only: `false` makes `adaptive` keep spinning on each new
/// owner (the kernel mutex before seed 000's patch).
pub fn set_bail_on_owner_change(enabled: bool) {
    BAIL_ON_OWNER_CHANGE.store(enabled, Ordering::Relaxed);
}

/// Whether `ticket` waiters back off in proportion to their place in line.
#[inline]
pub fn proportional_backoff() -> bool {
    PROPORTIONAL_BACKOFF.load(Ordering::Relaxed)
}

/// Experiments only: `false` makes `ticket` waiters check the lock after
/// every pause (a plain ticket spinlock, still parking when the spin budget
/// runs out).
pub fn set_proportional_backoff(enabled: bool) {
    PROPORTIONAL_BACKOFF.store(enabled, Ordering::Relaxed);
}

/// Whether `adaptive`'s spinner backs off between reads of the lock word.
#[inline]
pub fn spinner_backoff() -> bool {
    SPINNER_BACKOFF.load(Ordering::Relaxed)
}

/// Experiments only: `false` makes `adaptive`'s spinner read the lock
/// word after every pause.
pub fn set_spinner_backoff(enabled: bool) {
    SPINNER_BACKOFF.store(enabled, Ordering::Relaxed);
}

/// Whether `adaptive`'s spinner, seeing the lock free, gives its owner a
/// moment to take it back before competing for it.
#[inline]
pub fn owner_return_grace() -> bool {
    OWNER_RETURN_GRACE.load(Ordering::Relaxed)
}

/// Experiments only: `false` makes `adaptive`'s spinner take the lock the
/// moment it sees it free.
pub fn set_owner_return_grace(enabled: bool) {
    OWNER_RETURN_GRACE.store(enabled, Ordering::Relaxed);
}

/// Whether an `adaptive` waiter about to sleep spins again instead while
/// sleeping would leave a CPU idle (see `idle_cpu.rs`).
#[inline]
pub fn spin_while_a_cpu_would_idle() -> bool {
    SPIN_WHILE_A_CPU_WOULD_IDLE.load(Ordering::Relaxed)
}

/// Experiments only: `false` makes an `adaptive` waiter sleep when its
/// spin ends, whether or not a CPU would idle.
pub fn set_spin_while_a_cpu_would_idle(enabled: bool) {
    SPIN_WHILE_A_CPU_WOULD_IDLE.store(enabled, Ordering::Relaxed);
}
