//! A mutex whose algorithm is chosen at run time, for the C ABI and for
//! serving other programs' `pthread_mutex_t`: the tag and the chosen lock's
//! state, 24 bytes, valid when all-zero (an unlocked `adaptive`).

use crate::{Algorithm, RawAdaptive, RawFutex, RawFutexTid, RawMcs, RawPi, RawSpin, RawTicket};
use std::time::Instant;

/// A mutex of any algorithm, dispatched by a tag.
#[repr(C, u32)]
pub enum AnyMutex {
    /// See [`RawAdaptive`].
    Adaptive(RawAdaptive) = Algorithm::Adaptive as u32,
    /// See [`RawFutex`].
    Futex(RawFutex) = Algorithm::Futex as u32,
    /// See [`RawFutexTid`].
    FutexTid(RawFutexTid) = Algorithm::FutexTid as u32,
    /// See [`RawPi`].
    Pi(RawPi) = Algorithm::Pi as u32,
    /// See [`RawTicket`].
    Ticket(RawTicket) = Algorithm::Ticket as u32,
    /// See [`RawMcs`].
    Mcs(RawMcs) = Algorithm::Mcs as u32,
    /// See [`RawSpin`].
    Spin(RawSpin) = Algorithm::Spin as u32,
}

/// Dispatches `$body` on the concrete lock inside `$any`.
macro_rules! dispatch {
    ($any:expr, $lock:ident => $body:expr) => {
        match $any {
            AnyMutex::Adaptive($lock) => $body,
            AnyMutex::Futex($lock) => $body,
            AnyMutex::FutexTid($lock) => $body,
            AnyMutex::Pi($lock) => $body,
            AnyMutex::Ticket($lock) => $body,
            AnyMutex::Mcs($lock) => $body,
            AnyMutex::Spin($lock) => $body,
        }
    };
}

impl AnyMutex {
    /// An unlocked mutex of `algorithm`.
    pub const fn new(algorithm: Algorithm) -> Self {
        match algorithm {
            Algorithm::Adaptive => AnyMutex::Adaptive(RawAdaptive::new()),
            Algorithm::Futex => AnyMutex::Futex(RawFutex::new()),
            Algorithm::FutexTid => AnyMutex::FutexTid(RawFutexTid::new()),
            Algorithm::Pi => AnyMutex::Pi(RawPi::new()),
            Algorithm::Ticket => AnyMutex::Ticket(RawTicket::new()),
            Algorithm::Mcs => AnyMutex::Mcs(RawMcs::new()),
            Algorithm::Spin => AnyMutex::Spin(RawSpin::new()),
        }
    }

    /// Which algorithm this is.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            AnyMutex::Adaptive(_) => Algorithm::Adaptive,
            AnyMutex::Futex(_) => Algorithm::Futex,
            AnyMutex::FutexTid(_) => Algorithm::FutexTid,
            AnyMutex::Pi(_) => Algorithm::Pi,
            AnyMutex::Ticket(_) => Algorithm::Ticket,
            AnyMutex::Mcs(_) => Algorithm::Mcs,
            AnyMutex::Spin(_) => Algorithm::Spin,
        }
    }

    /// Acquires the lock.
    pub fn lock(&self) {
        dispatch!(self, l => l.lock())
    }

    /// Acquires the lock if free.
    pub fn try_lock(&self) -> bool {
        dispatch!(self, l => l.try_lock())
    }

    /// Acquires the lock unless `deadline` passes first (`mcs` and
    /// `ticket` leave their place in line to the unlock that reaches it).
    pub fn lock_until(&self, deadline: Instant) -> bool {
        match self {
            AnyMutex::Adaptive(l) => l.lock_until(deadline),
            AnyMutex::Futex(l) => l.lock_until(deadline),
            AnyMutex::FutexTid(l) => l.lock_until(deadline),
            AnyMutex::Pi(l) => l.lock_until(deadline),
            AnyMutex::Spin(l) => l.lock_until(deadline),
            AnyMutex::Mcs(l) => l.lock_until(deadline),
            AnyMutex::Ticket(l) => l.lock_until(deadline),
        }
    }

    /// Releases the lock.
    ///
    /// # Safety
    /// The calling thread must hold the lock.
    pub unsafe fn unlock(&self) {
        // SAFETY: forwarded caller contract.
        dispatch!(self, l => unsafe { l.unlock() })
    }

    /// Releases the lock for whichever thread holds it, as
    /// `pthread_mutex_unlock` of a normal mutex allows; returns false, the
    /// lock still held, for `pi` unlocked by a thread that does not hold
    /// it (the kernel refuses, and glibc's PI mutex returns EPERM). Only
    /// `adaptive` needs a path of its own otherwise: its unlock subtracts
    /// the caller's tid from the word.
    ///
    /// # Safety
    /// The lock must be held, and its holder must not also release it.
    pub unsafe fn unlock_from_any_thread(&self) -> bool {
        match self {
            // SAFETY: forwarded caller contract.
            AnyMutex::Adaptive(l) => unsafe { l.unlock_from_any_thread() },
            // SAFETY: forwarded caller contract.
            AnyMutex::Pi(l) => return unsafe { l.release() },
            // SAFETY: forwarded caller contract.
            _ => unsafe { self.unlock() },
        }
        true
    }

    /// Whether the lock is held (or, for the queue locks, waited for).
    pub fn is_locked(&self) -> bool {
        dispatch!(self, l => l.is_locked())
    }
}

// SAFETY: forwards to the chosen algorithm, each of which is a RawMutex.
unsafe impl lock_api::RawMutex for AnyMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = AnyMutex::new(Algorithm::Adaptive);
    type GuardMarker = lock_api::GuardNoSend;
    fn lock(&self) {
        AnyMutex::lock(self)
    }
    fn try_lock(&self) -> bool {
        AnyMutex::try_lock(self)
    }
    unsafe fn unlock(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { AnyMutex::unlock(self) }
    }
    fn is_locked(&self) -> bool {
        AnyMutex::is_locked(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_in_pthread_storage() {
        assert!(std::mem::size_of::<AnyMutex>() <= 40, "pthread_mutex_t is 40 bytes");
        assert!(std::mem::align_of::<AnyMutex>() <= 8);
        assert!(std::mem::size_of::<crate::Condvar>() <= 48, "pthread_cond_t is 48 bytes");
    }

    #[test]
    fn all_zero_is_an_unlocked_adaptive() {
        let zeroed: AnyMutex = unsafe { std::mem::zeroed() };
        assert_eq!(zeroed.algorithm(), Algorithm::Adaptive);
        assert!(!zeroed.is_locked());
        zeroed.lock();
        assert!(zeroed.is_locked());
        unsafe { zeroed.unlock() };
    }

    #[test]
    fn names_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
            assert_eq!(Algorithm::from_index(a as u32), Some(a));
        }
        let err = "fastest".parse::<Algorithm>().unwrap_err().to_string();
        assert!(err.contains("unknown lock algorithm 'fastest'") && err.contains("adaptive"), "{err}");
    }
}
