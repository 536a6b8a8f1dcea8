//! A stop asked of a long run (^C, SIGTERM): the run in progress ends at
//! once, as if its time were up, and no other starts. Every worker then
//! finishes the operation it is in: nothing is left half done (a `dir
//! --fs` worker's file made and not yet removed).

use std::sync::atomic::{AtomicI32, Ordering};

/// The signal that asked, 0 for none.
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Asks the runs to stop (async-signal-safe: one atomic store).
pub fn request(signal: i32) {
    let _ = SIGNAL.compare_exchange(0, signal, Ordering::Relaxed, Ordering::Relaxed);
}

/// The signal that asked the runs to stop, if one did.
pub fn requested() -> Option<i32> {
    Some(SIGNAL.load(Ordering::Relaxed)).filter(|&s| s != 0)
}

/// An error when a stop was asked: none more runs.
pub fn check() -> Result<(), String> {
    match requested() {
        Some(_) => Err("interrupted".into()),
        None => Ok(()),
    }
}
