//! Replace mode (`LOCKMETER_LOCK=ALG`): the program's own
//! `pthread_mutex_t` and `pthread_cond_t` are served by one of lockmeter's
//! algorithms, its state kept inside the program's storage (no side
//! table), statically initialised objects included.
//!
//! Layout of a served mutex (40 bytes, glibc's size and alignment):
//!
//! ```text
//!  0..16  the algorithm's state (all-zero is unlocked, for every algorithm)
//! 16..20  the type: 0 normal, 1 recursive, 2 errorcheck, 3 adaptive; this
//!         is where glibc keeps `__kind`, so PTHREAD_MUTEX_INITIALIZER and
//!         its recursive / errorcheck / adaptive variants need no init call
//! 20..24  owner's tid (recursive and errorcheck types)
//! 24..28  recursion depth
//! 28..32  fork generation (see `mutex::refresh`)
//! 32..40  the holder's pthread_self() (normal and adaptive types,
//!         algorithms whose lock word does not name the owner)
//! ```
//!
//! Mutexes that are robust, priority-inheritance, priority-protect or
//! process-shared are initialised by glibc and stay glibc's: their `__kind`
//! carries a flag in 0xF0, which a served mutex never has, and every
//! function passes them through untouched. A served condvar keeps its
//! state in bytes 0..8 and its clock in 8..12; a process-shared one is
//! glibc's (bit 0 of byte 36, which a served condvar never sets).

pub mod cond;
pub mod deadline;
pub mod mutex;

use lockmeter_locks::Algorithm;
use std::sync::atomic::{AtomicU8, Ordering};

const UNSET: u8 = 0;
/// `ALGORITHM` once decided against replacing.
const OFF: u8 = 1;
/// `ALGORITHM` holds `FIRST + Algorithm::index()` when replacing.
const FIRST: u8 = 2;
static ALGORITHM: AtomicU8 = AtomicU8::new(UNSET);

/// The algorithm serving the program's locks, if replace mode is on.
#[inline(always)]
pub fn algorithm() -> Option<Algorithm> {
    match ALGORITHM.load(Ordering::Relaxed) {
        OFF => None,
        UNSET => decide(),
        value => Algorithm::from_index(u32::from(value - FIRST)),
    }
}

/// Reads `LOCKMETER_LOCK` without allocating: the first lock call may
/// come from inside the program's allocator (jemalloc locks a pthread
/// mutex while it initialises), and an allocation here would call it
/// again before it is ready, and that call would lock again, without end.
#[cold]
fn decide() -> Option<Algorithm> {
    let name = crate::environment::get("LOCKMETER_LOCK").map(|value| value.to_str().unwrap_or("?"));
    let chosen = name.filter(|name| !name.is_empty()).map(|name| match name.parse::<Algorithm>() {
        Ok(algorithm) => algorithm,
        Err(_) if name == "busted" => crate::profile::output::fatal(
            "LOCKMETER_LOCK=busted: busted is a deliberately broken lock for `lockmeter torture`; it never serves a program",
        ),
        Err(_) => crate::profile::output::fatal(&format!(
            "LOCKMETER_LOCK={name:?} is not an algorithm (one of: {})",
            Algorithm::ALL.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ")
        )),
    });
    ALGORITHM.store(chosen.map_or(OFF, |a| FIRST + a as u8), Ordering::Relaxed);
    chosen
}

/// Called by the library's constructor (registering allocates, so not
/// from `decide`): a child of `fork` starts a new generation of served
/// mutexes, which needs to know the thread that forked.
pub fn register_fork_handler() {
    if algorithm().is_some() {
        // SAFETY: registers a plain extern "C" function.
        unsafe { libc::pthread_atfork(Some(mutex::forking), Some(mutex::forked_parent), Some(mutex::forked)) };
    }
}
