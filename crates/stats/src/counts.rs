//! A lighter recorder: how each acquisition was obtained, without time
//! stamps, so a benchmark can report SPIN and SLEEP for our locks without
//! slowing them the way full statistics (two cycle-counter reads per
//! acquisition) would.
//!
//! An acquisition that waited is counted by its thread in a slot of its
//! own, on a cache line of its own, away from the lock. The counters used
//! to sit in the lock beside its word, and a holder that had waited wrote
//! them right after it took the lock: the next waiter was by then polling
//! that line, and the holder's stores waited for it to come back. That
//! lengthened every critical section the bench timed (2 µs sections at 2
//! threads: 2.10-2.16 µs on average against 2.04-2.06 for the same work
//! under std's mutex), and cost our locks 2-5% against the peers, which
//! record nothing: a measurement that slowed what it measured.
//! Acquisitions that did not wait are still counted in the lock: the
//! holder has the line to itself from the compare-exchange that took it,
//! and a slot's look-up cost the uncontended pair 2-4%.

use lockmeter_locks::oracle::Decider;
use lockmeter_locks::{AcquireKind, Recorder};
use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering, Ordering::Relaxed};

/// Acquisition counts by kind.
pub struct Counts {
    /// Acquisitions that did not wait; written by the holder only.
    without_wait: AtomicU64,
    /// Per-thread slots for the rest, allocated on first use: a lock that
    /// never waited stays small, and shares cache lines with its
    /// neighbours as the production lock would.
    slots: AtomicPtr<Slots>,
}

/// Threads that get a slot of their own at once; more share
/// `OVERFLOW_SLOT`, with atomic additions.
const SLOTS: usize = 1024;
/// The slot every thread beyond `SLOTS` shares.
const OVERFLOW_SLOT: usize = SLOTS;

type Slots = [Slot; SLOTS + 1];

/// One thread's counters: one cache line, written by that thread only
/// (except the overflow slot).
#[derive(Default)]
#[repr(align(64))]
struct Slot {
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
    /// The counts so far, summed over the threads.
    pub fn snapshot(&self) -> CountsSnapshot {
        let mut total = CountsSnapshot::default();
        if let Some(slots) = self.slots_if_any() {
            for slot in slots.iter() {
                    total.spin += slot.spin.load(Relaxed);
                total.sleep += slot.sleep.load(Relaxed);
                total.rejected += slot.rejected.load(Relaxed);
                total.spins.by_table += slot.spins.by_table.load(Relaxed);
                total.spins.by_clock += slot.spins.by_clock.load(Relaxed);
                total.spins.undecided += slot.spins.undecided.load(Relaxed);
                total.spins.cycles += slot.spins.cycles.load(Relaxed);
            }
        }
        total.acquisitions = self.without_wait.load(Relaxed) + total.spin + total.sleep;
        total
    }

    #[inline]
    fn slots_if_any(&self) -> Option<&Slots> {
        let slots = self.slots.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is a leaked box this recorder owns
        // until it is dropped (see `slots`).
        (!slots.is_null()).then(|| unsafe { &*slots })
    }

    /// The calling thread's slot, and whether the thread has it to itself.
    #[inline]
    fn my_slot(&self) -> (&Slot, bool) {
        let index = slot_index();
        (&self.slots()[index], index != OVERFLOW_SLOT)
    }

    #[inline]
    fn slots(&self) -> &Slots {
        match self.slots_if_any() {
            Some(slots) => slots,
            None => self.allocate_slots(),
        }
    }

    #[cold]
    fn allocate_slots(&self) -> &Slots {
        // Built on the heap: 64 KiB is too much for a small thread stack.
        let slots: Box<[Slot]> = (0..=SLOTS).map(|_| Slot::default()).collect();
        let fresh = Box::into_raw(<Box<Slots>>::try_from(slots).unwrap_or_else(|_| unreachable!("SLOTS + 1 slots")));
        match self.slots.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: just installed; freed only by `drop`.
            Ok(_) => unsafe { &*fresh },
            Err(installed) => {
                // SAFETY: `fresh` was never shared; `installed` is owned by
                // this recorder until it is dropped.
                unsafe {
                    drop(Box::from_raw(fresh));
                    &*installed
                }
            }
        }
    }
}

impl Drop for Counts {
    fn drop(&mut self) {
        let slots = *self.slots.get_mut();
        if !slots.is_null() {
            // SAFETY: allocated by `allocate_slots` as a box, and nobody
            // can use the recorder any more.
            drop(unsafe { Box::from_raw(slots) });
        }
    }
}

impl Default for Counts {
    fn default() -> Self {
        Counts::INIT
    }
}

/// Bitmap of the slot indices threads hold (`SLOTS` bits).
static LEASED: [AtomicU64; SLOTS / 64] = [const { AtomicU64::new(0) }; SLOTS / 64];

/// A slot index of no thread yet.
const UNCLAIMED: usize = usize::MAX;

thread_local! {
    /// The calling thread's slot index in every `Counts`.
    static SLOT_INDEX: Cell<usize> = const { Cell::new(UNCLAIMED) };
    /// Gives the index back when the thread exits.
    static LEASE: Lease = const { Lease };
}

/// The calling thread's slot index.
#[inline]
fn slot_index() -> usize {
    match SLOT_INDEX.with(Cell::get) {
        UNCLAIMED => claim_slot_index(),
        index => index,
    }
}

#[cold]
fn claim_slot_index() -> usize {
    let index = lease_free_index().unwrap_or(OVERFLOW_SLOT);
    SLOT_INDEX.with(|cell| cell.set(index));
    if index != OVERFLOW_SLOT {
        // Registers the lease's destructor; a thread already past its
        // destructors cannot, and keeps the index for good.
        let _ = LEASE.try_with(|_| ());
    }
    index
}

fn lease_free_index() -> Option<usize> {
    for (word_index, word) in LEASED.iter().enumerate() {
        let mut bits = word.load(Relaxed);
        while bits != u64::MAX {
            let free = (!bits).trailing_zeros() as usize;
            // Acquire: the slot's counters as the last holder left them.
            match word.compare_exchange_weak(bits, bits | 1 << free, Ordering::Acquire, Relaxed) {
                Ok(_) => return Some(word_index * 64 + free),
                Err(now) => bits = now,
            }
        }
    }
    None
}

/// Returns the thread's slot index when the thread exits. The counts stay
/// in the slot; the next thread to hold the index adds to them.
struct Lease;

impl Drop for Lease {
    fn drop(&mut self) {
        let index = SLOT_INDEX.with(|cell| cell.replace(OVERFLOW_SLOT));
        if index < SLOTS {
            // Release: the next holder of the index continues these counts.
            LEASED[index / 64].fetch_and(!(1 << (index % 64)), Ordering::Release);
        }
    }
}

/// Adds `n` to a counter of the caller's slot: a plain load and store
/// when the slot is the thread's own (exact: nobody else writes it), an
/// atomic addition in the shared overflow slot.
#[inline]
fn add(counter: &AtomicU64, n: u64, own_slot: bool) {
    if own_slot {
        counter.store(counter.load(Relaxed) + n, Relaxed);
    } else {
        counter.fetch_add(n, Relaxed);
    }
}

impl Recorder for Counts {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Counts { without_wait: AtomicU64::new(0), slots: AtomicPtr::new(std::ptr::null_mut()) };
    const ENABLED: bool = false;

    #[inline]
    fn acquired(&self, kind: AcquireKind, _wait_cycles: u64) {
        match kind {
            // Exact as a plain add: only the holder writes it.
            AcquireKind::NoWait => add(&self.without_wait, 1, true),
            AcquireKind::Spin => {
                let (slot, own) = self.my_slot();
                add(&slot.spin, 1, own);
            }
            AcquireKind::Sleep => {
                let (slot, own) = self.my_slot();
                add(&slot.sleep, 1, own);
            }
        }
    }
    #[inline]
    fn rejected(&self) {
        let (slot, own) = self.my_slot();
        add(&slot.rejected, 1, own);
    }
    #[inline]
    fn timed_out(&self, _wait_cycles: u64) {}
    #[inline]
    fn releasing(&self) {}
    #[inline]
    fn spun(&self, spin_cycles: u64, decider: Option<Decider>) {
        let (slot, own) = self.my_slot();
        let counter = match decider {
            Some(Decider::Table) => &slot.spins.by_table,
            Some(Decider::CpuClock) => &slot.spins.by_clock,
            None => &slot.spins.undecided,
        };
        add(counter, 1, own);
        add(&slot.spins.cycles, spin_cycles, own);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockmeter_locks::RawAdaptive;
    use std::sync::{Arc, Barrier};

    /// Beyond the holder's count of acquisitions that did not wait, the
    /// counters live out of the lock, on lines of their own.
    #[test]
    fn the_counters_are_out_of_the_lock() {
        assert_eq!(std::mem::size_of::<Counts>(), 8 + std::mem::size_of::<usize>());
        assert_eq!(std::mem::align_of::<Slot>(), 64);
        assert_eq!(std::mem::size_of::<Slot>(), 64);
    }

    /// Every acquisition and rejection of many threads is counted once,
    /// whether the thread has a slot of its own or shares the overflow
    /// slot: each thread locks `per_thread` times and tries as often.
    fn count_acquisitions_of(threads: usize, per_thread: u64) {
        let lock = Arc::new(RawAdaptive::<Counts>::new());
        let start = Arc::new(Barrier::new(threads));
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (lock, start) = (lock.clone(), start.clone());
                std::thread::Builder::new()
                    .stack_size(64 << 10)
                    .spawn(move || {
                        // All alive at once: beyond SLOTS, some share.
                        start.wait();
                        for _ in 0..per_thread {
                            lock.lock();
                            // SAFETY: locked just above by this thread.
                            unsafe { lock.unlock() };
                            if lock.try_lock() {
                                // SAFETY: taken by the try_lock.
                                unsafe { lock.unlock() };
                            }
                        }
                    })
                    .unwrap()
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
        let counts = lock.recorder().snapshot();
        let tries = threads as u64 * per_thread;
        assert!(counts.acquisitions >= tries, "{counts:?}");
        assert_eq!(counts.acquisitions + counts.rejected, 2 * tries, "{counts:?}");
        assert!(counts.spin + counts.sleep <= tries, "{counts:?}");
    }

    #[test]
    fn every_acquisition_is_counted_once() {
        count_acquisitions_of(8, 20_000);
    }

    #[test]
    fn threads_beyond_the_slots_share_one_exactly() {
        count_acquisitions_of(SLOTS + 40, 200);
    }

    /// A thread that exits gives its slot back, and its counts stay.
    #[test]
    fn counts_outlive_their_threads() {
        let lock = Arc::new(RawAdaptive::<Counts>::new());
        for _ in 0..3 * SLOTS {
            let lock = lock.clone();
            std::thread::spawn(move || {
                lock.lock();
                // SAFETY: locked just above by this thread.
                unsafe { lock.unlock() };
            })
            .join()
            .unwrap();
        }
        assert_eq!(lock.recorder().snapshot().acquisitions, 3 * SLOTS as u64);
    }
}
