//! Profile mode: glibc's own lock functions, wrapped so the program's
//! behaviour is untouched, with every acquisition, wait and hold counted
//! per lock and per call site.
//!
//! The cost is paid where it is cheapest: every blocking acquisition tries
//! first (a trylock that succeeds needs one timestamp, no wait clock), and
//! the per-lock counters of an exclusive lock are written by its holder
//! with plain stores (see `table`).

mod hooks;
pub mod output;
pub mod real;
mod stacks;
mod symbols;
pub mod table;

use lockmeter_locks::clock::cycles;
use lockmeter_stats::histogram::bin_of;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering::*};
use table::{LockRecord, SiteRecord, Tables, HIST_BINS, INIT_SEEN, RETIRED};

/// What a lock record is of (stored in the record, reported as `kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    Mutex = 0,
    Rwlock = 1,
    Spin = 2,
    Sem = 3,
    Cond = 4,
}

impl Kind {
    pub fn from_u32(value: u32) -> Kind {
        match value {
            1 => Kind::Rwlock,
            2 => Kind::Spin,
            3 => Kind::Sem,
            4 => Kind::Cond,
            _ => Kind::Mutex,
        }
    }
}

/// Index of a lock's exclusive side (mutex, spinlock, rwlock writers).
pub const EXCLUSIVE: usize = 0;
/// Index of a lock's shared side (rwlock readers, semaphore waits, condvar waits).
pub const SHARED: usize = 1;

/// The profiler of this process.
pub struct Profiler {
    pub tables: Tables,
    pub start_cycles: u64,
    pub start_ns: u64,
    pub frames: usize,
}

static PROFILER: AtomicPtr<Profiler> = AtomicPtr::new(std::ptr::null_mut());
const UNSET: u8 = 0;
const STARTING: u8 = 1;
const SETTLED: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(UNSET);

/// The running profiler, or `None` when this process is not profiled
/// (or while the profiler is being set up by another thread).
#[inline(always)]
pub fn active() -> Option<&'static Profiler> {
    let profiler = PROFILER.load(Acquire);
    if !profiler.is_null() {
        // SAFETY: once published the profiler is never freed (a forked
        // child publishes a new one and leaks the old).
        return Some(unsafe { &*profiler });
    }
    if STATE.load(Acquire) == SETTLED {
        return None;
    }
    start()
}

#[cold]
fn start() -> Option<&'static Profiler> {
    if STATE.compare_exchange(UNSET, STARTING, AcqRel, Acquire).is_err() {
        return None;
    }
    let settings = output::Settings::from_env();
    if let Some(settings) = settings {
        if let Some(profiler) = Profiler::new(settings.frames) {
            output::arm(settings);
            PROFILER.store(Box::into_raw(Box::new(profiler)), Release);
        }
    }
    STATE.store(SETTLED, Release);
    let profiler = PROFILER.load(Acquire);
    // SAFETY: as in `active`.
    (!profiler.is_null()).then(|| unsafe { &*profiler })
}

/// After `fork`, in the child: a fresh profiler of the child alone.
pub fn restart_in_child() {
    if let Some(old) = active() {
        if let Some(fresh) = Profiler::new(old.frames) {
            PROFILER.store(Box::into_raw(Box::new(fresh)), Release);
        }
    }
}

fn monotonic_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// This thread's identity: the thread control block's self pointer, which
/// is what `pthread_self()` returns on x86-64 glibc, read without a call.
#[inline(always)]
fn this_thread() -> usize {
    let tcb: usize;
    // SAFETY: on x86-64 Linux %fs points at the thread control block,
    // whose first word points at itself; reading it has no side effects.
    unsafe { core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tcb, options(nostack, readonly, preserves_flags)) };
    tcb
}

/// How an acquisition went.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// The first try succeeded.
    NoWait,
    /// It waited this many cycles.
    Waited(u64),
    /// Re-acquired inside a condvar wait.
    CondReacquire,
}

/// An acquisition of a shared hold, remembered by the thread until it
/// releases (an rwlock's readers have no single holder slot).
#[derive(Clone, Copy)]
struct ReadHold {
    address: usize,
    at: u64,
    site: u32,
}

const READ_HOLDS: usize = 16;

/// One in this many holds of a never-contended lock is timed.
pub const HOLD_SAMPLE: u64 = 16;

thread_local! {
    /// Timed read holds this thread has open.
    static OPEN_READS: Cell<u32> = const { Cell::new(0) };
    static READS: RefCell<[ReadHold; READ_HOLDS]> =
        const { RefCell::new([ReadHold { address: 0, at: 0, site: 0 }; READ_HOLDS]) };
}

fn count_wait(counters: &table::SideCounters, hist: Option<&[table::Counter; HIST_BINS]>, how: Acquired, shared: bool) {
    counters.acquisitions.add(1, shared);
    match how {
        Acquired::NoWait => counters.nowait.add(1, shared),
        Acquired::Waited(wait) => {
            counters.contended.add(1, shared);
            counters.wait_total.add(wait, shared);
            counters.wait_max.max(wait, shared);
            if let Some(hist) = hist {
                hist[bin_of(wait).min(HIST_BINS - 1)].add(1, shared);
            }
        }
        Acquired::CondReacquire => counters.cond_reacquire.add(1, shared),
    }
}

impl Profiler {
    fn new(frames: usize) -> Option<Profiler> {
        Some(Profiler { tables: Tables::new()?, start_cycles: cycles(), start_ns: monotonic_ns(), frames })
    }

    fn record(&self, kind: Kind, address: usize, pc: usize) -> Option<(u32, &LockRecord)> {
        self.tables.lock(address, kind as u32, pc)
    }

    /// The site record id of `pc` for lock `index`, through the record's
    /// one-entry cache (exclusive locks only: the holder owns the cache).
    #[inline(always)]
    fn exclusive_site(&self, index: u32, record: &LockRecord, pc: usize) -> u32 {
        if record.last_pc.load(Relaxed) == pc {
            return record.last_site.load(Relaxed);
        }
        let id = self.tables.site(index, pc).map_or(0, |(id, _)| id);
        record.last_pc.store(pc, Relaxed);
        record.last_site.store(id, Relaxed);
        id
    }

    /// An exclusive hold begins; `now` is the time the wait ended, if it
    /// was measured.
    ///
    /// Timestamps cost about 10 ns each on a virtual machine, more than
    /// everything else here together, so the hold of a lock that has never
    /// been contended is timed 1 in `HOLD_SAMPLE` acquisitions (HOLD and
    /// UTIL are then estimates); once a lock has made anyone wait, every
    /// hold is timed, because that is the lock a user will look at.
    #[inline(always)]
    pub fn acquired_exclusive(&self, kind: Kind, address: usize, pc: usize, how: Acquired, now: Option<u64>) {
        let Some((index, record)) = self.record(kind, address, pc) else { return };
        let me = this_thread();
        if record.holder_thread.load(Relaxed) == me {
            // A recursive mutex taken again by its holder: one hold.
            record.depth.store(record.depth.load(Relaxed) + 1, Relaxed);
            count_wait(&record.sides[EXCLUSIVE], None, Acquired::NoWait, false);
            return;
        }
        let side = &record.sides[EXCLUSIVE];
        count_wait(side, Some(&record.hist), how, false);
        let site = self.exclusive_site(index, record, pc);
        if let Some(site) = self.tables.site_by_id(site) {
            count_wait(&site.counters, None, how, false);
        }
        record.holder_site.store(site, Relaxed);
        record.holder_thread.store(me, Relaxed);
        // With threads already waiting the start must be exact: their
        // waiting during this hold is the delay it causes.
        let timed = side.contended.get() != 0 || side.acquisitions.get() % HOLD_SAMPLE == 1 || record.clock.has_waiters();
        let started = if timed { now.unwrap_or_else(cycles).max(1) } else { 0 };
        record.acquired_at.store(started, Relaxed);
        record.area_at_acquire.store(record.clock.area_at(started), Relaxed);
    }

    /// An exclusive hold ends (call before the real unlock). Returns
    /// whether this thread was the recorded holder.
    #[inline(always)]
    pub fn releasing_exclusive(&self, address: usize) -> bool {
        match self.tables.existing_lock(address) {
            Some((_, record)) => self.release_exclusive_record(record),
            None => false,
        }
    }

    #[inline(always)]
    fn release_exclusive_record(&self, record: &LockRecord) -> bool {
        if record.holder_thread.load(Relaxed) != this_thread() {
            return false;
        }
        let depth = record.depth.load(Relaxed);
        if depth > 0 {
            record.depth.store(depth - 1, Relaxed);
            return true;
        }
        record.holder_thread.store(0, Relaxed);
        let started = record.acquired_at.load(Relaxed);
        let waiters_came = record.clock.changed_since(record.area_at_acquire.load(Relaxed));
        if started == 0 && !waiters_came {
            return true;
        }
        let now = cycles();
        let site = self.tables.site_by_id(record.holder_site.load(Relaxed));
        let side = &record.sides[EXCLUSIVE];
        if started != 0 {
            let hold = now.saturating_sub(started);
            side.hold_total.add(hold, false);
            side.hold_max.max(hold, false);
            side.hold_samples.add(1, false);
            if let Some(site) = site {
                site.counters.hold_total.add(hold, false);
                site.counters.hold_max.max(hold, false);
                site.counters.hold_samples.add(1, false);
            }
        }
        if waiters_came {
            let delay = record.clock.area_at(now).saturating_sub(record.area_at_acquire.load(Relaxed));
            side.delay_total.add(delay, false);
            if let Some(site) = site {
                site.counters.delay_total.add(delay, false);
            }
        }
        true
    }

    /// A shared hold (rwlock read), a semaphore acquisition or a condvar
    /// wake-up. Several threads update these counters at once, so every
    /// update is an atomic add: only the ones that matter are made (NOWAIT
    /// is derived), and read holds are timed like exclusive ones (1 in
    /// `HOLD_SAMPLE` until the lock has been contended).
    pub fn acquired_shared(&self, kind: Kind, address: usize, pc: usize, how: Acquired, now: Option<u64>) {
        let Some((index, record)) = self.record(kind, address, pc) else { return };
        let side = &record.sides[SHARED];
        let stripe = table::stripe_of(this_thread());
        let before = record.shared_acquisitions.increment(stripe);
        let site = self.tables.site(index, pc);
        if let Some((_, site)) = site {
            site.shared_acquisitions.increment(stripe);
            if site.shared.load(Relaxed) == 0 {
                site.shared.store(1, Relaxed);
            }
        }
        if let Acquired::Waited(wait) = how {
            for counters in std::iter::once(side).chain(site.map(|(_, s)| &s.counters)) {
                counters.contended.add(1, true);
                counters.wait_total.add(wait, true);
                counters.wait_max.max(wait, true);
            }
            record.hist[bin_of(wait).min(HIST_BINS - 1)].add(1, true);
        }
        let timed = kind == Kind::Rwlock && (before % HOLD_SAMPLE == 0 || side.contended.get() != 0);
        if timed {
            let hold = ReadHold { address, at: now.unwrap_or_else(cycles), site: site.map_or(0, |(id, _)| id) };
            READS.with(|reads| {
                let mut reads = reads.borrow_mut();
                if let Some(free) = reads.iter_mut().find(|r| r.address == 0) {
                    *free = hold;
                }
            });
            OPEN_READS.with(|open| open.set(open.get() + 1));
        }
    }

    /// A shared hold ends: if it was timed, its hold time is counted.
    pub fn releasing_shared(&self, address: usize, record: &LockRecord) {
        if OPEN_READS.with(Cell::get) == 0 {
            return;
        }
        let Some(hold) = READS.with(|reads| {
            let mut reads = reads.borrow_mut();
            let entry = reads.iter_mut().rev().find(|r| r.address == address)?;
            let hold = *entry;
            entry.address = 0;
            Some(hold)
        }) else {
            return;
        };
        OPEN_READS.with(|open| open.set(open.get() - 1));
        let held = cycles().saturating_sub(hold.at);
        let side = &record.sides[SHARED];
        let site = self.tables.site_by_id(hold.site).map(|s| &s.counters);
        for counters in std::iter::once(side).chain(site) {
            counters.hold_total.add(held, true);
            counters.hold_max.max(held, true);
            counters.hold_samples.add(1, true);
        }
    }

    /// An rwlock is unlocked: the writer's hold or one reader's ends.
    pub fn releasing_rwlock(&self, address: usize) {
        let Some((_, record)) = self.tables.existing_lock(address) else { return };
        if !self.release_exclusive_record(record) {
            self.releasing_shared(address, record);
        }
    }

    /// A trylock refused (or a timed acquisition gave up after `waited`).
    pub fn refused(&self, kind: Kind, address: usize, pc: usize, side: usize, timed_out_after: Option<u64>) {
        let Some((index, record)) = self.record(kind, address, pc) else { return };
        let site = self.tables.site(index, pc).map(|(_, s)| s);
        let apply = |c: &table::SideCounters| match timed_out_after {
            None => c.reject.add(1, true),
            Some(waited) => {
                c.timeout.add(1, true);
                c.wait_total.add(waited, true);
                c.wait_max.max(waited, true);
            }
        };
        apply(&record.sides[side]);
        if let Some(site) = site {
            apply(&site.counters);
        }
    }

    /// A thread starts waiting for `address`: returns the wait's start and
    /// the record whose waiter clock it joined.
    #[inline]
    pub fn begin_wait(&self, kind: Kind, address: usize, pc: usize) -> (u64, Option<&LockRecord>) {
        let record = self.record(kind, address, pc).map(|(_, r)| r);
        let now = cycles();
        if let Some(record) = record {
            record.clock.change(now, 1);
        }
        if self.frames > 0 {
            if let Some((index, _)) = self.record(kind, address, pc) {
                stacks::capture(self.frames, index, pc);
            }
        }
        (now, record)
    }

    /// The wait that [`Profiler::begin_wait`] started is over: cycles waited.
    #[inline]
    pub fn end_wait(&self, started: (u64, Option<&LockRecord>)) -> (u64, u64) {
        let now = cycles();
        if let Some(record) = started.1 {
            record.clock.change(now, -1);
        }
        let waited = now.saturating_sub(started.0);
        if self.frames > 0 {
            stacks::charge(waited);
        }
        (now, waited)
    }

    /// A lock is being (re-)initialised or destroyed: its statistics so
    /// far belong to the previous generation.
    pub fn retire(&self, address: usize) {
        if let Some((_, record)) = self.tables.existing_lock(address) {
            record.flags.fetch_or(RETIRED, Relaxed);
        }
    }

    /// A lock is initialised at call site `pc`: that site names it.
    pub fn initialised(&self, kind: Kind, address: usize, pc: usize) {
        self.retire(address);
        if let Some((_, record)) = self.record(kind, address, pc) {
            record.first_site.store(pc, Relaxed);
            record.flags.fetch_or(INIT_SEEN, Relaxed);
        }
    }

    /// Site record of a lock's holder, for stacks and tests.
    pub fn site(&self, lock: u32, pc: usize) -> Option<&SiteRecord> {
        self.tables.site(lock, pc).map(|(_, s)| s)
    }
}
