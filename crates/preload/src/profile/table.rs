//! The profiler's tables. Identity is global: one record per lock and one
//! per (lock, call site), in fixed-size open-addressing tables that threads
//! insert into with a compare-and-swap and otherwise only read. Counters
//! are per thread: every thread has its own block of counters, indexed like
//! the global tables, written with plain stores by that thread alone and
//! summed when the profile is written. No lock on any path, and no cache
//! line written by two threads on an uncontended acquisition: a profiled
//! lock must not become a contended cache line the program never had.
//!
//! A thread's counters are indexed by the records' *numbers*, not by their
//! slots, which a hash scatters: indexed by slot, each lock a thread used
//! took a page or two of its memory (2,000 threads each using the same 10
//! locks and 3 of their own took 346 MB resident against the bare
//! program's 18 MB). A record is numbered by the first thread to count it,
//! from a run of numbers that thread holds (see [`Numbers`]), so the locks
//! a thread makes and uses, numbered by it, sit side by side in its
//! counters, however many other threads number theirs meanwhile.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};

/// Histogram bins kept per lock (2^47 cycles is over ten hours).
pub const HIST_BINS: usize = 48;
/// Locks tracked at once unless `LOCKMETER_MAX_LOCKS` says otherwise.
pub const DEFAULT_MAX_LOCKS: usize = 1 << 14;
/// The most `LOCKMETER_MAX_LOCKS` may ask for. Every thread reserves
/// address space for its counters of every number, two a slot (1.5 KB a
/// lock, and 1.5 KB for its call sites), touched only where it records.
pub const MAX_MAX_LOCKS: usize = 1 << 20;
/// Record numbers, handed out in runs of [`RUN`] to each thread block,
/// while the runs have taken no more numbers than there are slots, and
/// one at a time after that: as many numbers again as slots, so that runs
/// left unfinished (a thread that ends, having numbered one lock) cannot
/// leave records without numbers. A number a thread took for a record that
/// another thread numbered first goes back to its run (lost, two threads
/// racing to number the shared locks of a nearly full table left 13 of 64
/// records without a number); only a signal handler that takes from the
/// run in between loses one.
struct Numbers {
    handed_out: AtomicU32,
    slots: usize,
}

/// Numbers a thread block takes at a time.
const RUN: u32 = 8;

impl Numbers {
    fn new(slots: usize) -> Numbers {
        Numbers { handed_out: AtomicU32::new(0), slots }
    }

    /// How many numbers there can be.
    fn capacity(&self) -> usize {
        numbers_for(self.slots)
    }

    /// The number in `cell` (stored + 1), or, if it has none yet, the next
    /// of the thread's `run` (`None`: one of its own); `None` when every
    /// number is handed out. Whoever first needs a record's number gives it
    /// one, the thread that made the record or one that found it before
    /// that thread got there (which never waits for it: it may be the very
    /// thread it interrupted); of two at once, one number goes unused.
    #[cold]
    fn number(&self, cell: &AtomicU32, run: Option<&AtomicU64>) -> Option<u32> {
        if let Some(number) = cell.load(Relaxed).checked_sub(1) {
            return Some(number);
        }
        let Some(mine) = run.and_then(|run| self.next_of_run(run)).or_else(|| self.single()) else {
            return cell.load(Relaxed).checked_sub(1);
        };
        match cell.compare_exchange(0, mine + 1, Relaxed, Relaxed) {
            Ok(_) => Some(mine),
            Err(theirs) => {
                if let Some(run) = run {
                    Self::give_back(run, mine);
                }
                Some(theirs - 1)
            }
        }
    }

    /// `number`, just taken from `run` (or, the run empty, one at a time),
    /// is unused: it becomes the run's next again.
    fn give_back(run: &AtomicU64, number: u32) {
        let packed = run.load(Relaxed);
        let (next, end) = ((packed >> 32) as u32, packed as u32);
        let returned = if next == number + 1 && next <= end {
            (u64::from(number) << 32) | u64::from(end)
        } else if next >= end {
            (u64::from(number) << 32) | u64::from(number + 1)
        } else {
            return;
        };
        let _ = run.compare_exchange(packed, returned, Relaxed, Relaxed);
    }

    /// The next number of `run` (next in the high half, end in the low),
    /// taking a new run when it is used up, while the runs' budget lasts.
    /// Only the block's thread takes from its run, but a signal handler may
    /// interrupt it doing so: each step is a compare-exchange.
    fn next_of_run(&self, run: &AtomicU64) -> Option<u32> {
        loop {
            let packed = run.load(Relaxed);
            let (next, end) = ((packed >> 32) as u32, packed as u32);
            if next < end {
                if run.compare_exchange(packed, packed + (1 << 32), Relaxed, Relaxed).is_ok() {
                    return Some(next);
                }
                continue;
            }
            // Never past the budget, even by threads taking runs at once.
            let start = self
                .handed_out
                .fetch_update(Relaxed, Relaxed, |taken| (taken as usize + RUN as usize <= self.slots).then_some(taken + RUN))
                .ok()?;
            // The rest of the run, for this thread's next records (lost if
            // a signal handler took a run meanwhile: it holds its own).
            let rest = (u64::from(start + 1) << 32) | u64::from(start + RUN);
            let _ = run.compare_exchange(packed, rest, Relaxed, Relaxed);
            return Some(start);
        }
    }

    fn single(&self) -> Option<u32> {
        if self.handed_out.load(Relaxed) as usize >= self.capacity() {
            return None;
        }
        let mine = self.handed_out.fetch_add(1, Relaxed);
        ((mine as usize) < self.capacity()).then_some(mine)
    }
}

/// Numbers for `slots` records: twice as many (see [`Numbers`]).
fn numbers_for(slots: usize) -> usize {
    2 * slots
}
/// Call-site slots per lock slot.
const SITES_PER_LOCK: usize = 4;
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

/// Counters of one side of a lock (or of one call site).
#[derive(Default)]
pub struct SideCounters {
    pub acquisitions: Counter,
    /// Exclusive side only: the shared side derives it (acquisitions -
    /// contended), sparing an atomic add per acquisition.
    pub nowait: Counter,
    pub contended: Counter,
    /// Of `contended`: waits that only spun, and waits that slept (known
    /// for lockmeter's own algorithms only).
    pub spin: Counter,
    pub sleep: Counter,
    pub cond_reacquire: Counter,
    pub reject: Counter,
    pub timeout: Counter,
    pub wait_total: Counter,
    pub wait_max: Counter,
    /// Hold time of the holds that were timed (see `hold_samples`).
    pub hold_total: Counter,
    pub hold_max: Counter,
    /// Holds that were timed: those after a wait or a long hold, and 1 in
    /// `HOLD_SAMPLE` of the others.
    pub hold_samples: Counter,
    pub delay_total: Counter,
    /// Of `hold_samples`: the holds timed only for their turn in the 1 in
    /// `HOLD_SAMPLE`, with their hold and delay totals. They are the
    /// uniform sample the holds never timed are estimated from; the holds
    /// timed whatever their turn count as themselves.
    pub sampled_holds: Counter,
    pub sampled_hold_total: Counter,
    /// The longest of them, which the estimate counts once (see
    /// `output::estimate`).
    pub sampled_hold_max: Counter,
    pub sampled_delay_total: Counter,
    /// Acquisitions that re-locked a recursive mutex this thread already
    /// held: counted, but not holds of their own.
    pub nested: Counter,
}

/// The waiters of a lock, for the waiter-weighted delay (Go 1.22's): how
/// many threads wait, and the sum of the times they started. A holder
/// reads both when its hold starts (n_a, s_a at t_a) and ends (n_r, s_r
/// at t_r); the threads waiting during the hold waited, in total,
///
///   n_a (t_r - t_a) + sum over newcomers of (t_r - start)
///   = n_r t_r - n_a t_a - (s_r - s_a)
///
/// when a waiter leaves only by acquiring, which the hold prevents. One
/// that gives up (a timed lock) at t_l during the hold must count t_l -
/// max(start, t_a): it leaves with its leaving time in place of its start
/// (the sum loses t_l, not start), which the formula then gives exactly,
/// present at t_a or come since, in the same one word a holder loads (a
/// timed-out waiter's 50 ms under a hold read 0; summed in a second word,
/// a holder's two loads could see a waiter both present and gone).
/// The sum then exceeds the present waiters' starts by the give-ups'
/// waits, kept apart for the waits in progress.
///
/// Both live in one word, so a holder reads them together with one load:
/// the count in the low 16 bits, the sum above it in units of 1024 cycles
/// (about half a microsecond), modulo 2^48. The formula's result is small
/// and non-negative, so computing it modulo 2^48 gives it exactly.
/// Lock-free: waiters add and subtract, holders only load.
#[derive(Default)]
pub struct WaiterClock {
    word: AtomicU64,
    /// Units waited by the waiters that gave up, in all (modulo 2^64):
    /// what the sum holds beyond the present waiters' starts.
    given_up: AtomicU64,
}

const COUNT_BITS: u32 = 16;
const UNIT_SHIFT: u32 = 10;
const SUM_MASK: u64 = (1 << 48) - 1;

/// A [`Waiters`] snapshot kept in a thread block.
#[derive(Default)]
pub struct AtomicWaiters(AtomicU64);

impl AtomicWaiters {
    pub fn store(&self, waiters: Waiters, order: std::sync::atomic::Ordering) {
        self.0.store(waiters.0, order);
    }

    pub fn load(&self, order: std::sync::atomic::Ordering) -> Waiters {
        Waiters(self.0.load(order))
    }
}

/// What a holder saw of the waiters at one moment.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Waiters(u64);

impl Waiters {
    /// Threads waiting.
    pub fn count(self) -> u64 {
        self.0 & ((1 << COUNT_BITS) - 1)
    }

    fn start_sum(self) -> u64 {
        self.0 >> COUNT_BITS
    }
}

impl WaiterClock {
    fn delta(start: u64) -> u64 {
        ((start >> UNIT_SHIFT) << COUNT_BITS).wrapping_add(1)
    }

    /// A thread starts waiting at `start`.
    pub fn arrive(&self, start: u64) {
        self.word.fetch_add(Self::delta(start), Release);
    }

    /// The thread that arrived at `start` stops waiting.
    pub fn leave(&self, start: u64) {
        self.word.fetch_sub(Self::delta(start), Release);
    }

    /// The thread that arrived at `start` gives up at `left`: its wait
    /// ends without the lock (instead of [`Self::leave`]).
    pub fn give_up(&self, start: u64, left: u64) {
        self.word.fetch_sub(Self::delta(left), Release);
        self.given_up.fetch_add((left >> UNIT_SHIFT).wrapping_sub(start >> UNIT_SHIFT), Relaxed);
    }

    /// The waiters now.
    #[inline(always)]
    pub fn now(&self) -> Waiters {
        Waiters(self.word.load(Acquire))
    }

    /// Cycles the threads waiting now have waited by `now`, in all (for a
    /// snapshot: a waiter giving up between the two loads is off by its
    /// wait).
    pub fn waited_so_far(&self, now: u64) -> u64 {
        let waiters = self.now();
        let given_up = self.given_up.load(Relaxed);
        let units = waiters.count().wrapping_mul(now >> UNIT_SHIFT).wrapping_sub(waiters.start_sum()).wrapping_sub(given_up) & SUM_MASK;
        if units > SUM_MASK / 2 { 0 } else { units << UNIT_SHIFT }
    }

    /// The units the waiters that gave up waited, in all so far.
    fn given_up_units(&self) -> u64 {
        self.given_up.load(Relaxed)
    }

    /// Cycles the waiters still waiting at `ended` (`at_end`) have waited
    /// since a moment when none waited (`at_start`): the waiter-time
    /// since, less what the waiters that gave up meanwhile waited. (Each
    /// waited no longer than the time since; with the give-ups counted
    /// in, one hold whose timed-out waiters had left read 2.7 ms for 1
    /// ms.) With nobody waiting, the sum of starts holds what every
    /// give-up so far took out of it, minus their waits: the give-ups'
    /// total then, without a read of it at every hold's start.
    pub fn waited_by_present(&self, at_start: Waiters, at_end: Waiters, ended: u64) -> u64 {
        debug_assert_eq!(at_start.count(), 0);
        let given_up_then = at_start.start_sum().wrapping_neg() & SUM_MASK;
        let gave_up = (self.given_up_units().wrapping_sub(given_up_then) & SUM_MASK) << UNIT_SHIFT;
        Self::delay(at_start, 0, at_end, ended).saturating_sub(gave_up)
    }

    /// Waiter-cycles during a hold from `at_start` (time `started`) to
    /// `at_end` (time `ended`).
    pub fn delay(at_start: Waiters, started: u64, at_end: Waiters, ended: u64) -> u64 {
        let arrived = at_end.count().wrapping_mul(ended >> UNIT_SHIFT);
        let present = at_start.count().wrapping_mul(started >> UNIT_SHIFT);
        let starts = at_end.start_sum().wrapping_sub(at_start.start_sum());
        let units = arrived.wrapping_sub(present).wrapping_sub(starts) & SUM_MASK;
        // Never "negative" from the waiters: guarded all the same.
        if units > SUM_MASK / 2 { 0 } else { units << UNIT_SHIFT }
    }
}

/// A lock's kind as its record keeps it: one more than the kind, so that
/// 0 says a record just claimed, its kind not stored yet.
fn kind_stored(kind: u32) -> u32 {
    kind + 1
}

/// The kind a record keeps (see [`kind_stored`]).
pub fn kind_of(record: &LockRecord) -> u32 {
    record.kind.load(Relaxed).saturating_sub(1)
}

/// Flag: this record's lock was destroyed (or re-initialised); lookups
/// pass over it and a new generation gets a new record.
pub const RETIRED: u32 = 1;
/// Flag: the record was created by an init call (its site names it).
pub const INIT_SEEN: u32 = 2;
/// Flag (with RETIRED): the lock's object was unloaded. A lock at its
/// address since is another object's, whatever its first use: never the
/// record's later lifetime (a library loaded where another had been,
/// laid out alike, had its locks counted as the first's).
pub const UNLOADED: u32 = 4;

/// One lock: its identity and the clock of its waiters (written only by
/// threads that wait).
#[repr(C, align(64))]
pub struct LockRecord {
    pub key: AtomicUsize,
    /// The record's number + 1 (0: not numbered yet), which indexes the
    /// threads' counters of the lock (see [`Numbers`]).
    number: AtomicU32,
    pub flags: AtomicU32,
    pub kind: AtomicU32,
    pub generation: AtomicU32,
    /// Locks this record stood for after the first: a lock destroyed and
    /// initialised again at its address by the same call site continues
    /// the record (see `Tables::initialised`).
    pub later_lifetimes: AtomicU32,
    /// Return address of the init call or of the first use.
    pub first_site: AtomicUsize,
    /// On a line of its own: waiters write it, while every acquisition
    /// reads the identity above.
    pub clocks: Padded<Clocks>,
}

/// A lock's waiter clocks.
#[derive(Default)]
pub struct Clocks {
    /// Every waiter's: the delay of an exclusive hold, which keeps every
    /// waiter waiting.
    pub all: WaiterClock,
    /// An rwlock's waiting writers' (on `all` too): the delay of a read
    /// hold. Readers that wait as it begins leave by taking their own read
    /// holds beside it, which the waiter-time formula cannot tell from a
    /// waiter still kept waiting: a writer's 30 ms behind two readers read
    /// 0 in 4 of 15 runs, the other reader's wait before the hold taken
    /// off it.
    pub writers: WaiterClock,
}

/// The number [`Tables::all_locks`] gives a record no thread has counted:
/// no thread block, site or stack has it.
pub const UNCOUNTED: u32 = u32::MAX;

/// A value alone on its cache line.
#[repr(align(64))]
pub struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// One (lock, call site) pair: claimed by writing `lock`, then published
/// by writing `pc`. (A lock index of up to 2^20 slots beside a 48-bit
/// return address does not fit one word: packed into one, locks 65,536
/// apart shared their sites.) A reader never waits for a claim to be
/// published: the claimer may be the very thread it interrupted (a signal
/// handler taking the same lock from the same place waited for ever), so
/// it passes over the slot, and a pair may get two records; the report
/// adds them up.
#[repr(C)]
pub struct SiteRecord {
    /// The lock's number + 1; 0 = free.
    pub lock: AtomicU32,
    /// As [`LockRecord`]'s: the site's number + 1, 0 until numbered.
    number: AtomicU32,
    /// The return address once published; 0 until then.
    pub pc: AtomicUsize,
}

/// Waits by log2 of their cycles.
pub type Histogram = [Counter; HIST_BINS];

/// One thread's counters of one lock.
#[repr(C, align(64))]
pub struct ThreadLock {
    /// Index 0: exclusive (mutex, spin, rwlock write); 1: shared.
    pub sides: [SideCounters; 2],
    /// This thread holds the lock exclusively (as far as it knows).
    pub holding: AtomicU32,
    /// Site record id of the current exclusive hold.
    pub holder_site: AtomicU32,
    /// Cycle count at the start of the current exclusive hold, 0 when
    /// this hold is not timed.
    pub acquired_at: AtomicU64,
    /// 1 if this thread's last timed hold of the lock was long.
    pub long_holds: AtomicU32,
    /// 1 if the current exclusive hold is timed only for its turn in the
    /// sample (see `SideCounters::sampled_holds`).
    pub hold_sampled: AtomicU32,
    /// The waiters when the current exclusive hold started.
    pub waiters_at_acquire: AtomicWaiters,
    /// The return address whose site record is `last_site` (a cache: most
    /// locks are taken from one or two places).
    pub last_pc: AtomicUsize,
    pub last_site: AtomicU32,
    /// Read holds this thread has open on the lock, and the timing of the
    /// outermost one (0: not timed).
    pub reads_open: AtomicU32,
    pub read_site: AtomicU32,
    pub read_at: AtomicU64,
    /// As `hold_sampled`, for the outermost read hold.
    pub read_sampled: AtomicU32,
    /// As `waiters_at_acquire`, for the outermost read hold.
    pub read_waiters_at: AtomicWaiters,
}

/// One thread's counters of one call site.
#[repr(C, align(64))]
pub struct ThreadSite {
    pub counters: SideCounters,
    /// 1 once the site took the lock shared.
    pub shared: AtomicU32,
}

/// One thread's counters (reused by a later thread once it exits: the
/// counts are sums, so they stay valid), indexed by record number.
pub struct ThreadBlock {
    locks: &'static [ThreadLock],
    /// The wait histograms of the locks, apart from the counters every
    /// acquisition writes: only waits write them.
    hists: &'static [Histogram],
    sites: &'static [ThreadSite],
    /// A bit per lock number, set once the block has counted anything of
    /// that lock: a report reads only those (it read every thread's entry
    /// of every lock, untouched pages included: 2,000 threads of 15,000
    /// locks made a program's exit 17 s longer).
    used: &'static [AtomicU64],
    /// The block's runs of lock and site numbers (see [`Numbers`]).
    lock_run: AtomicU64,
    site_run: AtomicU64,
    next: *const ThreadBlock,
    free: AtomicBool,
}

// SAFETY: `next` is written once before the block is published and only
// read afterwards; every other field is atomic.
unsafe impl Sync for ThreadBlock {}
// SAFETY: as above.
unsafe impl Send for ThreadBlock {}

impl ThreadBlock {
    /// A block, on a page it shares with the start of its bitmap of used
    /// locks (a page of its own was one of a thread's five to eight), and
    /// its counters; all mapped, or none (under `ulimit -v`, a claim that
    /// failed kept what it had mapped, and every operation claimed again
    /// until the program's own allocations failed).
    fn new(lock_numbers: usize, site_numbers: usize) -> Option<&'static mut ThreadBlock> {
        let head = std::mem::size_of::<ThreadBlock>().next_multiple_of(64);
        let words = lock_numbers.div_ceil(64);
        let sizes = [
            head + words * std::mem::size_of::<AtomicU64>(),
            lock_numbers * std::mem::size_of::<ThreadLock>(),
            lock_numbers * std::mem::size_of::<Histogram>(),
            site_numbers * std::mem::size_of::<ThreadSite>(),
        ];
        let mut mapped = [std::ptr::null_mut::<u8>(); 4];
        for (i, &bytes) in sizes.iter().enumerate() {
            match anonymous_mapping(bytes) {
                Some(memory) => mapped[i] = memory,
                None => {
                    for (&memory, &bytes) in mapped[..i].iter().zip(&sizes) {
                        // SAFETY: a mapping of this call's, `bytes` long,
                        // that nothing refers to.
                        unsafe { libc::munmap(memory.cast(), bytes) };
                    }
                    return None;
                }
            }
        }
        let [block, locks, hists, sites] = mapped;
        // SAFETY: each mapping is this call's alone, page-aligned (enough
        // for the 64-byte alignment of every type here; `head` is a multiple
        // of 64), zeroed, sized above, and never unmapped; all-zero bytes
        // are a valid counter (atomics and integers).
        unsafe {
            let slot = block.cast::<ThreadBlock>();
            slot.write(ThreadBlock {
                locks: std::slice::from_raw_parts(locks.cast(), lock_numbers),
                hists: std::slice::from_raw_parts(hists.cast(), lock_numbers),
                sites: std::slice::from_raw_parts(sites.cast(), site_numbers),
                used: std::slice::from_raw_parts(block.add(head).cast(), words),
                lock_run: AtomicU64::new(0),
                site_run: AtomicU64::new(0),
                next: std::ptr::null(),
                free: AtomicBool::new(false),
            });
            Some(&mut *slot)
        }
    }

    /// This thread's counters of lock `number`.
    #[inline(always)]
    pub fn lock(&self, number: u32) -> &ThreadLock {
        &self.locks[number as usize]
    }

    /// This thread's histogram of its waits for lock `number`.
    #[inline(always)]
    pub fn hist(&self, number: u32) -> &Histogram {
        &self.hists[number as usize]
    }

    /// This thread's counters of the site with id `id` (0: none).
    #[inline(always)]
    pub fn site(&self, id: u32) -> Option<&ThreadSite> {
        id.checked_sub(1).map(|i| &self.sites[i as usize])
    }

    /// Notes that the block counts lock `number` (before its first count:
    /// a count is then never missed by [`Self::used_locks`]).
    #[inline]
    pub fn note_used(&self, number: u32) {
        let (word, bit) = (&self.used[number as usize / 64], 1u64 << (number % 64));
        if word.load(Relaxed) & bit == 0 {
            word.fetch_or(bit, Release);
        }
    }

    /// Bytes of the block's counters in memory (the pages it touched).
    #[cfg(test)]
    pub fn resident_bytes(&self) -> usize {
        fn resident<T>(slice: &[T]) -> usize {
            // From the page the slice starts in (the bitmap's, the block's).
            let start = slice.as_ptr() as usize & !4095;
            let bytes = slice.as_ptr() as usize + std::mem::size_of_val(slice) - start;
            let mut pages = vec![0u8; bytes.div_ceil(4096)];
            // SAFETY: the pages are mapped (the slice's mapping); mincore
            // writes one byte per page.
            assert_eq!(unsafe { libc::mincore(start as *mut libc::c_void, bytes, pages.as_mut_ptr()) }, 0);
            pages.iter().filter(|&&page| page & 1 != 0).count() * 4096
        }
        resident(self.locks) + resident(self.hists) + resident(self.sites) + resident(self.used)
    }

    /// The locks the block has counted anything of, by number.
    pub fn used_locks(&self) -> impl Iterator<Item = u32> + '_ {
        self.used.iter().enumerate().flat_map(|(w, word)| {
            let mut bits = word.load(Acquire);
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let bit = bits.trailing_zeros();
                    bits &= bits - 1;
                    (w * 64) as u32 + bit
                })
            })
        })
    }
}

/// Profiler health counters.
#[derive(Default)]
pub struct HealthCounters {
    pub events: AtomicU64,
    /// Operations not recorded: their lock found no slot.
    pub lock_table_full: AtomicU64,
    /// Operations not recorded: their address's probe sequence was full
    /// of records of earlier locks there.
    pub address_crowded: AtomicU64,
    /// Operations recorded without their call site: it found no slot.
    pub site_table_full: AtomicU64,
    /// Operations not recorded: their thread's counters could not be mapped.
    pub no_thread_block: AtomicU64,
    pub lock_collisions: AtomicU64,
    pub site_collisions: AtomicU64,
    pub locks_used: AtomicU64,
    pub sites_used: AtomicU64,
}

/// The tables of one process.
pub struct Tables {
    locks: &'static [LockRecord],
    sites: &'static [SiteRecord],
    lock_numbers: Numbers,
    site_numbers: Numbers,
    threads: AtomicPtr<ThreadBlock>,
    pub health: HealthCounters,
}

/// A fresh private anonymous mapping of `bytes`, page-aligned: its pages
/// are zero-filled on first touch, and MAP_NORESERVE keeps the untouched
/// ones free. A system call only, so a signal handler may map too.
pub fn anonymous_mapping(bytes: usize) -> Option<*mut u8> {
    // SAFETY: a new mapping; nothing else is at the address it returns.
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
    (ptr != libc::MAP_FAILED).then_some(ptr.cast())
}

fn map_zeroed<T>(count: usize) -> Option<&'static [T]> {
    let ptr = anonymous_mapping(count * std::mem::size_of::<T>())?;
    // SAFETY: the mapping is `count` Ts long, page-aligned (enough for T's
    // 64-byte alignment), zeroed, and never unmapped (it lives as long as
    // the process); all-zero bytes are a valid T (atomics and integers).
    Some(unsafe { std::slice::from_raw_parts(ptr.cast::<T>(), count) })
}


#[inline(always)]
fn home(key: u64, slots: usize) -> usize {
    // Fibonacci hashing: locks are 8-byte aligned and often 40 or 64
    // bytes apart, so the low bits alone would cluster. (Bits 40 and up of
    // the product: up to the 2^24 slots of the largest site table.)
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize & (slots - 1)
}

#[inline(always)]
fn site_home(tag: u32, pc: usize, slots: usize) -> usize {
    // A full mix (MurmurHash3's finaliser) of the lock and the address, so
    // that the sites of many locks taken at one call spread. (One multiply
    // of a key with the lock in its top bits carried them only to the
    // product's top: the sites of 100,000 locks taken at one call could
    // land on only 4,096 of 1 M homes, and 57,710 of 61,807 inserts probed
    // past theirs.) Site lookups are rare: each thread caches its last
    // site per lock.
    let mut k = pc as u64 ^ u64::from(tag).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k as usize & (slots - 1)
}

impl Tables {
    /// Fresh, empty tables for `max_locks` locks (rounded up to a power of
    /// two, within `MAX_MAX_LOCKS`); `None` if the memory cannot be mapped.
    pub fn new(max_locks: usize) -> Option<Tables> {
        let lock_slots = max_locks.clamp(64, MAX_MAX_LOCKS).next_power_of_two();
        Some(Tables {
            locks: map_zeroed(lock_slots)?,
            sites: map_zeroed(lock_slots * SITES_PER_LOCK)?,
            lock_numbers: Numbers::new(lock_slots),
            site_numbers: Numbers::new(lock_slots * SITES_PER_LOCK),
            threads: AtomicPtr::new(std::ptr::null_mut()),
            health: HealthCounters::default(),
        })
    }

    /// A counter block for the calling thread: one a finished thread left,
    /// or a new one. `None` if memory cannot be mapped.
    pub fn claim_block(&self) -> Option<&ThreadBlock> {
        let mut block = self.threads.load(Acquire);
        while !block.is_null() {
            // SAFETY: blocks are never freed once pushed.
            let candidate = unsafe { &*block };
            if candidate.free.compare_exchange(true, false, Acquire, Relaxed).is_ok() {
                return Some(candidate);
            }
            block = candidate.next.cast_mut();
        }
        // Mapped, not allocated: a thread's first recorded operation can be
        // an allocator's own mutex call (jemalloc's, inside its
        // `posix_memalign`), where `malloc` is not to be called again.
        let fresh = ThreadBlock::new(numbers_for(self.locks.len()), numbers_for(self.sites.len()))?;
        let mut head = self.threads.load(Acquire);
        loop {
            fresh.next = head;
            match self.threads.compare_exchange(head, fresh, AcqRel, Acquire) {
                Ok(_) => return Some(fresh),
                Err(current) => head = current,
            }
        }
    }

    /// Gives a block back when its thread exits.
    pub fn release_block(&self, block: &ThreadBlock) {
        block.free.store(true, Release);
    }

    /// Every thread block ever claimed.
    pub fn blocks(&self) -> impl Iterator<Item = &ThreadBlock> {
        let mut block = self.threads.load(Acquire);
        std::iter::from_fn(move || {
            // SAFETY: blocks are never freed once pushed.
            let current = unsafe { block.as_ref() }?;
            block = current.next.cast_mut();
            Some(current)
        })
    }

    /// Address space a thread's counters take.
    pub fn thread_block_bytes(&self) -> usize {
        numbers_for(self.locks.len()) * (std::mem::size_of::<ThreadLock>() + std::mem::size_of::<Histogram>())
            + numbers_for(self.sites.len()) * std::mem::size_of::<ThreadSite>()
    }

    /// Capacity of the lock table.
    pub fn lock_slots(&self) -> usize {
        self.locks.len()
    }

    /// Capacity of the call-site table.
    pub fn site_slots(&self) -> usize {
        self.sites.len()
    }

    /// The live record of the lock at `address` and its number; without
    /// one, the record of a lock retired at this address that was first
    /// used at `site` continues (see `live_or_revived`), or a new record is
    /// made, with `kind` and `site` as its first use. `None` when no slot
    /// (or no number) is left.
    /// A record the calling thread numbers takes its number from `block`'s
    /// run, if it has a block.
    #[inline(always)]
    pub fn lock(&self, address: usize, kind: u32, site: usize, block: Option<&ThreadBlock>) -> Option<(u32, &LockRecord)> {
        self.live_or_revived(address, kind, site, 0, true).and_then(|record| self.numbered(record, block, true))
    }

    /// As [`Self::lock`], for a wait that an acquisition (or a refusal)
    /// follows: a miss is counted there, once.
    pub fn lock_for_wait(&self, address: usize, kind: u32, site: usize, block: Option<&ThreadBlock>) -> Option<(u32, &LockRecord)> {
        self.live_or_revived(address, kind, site, 0, false).and_then(|record| self.numbered(record, block, false))
    }

    /// `record` with its number, numbering it if it has none yet; a miss
    /// counted (if `count_miss`) when the numbers have run out.
    #[inline(always)]
    fn numbered<'a>(&self, record: &'a LockRecord, block: Option<&ThreadBlock>, count_miss: bool) -> Option<(u32, &'a LockRecord)> {
        let number = record.number.load(Relaxed);
        if number != 0 {
            return Some((number - 1, record));
        }
        let number = self.lock_numbers.number(&record.number, block.map(|b| &b.lock_run));
        if number.is_none() && count_miss {
            self.health.lock_table_full.fetch_add(1, Relaxed);
        }
        Some((number?, record))
    }

    /// A lock of `kind` was initialised at `address` by call site `site`
    /// (the lock there before, if any, retired): its record, as for a
    /// first use, but continuing only a record that an initialisation at
    /// `site` named. (Not numbered here: the thread that first counts the
    /// lock numbers it.)
    pub fn initialised(&self, address: usize, kind: u32, site: usize) -> Option<&LockRecord> {
        // An initialisation without a slot is not an operation lost (the
        // unit is the acquisition): the lock's acquisitions are counted as
        // they miss.
        let record = self.live_or_revived(address, kind, site, INIT_SEEN, false)?;
        record.first_site.store(site, Relaxed);
        record.flags.fetch_or(INIT_SEEN, Relaxed);
        Some(record)
    }

    /// The live record of `address`; else a retired record of it whose
    /// lock had the same kind and origin (`site`, and `named` = INIT_SEEN
    /// or not), made live again and counting one more lock in
    /// `later_lifetimes`; else a new record.
    ///
    /// Objects allocated and freed over and over (a request's or a
    /// connection's mutex) come back at the few addresses the allocator
    /// reuses, made by the same line. A record per lifetime filled the
    /// probe sequences of those addresses: 20,000 such locks made one after
    /// another left 58,080 of 59,363 operations unrecorded, and the report
    /// had a row per lifetime.
    #[inline(always)]
    fn live_or_revived(&self, address: usize, kind: u32, site: usize, named: u32, count_miss: bool) -> Option<&LockRecord> {
        'probe: loop {
            let mut slot = home(address as u64, self.locks.len());
            let mut generation = 0;
            let mut revivable = None;
            for probe in 0..MAX_PROBE {
                let record = &self.locks[slot];
                let key = record.key.load(Acquire);
                if key == address {
                    let mut flags = record.flags.load(Relaxed);
                    // (0: the record was claimed a moment ago, its kind not
                    // stored yet; another kind then, it retired a lock two
                    // threads first used at once, and made it two rows.)
                    let known = record.kind.load(Acquire);
                    if flags & RETIRED == 0 && known != 0 && known != kind_stored(kind) {
                        // A lock of another kind at a live lock's address:
                        // the memory was freed without a destroy call and
                        // holds a new lock now (a zeroed mutex's memory
                        // used again as a zeroed rwlock was read as the
                        // mutex, and its 100 reads lost from its TOTAL).
                        flags = record.flags.fetch_or(RETIRED, Relaxed) | RETIRED;
                    }
                    if flags & RETIRED == 0 {
                        return Some(record);
                    }
                    let same_origin = flags == RETIRED | named
                        && record.kind.load(Relaxed) == kind_stored(kind)
                        && record.first_site.load(Relaxed) == site;
                    if same_origin && revivable.is_none() {
                        revivable = Some(slot);
                    }
                    generation += 1;
                } else if key == 0 {
                    if revivable.is_some() {
                        break;
                    }
                    match record.key.compare_exchange(0, address, AcqRel, Acquire) {
                        Ok(_) => {
                            record.kind.store(kind_stored(kind), Release);
                            record.generation.store(generation, Relaxed);
                            record.first_site.store(site, Relaxed);
                            self.health.locks_used.fetch_add(1, Relaxed);
                            if probe > 0 {
                                self.health.lock_collisions.fetch_add(1, Relaxed);
                            }
                            return Some(record);
                        }
                        Err(winner) if winner == address => continue,
                        Err(_) => {}
                    }
                }
                slot = (slot + 1) & (self.locks.len() - 1);
            }
            let Some(candidate) = revivable else {
                // Crowded by this address's own earlier locks (made again
                // and again by different lines), or by other locks.
                let counter = if generation >= MAX_PROBE as u32 / 2 {
                    &self.health.address_crowded
                } else {
                    &self.health.lock_table_full
                };
                // Operations lost are acquisitions, the unit of the
                // profile's "lock operations": counted once each (an
                // initialisation, or the wait before an acquisition, also
                // counted, made one lost acquisition read as two).
                if count_miss {
                    counter.fetch_add(1, Relaxed);
                }
                return None;
            };
            // No live record of the address: revive the candidate. Only
            // one reviver wins; the others look again and find it live.
            let record = &self.locks[candidate];
            if record.flags.compare_exchange(RETIRED | named, named, AcqRel, Relaxed).is_ok() {
                record.later_lifetimes.fetch_add(1, Relaxed);
                return Some(record);
            }
            continue 'probe;
        }
    }

    /// The lock at `address` was destroyed (or is initialised again):
    /// every live record of it retires. Two threads first using one new
    /// lock at the same moment, each reviving the record of its own line,
    /// can both succeed (945 of 20,000 such races did): retiring only the
    /// first left the other live for good, charged with every later lock
    /// at the address.
    pub fn retire(&self, address: usize) {
        self.retire_with(address, RETIRED);
    }

    /// The lock at `address` went with its object (see [`UNLOADED`]).
    pub fn retire_unloaded(&self, address: usize) {
        self.retire_with(address, RETIRED | UNLOADED);
    }

    fn retire_with(&self, address: usize, flags: u32) {
        let mut slot = home(address as u64, self.locks.len());
        for _ in 0..MAX_PROBE {
            let record = &self.locks[slot];
            match record.key.load(Acquire) {
                0 => return,
                key if key == address => {
                    record.flags.fetch_or(flags, Relaxed);
                }
                _ => {}
            }
            slot = (slot + 1) & (self.locks.len() - 1);
        }
    }

    /// The live record of `address` if there is one (no insert).
    #[inline(always)]
    pub fn existing_lock(&self, address: usize) -> Option<(u32, &LockRecord)> {
        let mut slot = home(address as u64, self.locks.len());
        for _ in 0..MAX_PROBE {
            let record = &self.locks[slot];
            let key = record.key.load(Acquire);
            if key == 0 {
                return None;
            }
            if key == address && record.flags.load(Relaxed) & RETIRED == 0 {
                // Unnumbered: no thread has counted it yet.
                return record.number.load(Relaxed).checked_sub(1).map(|number| (number, record));
            }
            slot = (slot + 1) & (self.locks.len() - 1);
        }
        None
    }

    /// The record of call site `pc` of lock number `lock`; its number + 1
    /// (numbered as [`Self::lock`] numbers).
    #[inline(always)]
    pub fn site(&self, lock: u32, pc: usize, block: Option<&ThreadBlock>) -> Option<(u32, &SiteRecord)> {
        let Some(record) = self.site_record(lock, pc) else {
            self.health.site_table_full.fetch_add(1, Relaxed);
            return None;
        };
        let number = match record.number.load(Relaxed) {
            0 => self.site_numbers.number(&record.number, block.map(|b| &b.site_run)),
            stored => Some(stored - 1),
        };
        let Some(number) = number else {
            self.health.site_table_full.fetch_add(1, Relaxed);
            return None;
        };
        Some((number + 1, record))
    }

    #[inline(always)]
    fn site_record(&self, lock: u32, pc: usize) -> Option<&SiteRecord> {
        let tag = lock + 1;
        let mut slot = site_home(tag, pc, self.sites.len());
        for probe in 0..MAX_PROBE {
            let record = &self.sites[slot];
            let mut owner = record.lock.load(Acquire);
            if owner == 0 {
                match record.lock.compare_exchange(0, tag, AcqRel, Acquire) {
                    Ok(_) => {
                        record.pc.store(pc, Release);
                        self.health.sites_used.fetch_add(1, Relaxed);
                        if probe > 0 {
                            self.health.site_collisions.fetch_add(1, Relaxed);
                        }
                        return Some(record);
                    }
                    Err(now) => owner = now,
                }
            }
            if owner == tag && record.pc.load(Acquire) == pc {
                return Some(record);
            }
            slot = (slot + 1) & (self.sites.len() - 1);
        }
        None
    }

    /// The slot of `record`, one of this table's: a record's place for as
    /// long as the table lives, numbered or not.
    pub fn slot_of(&self, record: &LockRecord) -> u32 {
        ((record as *const LockRecord as usize - self.locks.as_ptr() as usize) / std::mem::size_of::<LockRecord>()) as u32
    }

    /// Every lock record ever inserted, with its number, [`UNCOUNTED`] for
    /// one no thread has counted (initialised, never taken).
    pub fn all_locks(&self) -> impl Iterator<Item = (u32, &LockRecord)> {
        self.locks.iter().filter(|r| r.key.load(Acquire) != 0).map(|r| (r.number.load(Relaxed).checked_sub(1).unwrap_or(UNCOUNTED), r))
    }

    /// Every numbered site record: (lock number, return address, site id).
    pub fn all_sites(&self) -> impl Iterator<Item = (u32, usize, u32)> + '_ {
        self.sites.iter().filter_map(|r| {
            let (lock, pc, id) = (r.lock.load(Acquire), r.pc.load(Acquire), r.number.load(Relaxed));
            (lock != 0 && pc != 0 && id != 0).then(|| (lock - 1, pc, id))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An initialisation, and the record's number as a first count gives it.
    fn init(tables: &Tables, address: usize, kind: u32, site: usize) -> Option<(u32, &LockRecord)> {
        tables.initialised(address, kind, site).and_then(|record| tables.numbered(record, None, false))
    }

    #[test]
    fn a_retired_lock_gets_a_new_generation() {
        let tables = Tables::new(DEFAULT_MAX_LOCKS).unwrap();
        let (first, record) = tables.lock(0x1000, 0, 7, None).unwrap();
        assert_eq!(record.generation.load(Relaxed), 0);
        assert_eq!(tables.lock(0x1000, 0, 8, None).unwrap().0, first, "same lock, same record");
        record.flags.fetch_or(RETIRED, Relaxed);
        let (second, record) = tables.lock(0x1000, 0, 9, None).unwrap();
        assert_ne!(second, first);
        assert_eq!(record.generation.load(Relaxed), 1);
        assert_eq!(record.first_site.load(Relaxed), 9);
        assert_eq!(tables.existing_lock(0x1000).unwrap().0, second);
        assert!(tables.existing_lock(0x2000).is_none());
    }

    #[test]
    fn a_lock_initialised_again_by_the_same_site_continues_its_record() {
        let tables = Tables::new(DEFAULT_MAX_LOCKS).unwrap();
        let (first, record) = init(&tables, 0x1000, 0, 7).unwrap();
        assert_eq!(record.flags.load(Relaxed), INIT_SEEN);
        for lifetime in 1..=3 {
            record.flags.fetch_or(RETIRED, Relaxed);
            assert_eq!(init(&tables, 0x1000, 0, 7).unwrap().0, first);
            assert_eq!(record.later_lifetimes.load(Relaxed), lifetime);
            assert_eq!(tables.existing_lock(0x1000).unwrap().0, first, "live again");
        }
        // Another site, or another kind, makes another lock.
        record.flags.fetch_or(RETIRED, Relaxed);
        let (other_site, other) = init(&tables, 0x1000, 0, 8).unwrap();
        assert_ne!(other_site, first);
        assert_eq!((other.generation.load(Relaxed), other.later_lifetimes.load(Relaxed)), (1, 0));
        other.flags.fetch_or(RETIRED, Relaxed);
        let (other_kind, other_kind_record) = init(&tables, 0x1000, 1, 7).unwrap();
        assert_ne!(other_kind, first);
        // While a live record of the address and kind exists, it is the
        // record: no second live one.
        assert_eq!(init(&tables, 0x1000, 1, 7).unwrap().0, other_kind);
        assert_eq!(record.flags.load(Relaxed) & RETIRED, RETIRED);
        // A lock of another kind at a live record's address is a new lock
        // in memory freed without a destroy call: the live record retires.
        assert_eq!(init(&tables, 0x1000, 0, 7).unwrap().0, first, "the retired record of site 7 revives");
        assert_eq!(other_kind_record.flags.load(Relaxed) & RETIRED, RETIRED, "the other kind's record retired");
        assert_eq!(tables.health.locks_used.load(Relaxed), 3);
    }

    #[test]
    fn a_lock_first_used_again_by_the_same_site_continues_its_record() {
        let tables = Tables::new(DEFAULT_MAX_LOCKS).unwrap();
        let (first, record) = tables.lock(0x2000, 0, 5, None).unwrap();
        record.flags.fetch_or(RETIRED, Relaxed);
        assert_eq!(tables.lock(0x2000, 0, 5, None).unwrap().0, first, "revived");
        assert_eq!(record.later_lifetimes.load(Relaxed), 1);
        // A record named by an init call is not revived by a first use.
        record.flags.fetch_or(RETIRED, Relaxed);
        let (named, named_record) = init(&tables, 0x2000, 0, 5).unwrap();
        assert_ne!(named, first);
        named_record.flags.fetch_or(RETIRED, Relaxed);
        // With a live record of the address further on, a lookup finds it
        // and revives nothing: one live record per address.
        let (live, _) = tables.lock(0x2000, 0, 6, None).unwrap();
        assert_eq!(tables.lock(0x2000, 0, 5, None).unwrap().0, live);
        assert_eq!(record.flags.load(Relaxed) & RETIRED, RETIRED);
        assert_eq!(record.later_lifetimes.load(Relaxed), 1);
    }

    /// A lock whose object was unloaded is never continued, though a lock
    /// at its address is first used by the same line (another library,
    /// laid out alike, loaded where it was).
    #[test]
    fn a_lock_of_an_unloaded_object_is_not_continued() {
        let tables = Tables::new(DEFAULT_MAX_LOCKS).unwrap();
        let (first, record) = tables.lock(0x4000, 0, 5, None).unwrap();
        tables.retire_unloaded(0x4000);
        let (next, next_record) = tables.lock(0x4000, 0, 5, None).unwrap();
        assert_ne!(next, first);
        assert_eq!((next_record.generation.load(Relaxed), record.later_lifetimes.load(Relaxed)), (1, 0));
    }

    #[test]
    fn an_address_crowded_by_its_own_earlier_locks_is_counted_apart() {
        let tables = Tables::new(DEFAULT_MAX_LOCKS).unwrap();
        // Each lifetime first used by another line: nothing to revive.
        for site in 0..MAX_PROBE {
            let (_, record) = tables.lock(0x3000, 0, site, None).unwrap();
            record.flags.fetch_or(RETIRED, Relaxed);
        }
        assert!(tables.lock(0x3000, 0, 10_000, None).is_none());
        assert_eq!(tables.health.address_crowded.load(Relaxed), 1);
        assert_eq!(tables.health.lock_table_full.load(Relaxed), 0);
    }

    #[test]
    fn a_retirement_retires_every_live_record_of_the_address() {
        let tables = Tables::new(DEFAULT_MAX_LOCKS).unwrap();
        for site in [1, 2] {
            tables.lock(0x5000, 0, site, None).unwrap().1.flags.fetch_or(RETIRED, Relaxed);
        }
        // As after two first uses that raced, each reviving its line's record.
        for (_, record) in tables.all_locks() {
            record.flags.fetch_and(!RETIRED, Relaxed);
        }
        tables.retire(0x5000);
        assert!(tables.existing_lock(0x5000).is_none(), "no live record left");
        let (_, fresh) = tables.lock(0x5000, 0, 3, None).unwrap();
        assert_eq!(fresh.generation.load(Relaxed), 2);
    }

    #[test]
    fn the_capacity_is_the_asked_power_of_two_and_a_full_table_counts_what_it_missed() {
        let tables = Tables::new(100).unwrap();
        assert_eq!((tables.lock_slots(), tables.site_slots()), (128, 512));
        let inserted = (0..200usize).filter(|i| tables.lock(0x10000 + 64 * i, 0, 1, None).is_some()).count();
        assert_eq!(inserted, 128);
        assert_eq!(tables.health.lock_table_full.load(Relaxed), 72);
        // Initialisations that find no slot are not counted: only the
        // acquisitions that then miss.
        assert!(init(&tables, 0x90000, 0, 1).is_none());
        assert_eq!(tables.health.lock_table_full.load(Relaxed), 72);
        assert!(tables.lock(0x90000, 0, 1, None).is_none());
        assert_eq!(tables.health.lock_table_full.load(Relaxed), 73);
        assert_eq!(Tables::new(0).unwrap().lock_slots(), 64);
        assert_eq!(Tables::new(usize::MAX).unwrap().lock_slots(), MAX_MAX_LOCKS);
    }

    #[test]
    fn sites_of_many_locks_taken_at_one_call_spread_over_the_table() {
        let tables = Tables::new(DEFAULT_MAX_LOCKS).unwrap();
        for lock in 0..10_000 {
            tables.site(lock, 0x4005d0, None).unwrap();
        }
        let probed = tables.health.site_collisions.load(Relaxed);
        // At 15% load, random homes make about 8% of inserts probe; with
        // the lock only in the key's high bits (one multiply), 9,744 did.
        assert!(probed < 1_500, "{probed} of 10,000 inserts probed past their home");
    }

    #[test]
    fn locks_far_apart_keep_their_own_sites() {
        let tables = Tables::new(MAX_MAX_LOCKS).unwrap();
        let near = tables.site(1, 0x4005d0, None).unwrap().0;
        let far = tables.site(1 + (1 << 16), 0x4005d0, None).unwrap().0;
        assert_ne!(near, far, "locks 65,536 apart at one call");
        let last = (MAX_MAX_LOCKS - 1) as u32;
        tables.site(last, 0x4005d0, None).unwrap();
        let mut sites: Vec<_> = tables.all_sites().map(|(lock, pc, _)| (lock, pc)).collect();
        sites.sort();
        assert_eq!(sites, [(1, 0x4005d0), (1 + (1 << 16), 0x4005d0), (last, 0x4005d0)]);
    }

    #[test]
    fn concurrent_inserts_of_one_site_find_records_of_it() {
        let tables = Tables::new(DEFAULT_MAX_LOCKS).unwrap();
        for lock in 0..50 {
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| tables.site(lock, 0x4005d0, None).unwrap());
                }
            });
        }
        // A thread that met another's claim not yet published made its own
        // record: at most one per thread, each of the right pair.
        let sites: Vec<_> = tables.all_sites().collect();
        assert!((50..=200).contains(&sites.len()), "{}", sites.len());
        assert!(sites.iter().all(|&(lock, pc, _)| lock < 50 && pc == 0x4005d0));
        // Once published, lookups agree.
        for lock in 0..50 {
            assert_eq!(tables.site(lock, 0x4005d0, None).unwrap().0, tables.site(lock, 0x4005d0, None).unwrap().0);
        }
    }

    #[test]
    fn a_claim_not_yet_published_is_passed_over() {
        let tables = Tables::new(DEFAULT_MAX_LOCKS).unwrap();
        // As if this thread had been interrupted between claiming a slot
        // and publishing it, and a signal handler now took the same lock
        // from the same place: it must not wait for itself.
        let home = site_home(1, 0x4005d0, tables.site_slots());
        tables.sites[home].lock.store(1, Relaxed);
        let (_, record) = tables.site(0, 0x4005d0, None).unwrap();
        assert!(!std::ptr::eq(record, &tables.sites[home]));
    }

    #[test]
    fn sites_are_per_lock_and_address() {
        let tables = Tables::new(DEFAULT_MAX_LOCKS).unwrap();
        let a = tables.site(1, 0x4000, None).unwrap().0;
        assert_eq!(tables.site(1, 0x4000, None).unwrap().0, a);
        assert_ne!(tables.site(2, 0x4000, None).unwrap().0, a);
        let sites: Vec<_> = tables.all_sites().map(|(lock, pc, _)| (lock, pc)).collect();
        assert!(sites.contains(&(1, 0x4000)) && sites.contains(&(2, 0x4000)));
    }

    #[test]
    fn the_delay_is_the_waiting_during_the_hold() {
        let u = 1 << UNIT_SHIFT;
        let clock = WaiterClock::default();
        clock.arrive(100 * u + 7); // waiting before the hold starts at 1000
        let at_start = clock.now();
        clock.arrive(1500 * u); // arrives during the hold
        let at_end = clock.now();
        assert_eq!(at_end.count(), 2);
        // Ends at 3000: (3000 - 1000) + (3000 - 1500).
        assert_eq!(WaiterClock::delay(at_start, 1000 * u, at_end, 3000 * u), (2000 + 1500) * u);
        clock.leave(100 * u + 7);
        clock.leave(1500 * u);
        assert!(clock.now() == Waiters::default());
        assert_eq!(WaiterClock::delay(Waiters::default(), 0, Waiters::default(), 5000 * u), 0, "nobody waited");
    }

    /// Waiters that give up during a hold count the time they waited in
    /// it (the formula alone read 0 for one there from the start).
    #[test]
    fn a_wait_given_up_during_the_hold_counts_until_it_ends() {
        let u = 1 << UNIT_SHIFT;
        let clock = WaiterClock::default();
        clock.arrive(500 * u); // waiting before the hold starts at 1000...
        clock.arrive(10 * u); // ...and one that gives up before it
        clock.give_up(10 * u, 400 * u);
        let at_start = clock.now();
        clock.arrive(1500 * u); // comes during the hold, gives up at 2500
        clock.arrive(1800 * u); // comes during the hold, still waits at its end
        clock.give_up(500 * u, 2000 * u);
        clock.give_up(1500 * u, 2500 * u);
        let at_end = clock.now();
        // Ends at 3000: (2000 - 1000) + (2500 - 1500) + (3000 - 1800); the
        // one gone before is none of it.
        assert_eq!(WaiterClock::delay(at_start, 1000 * u, at_end, 3000 * u), (1000 + 1000 + 1200) * u);
        assert_eq!(clock.waited_so_far(5000 * u), 3200 * u, "the one still waiting");
        clock.leave(1800 * u);
        assert_eq!(clock.waited_so_far(5000 * u), 0, "nobody waits now");
    }

    /// What the waiters still waiting waited, for a hold begun with none:
    /// the give-ups' waits left out (counted in, one hold read 2.7 ms for
    /// 1 ms, their waits divided among the few left).
    #[test]
    fn the_present_waiters_wait_leaves_the_give_ups_out() {
        let u = 1 << UNIT_SHIFT;
        let clock = WaiterClock::default();
        clock.arrive(u);
        clock.give_up(u, 50 * u); // gone before the hold starts at 1000
        let at_start = clock.now();
        for start in [1100, 1200, 1300] {
            clock.arrive(start * u);
        }
        clock.give_up(1100 * u, 1500 * u);
        clock.give_up(1200 * u, 1600 * u);
        clock.arrive(1900 * u);
        let at_end = clock.now();
        assert_eq!(at_end.count(), 2);
        // At 2000: the two still waiting waited 700 and 100; the delay
        // counts the give-ups' 400 and 400 too.
        assert_eq!(WaiterClock::delay(at_start, 0, at_end, 2000 * u), 1600 * u);
        assert_eq!(clock.waited_by_present(at_start, at_end, 2000 * u), 800 * u);
    }

    #[test]
    fn waits_so_far_are_the_waiters_time_since_they_came() {
        let clock = WaiterClock::default();
        let u = 1 << UNIT_SHIFT;
        assert_eq!(clock.waited_so_far(5000 * u), 0);
        clock.arrive(1000 * u);
        clock.arrive(3000 * u);
        assert_eq!(clock.now().count(), 2);
        assert_eq!(clock.waited_so_far(5000 * u), (4000 + 2000) * u);
        clock.leave(1000 * u);
        assert_eq!(clock.waited_so_far(5000 * u), 2000 * u);
    }

    #[test]
    fn the_delay_survives_the_sum_wrapping() {
        let u = 1 << UNIT_SHIFT;
        let clock = WaiterClock::default();
        // Start times near 2^60 cycles: their sum wraps 48 bits of units.
        let base = (1u64 << 60) / u * u;
        for i in 0..5 {
            clock.arrive(base + i * u);
        }
        let at_start = clock.now();
        let at_end = clock.now();
        // 5 waiters through a hold of 100 units.
        assert_eq!(WaiterClock::delay(at_start, base + 10 * u, at_end, base + 110 * u), 5 * 100 * u);
    }

    /// A thread's locks get numbers side by side, however the threads'
    /// first counts interleave.
    #[test]
    fn each_block_numbers_its_locks_and_sites_side_by_side() {
        let tables = Tables::new(DEFAULT_MAX_LOCKS).unwrap();
        let blocks = [tables.claim_block().unwrap(), tables.claim_block().unwrap()];
        let mut numbers = [Vec::new(), Vec::new()];
        let mut sites = [Vec::new(), Vec::new()];
        for i in 0..20 {
            for (b, block) in blocks.iter().enumerate() {
                let (number, _) = tables.lock(0x10_0000 * (b + 1) + 64 * i, 0, 7, Some(block)).unwrap();
                numbers[b].push(number);
                sites[b].push(tables.site(number, 0x4005d0, Some(block)).unwrap().0);
            }
        }
        for list in numbers.iter().chain(&sites) {
            // Runs of RUN numbers, each run side by side.
            for run in list.chunks(RUN as usize) {
                assert!(run.windows(2).all(|w| w[1] == w[0] + 1), "{list:?}");
            }
        }
        // Found again, a record keeps its number, whoever asks.
        let (again, _) = tables.lock(0x10_0000, 0, 7, Some(blocks[1])).unwrap();
        assert_eq!(again, numbers[0][0]);
        for list in [numbers.concat(), sites.concat()] {
            let mut distinct = list.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), list.len(), "each record a number of its own: {list:?}");
        }
    }

    /// Two threads first counting the same locks at the same moment, past
    /// the runs' budget: the one that loses a record's numbering keeps its
    /// number for its next (each lost one, 13 of 64 records of a table
    /// with room left went without a number, their operations counted as
    /// a full table's).
    #[test]
    fn racing_first_counts_leave_no_record_unnumbered() {
        use std::sync::atomic::AtomicUsize;
        for _ in 0..100 {
            let tables = Tables::new(64).unwrap();
            // The runs' budget spent: 8 blocks, one lock each.
            for i in 0..8 {
                let block = tables.claim_block().unwrap();
                tables.lock(0x2_0000 + 64 * i, 0, 1, Some(block)).unwrap();
            }
            let arrived = AtomicUsize::new(0);
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        let block = tables.claim_block().unwrap();
                        for (round, i) in (8..64usize).enumerate() {
                            // In step: both first count lock i together.
                            arrived.fetch_add(1, SeqCst);
                            // Spinning, then yielding: spinning alone for a
                            // partner that was not running took 38 s on a
                            // busy machine.
                            for spins in 0u32.. {
                                if arrived.load(SeqCst) >= 2 * (round + 1) {
                                    break;
                                }
                                if spins < 10_000 {
                                    std::hint::spin_loop();
                                } else {
                                    std::thread::yield_now();
                                }
                            }
                            // (Not unwrapped: a panic here would leave the
                            // other thread waiting for its partner.)
                            let _ = tables.lock(0x2_0000 + 64 * i, 0, 1, Some(block));
                        }
                    });
                }
            });
            assert_eq!(tables.health.lock_table_full.load(Relaxed), 0);
            assert!(tables.all_locks().all(|(number, _)| number != UNCOUNTED));
        }
    }

    /// Runs a thread leaves unfinished cannot leave a record without a
    /// number: past the runs' budget, numbers go one at a time.
    #[test]
    fn every_record_of_a_full_table_gets_a_number() {
        let tables = Tables::new(64).unwrap();
        let mut numbers: Vec<u32> = (0..64)
            .map(|i| {
                // Each lock counted first by a thread of its own, which
                // takes a run and uses one number of it.
                let block = tables.claim_block().unwrap();
                tables.lock(0x2_0000 + 64 * i, 0, 1, Some(block)).unwrap().0
            })
            .collect();
        assert_eq!(tables.health.locks_used.load(Relaxed), 64);
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), 64, "one number each");
        assert!(numbers.iter().all(|&n| (n as usize) < numbers_for(64)));
        // The runs stopped at the budget: 8 runs, then one at a time.
        assert_eq!(numbers.iter().filter(|&&n| n < 64).count(), 8);
    }

    #[test]
    fn blocks_of_finished_threads_are_reused() {
        let tables = Tables::new(DEFAULT_MAX_LOCKS).unwrap();
        let first = tables.claim_block().unwrap() as *const ThreadBlock;
        let second = tables.claim_block().unwrap();
        assert_ne!(first, second as *const ThreadBlock);
        tables.release_block(second);
        assert_eq!(tables.claim_block().unwrap() as *const ThreadBlock, second as *const ThreadBlock);
        assert_eq!(tables.blocks().count(), 2);
    }

    #[test]
    fn concurrent_inserts_of_one_address_agree() {
        let tables = Tables::new(DEFAULT_MAX_LOCKS).unwrap();
        let slots: Vec<u32> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8).map(|_| s.spawn(|| tables.lock(0xdead0, 0, 1, None).unwrap().0)).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(slots.windows(2).all(|w| w[0] == w[1]), "{slots:?}");
        assert_eq!(tables.health.locks_used.load(Relaxed), 1);
    }
}
