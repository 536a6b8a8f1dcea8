//! The statistics hook every algorithm calls: what happened on each
//! acquisition and release. The counters themselves live in the `stats`
//! crate; a lock built with [`NoStats`] compiles every call away (the
//! recorder is a zero-sized type and `ENABLED` is a constant `false`, so not
//! even the time stamps are taken).

use crate::oracle::Decider;

/// How an acquisition was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AcquireKind {
    /// On the fast path, without waiting (seed 004's NOWAIT).
    NoWait,
    /// After waiting without sleeping: spinning, backing off (SPIN).
    Spin,
    /// After sleeping in the kernel at least once (seed 002's mtx_sched).
    Sleep,
}

// SAFETY: `repr(u8)` stores the discriminant, and zero is `NoWait`'s
// (declared first, no explicit value); the enum drops nothing.
unsafe impl crate::static_tls::ZeroInit for AcquireKind {}
const _: () = assert!(AcquireKind::NoWait as u8 == 0);

/// Receives a lock's events. Implementations must be cheap and must not
/// take locks: they run inside the algorithms.
pub trait Recorder: Sync {
    /// The initial state (lock_api needs a constant initialiser).
    const INIT: Self;
    /// Whether the recorder wants wait times: when false, algorithms take
    /// no time stamps at all (and pass 0 as `wait_cycles`).
    const ENABLED: bool;

    /// The lock was acquired; `wait_cycles` is 0 for `NoWait`.
    fn acquired(&self, kind: AcquireKind, wait_cycles: u64);
    /// A trylock found the lock held (seed 004's REJECT).
    fn rejected(&self);
    /// A timed lock gave up after `wait_cycles`.
    fn timed_out(&self, wait_cycles: u64);
    /// The lock is about to be released by its holder.
    fn releasing(&self);
    /// A spin on a running owner (`adaptive`) ended after `spin_cycles`.
    /// `decider` is the owner-state source whose verdict was last consulted
    /// (the one that ended the spin when the owner stopped running), `None`
    /// when no source had an answer. Called by the one thread allowed to
    /// spin on the lock, once per spin.
    #[inline(always)]
    fn spun(&self, spin_cycles: u64, decider: Option<Decider>) {
        let _ = (spin_cycles, decider);
    }
}

/// The recorder that records nothing, at no cost.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoStats;

impl Recorder for NoStats {
    const INIT: Self = NoStats;
    const ENABLED: bool = false;
    #[inline(always)]
    fn acquired(&self, _: AcquireKind, _: u64) {}
    #[inline(always)]
    fn rejected(&self) {}
    #[inline(always)]
    fn timed_out(&self, _: u64) {}
    #[inline(always)]
    fn releasing(&self) {}
}

/// Cycle stamp taken at the start of a wait, only when recording.
#[inline(always)]
pub(crate) fn wait_start<R: Recorder>() -> u64 {
    if R::ENABLED {
        crate::clock::cycles()
    } else {
        0
    }
}

/// Cycles since `start`, only when recording.
#[inline(always)]
pub(crate) fn waited<R: Recorder>(start: u64) -> u64 {
    if R::ENABLED {
        crate::clock::cycles().wrapping_sub(start)
    } else {
        0
    }
}
