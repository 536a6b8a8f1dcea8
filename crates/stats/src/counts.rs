//! A lighter recorder: how each acquisition was obtained, without time
//! stamps. It costs a few plain loads and stores under the lock, so a
//! benchmark can report SPIN and SLEEP for our locks without slowing them
//! the way full statistics (two cycle-counter reads per acquisition) would.

use lockmeter_locks::{AcquireKind, Recorder};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Acquisition counts by kind.
#[derive(Default)]
pub struct Counts {
    acquisitions: AtomicU64,
    spin: AtomicU64,
    sleep: AtomicU64,
    rejected: AtomicU64,
}

/// A copy of [`Counts`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CountsSnapshot {
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Acquisitions that waited without sleeping.
    pub spin: u64,
    /// Acquisitions that slept.
    pub sleep: u64,
    /// Trylock failures.
    pub rejected: u64,
}

impl CountsSnapshot {
    /// Acquisitions that had to wait.
    pub fn contended(&self) -> u64 {
        self.spin + self.sleep
    }
}

impl Counts {
    /// The counts so far.
    pub fn snapshot(&self) -> CountsSnapshot {
        CountsSnapshot {
            acquisitions: self.acquisitions.load(Relaxed),
            spin: self.spin.load(Relaxed),
            sleep: self.sleep.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
        }
    }
}

/// Adds one to a counter only the lock holder writes (see `LockStats`).
#[inline]
fn holder_increment(counter: &AtomicU64) {
    counter.store(counter.load(Relaxed) + 1, Relaxed);
}

impl Recorder for Counts {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Counts {
        acquisitions: AtomicU64::new(0),
        spin: AtomicU64::new(0),
        sleep: AtomicU64::new(0),
        rejected: AtomicU64::new(0),
    };
    const ENABLED: bool = false;

    #[inline]
    fn acquired(&self, kind: AcquireKind, _wait_cycles: u64) {
        holder_increment(&self.acquisitions);
        match kind {
            AcquireKind::NoWait => {}
            AcquireKind::Spin => holder_increment(&self.spin),
            AcquireKind::Sleep => holder_increment(&self.sleep),
        }
    }
    #[inline]
    fn rejected(&self) {
        self.rejected.fetch_add(1, Relaxed);
    }
    #[inline]
    fn timed_out(&self, _wait_cycles: u64) {}
    #[inline]
    fn releasing(&self) {}
}
