//! The profiler's tables: one record per lock and one per (lock, call
//! site), in fixed-size open-addressing tables that threads insert into
//! with a compare-and-swap. No lock on any path: a lock the program takes
//! must never wait for the profiler.
//!
//! Counters of an exclusive lock (mutex, spinlock, rwlock write side) are
//! written only by the thread holding that lock, so they are updated with
//! a plain load and store (no locked instruction); counters of shared
//! holds (rwlock read side, semaphores, condvar waits) and of refused
//! trylocks use atomic read-modify-writes.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::*};

/// Histogram bins kept per lock (2^47 cycles is over ten hours).
pub const HIST_BINS: usize = 48;
/// Lock table capacity.
pub const LOCK_SLOTS: usize = 1 << 14;
/// Call-site table capacity.
pub const SITE_SLOTS: usize = 1 << 16;
/// How far an insert probes before the table counts as full.
const MAX_PROBE: usize = 128;

/// A counter updated either by the lock's exclusive holder or by anyone.
#[derive(Default)]
#[repr(transparent)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `value`; `shared` when other threads may update concurrently.
    #[inline(always)]
    pub fn add(&self, value: u64, shared: bool) {
        if shared {
            self.0.fetch_add(value, Relaxed);
        } else {
            self.0.store(self.0.load(Relaxed).wrapping_add(value), Relaxed);
        }
    }

    /// Adds one (shared) and returns the value before.
    #[inline(always)]
    pub fn increment(&self) -> u64 {
        self.0.fetch_add(1, Relaxed)
    }

    /// Raises the value to `value` if it is larger.
    #[inline(always)]
    pub fn max(&self, value: u64, shared: bool) {
        if value <= self.0.load(Relaxed) {
            return;
        }
        if shared {
            self.0.fetch_max(value, Relaxed);
        } else if value > self.0.load(Relaxed) {
            self.0.store(value, Relaxed);
        }
    }

    /// Back to zero.
    pub fn reset(&self) {
        self.0.store(0, Relaxed);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Number of stripes of a striped counter.
pub const STRIPES: usize = 8;

/// A counter that many threads add to at once, split into cache-line
/// stripes so that threads on different CPUs do not pass one line back
/// and forth (a read-mostly rwlock would otherwise make every reader pay a
/// cache miss the program itself does not).
#[derive(Default)]
pub struct Striped([Padded; STRIPES]);

#[derive(Default)]
#[repr(align(64))]
struct Padded(Counter);

/// This thread's stripe.
#[inline(always)]
pub fn stripe_of(thread: usize) -> usize {
    (thread.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61) & (STRIPES - 1)
}

impl Striped {
    /// Adds one to stripe `stripe`; returns that stripe's value before.
    #[inline(always)]
    pub fn increment(&self, stripe: usize) -> u64 {
        self.0[stripe].0.increment()
    }

    /// The total.
    pub fn sum(&self) -> u64 {
        self.0.iter().map(|p| p.0.get()).sum()
    }

    /// Back to zero.
    pub fn reset(&self) {
        self.0.iter().for_each(|p| p.0.reset());
    }
}

/// Counters of one side of a lock (or of one call site).
#[derive(Default)]
pub struct SideCounters {
    pub acquisitions: Counter,
    /// Exclusive side only: the shared side derives it (acquisitions -
    /// contended), sparing an atomic add per acquisition.
    pub nowait: Counter,
    pub contended: Counter,
    pub cond_reacquire: Counter,
    pub reject: Counter,
    pub timeout: Counter,
    pub wait_total: Counter,
    pub wait_max: Counter,
    /// Hold time of the holds that were timed (see `hold_samples`).
    pub hold_total: Counter,
    pub hold_max: Counter,
    /// Holds that were timed: all holds of a lock that has been
    /// contended, 1 in `HOLD_SAMPLE` of one that never was.
    pub hold_samples: Counter,
    pub delay_total: Counter,
}

/// The waiter-weighted clock of a lock: how many threads wait, and the
/// integral of that number over time, so a holder can learn how much
/// waiting its hold caused (Go 1.22's delay). Only touched when a thread
/// waits, and by a holder that sees waiters.
#[derive(Default)]
pub struct WaiterClock {
    guard: AtomicU32,
    waiting: AtomicU64,
    since: AtomicU64,
    area: AtomicU64,
}

impl WaiterClock {
    fn locked<R>(&self, f: impl FnOnce() -> R) -> R {
        while self.guard.swap(1, Acquire) != 0 {
            std::hint::spin_loop();
        }
        let result = f();
        self.guard.store(0, Release);
        result
    }

    /// A thread starts (`+1`) or stops (`-1`) waiting at `now`.
    pub fn change(&self, now: u64, delta: i64) {
        self.locked(|| {
            let waiting = self.waiting.load(Relaxed);
            let elapsed = now.saturating_sub(self.since.load(Relaxed));
            self.area.store(self.area.load(Relaxed) + waiting * elapsed, Relaxed);
            self.since.store(now, Relaxed);
            self.waiting.store(waiting.wrapping_add_signed(delta), Relaxed);
        })
    }

    /// Whether a thread is waiting now.
    #[inline(always)]
    pub fn has_waiters(&self) -> bool {
        self.waiting.load(Relaxed) != 0
    }

    /// Whether any thread waited since the area read `area` (a holder that
    /// saw no waiter at acquisition and sees none now caused no delay).
    #[inline(always)]
    pub fn changed_since(&self, area: u64) -> bool {
        self.waiting.load(Relaxed) != 0 || self.area.load(Relaxed) != area
    }

    /// Waiter-cycles accumulated up to `now`.
    #[inline(always)]
    pub fn area_at(&self, now: u64) -> u64 {
        let area = self.area.load(Relaxed);
        if self.waiting.load(Relaxed) == 0 {
            return area;
        }
        self.locked(|| {
            let elapsed = now.saturating_sub(self.since.load(Relaxed));
            self.area.load(Relaxed) + self.waiting.load(Relaxed) * elapsed
        })
    }
}

/// Flag: this record's lock was destroyed (or re-initialised); lookups
/// pass over it and a new generation gets a new record.
pub const RETIRED: u32 = 1;
/// Flag: the record was created by an init call (its site names it).
pub const INIT_SEEN: u32 = 2;

/// One lock.
#[repr(C, align(64))]
pub struct LockRecord {
    pub key: AtomicUsize,
    pub flags: AtomicU32,
    pub kind: AtomicU32,
    pub generation: AtomicU32,
    /// Site index + 1 of the exclusive holder's acquisition.
    pub holder_site: AtomicU32,
    /// `pthread_self()` of the exclusive holder, 0 when free.
    pub holder_thread: AtomicUsize,
    /// Extra holds of a recursive mutex by its holder.
    pub depth: AtomicU32,
    /// Cycle count at the start of the current exclusive hold, 0 when
    /// this hold is not timed.
    pub acquired_at: AtomicU64,
    /// The return address whose site record is `last_site` (a cache: most
    /// locks are taken from one or two places).
    pub last_pc: AtomicUsize,
    pub last_site: AtomicU32,
    pub area_at_acquire: AtomicU64,
    /// Return address of the init call or of the first use.
    pub first_site: AtomicUsize,
    /// Index 0: exclusive (mutex, spin, rwlock write); 1: shared.
    pub sides: [SideCounters; 2],
    /// Shared acquisitions (the shared side's `acquisitions` is unused).
    pub shared_acquisitions: Striped,
    pub clock: WaiterClock,
    pub hist: [Counter; HIST_BINS],
}

/// One (lock, call site) pair.
#[repr(C, align(64))]
pub struct SiteRecord {
    /// `(lock index + 1) << 48 | return address`; 0 = empty.
    pub key: AtomicU64,
    /// 1 once the site took the lock shared (its NOWAIT is derived).
    pub shared: AtomicU32,
    pub counters: SideCounters,
    /// Shared acquisitions at this site.
    pub shared_acquisitions: Striped,
}

/// Profiler health counters.
#[derive(Default)]
pub struct HealthCounters {
    pub events: AtomicU64,
    pub dropped: AtomicU64,
    pub lock_collisions: AtomicU64,
    pub site_collisions: AtomicU64,
    pub locks_used: AtomicU64,
    pub sites_used: AtomicU64,
}

/// The tables of one process.
pub struct Tables {
    locks: &'static [LockRecord],
    sites: &'static [SiteRecord],
    pub health: HealthCounters,
}

fn map_zeroed<T>(count: usize) -> Option<&'static [T]> {
    let bytes = count * std::mem::size_of::<T>();
    // SAFETY: an anonymous private mapping; pages are zero-filled on first
    // touch, and MAP_NORESERVE keeps the untouched ones free.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the mapping is `bytes` long, page-aligned (enough for T's
    // 64-byte alignment), zeroed, and never unmapped (it lives as long as
    // the process); all-zero bytes are a valid T (atomics and integers).
    Some(unsafe { std::slice::from_raw_parts(ptr.cast::<T>(), count) })
}

#[inline(always)]
fn home(key: u64, slots: usize) -> usize {
    // Fibonacci hashing: locks are 8-byte aligned and often 40 or 64
    // bytes apart, so the low bits alone would cluster.
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize & (slots - 1)
}

impl Tables {
    /// Fresh, empty tables; `None` if the memory cannot be mapped.
    pub fn new() -> Option<Tables> {
        Some(Tables { locks: map_zeroed(LOCK_SLOTS)?, sites: map_zeroed(SITE_SLOTS)?, health: HealthCounters::default() })
    }

    /// The live record of the lock at `address`, created (with `kind` and
    /// `site` as its first use) when absent; `None` when the table is full.
    #[inline(always)]
    pub fn lock(&self, address: usize, kind: u32, site: usize) -> Option<(u32, &LockRecord)> {
        let mut slot = home(address as u64, LOCK_SLOTS);
        let mut generation = 0;
        for probe in 0..MAX_PROBE {
            let record = &self.locks[slot];
            let key = record.key.load(Acquire);
            if key == address {
                if record.flags.load(Relaxed) & RETIRED == 0 {
                    return Some((slot as u32, record));
                }
                generation += 1;
            } else if key == 0 {
                match record.key.compare_exchange(0, address, AcqRel, Acquire) {
                    Ok(_) => {
                        record.kind.store(kind, Relaxed);
                        record.generation.store(generation, Relaxed);
                        record.first_site.store(site, Relaxed);
                        self.health.locks_used.fetch_add(1, Relaxed);
                        if probe > 0 {
                            self.health.lock_collisions.fetch_add(1, Relaxed);
                        }
                        return Some((slot as u32, record));
                    }
                    Err(winner) if winner == address => continue,
                    Err(_) => {}
                }
            }
            slot = (slot + 1) & (LOCK_SLOTS - 1);
        }
        self.health.dropped.fetch_add(1, Relaxed);
        None
    }

    /// The live record of `address` if there is one (no insert).
    #[inline(always)]
    pub fn existing_lock(&self, address: usize) -> Option<(u32, &LockRecord)> {
        let mut slot = home(address as u64, LOCK_SLOTS);
        for _ in 0..MAX_PROBE {
            let record = &self.locks[slot];
            let key = record.key.load(Acquire);
            if key == 0 {
                return None;
            }
            if key == address && record.flags.load(Relaxed) & RETIRED == 0 {
                return Some((slot as u32, record));
            }
            slot = (slot + 1) & (LOCK_SLOTS - 1);
        }
        None
    }

    /// The record of call site `pc` of lock number `lock`; its index + 1.
    #[inline(always)]
    pub fn site(&self, lock: u32, pc: usize) -> Option<(u32, &SiteRecord)> {
        let key = (u64::from(lock) + 1) << 48 | (pc as u64 & ((1 << 48) - 1));
        let mut slot = home(key, SITE_SLOTS);
        for probe in 0..MAX_PROBE {
            let record = &self.sites[slot];
            let current = record.key.load(Acquire);
            if current == key {
                return Some((slot as u32 + 1, record));
            }
            if current == 0 {
                match record.key.compare_exchange(0, key, AcqRel, Acquire) {
                    Ok(_) => {
                        self.health.sites_used.fetch_add(1, Relaxed);
                        if probe > 0 {
                            self.health.site_collisions.fetch_add(1, Relaxed);
                        }
                        return Some((slot as u32 + 1, record));
                    }
                    Err(winner) if winner == key => return Some((slot as u32 + 1, record)),
                    Err(_) => {}
                }
            }
            slot = (slot + 1) & (SITE_SLOTS - 1);
        }
        self.health.dropped.fetch_add(1, Relaxed);
        None
    }

    /// The site record with index + 1 `id` (from [`Tables::site`]).
    #[inline(always)]
    pub fn site_by_id(&self, id: u32) -> Option<&SiteRecord> {
        id.checked_sub(1).map(|i| &self.sites[i as usize])
    }

    /// Every lock record ever inserted, with its index.
    pub fn all_locks(&self) -> impl Iterator<Item = (u32, &LockRecord)> {
        self.locks.iter().enumerate().filter(|(_, r)| r.key.load(Acquire) != 0).map(|(i, r)| (i as u32, r))
    }

    /// Every site record: (lock index, return address, record).
    pub fn all_sites(&self) -> impl Iterator<Item = (u32, usize, &SiteRecord)> {
        self.sites.iter().filter_map(|r| {
            let key = r.key.load(Acquire);
            (key != 0).then(|| (((key >> 48) - 1) as u32, (key & ((1 << 48) - 1)) as usize, r))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retired_lock_gets_a_new_generation() {
        let tables = Tables::new().unwrap();
        let (first, record) = tables.lock(0x1000, 0, 7).unwrap();
        assert_eq!(record.generation.load(Relaxed), 0);
        assert_eq!(tables.lock(0x1000, 0, 8).unwrap().0, first, "same lock, same record");
        record.flags.fetch_or(RETIRED, Relaxed);
        let (second, record) = tables.lock(0x1000, 0, 9).unwrap();
        assert_ne!(second, first);
        assert_eq!(record.generation.load(Relaxed), 1);
        assert_eq!(record.first_site.load(Relaxed), 9);
        assert_eq!(tables.existing_lock(0x1000).unwrap().0, second);
        assert!(tables.existing_lock(0x2000).is_none());
    }

    #[test]
    fn sites_are_per_lock_and_address() {
        let tables = Tables::new().unwrap();
        let a = tables.site(1, 0x4000).unwrap().0;
        assert_eq!(tables.site(1, 0x4000).unwrap().0, a);
        assert_ne!(tables.site(2, 0x4000).unwrap().0, a);
        let sites: Vec<_> = tables.all_sites().map(|(lock, pc, _)| (lock, pc)).collect();
        assert!(sites.contains(&(1, 0x4000)) && sites.contains(&(2, 0x4000)));
    }

    #[test]
    fn concurrent_inserts_of_one_address_agree() {
        let tables = Tables::new().unwrap();
        let slots: Vec<u32> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8).map(|_| s.spawn(|| tables.lock(0xdead0, 0, 1).unwrap().0)).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(slots.windows(2).all(|w| w[0] == w[1]), "{slots:?}");
        assert_eq!(tables.health.locks_used.load(Relaxed), 1);
    }
}
