//! Profile mode: glibc's own lock functions, wrapped so the program's
//! behaviour is untouched, with every acquisition, wait and hold counted
//! per lock and per call site.
//!
//! The cost is paid where it is cheapest: every blocking acquisition tries
//! first (a trylock that succeeds needs one timestamp, no wait clock), and
//! the per-lock counters of an exclusive lock are written by its holder
//! with plain stores (see `table`).

pub mod heap;
mod hooks;
pub mod output;
pub mod real;
mod stacks;
mod symbols;
pub mod table;
mod unloaded;

use lockmeter_locks::clock::cycles;
use lockmeter_stats::histogram::bin_of;
use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering::*};
use table::{LockRecord, ThreadBlock, ThreadLock, Tables, HIST_BINS};

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
    /// Tells this profiler's thread blocks from an earlier one's (a forked
    /// child starts a new profiler; its threads' cached blocks are stale).
    epoch: u64,
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

/// Whether this process is, for good, not profiled: settled without a
/// profiler, which nothing starts later (a child of `fork` starts a fresh
/// one only where its parent had one).
pub fn never_profiled() -> bool {
    // In the order `start` publishes them: read the other way round, a
    // start finishing between the two reads looked settled without one.
    STATE.load(Acquire) == SETTLED && PROFILER.load(Acquire).is_null()
}

/// Set by the library's constructor. Lock calls before it come from other
/// libraries' start-up, an allocator's among them (jemalloc takes a pthread
/// mutex while it initialises): starting the profiler there would allocate
/// inside the allocator's own initialisation, which deadlocks. They are
/// forwarded unprofiled; the constructor starts the profiler.
static CONSTRUCTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Called first by the library's constructor.
pub fn library_constructed() {
    output::note_parent();
    // In every child forked from now on, profiled yet or not (the
    // profiler's own fork handler comes with its start).
    extern "C" fn note_forking() {
        output::note_forking();
    }
    extern "C" fn note_parent_in_child() {
        output::note_forked();
    }
    // SAFETY: registers plain extern "C" functions, which only call
    // getpid and touch atomics.
    unsafe { libc::pthread_atfork(Some(note_forking), None, Some(note_parent_in_child)) };
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: a valid out-pointer and a plain extern "C" destructor.
    if unsafe { libc::pthread_key_create(&mut key, Some(give_block_back)) } == 0 {
        EXIT_KEY.store(key, Release);
    }
    CONSTRUCTED.store(true, Release);
}

#[cold]
fn start() -> Option<&'static Profiler> {
    if !CONSTRUCTED.load(Acquire) {
        return None;
    }
    if STATE.compare_exchange(UNSET, STARTING, AcqRel, Acquire).is_err() {
        return None;
    }
    let settings = output::Settings::from_env();
    if let Some(settings) = settings {
        if let Some(profiler) = Profiler::new(settings.frames, settings.max_locks) {
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
    output::note_member();
    if let Some(old) = active() {
        if let Some(fresh) = Profiler::new(old.frames, old.tables.lock_slots()) {
            PROFILER.store(Box::into_raw(Box::new(fresh)), Release);
        }
    }
}

static EPOCH: AtomicU64 = AtomicU64::new(1);

/// The calling thread's block of the running profiler, cached in TLS;
/// `give_block_back` returns it when the thread exits.
#[derive(Clone, Copy)]
struct BlockCache {
    epoch: u64,
    block: *const ThreadBlock,
}

// SAFETY: epoch 0 (no profiler's: they start at 1) and a null block, the
// empty cache; plain values drop nothing.
unsafe impl lockmeter_locks::static_tls::ZeroInit for BlockCache {}

lockmeter_locks::static_thread_local! {
    /// Read at every recorded operation: in the static TLS block.
    static BLOCK: Cell<BlockCache>;
}

thread_local! {
    /// This thread is claiming its block (see `Profiler::claim_block`).
    static CLAIMING: Cell<bool> = const { Cell::new(false) };
}

/// The pthread key whose destructor gives a thread's block back when the
/// thread exits (`u32::MAX`: none). A key, not a thread-local with a
/// destructor: registering one of those allocates (glibc's
/// `__cxa_thread_atexit_impl` calls `calloc`), and a thread's first
/// recorded operation can be an allocator's own mutex call (jemalloc's,
/// inside its `posix_memalign`), where allocating again crashed it. Made
/// as the library starts, so among the first keys, whose values a thread
/// keeps in itself: setting one allocates nothing.
static EXIT_KEY: AtomicU32 = AtomicU32::new(u32::MAX);

extern "C" fn give_block_back(block: *mut libc::c_void) {
    // Forget the block first: locks taken later in this thread's exit
    // (destructors of keys after this one) must not write into a block
    // another thread may claim; they claim one of their own, which this
    // destructor, called again for it, gives back in turn.
    let cached = BLOCK.with(|b| b.replace(BlockCache { epoch: 0, block: std::ptr::null() }));
    if let Some(profiler) = active() {
        if cached.epoch == profiler.epoch && std::ptr::eq(cached.block, block.cast_const().cast()) {
            // SAFETY: blocks are never freed.
            profiler.tables.release_block(unsafe { &*cached.block });
        }
    }
}

/// The path of `name` under `/proc` for this process as the calling
/// thread sees it. Once a process's main thread has exited (a program
/// that ends `main` with `pthread_exit`), `/proc/self` names that thread:
/// its `exe` link cannot be read and its `cmdline` and `maps` read empty,
/// while the same files of a running thread still answer.
fn this_process(name: &str) -> String {
    format!("/proc/thread-self/{name}")
}

fn monotonic_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// A wait begun: when (cycles), the lock's record, whose waiter clocks it
/// counts on, and whether it is an rwlock writer's.
pub type Started<'a> = (u64, Option<&'a LockRecord>, bool);

/// A hold that has ended, to be counted once the lock is released.
pub struct Release<'a> {
    block: &'a ThreadBlock,
    index: u32,
    started: u64,
    ended: u64,
    at_start: table::Waiters,
    at_end: table::Waiters,
    shared: bool,
    /// Timed only for its turn in the sample.
    sampled: bool,
}

/// How an acquisition went.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// The first try succeeded.
    NoWait,
    /// It waited this many cycles.
    Waited(u64),
    /// It waited this many cycles, spinning only (a served lock says so).
    Spun(u64),
    /// It waited this many cycles and slept in the kernel.
    Slept(u64),
    /// Re-acquired inside a condvar wait.
    CondReacquire,
}

lockmeter_locks::static_thread_local! {
    /// The state of this thread's draws of which holds to time (0: not
    /// seeded yet), drawn at every recorded hold. In TLS rather than in
    /// the thread's block: a larger block moved jemalloc's allocation of
    /// it into a path that takes a pthread mutex, and claiming a block
    /// from inside its own allocation recursed.
    static SAMPLE_STATE: Cell<u64>;
}

/// Whether the hold beginning now is one of the 1 in `HOLD_SAMPLE` timed
/// for the estimate: a random draw (xorshift), independent of what the
/// program does. A fixed turn (every 16th hold of a site) read a program
/// that holds long every 1,024th time as holding long every time it was
/// sampled, or never (UTIL 87% where it was at most 15%).
#[inline(always)]
fn in_the_sample() -> bool {
    SAMPLE_STATE.with(|state| {
        let mut x = state.get();
        if x == 0 {
            // Seeded from the thread's id and the variable's address: the
            // address alone repeats for threads made one after another,
            // which then drew the same holds (whole runs without a sample).
            let id = u64::from(lockmeter_locks::current_tid());
            x = ((std::ptr::from_ref(state) as u64) ^ id.rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        (x >> 32) % HOLD_SAMPLE == 0
    })
}

/// One in this many short holds is timed.
pub const HOLD_SAMPLE: u64 = 16;
/// A hold at least this long (about 5 us) makes the next hold timed too.
const LONG_HOLD_CYCLES: u64 = 10_000;

fn count_wait(counters: &table::SideCounters, hist: Option<&table::Histogram>, how: Acquired) {
    counters.acquisitions.add(1, false);
    match how {
        Acquired::NoWait => counters.nowait.add(1, false),
        Acquired::Waited(wait) | Acquired::Spun(wait) | Acquired::Slept(wait) => {
            match how {
                Acquired::Spun(_) => counters.spin.add(1, false),
                Acquired::Slept(_) => counters.sleep.add(1, false),
                _ => {}
            }
            counters.contended.add(1, false);
            counters.wait_total.add(wait, false);
            counters.wait_max.max(wait, false);
            if let Some(hist) = hist {
                hist[bin_of(wait).min(HIST_BINS - 1)].add(1, false);
            }
        }
        Acquired::CondReacquire => counters.cond_reacquire.add(1, false),
    }
}

/// glibc's `pthread_mutex_t` layout on x86-64 (stable ABI): the recursion
/// count at offset 4 and the kind at offset 16. A recursive mutex taken
/// again by its owner is one hold, not two.
fn nested_recursive_hold(address: usize) -> bool {
    let m = address as *mut libc::pthread_mutex_t;
    if crate::replace::algorithm().is_some() && crate::replace::mutex::is_served(m) {
        // SAFETY: a served mutex the program holds.
        return unsafe { crate::replace::mutex::nested(m) };
    }
    // SAFETY: the program passed a pthread_mutex_t it currently holds (we
    // are between its successful lock and its unlock); reading two of its
    // fields is a plain read of its own memory.
    unsafe {
        let kind = std::ptr::read_volatile((address + 16) as *const i32);
        let count = std::ptr::read_volatile((address + 4) as *const u32);
        kind & 3 == libc::PTHREAD_MUTEX_RECURSIVE && count > 1
    }
}

impl Profiler {
    fn new(frames: usize, max_locks: usize) -> Option<Profiler> {
        Some(Profiler {
            tables: Tables::new(max_locks)?,
            start_cycles: cycles(),
            start_ns: monotonic_ns(),
            frames,
            epoch: EPOCH.fetch_add(1, Relaxed),
        })
    }

    /// The calling thread's counters.
    #[inline(always)]
    pub fn block(&self) -> Option<&ThreadBlock> {
        let cached = BLOCK.with(Cell::get);
        if cached.epoch == self.epoch {
            // SAFETY: blocks are never freed.
            return Some(unsafe { &*cached.block });
        }
        self.claim_block()
    }

    /// The calling thread's counters, for an acquisition (or a refused
    /// one): one that goes unrecorded for want of them is counted, so it
    /// shows (releases are not: the unit of operations lost is the
    /// acquisition, as of the operations seen).
    #[inline(always)]
    fn block_for_acquisition(&self) -> Option<&ThreadBlock> {
        let block = self.block();
        if block.is_none() && !CLAIMING.with(Cell::get) {
            self.tables.health.no_thread_block.fetch_add(1, Relaxed);
        }
        block
    }

    #[cold]
    fn claim_block(&self) -> Option<&ThreadBlock> {
        // Claiming allocates, and an allocator that takes pthread mutexes
        // (jemalloc, on a thread's first allocation) comes back here from
        // inside the allocation: those calls are the profiler's own doing,
        // not the program's, and go unrecorded (they claimed again, and
        // recursed until the stack ran out).
        if CLAIMING.with(|claiming| claiming.replace(true)) {
            return None;
        }
        let block = self.tables.claim_block();
        CLAIMING.with(|claiming| claiming.set(false));
        let block = block?;
        BLOCK.with(|b| b.set(BlockCache { epoch: self.epoch, block }));
        let key = EXIT_KEY.load(Acquire);
        // glibc keeps the first 32 keys' values in the thread itself;
        // setting a later one allocates (here, maybe inside an allocator's
        // mutex call): past them, blocks are not given back.
        if key < 32 {
            // SAFETY: a key made by this library; the value is only compared
            // and handed back to `give_block_back`.
            unsafe { libc::pthread_setspecific(key, std::ptr::from_ref(block).cast()) };
        }
        Some(block)
    }

    fn record(&self, kind: Kind, address: usize, pc: usize, block: &ThreadBlock) -> Option<(u32, &LockRecord)> {
        self.tables.lock(address, kind as u32, pc, Some(block))
    }

    /// The site record id of `pc` for lock `index`, through the thread's
    /// one-entry cache for the lock (most locks are taken from one or two
    /// places).
    ///
    /// Every first count of a lock in a block comes through here (its
    /// cache is empty then), where the block notes the lock as used: the
    /// fast path pays nothing for it.
    #[inline(always)]
    fn cached_site(&self, block: &ThreadBlock, index: u32, mine: &ThreadLock, pc: usize) -> u32 {
        if mine.last_pc.load(Relaxed) == pc {
            return mine.last_site.load(Relaxed);
        }
        block.note_used(index);
        let id = self.tables.site(index, pc, Some(block)).map_or(0, |(id, _)| id);
        mine.last_pc.store(pc, Relaxed);
        mine.last_site.store(id, Relaxed);
        id
    }

    /// An exclusive hold begins; `now` is the time the wait ended, if it
    /// was measured.
    ///
    /// A timestamp costs about 10 ns on a virtual machine, more than
    /// everything else here together, and the waiter clock is a cache line
    /// the waiters write (read, it stays in this CPU's cache while nobody
    /// waits): a hold is timed (and its delay measured) when the
    /// acquisition waited (its timestamp is already taken), when threads
    /// wait as it begins, when this thread's last timed hold of the lock
    /// was long (then the timestamps cost nothing in comparison), and
    /// otherwise 1 in `HOLD_SAMPLE` times; an untimed hold that threads
    /// come to wait through is counted at its release. HOLD, UTIL and the
    /// delay of short holds are estimates scaled from those samples;
    /// everything else is counted exactly.
    #[inline(always)]
    pub fn acquired_exclusive(&self, kind: Kind, address: usize, pc: usize, how: Acquired, now: Option<u64>) {
        // One after the other: an operation lost for want of a counter
        // block is not lost again for want of a lock slot. (The block
        // first: a lock this thread is the first to count takes its number
        // from the block's run.)
        let Some(block) = self.block_for_acquisition() else { return };
        let Some((index, record)) = self.record(kind, address, pc, block) else { return };
        self.acquired_exclusive_in(block, index, record, kind, address, pc, how, now);
    }

    /// A robust mutex came with EOWNERDEAD: its owner died holding it, and
    /// that hold ends here, timed as a release would (it showed as held
    /// at exit, then as a hold of no time). Whatever block records it open
    /// (its thread's, given back or claimed again), no other thread holds
    /// the lock now; a block claimed again is counted into by its new
    /// thread as well, so the hold is added atomically (the new thread's
    /// own plain adds can still lose one of the two, should they meet).
    #[cold]
    pub fn owner_died(&self, kind: Kind, address: usize, pc: usize) {
        let Some((index, record)) = self.tables.lock(address, kind as u32, pc, self.block()) else { return };
        for block in self.tables.blocks() {
            // Ended as its owner's unlock would have ended it.
            if let Some(release) = self.release_exclusive_in(block, index, record, kind, address) {
                self.count_hold(release, true);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn acquired_exclusive_in(
        &self,
        block: &ThreadBlock,
        index: u32,
        record: &LockRecord,
        kind: Kind,
        address: usize,
        pc: usize,
        how: Acquired,
        now: Option<u64>,
    ) {
        let mine = block.lock(index);
        let side = &mine.sides[EXCLUSIVE];
        if mine.holding.load(Relaxed) != 0 && kind == Kind::Mutex && nested_recursive_hold(address) {
            count_wait(side, None, Acquired::NoWait);
            side.nested.add(1, false);
            // At its call site too: a lock's TOTAL is its sites' (nested
            // re-locks were in the lock's row and in no site's).
            if let Some(site) = block.site(self.cached_site(block, index, mine, pc)) {
                count_wait(&site.counters, None, Acquired::NoWait);
            }
            return;
        }
        let site = self.cached_site(block, index, mine, pc);
        count_wait(side, Some(block.hist(index)), how);
        // Counted per call site: counted per lock, a loop taking the lock
        // at line A then at line B sampled only A's first hold.
        let mut turn = side.acquisitions.get();
        if let Some(site) = block.site(site) {
            count_wait(&site.counters, None, how);
            turn = site.counters.acquisitions.get();
        }
        mine.holder_site.store(site, Relaxed);
        mine.holding.store(1, Relaxed);
        // Holds after a wait or a long hold are timed whatever their turn,
        // and count as themselves; so do a site's first HOLD_SAMPLE (a rare
        // long hold is seen at least once, and a lock taken a few times is
        // timed whole: scaled as a draw, a first hold of 1 ms before 160
        // short ones read as 16 ms, and with no draw among a few holds,
        // one 10 ms hold of 8 read as 40 ms), and holds that begin while
        // threads wait (they delay them from their first instant); the
        // others 1 in HOLD_SAMPLE, drawn at random (a fixed turn, every
        // 16th, aliased with the program's own periods). The waiters are
        // read either way: an untimed hold that threads come to wait
        // through is counted at its release (see `release_exclusive_in`).
        let waiters = record.clocks.all.now();
        mine.waiters_at_acquire.store(waiters, Relaxed);
        let always = now.is_some() || waiters.count() != 0 || mine.long_holds.load(Relaxed) != 0 || turn <= HOLD_SAMPLE;
        let sampled = !always && in_the_sample();
        if !always && !sampled {
            mine.acquired_at.store(0, Relaxed);
            return;
        }
        mine.hold_sampled.store(u32::from(sampled), Relaxed);
        mine.acquired_at.store(now.unwrap_or_else(cycles).max(1), Relaxed);
    }

    /// An exclusive hold is about to end: call just before the real
    /// unlock, and pass the result to [`Profiler::released`] just after
    /// it, so the lock is held no longer than one timestamp's worth.
    #[inline(always)]
    pub fn releasing_exclusive(&self, kind: Kind, address: usize) -> Option<Release<'_>> {
        let (index, record) = self.tables.existing_lock(address)?;
        self.release_exclusive_in(self.block()?, index, record, kind, address)
    }

    /// `None` if this thread did not hold the lock (or the hold was nested).
    #[inline(always)]
    fn release_exclusive_in<'a>(
        &self,
        block: &'a ThreadBlock,
        index: u32,
        record: &LockRecord,
        kind: Kind,
        address: usize,
    ) -> Option<Release<'a>> {
        let mine = block.lock(index);
        if mine.holding.load(Relaxed) == 0 || (kind == Kind::Mutex && nested_recursive_hold(address)) {
            return None;
        }
        mine.holding.store(0, Relaxed);
        let started = mine.acquired_at.load(Relaxed);
        let at_end = record.clocks.all.now();
        let at_start = mine.waiters_at_acquire.load(Relaxed);
        if started == 0 {
            if at_end == at_start {
                return None;
            }
            return Self::waited_through(block, index, &record.clocks.all, at_start, at_end, false);
        }
        // A drawn hold that threads came to wait through counts as itself,
        // as an undrawn one does (see `waited_through`): left in the
        // sample, it stood for such holds counted already (a site's hold
        // total read 52-81 ms for 20 ms of long holds).
        let sampled = mine.hold_sampled.load(Relaxed) != 0 && at_end == at_start;
        Some(Release { block, index, started, ended: cycles(), at_start, at_end, shared: false, sampled })
    }

    /// An untimed hold (exclusive, or a read hold that is the last out:
    /// `shared`) ended with the waiter clock changed since it began
    /// (unchanged, nobody came, and the hold stays the sample's to
    /// estimate). Nobody waited when it began (or it would be timed), so
    /// threads waited through it: a rare long hold among short ones at one
    /// line (15 of 16 went unseen, and with them the waits they caused).
    /// Its delay is exact without its start (with no waiters at the start,
    /// the start drops out of the waiter-time formula), and it lasted at
    /// least as long as the waiters still waiting waited on average:
    /// counted as a hold of that length, as itself, not as a draw.
    #[inline(never)]
    fn waited_through<'a>(
        block: &'a ThreadBlock,
        index: u32,
        clock: &table::WaiterClock,
        at_start: table::Waiters,
        at_end: table::Waiters,
        shared: bool,
    ) -> Option<Release<'a>> {
        let ended = cycles();
        // (Every waiter that came gave up: the hold lasted at least as
        // long as each, but their count is not kept; its delay stands.)
        let lasted = match at_end.count() {
            0 => 0,
            present => clock.waited_by_present(at_start, at_end, ended) / present,
        };
        let started = ended.saturating_sub(lasted).max(1);
        Some(Release { block, index, started, ended, at_start, at_end, shared, sampled: false })
    }

    /// Counts a hold that [`Profiler::releasing_exclusive`] (or an rwlock
    /// release) ended.
    #[inline(always)]
    pub fn released(&self, release: Option<Release<'_>>) {
        if let Some(r) = release {
            self.count_hold(r, false);
        }
    }

    /// Counts an ended hold into its block; `concurrent` when another
    /// thread may count into that block meanwhile.
    #[inline(always)]
    fn count_hold(&self, r: Release<'_>, concurrent: bool) {
        let mine = r.block.lock(r.index);
        let (side, site_id) = if r.shared {
            (&mine.sides[SHARED], mine.read_site.load(Relaxed))
        } else {
            (&mine.sides[EXCLUSIVE], mine.holder_site.load(Relaxed))
        };
        let site = r.block.site(site_id).map(|s| &s.counters);
        let hold = r.ended.saturating_sub(r.started);
        for counters in std::iter::once(side).chain(site) {
            counters.hold_total.add(hold, concurrent);
            counters.hold_max.max(hold, concurrent);
            counters.hold_samples.add(1, concurrent);
            if r.sampled {
                counters.sampled_holds.add(1, concurrent);
                counters.sampled_hold_total.add(hold, concurrent);
                counters.sampled_hold_max.max(hold, concurrent);
            }
        }
        let long = &mine.long_holds;
        long.store(u32::from(hold >= LONG_HOLD_CYCLES), Relaxed);
        if r.at_end != r.at_start || r.at_end.count() != 0 {
            let delay = table::WaiterClock::delay(r.at_start, r.started, r.at_end, r.ended);
            for counters in std::iter::once(side).chain(site) {
                counters.delay_total.add(delay, concurrent);
                if r.sampled {
                    counters.sampled_delay_total.add(delay, concurrent);
                }
            }
        }
    }

    /// A shared hold (rwlock read), a semaphore acquisition or a condvar
    /// wake-up. Read holds are timed like exclusive ones (1 in
    /// `HOLD_SAMPLE` until this thread has waited for the lock); a thread's
    /// nested read holds of one lock count as one hold.
    pub fn acquired_shared(&self, kind: Kind, address: usize, pc: usize, how: Acquired, now: Option<u64>) {
        let Some(block) = self.block_for_acquisition() else { return };
        let Some((index, record)) = self.record(kind, address, pc, block) else { return };
        let mine = block.lock(index);
        let side = &mine.sides[SHARED];
        let site = self.cached_site(block, index, mine, pc);
        count_wait(side, Some(block.hist(index)), how);
        // Sampled as exclusive holds are.
        let mut turn = side.acquisitions.get();
        if let Some(site) = block.site(site) {
            count_wait(&site.counters, None, how);
            turn = site.counters.acquisitions.get();
            if site.shared.load(Relaxed) == 0 {
                site.shared.store(1, Relaxed);
            }
        }
        if kind != Kind::Rwlock {
            return;
        }
        let open = mine.reads_open.load(Relaxed);
        mine.reads_open.store(open + 1, Relaxed);
        if open == 0 {
            // As an exclusive hold (see `acquired_exclusive_in`): timed
            // when writers wait as it begins, and seen when they come to
            // wait through it untimed.
            let waiters = record.clocks.writers.now();
            mine.read_waiters_at.store(waiters, Relaxed);
            let always = side.contended.get() != 0 || waiters.count() != 0 || turn <= HOLD_SAMPLE;
            let sampled = !always && in_the_sample();
            mine.read_at.store(if always || sampled { now.unwrap_or_else(cycles).max(1) } else { 0 }, Relaxed);
            mine.read_sampled.store(u32::from(sampled), Relaxed);
            mine.read_site.store(site, Relaxed);
        }
    }

    /// An rwlock is about to be unlocked: the writer's hold or one
    /// reader's ends (see [`Profiler::releasing_exclusive`]).
    pub fn releasing_rwlock(&self, address: usize) -> Option<Release<'_>> {
        let (index, record) = self.tables.existing_lock(address)?;
        let block = self.block()?;
        if let Some(release) = self.release_exclusive_in(block, index, record, Kind::Rwlock, address) {
            return Some(release);
        }
        let mine = block.lock(index);
        let open = mine.reads_open.load(Relaxed);
        if open == 0 {
            return None;
        }
        mine.reads_open.store(open - 1, Relaxed);
        if open > 1 {
            return None;
        }
        let started = mine.read_at.load(Relaxed);
        // The delay a read hold caused (the writers it kept waiting) is
        // charged to the last reader out, the one whose unlock lets a
        // writer in, over its own hold: overlapping read holds each
        // charged the waits they overlapped would count a writer's wait
        // once per reader. glibc's rwlock counts its readers in `__readers`
        // (its first word) above PTHREAD_RWLOCK_READER_SHIFT, 3.
        // SAFETY: the program's pthread_rwlock_t, which this thread holds
        // for reading; a plain read of its first word.
        let readers = unsafe { std::ptr::read_volatile(address as *const u32) } >> 3;
        let last_out = readers == 1;
        let (at_start, at_end) = (mine.read_waiters_at.load(Relaxed), record.clocks.writers.now());
        if started == 0 {
            if !last_out || at_end == at_start {
                return None;
            }
            return Self::waited_through(block, index, &record.clocks.writers, at_start, at_end, true);
        }
        // Drawn and waited through: as itself (see `release_exclusive_in`).
        let sampled = mine.read_sampled.load(Relaxed) != 0 && !(last_out && at_end != at_start);
        let (at_start, at_end) = if last_out { (at_start, at_end) } else { (table::Waiters::default(), table::Waiters::default()) };
        Some(Release { block, index, started, ended: cycles(), at_start, at_end, shared: true, sampled })
    }

    /// A trylock refused (or a timed acquisition gave up after `waited`).
    pub fn refused(&self, kind: Kind, address: usize, pc: usize, side: usize, timed_out_after: Option<u64>) {
        let Some(block) = self.block_for_acquisition() else { return };
        let Some((index, _)) = self.record(kind, address, pc, block) else { return };
        let mine = block.lock(index);
        let site = block.site(self.cached_site(block, index, mine, pc)).map(|s| &s.counters);
        for counters in std::iter::once(&mine.sides[side]).chain(site) {
            match timed_out_after {
                None => counters.reject.add(1, false),
                Some(waited) => {
                    counters.timeout.add(1, false);
                    counters.wait_total.add(waited, false);
                    counters.wait_max.max(waited, false);
                }
            }
        }
        // In the histogram as in WAIT (a lock whose one wait timed out
        // showed a WAIT and no histogram).
        if let Some(waited) = timed_out_after {
            block.hist(index)[bin_of(waited).min(HIST_BINS - 1)].add(1, false);
        }
    }

    /// A thread starts waiting for `address` (for writing an rwlock:
    /// `writer`): returns the wait's start and the record whose waiter
    /// clocks it joined.
    #[inline]
    pub fn begin_wait(&self, kind: Kind, address: usize, pc: usize, writer: bool) -> Started<'_> {
        let found = self.tables.lock_for_wait(address, kind as u32, pc, self.block());
        let now = cycles();
        if let Some((index, record)) = found {
            record.clocks.all.arrive(now);
            if writer {
                record.clocks.writers.arrive(now);
            }
            if self.frames > 0 {
                stacks::capture(self.frames, index, pc);
            }
        }
        (now, found.map(|(_, r)| r), writer)
    }

    /// The wait that [`Profiler::begin_wait`] started is over, with the
    /// lock or without it (`acquired`): the time, and cycles waited.
    #[inline]
    pub fn end_wait(&self, started: Started<'_>, acquired: bool) -> (u64, u64) {
        let now = cycles();
        if let Some(record) = started.1 {
            let clocks = &record.clocks;
            for clock in std::iter::once(&clocks.all).chain(started.2.then_some(&clocks.writers)) {
                if acquired {
                    clock.leave(started.0);
                } else {
                    clock.give_up(started.0, now);
                }
            }
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
        self.tables.retire(address);
    }

    /// A lock is initialised at call site `pc`: that site names it.
    pub fn initialised(&self, kind: Kind, address: usize, pc: usize) {
        self.retire(address);
        self.tables.initialised(address, kind as u32, pc);
    }

    /// What recording adds to one uncontended lock+unlock: `pairs` of
    /// (record an acquisition, record its release) on a private lock of
    /// these tables, in nanoseconds per pair.
    pub fn time_recording(&self, address: usize, pairs: u32) -> f64 {
        let Some(block) = self.tables.claim_block() else { return 0.0 };
        if self.record(Kind::Mutex, address, 0x1000, block).is_none() {
            self.tables.release_block(block);
            return 0.0;
        }
        let start = std::time::Instant::now();
        for _ in 0..pairs {
            if let Some((index, record)) = self.record(Kind::Mutex, address, 0x1000, block) {
                self.acquired_exclusive_in(block, index, record, Kind::Mutex, address, 0x1000, Acquired::NoWait, None);
            }
            if let Some((index, record)) = self.tables.existing_lock(address) {
                let release = self.release_exclusive_in(block, index, record, Kind::Mutex, address);
                self.released(release);
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / f64::from(pairs);
        self.tables.release_block(block);
        ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each way a thread first counts a lock (an acquisition, a shared
    /// one, a refusal) notes the lock in its block, and no other lock is
    /// noted: a report reads only the noted ones.
    #[test]
    fn a_block_notes_every_lock_it_counts_and_no_other() {
        let profiler = Profiler::new(0, 64).unwrap();
        let mutexes: Vec<libc::pthread_mutex_t> = (0..4).map(|_| libc::PTHREAD_MUTEX_INITIALIZER).collect();
        let address = |i: usize| &mutexes[i] as *const libc::pthread_mutex_t as usize;
        profiler.acquired_exclusive(Kind::Mutex, address(0), 0x1000, Acquired::NoWait, None);
        profiler.acquired_shared(Kind::Rwlock, address(1), 0x1010, Acquired::Waited(5), None);
        profiler.refused(Kind::Mutex, address(2), 0x1020, EXCLUSIVE, None);
        // Known to the tables, never counted by this thread.
        let (untouched, _) = profiler.tables.lock(address(3), Kind::Mutex as u32, 0x1030, None).unwrap();
        let index = |i: usize| profiler.tables.existing_lock(address(i)).unwrap().0;
        let mut noted: Vec<u32> = profiler.block().unwrap().used_locks().collect();
        noted.sort_unstable();
        let mut counted = vec![index(0), index(1), index(2)];
        counted.sort_unstable();
        assert_eq!(noted, counted);
        assert!(!noted.contains(&untouched));
    }

    /// A read hold's delay is the writers' wait through it. Two readers
    /// woken together, the second's hold begun while the first still
    /// counted as waiting: the first's wait before the hold was taken off
    /// the writer's (a writer's 30 ms behind two readers read 0 in 4 of
    /// 15 runs of a program). The interleaving is forced here, one step
    /// per thread at a time.
    #[test]
    fn a_read_hold_is_charged_the_writers_wait_alone() {
        let profiler = Profiler::new(0, 64).unwrap();
        // The rwlock's first word, as glibc keeps it: readers above bit 3.
        let rwlock = std::sync::atomic::AtomicU32::new(0);
        let address = &rwlock as *const std::sync::atomic::AtomicU32 as usize;
        let readers = |n: u32| rwlock.store(n << 3, Relaxed);
        let step = std::sync::Barrier::new(3);
        let sleep = |ms| std::thread::sleep(std::time::Duration::from_millis(ms));
        let (delay, writers_wait) = std::thread::scope(|s| {
            let first = s.spawn(|| {
                let started = profiler.begin_wait(Kind::Rwlock, address, 0x100, false);
                step.wait(); // 1: waiting
                step.wait(); // 2: the second reader holds
                let (now, waited) = profiler.end_wait(started, true);
                profiler.acquired_shared(Kind::Rwlock, address, 0x100, Acquired::Waited(waited), Some(now));
                readers(2);
                profiler.released(profiler.releasing_rwlock(address));
                step.wait(); // 3: the first reader is gone
                step.wait(); // 4
            });
            let second = s.spawn(|| {
                step.wait(); // 1
                sleep(30);
                let started = profiler.begin_wait(Kind::Rwlock, address, 0x200, false);
                let (now, waited) = profiler.end_wait(started, true);
                profiler.acquired_shared(Kind::Rwlock, address, 0x200, Acquired::Waited(waited), Some(now));
                step.wait(); // 2
                step.wait(); // 3
                step.wait(); // 4: the writer waits
                sleep(20);
                readers(1);
                profiler.released(profiler.releasing_rwlock(address));
                let index = profiler.tables.existing_lock(address).unwrap().0;
                profiler.block().unwrap().lock(index).sides[SHARED].delay_total.get()
            });
            step.wait(); // 1
            step.wait(); // 2
            step.wait(); // 3
            let started = profiler.begin_wait(Kind::Rwlock, address, 0x300, true);
            step.wait(); // 4
            first.join().unwrap();
            let delay = second.join().unwrap();
            (delay, profiler.end_wait(started, true).1)
        });
        assert!(delay > writers_wait / 2 && delay <= writers_wait, "delay {delay} cycles, the writer waited {writers_wait}");
    }

    /// Threads that use a few shared locks and a few of their own, their
    /// own first counted all at once, keep their counters on a few pages
    /// each (indexed by slot, each lock and site took a page of every
    /// thread that used it: 41-44 pages a thread here).
    #[test]
    fn a_threads_counters_take_a_few_pages() {
        let profiler = Profiler::new(0, table::DEFAULT_MAX_LOCKS).unwrap();
        let shared: Vec<libc::pthread_mutex_t> = (0..10).map(|_| libc::PTHREAD_MUTEX_INITIALIZER).collect();
        let address = |m: &libc::pthread_mutex_t| m as *const libc::pthread_mutex_t as usize;
        let threads = 32;
        let barrier = std::sync::Barrier::new(threads);
        let use_lock = |m: &libc::pthread_mutex_t, i: usize| {
            // Two call sites of each lock.
            for pc in [0x1000 + 16 * i, 0x8000 + 16 * i] {
                profiler.acquired_exclusive(Kind::Mutex, address(m), pc, Acquired::NoWait, None);
                profiler.released(profiler.releasing_exclusive(Kind::Mutex, address(m)));
            }
        };
        // The program's shared locks, used first where they are made.
        for (i, m) in shared.iter().enumerate() {
            use_lock(m, i);
        }
        let pages: Vec<usize> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let own: Vec<libc::pthread_mutex_t> = (0..3).map(|_| libc::PTHREAD_MUTEX_INITIALIZER).collect();
                        barrier.wait();
                        for (i, m) in shared.iter().chain(&own).enumerate() {
                            use_lock(m, i);
                        }
                        let block = profiler.block().unwrap();
                        assert_eq!(block.used_locks().count(), 13);
                        // Every thread's block stays its own until all counted.
                        barrier.wait();
                        block.resident_bytes() / 4096
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        // Shared locks and their sites, own locks and theirs, the block
        // with its bitmap of used locks: 6 pages, up to 9 where runs
        // straddle pages.
        assert!(pages.iter().all(|&p| p <= 9), "pages a thread: {pages:?}");
    }
}
