//! The algorithms by name: the stable names used by the CLI, JSON output
//! and the C ABI.

use std::fmt;
use std::str::FromStr;

/// One of the lock algorithms. The discriminant is stable (the C ABI and
/// the all-zero initialiser rely on `Adaptive` being 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum Algorithm {
    /// Owner-aware adaptive spinning, then futex sleep.
    Adaptive = 0,
    /// Three-state futex mutex.
    Futex = 1,
    /// TID|WAITERS futex mutex.
    FutexTid = 2,
    /// Priority-inheritance futex.
    Pi = 3,
    /// Ticket lock with proportional backoff.
    Ticket = 4,
    /// MCS queue lock.
    Mcs = 5,
    /// Test-and-test-and-set spinlock.
    Spin = 6,
}

impl Algorithm {
    /// Every algorithm, flagship first.
    pub const ALL: [Algorithm; 7] = [
        Algorithm::Adaptive,
        Algorithm::Futex,
        Algorithm::FutexTid,
        Algorithm::Pi,
        Algorithm::Ticket,
        Algorithm::Mcs,
        Algorithm::Spin,
    ];

    /// The stable name.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Adaptive => "adaptive",
            Algorithm::Futex => "futex",
            Algorithm::FutexTid => "futex-tid",
            Algorithm::Pi => "pi",
            Algorithm::Ticket => "ticket",
            Algorithm::Mcs => "mcs",
            Algorithm::Spin => "spin",
        }
    }

    /// One line on what it is and when to pick it.
    pub const fn summary(self) -> &'static str {
        match self {
            Algorithm::Adaptive => "spins only while the owner runs on a CPU, stops when the owner changes, else sleeps; the default",
            Algorithm::Futex => "0/1/2 futex mutex without spinning: the baseline every lock must beat",
            Algorithm::FutexTid => "TID|WAITERS futex mutex without spinning: the price of knowing the owner",
            Algorithm::Pi => "kernel priority-inheritance futex: for real-time threads, slow under contention",
            Algorithm::Ticket => "FIFO ticket lock with auto-tuned proportional backoff; when oversubscribed, a gate keeps the line to the CPUs",
            Algorithm::Mcs => "FIFO MCS queue lock: waiters spin on their own node, then park",
            Algorithm::Spin => "test-and-test-and-set with backoff, never sleeps: collapses when oversubscribed",
        }
    }

    /// The algorithm with this discriminant.
    pub fn from_index(index: u32) -> Option<Algorithm> {
        Algorithm::ALL.get(index as usize).copied()
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An algorithm name that is not one of ours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownAlgorithm(pub String);

impl fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
        write!(f, "unknown lock algorithm '{}' (expected one of: {})", self.0, names.join(", "))
    }
}

impl std::error::Error for UnknownAlgorithm {}

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .iter()
            .copied()
            .find(|a| a.name() == s)
            .ok_or_else(|| UnknownAlgorithm(s.to_string()))
    }
}
