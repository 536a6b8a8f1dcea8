//! Run-time switches, read once from the environment and changeable through
//! this API without rebuilding (seed 002's `NO_MUTEX_SPIN` sched feature).
//!
//! - `LOCKMETER_SPIN=0` turns optimistic spinning off in `adaptive`, `mcs`
//!   and `ticket`: waiters go straight to sleep.
//! - `LOCKMETER_HANDOFF_US=N` sets how long an `adaptive` waiter may be
//!   passed over by barging threads before the lock is handed to it
//!   (default 1000 µs).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

const UNREAD: u8 = 0;
const ON: u8 = 1;
const OFF: u8 = 2;

static SPINNING: AtomicU8 = AtomicU8::new(UNREAD);
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
    let on = !matches!(std::env::var("LOCKMETER_SPIN").as_deref(), Ok("0") | Ok("off") | Ok("false"));
    let _ = SPINNING.compare_exchange(UNREAD, if on { ON } else { OFF }, Ordering::Relaxed, Ordering::Relaxed);
    on
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
    let bound = std::env::var("LOCKMETER_HANDOFF_US")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_micros)
        .unwrap_or(DEFAULT_HANDOFF_BOUND);
    let _ = HANDOFF_NS.compare_exchange(u64::MAX, bound.as_nanos() as u64, Ordering::Relaxed, Ordering::Relaxed);
    bound
}

/// Sets the `adaptive` starvation bound for every lock in the process.
pub fn set_handoff_bound(bound: Duration) {
    HANDOFF_NS.store((bound.as_nanos() as u64).min(u64::MAX - 1), Ordering::Relaxed);
}
