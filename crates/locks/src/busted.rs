//! `busted`: a deliberately broken lock, so that `lockmeter torture` can
//! show it catches broken exclusion (the kernel's locktorture ships
//! `lock_busted` for the same reason).
//!
//! Its lock is a test-and-test-and-set whose "set" is a plain store
//! instead of an atomic exchange: two threads that both see the lock free
//! both take it. It is not an [`crate::Algorithm`], replace mode refuses
//! it, and nothing should ever use it to protect data.

use crate::sync::{spin_hint, AtomicU32, Ordering};

/// The broken lock.
pub struct RawBusted {
    word: AtomicU32,
}

impl RawBusted {
    crate::sync::const_unless_loom! {
        /// An unlocked (so to speak) lock.
        pub fn new() -> Self {
            RawBusted { word: AtomicU32::new(0) }
        }
    }

    /// "Acquires" the lock: waits until it looks free, then marks it taken
    /// without checking that nobody else did the same in between.
    pub fn lock(&self) {
        loop {
            if self.word.load(Ordering::Acquire) == 0 {
                // The bug: the window between seeing 0 and storing 1, made
                // a little wider so the torture needs no luck to hit it.
                for _ in 0..8 {
                    spin_hint();
                }
                self.word.store(1, Ordering::Relaxed);
                return;
            }
            spin_hint();
        }
    }

    /// Takes the lock if it looks free (same bug).
    pub fn try_lock(&self) -> bool {
        if self.word.load(Ordering::Acquire) != 0 {
            return false;
        }
        self.word.store(1, Ordering::Relaxed);
        true
    }

    /// Releases the lock.
    pub fn unlock(&self) {
        self.word.store(0, Ordering::Release);
    }
}

#[cfg(not(loom))]
impl Default for RawBusted {
    fn default() -> Self {
        Self::new()
    }
}
