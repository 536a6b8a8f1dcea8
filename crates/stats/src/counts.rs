//! A lighter recorder: how each acquisition was obtained, without time
//! stamps. It costs a few plain loads and stores under the lock, so a
//! benchmark can report SPIN and SLEEP for our locks without slowing them
//! the way full statistics (two cycle-counter reads per acquisition) would.

use lockmeter_locks::oracle::Decider;
use lockmeter_locks::{AcquireKind, Recorder};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Acquisition counts by kind.
#[derive(Default)]
pub struct Counts {
    acquisitions: AtomicU64,
    spin: AtomicU64,
    sleep: AtomicU64,
    rejected: AtomicU64,
    spins: SpinCounters,
}

/// Spins on a running owner, by the source that decided them.
#[derive(Default)]
struct SpinCounters {
    by_table: AtomicU64,
    by_clock: AtomicU64,
    undecided: AtomicU64,
    cycles: AtomicU64,
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
    /// Spins on the owner (`adaptive`), by the source that decided them.
    pub spins: SpinsSnapshot,
}

/// Spins on a running owner and who decided them: the on-CPU table, the
/// owner's CPU clock, or neither (the spin ended before any verdict).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpinsSnapshot {
    /// Spins whose last verdict came from the on-CPU table.
    pub by_table: u64,
    /// Spins whose last verdict came from the owner's CPU clock.
    pub by_clock: u64,
    /// Spins that ended before any source answered.
    pub undecided: u64,
    /// Cycles spent spinning in all of them.
    pub cycles: u64,
}

impl SpinsSnapshot {
    /// Every spin.
    pub fn total(&self) -> u64 {
        self.by_table + self.by_clock + self.undecided
    }
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
            spins: SpinsSnapshot {
                by_table: self.spins.by_table.load(Relaxed),
                by_clock: self.spins.by_clock.load(Relaxed),
                undecided: self.spins.undecided.load(Relaxed),
                cycles: self.spins.cycles.load(Relaxed),
            },
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
        spins: SpinCounters {
            by_table: AtomicU64::new(0),
            by_clock: AtomicU64::new(0),
            undecided: AtomicU64::new(0),
            cycles: AtomicU64::new(0),
        },
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
    /// Only the one thread holding a lock's spinner slot calls this, so
    /// plain load+store increments are exact.
    #[inline]
    fn spun(&self, spin_cycles: u64, decider: Option<Decider>) {
        holder_increment(match decider {
            Some(Decider::Table) => &self.spins.by_table,
            Some(Decider::CpuClock) => &self.spins.by_clock,
            None => &self.spins.undecided,
        });
        self.spins.cycles.store(self.spins.cycles.load(Relaxed) + spin_cycles, Relaxed);
    }
}
