//! A stop asked of a long run (^C, SIGTERM): the run in progress ends at
//! once, as if its time were up, and no other starts. Every worker then
//! finishes the operation it is in: nothing is left half done (a `dir
//! --fs` worker's file made and not yet removed).

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

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

/// Whether the stop cut a run short (a contended workload's; a pair's
/// run is short and finishes).
static CUT_SHORT: AtomicBool = AtomicBool::new(false);

/// Notes that the stop cut the run in progress short.
pub fn note_cut_short() {
    CUT_SHORT.store(true, Ordering::Relaxed);
}

/// Whether the stop cut a run short.
pub fn cut_short() -> bool {
    CUT_SHORT.load(Ordering::Relaxed)
}

/// An error when a stop was asked: none more runs.
pub fn check() -> Result<(), String> {
    match requested() {
        Some(_) => Err("interrupted".into()),
        None => Ok(()),
    }
}
