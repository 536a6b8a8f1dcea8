//! The locks a benchmark can run: ours (by algorithm) and the peers.

use lockmeter_locks::{Algorithm, RawAdaptive, RawFutex, RawFutexTid, RawMcs, RawPi, RawSpin, RawTicket, Recorder};
use lockmeter_stats::{Counts, CountsSnapshot, LockStats, Snapshot};
use std::cell::UnsafeCell;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// A lock under test: runs a critical section.
pub trait BenchLock: Send + Sync + 'static {
    /// Runs `f` with the lock held.
    fn critical<T>(&self, f: impl FnOnce() -> T) -> T;
    /// The lock's full statistics, if it records them.
    fn stats(&self) -> Option<Snapshot> {
        None
    }
    /// How the lock's acquisitions were obtained, if it counts them.
    fn counts(&self) -> Option<CountsSnapshot> {
        None
    }
}

/// What one of our locks records while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Recording {
    /// Nothing (the production configuration).
    Off,
    /// Acquisition counts by kind, no time stamps (what `bench` uses).
    Counts,
    /// Full statistics: counts, wait and hold times, histogram.
    Full,
}

/// Something to do with a lock, whatever its type.
pub trait LockVisitor {
    /// What the visit produces.
    type Output;
    /// Runs with locks made by `make` (called once per lock needed).
    fn visit<L: BenchLock>(self, make: impl Fn() -> L + Send + Sync + Clone + 'static) -> Self::Output;
}

/// Which lock to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockKind {
    /// One of ours.
    Ours {
        /// The algorithm.
        algorithm: Algorithm,
        /// What it records.
        recording: Recording,
    },
    /// glibc's default pthread mutex (PTHREAD_MUTEX_NORMAL).
    Glibc,
    /// glibc's PTHREAD_MUTEX_ADAPTIVE_NP (spins a bounded count first).
    GlibcAdaptive,
    /// glibc's PTHREAD_PRIO_INHERIT mutex (the PI futex).
    GlibcPi,
    /// `std::sync::Mutex`.
    Std,
    /// `parking_lot::Mutex`.
    ParkingLot,
    /// A bare test-and-set flag: the floor of a lock+unlock pair's cost
    /// (not a usable lock: it never sleeps and has no backoff).
    TasFloor,
    /// A compare-exchange lock and an exchange unlock: the floor of a pair
    /// for a lock that can sleep, whose unlock must learn atomically
    /// whether anyone sleeps (two locked instructions where `tas-floor`
    /// has one; not a usable lock either).
    CasFloor,
    /// One of ours with one decision changed, for experiments.
    Variant {
        /// Which.
        variant: Variant,
        /// What it records.
        recording: Recording,
    },
}

/// Our locks with one decision changed: what the decision is worth is the
/// difference to the plain lock in the same run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// `adaptive` asking the on-CPU table (a BPF program loaded for the
    /// run; needs CAP_BPF and CAP_PERFMON, or root) whether its owner runs.
    AdaptiveOnCpu,
    /// `adaptive` that keeps spinning when the lock changes owner (the
    /// kernel mutex before seed 000's patch).
    AdaptiveNoBail,
    /// `ticket` checking the lock after every pause (seed 003 without its
    /// proportional backoff).
    TicketNoBackoff,
    /// `adaptive` whose spinner reads the lock word after every pause.
    AdaptiveNoBackoff,
    /// `adaptive` whose spinner takes the lock the moment it sees it free,
    /// giving the owner no grace to take it back.
    AdaptiveEager,
    /// `adaptive` whose waiters sleep when their spin ends even if the
    /// CPU would go idle.
    AdaptiveIdleSleep,
}

impl Variant {
    /// Every variant.
    pub const ALL: [Variant; 6] = [
        Variant::AdaptiveOnCpu,
        Variant::AdaptiveNoBail,
        Variant::TicketNoBackoff,
        Variant::AdaptiveNoBackoff,
        Variant::AdaptiveEager,
        Variant::AdaptiveIdleSleep,
    ];

    /// The stable name.
    pub const fn name(self) -> &'static str {
        match self {
            Variant::AdaptiveOnCpu => "adaptive-oncpu",
            Variant::AdaptiveNoBail => "adaptive-nobail",
            Variant::TicketNoBackoff => "ticket-nobackoff",
            Variant::AdaptiveNoBackoff => "adaptive-nobackoff",
            Variant::AdaptiveEager => "adaptive-eager",
            Variant::AdaptiveIdleSleep => "adaptive-idlesleep",
        }
    }

    /// The algorithm it changes.
    pub const fn algorithm(self) -> Algorithm {
        match self {
            Variant::AdaptiveOnCpu
            | Variant::AdaptiveNoBail
            | Variant::AdaptiveNoBackoff
            | Variant::AdaptiveEager
            | Variant::AdaptiveIdleSleep => Algorithm::Adaptive,
            Variant::TicketNoBackoff => Algorithm::Ticket,
        }
    }
}

impl LockKind {
    /// The peers, in report order.
    pub const PEERS: [LockKind; 5] =
        [LockKind::Glibc, LockKind::GlibcAdaptive, LockKind::GlibcPi, LockKind::Std, LockKind::ParkingLot];

    /// The floors: bare instructions a pair costs at least, not locks.
    pub const FLOORS: [LockKind; 2] = [LockKind::TasFloor, LockKind::CasFloor];

    /// Our algorithms, recording nothing.
    pub fn ours() -> impl Iterator<Item = LockKind> {
        Algorithm::ALL.into_iter().map(|algorithm| LockKind::Ours { algorithm, recording: Recording::Off })
    }

    /// The same lock, recording as said (peers record nothing).
    pub fn recording(self, recording: Recording) -> LockKind {
        match self {
            LockKind::Ours { algorithm, .. } => LockKind::Ours { algorithm, recording },
            LockKind::Variant { variant, .. } => LockKind::Variant { variant, recording },
            peer => peer,
        }
    }

    /// The stable name.
    pub fn name(self) -> &'static str {
        match self {
            LockKind::Ours { algorithm, .. } => algorithm.name(),
            LockKind::Glibc => "glibc",
            LockKind::GlibcAdaptive => "glibc-adaptive",
            LockKind::GlibcPi => "glibc-pi",
            LockKind::Std => "std",
            LockKind::ParkingLot => "parking_lot",
            LockKind::TasFloor => "tas-floor",
            LockKind::CasFloor => "cas-floor",
            LockKind::Variant { variant, .. } => variant.name(),
        }
    }

    /// The variant, if this is one.
    pub fn variant(self) -> Option<Variant> {
        match self {
            LockKind::Variant { variant, .. } => Some(variant),
            _ => None,
        }
    }

    /// The name for tables: the stable name, with "+stats" for one of ours
    /// that records statistics.
    pub fn label(self) -> String {
        match self {
            LockKind::Ours { recording: Recording::Full, .. } | LockKind::Variant { recording: Recording::Full, .. } => {
                format!("{}+stats", self.name())
            }
            other => other.name().to_string(),
        }
    }

    /// Whether this is one of our algorithms.
    pub fn is_ours(self) -> bool {
        matches!(self, LockKind::Ours { .. } | LockKind::Variant { .. })
    }

    /// Whether `name`, as reports give it, is one of the peers.
    pub fn is_peer_name(name: &str) -> bool {
        LockKind::PEERS.iter().any(|peer| peer.name() == name)
    }

    /// Runs `visitor` with this kind of lock.
    pub fn visit<V: LockVisitor>(self, visitor: V) -> V::Output {
        fn ours<V: LockVisitor, R: Recorder + SnapshotSource + Send + 'static>(a: Algorithm, v: V) -> V::Output {
            match a {
                Algorithm::Adaptive => v.visit(Raw::<RawAdaptive<R>>::default),
                Algorithm::Futex => v.visit(Raw::<RawFutex<R>>::default),
                Algorithm::FutexTid => v.visit(Raw::<RawFutexTid<R>>::default),
                Algorithm::Pi => v.visit(Raw::<RawPi<R>>::default),
                Algorithm::Ticket => v.visit(Raw::<RawTicket<R>>::default),
                Algorithm::Mcs => v.visit(Raw::<RawMcs<R>>::default),
                Algorithm::Spin => v.visit(Raw::<RawSpin<R>>::default),
            }
        }
        match self {
            LockKind::Ours { algorithm, recording: Recording::Off } => {
                ours::<V, lockmeter_locks::NoStats>(algorithm, visitor)
            }
            LockKind::Ours { algorithm, recording: Recording::Counts } => ours::<V, Counts>(algorithm, visitor),
            LockKind::Ours { algorithm, recording: Recording::Full } => ours::<V, LockStats>(algorithm, visitor),
            // The same lock as its algorithm: the experiment switches the
            // decision while the variant runs (see `variants.rs`).
            LockKind::Variant { variant, recording } => {
                LockKind::Ours { algorithm: variant.algorithm(), recording }.visit(visitor)
            }
            LockKind::Glibc => visitor.visit(|| GlibcMutex::new(libc::PTHREAD_MUTEX_NORMAL, false)),
            LockKind::GlibcAdaptive => visitor.visit(|| GlibcMutex::new(PTHREAD_MUTEX_ADAPTIVE_NP, false)),
            LockKind::GlibcPi => visitor.visit(|| GlibcMutex::new(libc::PTHREAD_MUTEX_NORMAL, true)),
            LockKind::Std => visitor.visit(|| std::sync::Mutex::new(())),
            LockKind::ParkingLot => visitor.visit(|| parking_lot::Mutex::new(())),
            LockKind::TasFloor => visitor.visit(|| TasFloor(AtomicBool::new(false))),
            LockKind::CasFloor => visitor.visit(|| CasFloor(AtomicU32::new(0))),
        }
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LockKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(algorithm) = s.parse::<Algorithm>() {
            return Ok(LockKind::Ours { algorithm, recording: Recording::Off });
        }
        LockKind::PEERS
            .into_iter()
            .chain(LockKind::FLOORS)
            .chain(Variant::ALL.map(|variant| LockKind::Variant { variant, recording: Recording::Off }))
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown lock '{s}'"))
    }
}

/// One of our raw locks.
pub struct Raw<L>(L);

impl<L: lock_api::RawMutex> Default for Raw<L> {
    fn default() -> Self {
        Raw(L::INIT)
    }
}

/// Access to a raw lock's recorder, whatever the algorithm.
pub trait HasRecorder {
    /// The recorder type.
    type Rec: SnapshotSource;
    /// The recorder.
    fn rec(&self) -> &Self::Rec;
}

/// A recorder that may be able to report what it recorded.
pub trait SnapshotSource {
    /// The full statistics so far, if this recorder keeps them.
    fn snapshot_if_any(&self) -> Option<Snapshot> {
        None
    }
    /// The acquisition counts so far, if this recorder keeps them.
    fn counts_if_any(&self) -> Option<CountsSnapshot> {
        None
    }
}

impl SnapshotSource for lockmeter_locks::NoStats {}

impl SnapshotSource for Counts {
    fn counts_if_any(&self) -> Option<CountsSnapshot> {
        Some(self.snapshot())
    }
}

impl SnapshotSource for LockStats {
    fn snapshot_if_any(&self) -> Option<Snapshot> {
        Some(self.snapshot())
    }
    fn counts_if_any(&self) -> Option<CountsSnapshot> {
        let s = self.snapshot();
        Some(CountsSnapshot { acquisitions: s.acquisitions, spin: s.spin, sleep: s.sleep, rejected: s.rejected, ..Default::default() })
    }
}

macro_rules! has_recorder {
    ($($raw:ident),*) => {$(
        impl<R: Recorder + SnapshotSource> HasRecorder for $raw<R> {
            type Rec = R;
            fn rec(&self) -> &R {
                self.recorder()
            }
        }
    )*};
}
has_recorder!(RawAdaptive, RawFutex, RawFutexTid, RawPi, RawTicket, RawMcs, RawSpin);

impl<M> BenchLock for Raw<M>
where
    M: lock_api::RawMutex + HasRecorder + Send + Sync + 'static,
{
    #[inline]
    fn critical<T>(&self, f: impl FnOnce() -> T) -> T {
        self.0.lock();
        let out = f();
        // SAFETY: locked just above, on this thread.
        unsafe { self.0.unlock() };
        out
    }
    fn stats(&self) -> Option<Snapshot> {
        self.0.rec().snapshot_if_any()
    }
    fn counts(&self) -> Option<CountsSnapshot> {
        self.0.rec().counts_if_any()
    }
}

impl BenchLock for std::sync::Mutex<()> {
    #[inline]
    fn critical<T>(&self, f: impl FnOnce() -> T) -> T {
        let _g = self.lock().unwrap_or_else(|e| e.into_inner());
        f()
    }
}

impl BenchLock for parking_lot::Mutex<()> {
    #[inline]
    fn critical<T>(&self, f: impl FnOnce() -> T) -> T {
        let _g = self.lock();
        f()
    }
}

/// glibc's PTHREAD_MUTEX_ADAPTIVE_NP.
const PTHREAD_MUTEX_ADAPTIVE_NP: libc::c_int = 3;

/// A glibc pthread mutex, boxed so it never moves after initialisation.
pub struct GlibcMutex(Box<UnsafeCell<libc::pthread_mutex_t>>);

// SAFETY: a pthread mutex is made to be shared between threads.
unsafe impl Send for GlibcMutex {}
// SAFETY: as above.
unsafe impl Sync for GlibcMutex {}

impl GlibcMutex {
    fn new(kind: libc::c_int, priority_inheritance: bool) -> Self {
        let mutex = Box::new(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));
        // SAFETY: attr and mutex are valid, initialised in place, and the
        // attribute is destroyed after use.
        unsafe {
            let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
            libc::pthread_mutexattr_init(attr.as_mut_ptr());
            libc::pthread_mutexattr_settype(attr.as_mut_ptr(), kind);
            if priority_inheritance {
                libc::pthread_mutexattr_setprotocol(attr.as_mut_ptr(), libc::PTHREAD_PRIO_INHERIT);
            }
            libc::pthread_mutex_init(mutex.get(), attr.as_ptr());
            libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
        }
        GlibcMutex(mutex)
    }
}

impl BenchLock for GlibcMutex {
    #[inline]
    fn critical<T>(&self, f: impl FnOnce() -> T) -> T {
        // SAFETY: the mutex was initialised and lives as long as self.
        unsafe { libc::pthread_mutex_lock(self.0.get()) };
        let out = f();
        // SAFETY: locked just above, on this thread.
        unsafe { libc::pthread_mutex_unlock(self.0.get()) };
        out
    }
}

impl Drop for GlibcMutex {
    fn drop(&mut self) {
        // SAFETY: nobody holds it any more (we own it).
        unsafe { libc::pthread_mutex_destroy(self.0.get()) };
    }
}

/// The test-and-set floor.
pub struct TasFloor(AtomicBool);

impl BenchLock for TasFloor {
    #[inline]
    fn critical<T>(&self, f: impl FnOnce() -> T) -> T {
        while self.0.swap(true, Ordering::Acquire) {
            std::hint::spin_loop();
        }
        let out = f();
        self.0.store(false, Ordering::Release);
        out
    }
}

/// The two-instruction floor: what every lock here that can sleep pays
/// at least (a compare-exchange to take the word, an exchange to free it
/// that returns whether sleepers marked it).
pub struct CasFloor(AtomicU32);

impl BenchLock for CasFloor {
    #[inline]
    fn critical<T>(&self, f: impl FnOnce() -> T) -> T {
        while self.0.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            std::hint::spin_loop();
        }
        let out = f();
        // The value returned is what a sleeping lock's unlock would test;
        // the instruction is made whether or not it is read.
        self.0.swap(0, Ordering::Release);
        out
    }
}
