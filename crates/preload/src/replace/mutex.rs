//! A program's `pthread_mutex_t`, served by one of lockmeter's algorithms
//! with POSIX's semantics for every type: normal, recursive (EAGAIN when
//! the count would overflow), errorcheck (EDEADLK on relock, EPERM on an
//! unlock by a thread that does not own it) and adaptive; EBUSY from
//! trylock and from destroying a locked mutex; ETIMEDOUT, and EINVAL for a
//! bad timespec, from the timed locks.

use lockmeter_locks::ticket;
use lockmeter_locks::{
    current_tid, current_tid_at_hand, kernel_tid, oracle::Decider, AcquireKind, Algorithm, NoStats, RawAdaptive, RawFutex, RawFutexTid, RawMcs, RawPi, RawSpin, RawTicket,
    Recorder,
};
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::{Acquire, Relaxed, Release, SeqCst}};
use super::deadline;
use std::time::{Duration, Instant};

/// A served mutex in the program's storage (see the module layout).
#[repr(C)]
pub struct Served {
    state: [AtomicU64; 2],
    kind: AtomicU32,
    owner: AtomicU32,
    depth: AtomicU32,
    /// The fork generation the state belongs to (see [`FORK_EPOCH`]).
    epoch: AtomicU32,
    /// `pthread_self()` of the holder of a normal mutex, while held, where
    /// the algorithm's word does not name it (see [`now_owned`]).
    holder_thread: AtomicU64,
}

/// Runs `$body` with `$lock` bound to the algorithm's state inside `$m`.
macro_rules! with_lock {
    ($algorithm:expr, $m:expr, $recorder:ty, $lock:ident => $body:expr) => {{
        let state = $m.state.as_ptr();
        // SAFETY: the first 16 bytes are the algorithm's state: each raw
        // lock is at most 16 bytes, 8-aligned, valid when all-zero, and only
        // ever used as the one algorithm the process chose.
        unsafe {
            match $algorithm {
                Algorithm::Adaptive => {
                    let $lock = &*state.cast::<RawAdaptive<$recorder>>();
                    $body
                }
                Algorithm::Futex => {
                    let $lock = &*state.cast::<RawFutex<$recorder>>();
                    $body
                }
                Algorithm::FutexTid => {
                    let $lock = &*state.cast::<RawFutexTid<$recorder>>();
                    $body
                }
                Algorithm::Pi => {
                    let $lock = &*state.cast::<RawPi<$recorder>>();
                    $body
                }
                Algorithm::Ticket => {
                    let $lock = &*state.cast::<RawTicket<$recorder>>();
                    $body
                }
                Algorithm::Mcs => {
                    let $lock = &*state.cast::<RawMcs<$recorder>>();
                    $body
                }
                Algorithm::Spin => {
                    let $lock = &*state.cast::<RawSpin<$recorder>>();
                    $body
                }
            }
        }
    }};
}

/// Counts forks on the way to this process: a child's locks still carry
/// the parent's state, including threads queued or holding that do not
/// exist in the child; a FIFO lock would hand itself to one of them and
/// never come back. The first use of a mutex in a new generation brings it
/// over: a mutex the forking thread held stays held, by that thread (the
/// child's only one, under its new id), as glibc's copy of the lock word
/// does; any other is reset to unlocked, its waiters and any other holder
/// gone (the usual pthread_atfork pattern, lock in prepare and unlock in
/// the child, then works for every algorithm, and so does a lock a
/// vanished thread held).
static FORK_EPOCH: AtomicU32 = AtomicU32::new(0);
/// Flag on an epoch value: "being reset towards this epoch by a thread".
/// If that thread is gone (a fork caught it mid-reset), a thread of a
/// later epoch takes the reset over.
const RESETTING: u32 = 1 << 31;
/// The forks on the way to this process, the last `LINEAGE` of them: for
/// the fork from generation g to g + 1 (at `g % LINEAGE`), the thread that
/// forked, as its id in g, its id in g + 1 and its `pthread_self()` (the
/// same in both). Inherited with the rest of memory, and extended in each
/// child: a mutex last used generations ago is still known to be held if
/// one thread held it and forked, fork after fork (a daemon that forks
/// twice while holding a lock; with the last fork alone known, the
/// grandchild found the mutex free).
const LINEAGE: usize = 16;
static FORKER_IN_PARENT: [AtomicU32; LINEAGE] = [const { AtomicU32::new(0) }; LINEAGE];
static FORKER_IN_CHILD: [AtomicU32; LINEAGE] = [const { AtomicU32::new(0) }; LINEAGE];
static FORKER_THREAD: [AtomicU64; LINEAGE] = [const { AtomicU64::new(0) }; LINEAGE];

/// The thread that forked generation `g` into `g + 1`: (its id in `g`, its
/// id in `g + 1`, its `pthread_self()`).
fn forker(g: u32) -> (u32, u32, u64) {
    let i = g as usize % LINEAGE;
    (FORKER_IN_PARENT[i].load(Relaxed), FORKER_IN_CHILD[i].load(Relaxed), FORKER_THREAD[i].load(Relaxed))
}

thread_local! {
    /// This thread's id and `pthread_self()` as it forks, for its child.
    /// Per thread: two threads forking at once run their prepare handlers
    /// interleaved, and a process-wide record gave 10 of 3,000 children
    /// the other thread as their forker.
    static AS_IT_FORKS: Cell<(u32, u64)> = const { Cell::new((0, 0)) };
}

/// Refreshes under way in this process (see [`refresh`]), and forks under
/// way (threads between their prepare handler and their parent handler).
///
/// A fork that lands while another thread brings a mutex over gives the
/// child that mutex marked RESETTING by a thread the child does not have,
/// and the child resets it: a mutex the forking thread held came out free.
/// The kernel write-protects the parent's pages one by one as it copies
/// them, and a refresh whose next store hits a protected page waits out
/// the rest of the fork half done: with a thread making the first use of
/// 4,096 held mutexes while its process forked, the grandchild found one
/// free in 20-30 rounds of 200 (`futex`, `ticket`, `mcs`, `spin`). So a
/// fork waits for the refreshes under way, and a refresh waits while
/// another thread forks. Both waits are bounded by [`FORK_REFRESH_BOUND`]:
/// a refresh never blocks, so the fork's wait only outlasts a preempted
/// refresher; but the forking thread's later prepare handlers may lock a
/// mutex the waiting refresher holds (an allocator locking its arenas),
/// and the bound ends that deadlock, at the cost of the race it closes
/// (for forks that take longer than the bound).
static REFRESHES: AtomicU32 = AtomicU32::new(0);
static FORKS: AtomicU32 = AtomicU32::new(0);
const FORK_REFRESH_BOUND: Duration = Duration::from_millis(100);

thread_local! {
    /// Whether this thread is forking (between its prepare handler and
    /// its parent or child handler): its own refreshes, in the prepare
    /// handlers that run after lockmeter's, do not wait for its fork.
    static FORKING_NOW: Cell<bool> = const { Cell::new(false) };
}

/// Waits, at most [`FORK_REFRESH_BOUND`], until `done`: yields first,
/// then naps (a fork of a large process takes milliseconds).
fn wait_bounded(done: impl Fn() -> bool) {
    let start = Instant::now();
    let mut yields = 0;
    while !done() && start.elapsed() < FORK_REFRESH_BOUND {
        if yields < 64 {
            yields += 1;
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// Counts a refresh under way, once no other thread is forking (or the
/// bound has passed); uncounted when dropped.
struct RefreshUnderWay;

impl RefreshUnderWay {
    fn begin() -> Self {
        let own_fork = FORKING_NOW.with(Cell::get) as u32;
        let start = Instant::now();
        loop {
            // SeqCst with the fork's count and read of REFRESHES: either
            // the forking thread sees this refresh and waits for it, or
            // this thread sees the fork and waits for it.
            REFRESHES.fetch_add(1, SeqCst);
            if FORKS.load(SeqCst) <= own_fork || start.elapsed() >= FORK_REFRESH_BOUND {
                return RefreshUnderWay;
            }
            REFRESHES.fetch_sub(1, SeqCst);
            wait_bounded(|| FORKS.load(SeqCst) <= own_fork);
        }
    }
}

impl Drop for RefreshUnderWay {
    fn drop(&mut self) {
        REFRESHES.fetch_sub(1, Release);
    }
}

/// In the parent, as a thread forks: who it is (from the kernel, not the
/// thread-id cache: the cache's first use registers a fork handler, and
/// one registered while forking is not run for that fork); and no other
/// thread is bringing a mutex over as the memory is copied.
pub extern "C" fn forking() {
    AS_IT_FORKS.with(|f| f.set((kernel_tid(), this_thread())));
    FORKING_NOW.with(|f| f.set(true));
    FORKS.fetch_add(1, SeqCst);
    wait_bounded(|| REFRESHES.load(SeqCst) == 0);
}

/// In the parent after `fork`: the refreshes may go on.
pub extern "C" fn forked_parent() {
    FORKING_NOW.with(|f| f.set(false));
    FORKS.fetch_sub(1, SeqCst);
}

/// The calling thread's `pthread_self()`: one load from the thread
/// pointer, where the thread id would be a lookup of this library's
/// thread-local storage.
#[inline(always)]
fn this_thread() -> u64 {
    // SAFETY: always safe.
    unsafe { libc::pthread_self() as u64 }
}

/// In the child after `fork` (its one thread is the one that forked): a
/// new generation.
pub extern "C" fn forked() {
    // The other threads, forking or refreshing, are not in the child.
    FORKING_NOW.with(|f| f.set(false));
    FORKS.store(0, SeqCst);
    REFRESHES.store(0, SeqCst);
    let (in_parent, thread) = AS_IT_FORKS.with(Cell::get);
    let parent = FORK_EPOCH.load(Relaxed) & !RESETTING;
    let i = parent as usize % LINEAGE;
    FORKER_IN_PARENT[i].store(in_parent, Relaxed);
    FORKER_THREAD[i].store(thread, Relaxed);
    FORKER_IN_CHILD[i].store(kernel_tid(), Relaxed);
    FORK_EPOCH.store((parent + 1) & !RESETTING, Relaxed);
}

/// Whether a mutex held in generation `seen` (by `held_by_forker`'s
/// answer there) is held now, in `epoch`: the thread that forked from
/// `seen` forked again from every generation after it, up to this one.
fn forker_line_unbroken(seen: u32, epoch: u32) -> bool {
    let forks = epoch.wrapping_sub(seen) & !RESETTING;
    if forks == 0 || forks as usize > LINEAGE {
        return false;
    }
    (1..forks).all(|k| {
        let (_, arrived_as, thread) = forker(seen.wrapping_add(k - 1) & !RESETTING);
        let (forked_as, _, forked_thread) = forker(seen.wrapping_add(k) & !RESETTING);
        forked_as == arrived_as && forked_thread == thread
    })
}

/// Brings `m` into the current generation.
#[inline(always)]
fn current(m: &Served) -> &Served {
    if !is_current(m) {
        refresh(m, FORK_EPOCH.load(Relaxed) & !RESETTING);
    }
    m
}

/// Whether `m` is of the current generation already (else [`current`]
/// brings it over).
#[inline(always)]
fn is_current(m: &Served) -> bool {
    m.epoch.load(Acquire) == FORK_EPOCH.load(Relaxed) & !RESETTING
}

#[cold]
fn refresh(m: &Served, epoch: u32) {
    loop {
        let seen = m.epoch.load(Acquire);
        if seen == epoch {
            return;
        }
        if seen == RESETTING | epoch {
            // Another thread of this process is resetting it.
            std::hint::spin_loop();
            continue;
        }
        let _under_way = RefreshUnderWay::begin();
        if m.epoch.compare_exchange(seen, RESETTING | epoch, Acquire, Relaxed).is_ok() {
            // Last used in an ancestor (the parent, most often), held there
            // by the thread whose forks led here (see `held_by_forker` and
            // `forker_line_unbroken`); else reset, as is a mutex whose reset
            // a fork interrupted (`seen` flagged RESETTING).
            let held = super::algorithm().filter(|&algorithm| {
                seen & RESETTING == 0 && forker_line_unbroken(seen, epoch) && held_by_forker(algorithm, m, forker(seen))
            });
            if let Some(algorithm) = held {
                let (_, forker, forker_thread) = forker(epoch.wrapping_sub(1) & !RESETTING);
                // SAFETY: nobody else uses the mutex while its epoch says
                // RESETTING, and the forking thread is to unlock it.
                with_lock!(algorithm, m, NoStats, l => l.reset_to_held_by(forker));
                // Held by the forking thread as `now_owned` would have it
                // (a child of this child reads it again).
                if keeps_owner(m.kind.load(Relaxed) & TYPE_MASK) {
                    m.owner.store(forker, Relaxed);
                } else if !word_names_owner(algorithm) {
                    m.holder_thread.store(forker_thread, Relaxed);
                }
            } else {
                forget_given_up(m);
                for word in &m.state {
                    word.store(0, Relaxed);
                }
                m.owner.store(0, Relaxed);
                m.depth.store(0, Relaxed);
                m.holder_thread.store(0, Relaxed);
            }
            m.epoch.store(epoch, Release);
            return;
        }
    }
}

const _: () = assert!(std::mem::size_of::<Served>() == std::mem::size_of::<libc::pthread_mutex_t>());
const _: () = assert!(std::mem::align_of::<Served>() <= std::mem::align_of::<libc::pthread_mutex_t>());

/// glibc's `__kind` flags of the mutexes it keeps (robust, PI, PP, pshared).
const GLIBC_FLAGS: u32 = 0xF0;
const TYPE_MASK: u32 = 3;
const RECURSIVE: u32 = libc::PTHREAD_MUTEX_RECURSIVE as u32;
const ERRORCHECK: u32 = libc::PTHREAD_MUTEX_ERRORCHECK as u32;

/// Whether lockmeter serves this mutex (else it is glibc's).
#[inline(always)]
pub fn is_served(m: *mut libc::pthread_mutex_t) -> bool {
    // SAFETY: the program passed a pthread_mutex_t; its `__kind` word is at
    // offset 16 in glibc's layout and in ours.
    unsafe { (*m.cast::<Served>()).kind.load(Relaxed) & GLIBC_FLAGS == 0 }
}

/// # Safety
/// `m` is a valid mutex the program passed to a pthread function.
#[inline(always)]
unsafe fn served<'a>(m: *mut libc::pthread_mutex_t) -> &'a Served {
    // SAFETY: same size and alignment (checked above); every field is an
    // atomic, valid for any bit pattern, and all-zero state is unlocked.
    current(unsafe { &*m.cast::<Served>() })
}

lockmeter_locks::static_thread_local! {
    /// How this thread's last acquisition went, as the algorithm saw it
    /// (at first `NoWait`, all-zero), set and read at every profiled
    /// acquisition.
    static LAST: Cell<AcquireKind>;
}

/// The recorder a profiled served mutex uses: the algorithm tells it
/// whether the wait spun or slept, which glibc's mutex cannot say.
pub struct LastAcquire;

impl Recorder for LastAcquire {
    const INIT: Self = LastAcquire;
    const ENABLED: bool = false;
    #[inline(always)]
    fn acquired(&self, kind: AcquireKind, _: u64) {
        LAST.with(|l| l.set(kind));
    }
    fn rejected(&self) {}
    fn timed_out(&self, _: u64) {}
    fn releasing(&self) {}
    /// Once per spin (a slow path): a shared counter is cheap enough.
    fn spun(&self, _: u64, decider: Option<Decider>) {
        let counter = match decider {
            Some(Decider::Table) => &SPINS.by_table,
            Some(Decider::CpuClock) => &SPINS.by_cpu_clock,
            None => &SPINS.undecided,
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Spins on a running owner in this process, by who decided them.
pub struct SpinDeciders {
    pub by_table: std::sync::atomic::AtomicU64,
    pub by_cpu_clock: std::sync::atomic::AtomicU64,
    pub undecided: std::sync::atomic::AtomicU64,
}

/// The process's spin counters (served `adaptive` mutexes).
pub static SPINS: SpinDeciders = SpinDeciders {
    by_table: std::sync::atomic::AtomicU64::new(0),
    by_cpu_clock: std::sync::atomic::AtomicU64::new(0),
    undecided: std::sync::atomic::AtomicU64::new(0),
};

/// How the calling thread's last acquisition with [`LastAcquire`] went.
pub fn last_acquire() -> AcquireKind {
    LAST.with(Cell::get)
}

const _: () = {
    assert!(std::mem::size_of::<RawAdaptive<LastAcquire>>() <= 16);
    assert!(std::mem::size_of::<RawMcs<LastAcquire>>() <= 16);
    assert!(std::mem::size_of::<RawTicket<LastAcquire>>() <= 16);
    assert!(std::mem::size_of::<RawPi<LastAcquire>>() <= 16);
    assert!(std::mem::size_of::<RawSpin<LastAcquire>>() <= 16);
};

/// The owner bookkeeping before blocking: Some(result) when the call is
/// decided without touching the lock (a relock by the owner). Inlined:
/// for a normal mutex it is one test of the type, and called it cost the
/// served uncontended pair 1.6 ns (a C loop, medians of 15 alternated
/// runs, 11.9 ns called, 10.3 inlined, glibc 6.6).
/// `tid` gives the calling thread's id, asked only for those types.
#[inline(always)]
fn relock_by_owner(m: &Served, tid: impl FnOnce() -> u32) -> Option<libc::c_int> {
    let kind = m.kind.load(Relaxed) & TYPE_MASK;
    if !keeps_owner(kind) {
        return None;
    }
    if m.owner.load(Relaxed) != tid() {
        return None;
    }
    if kind == ERRORCHECK {
        return Some(libc::EDEADLK);
    }
    let depth = m.depth.load(Relaxed);
    if depth == u32::MAX {
        return Some(libc::EAGAIN);
    }
    m.depth.store(depth + 1, Relaxed);
    Some(0)
}

/// The recursive and error-checking types answer from the owner. A normal
/// mutex keeps its holder only where the algorithm's lock word does not
/// name it, as `pthread_self()`, so that a child of `fork` can tell
/// whether the forking thread held it (see [`held_by_forker`]). Where the
/// word names it, a store here would only add to every acquisition, and
/// `pthread_self()` is cheaper than the thread id, a lookup of this
/// library's thread-local storage. (Uncontended pair of a served `ticket`
/// in a C loop, medians of 8 alternated runs: 24.0 ns keeping no holder,
/// 27.9 keeping the thread id, 25.9 keeping `pthread_self()`.) `tid`
/// gives the calling thread's id, asked only for the types that keep it.
#[inline(always)]
fn now_owned(algorithm: Algorithm, m: &Served, tid: impl FnOnce() -> u32) {
    if keeps_owner(m.kind.load(Relaxed) & TYPE_MASK) {
        m.owner.store(tid(), Relaxed);
        m.depth.store(1, Relaxed);
    } else if !word_names_owner(algorithm) {
        m.holder_thread.store(this_thread(), Relaxed);
    }
}

/// Clears what [`now_owned`] kept for a mutex of type `kind`, before the
/// release: after it, the next holder may free the mutex.
#[inline(always)]
fn no_longer_owned(algorithm: Algorithm, m: &Served, kind: u32) {
    if keeps_owner(kind) {
        m.owner.store(0, Relaxed);
        m.depth.store(0, Relaxed);
    } else if !word_names_owner(algorithm) {
        m.holder_thread.store(0, Relaxed);
    }
}

/// Whether a mutex of type `kind` keeps its owner and depth: the
/// recursive and error-checking types, which answer from them. The
/// adaptive type (glibc's PTHREAD_MUTEX_ADAPTIVE_NP, a normal mutex that
/// glibc lets spin) is served as a normal one, uncontended paths included.
#[inline(always)]
fn keeps_owner(kind: u32) -> bool {
    kind == RECURSIVE || kind == ERRORCHECK
}

/// Whether the algorithm's lock word holds its owner's thread id.
#[inline(always)]
fn word_names_owner(algorithm: Algorithm) -> bool {
    matches!(algorithm, Algorithm::Adaptive | Algorithm::FutexTid | Algorithm::Pi)
}

/// Whether `forker`, the thread that forked from the generation `m` was
/// last used in, held `m` when it forked (read in a descendant, before
/// `m` is brought over).
fn held_by_forker(algorithm: Algorithm, m: &Served, forker: (u32, u32, u64)) -> bool {
    let (forker_tid, _, forker_thread) = forker;
    if keeps_owner(m.kind.load(Relaxed) & TYPE_MASK) {
        return m.owner.load(Relaxed) == forker_tid;
    }
    if !word_names_owner(algorithm) {
        return m.holder_thread.load(Relaxed) == forker_thread;
    }
    let state = m.state.as_ptr();
    // SAFETY: as in `with_lock!`.
    let owner = unsafe {
        match algorithm {
            Algorithm::Adaptive => (*state.cast::<RawAdaptive<NoStats>>()).owner(),
            Algorithm::FutexTid => (*state.cast::<RawFutexTid<NoStats>>()).owner(),
            Algorithm::Pi => (*state.cast::<RawPi<NoStats>>()).owner(),
            _ => unreachable!("the word names no owner"),
        }
    };
    owner == Some(forker_tid)
}

/// Whether `pi`'s word names the id the calling thread had before it
/// forked, in a child where that id is no longer its own.
fn held_by_this_thread_before_its_fork(pi: &RawPi<NoStats>) -> bool {
    let (in_parent, _) = AS_IT_FORKS.with(Cell::get);
    in_parent != 0 && pi.owner() == Some(in_parent) && kernel_tid() != in_parent
}

/// `pthread_mutex_lock`.
///
/// # Safety
/// `m` is a served mutex (see [`is_served`]).
pub unsafe fn lock<R: Recorder>(algorithm: Algorithm, m: *mut libc::pthread_mutex_t) -> libc::c_int {
    // SAFETY: forwarded contract.
    let m = unsafe { served(m) };
    if let Some(result) = relock_by_owner(m, current_tid) {
        return result;
    }
    with_lock!(algorithm, m, R, l => l.lock());
    now_owned(algorithm, m, current_tid);
    0
}

/// What [`lock_at_once`] left to do.
pub enum Contended {
    /// Nothing was done: [`lock`] takes it from the start.
    Untouched,
    /// The lock was tried and is taken: [`lock`] waits for it.
    Busy,
    /// A `ticket` lock's ticket was taken and its turn has not come:
    /// [`wait_for_ticket`] waits for it.
    TicketTaken(ticket::Wait),
}

/// `pthread_mutex_lock` without waiting, the most common call of all: one
/// attempt (for `ticket`, taking a ticket: a failed attempt would be one
/// more access to the contended line before taking it anyway), or the
/// owner's relock of a recursive or error-checking mutex. No system call
/// that could change `errno` (so the caller need not save it), and for the
/// algorithms whose word is their owner's id no call at all: a call on
/// the way made the caller save and restore registers on every pass. So
/// it leaves [`lock`] (`Untouched`) what needs one: a mutex glibc serves
/// (`m` may be any mutex), one of an earlier generation of a forked
/// process, a thread id not at hand. `Ok(result)` when decided; `Err`
/// with what is left to do otherwise.
///
/// # Safety
/// `m` is a valid mutex the program passed to a pthread function, and
/// `algorithm` the one serving the program's mutexes.
#[inline(always)]
pub unsafe fn lock_at_once(algorithm: Algorithm, m: *mut libc::pthread_mutex_t) -> Result<libc::c_int, Contended> {
    // SAFETY: forwarded contract.
    let Some((m, tid)) = (unsafe { at_hand(m) }) else {
        return Err(Contended::Untouched);
    };
    if let Some(result) = relock_by_owner(m, || tid) {
        return Ok(result);
    }
    let acquired = if algorithm == Algorithm::Ticket {
        // SAFETY: as in `with_lock!`: a served `ticket` mutex.
        match unsafe { (*m.state.as_ptr().cast::<RawTicket<NoStats>>()).enter() } {
            Ok(()) => true,
            Err(wait) => return Err(Contended::TicketTaken(wait)),
        }
    } else {
        // SAFETY: `tid` is the calling thread's id.
        unsafe { try_acquire_as(algorithm, m, tid) }
    };
    if !acquired {
        return Err(Contended::Busy);
    }
    now_owned(algorithm, m, || tid);
    Ok(0)
}

/// `pthread_mutex_trylock` as [`lock_at_once`] takes the lock: `None`,
/// with nothing done, for what that leaves to [`lock`], which
/// [`try_lock`] then takes.
///
/// # Safety
/// As [`lock_at_once`].
#[inline(always)]
pub unsafe fn try_lock_at_once(algorithm: Algorithm, m: *mut libc::pthread_mutex_t) -> Option<libc::c_int> {
    // SAFETY: forwarded contract.
    let (m, tid) = unsafe { at_hand(m) }?;
    // SAFETY: `tid` is the calling thread's id.
    Some(unsafe { try_lock_as(algorithm, m, tid) })
}

/// `pthread_mutex_trylock` of the served `m` by the thread of id `tid`:
/// EBUSY when taken (also by the calling thread, unless the mutex is
/// recursive).
///
/// # Safety
/// `m` is served by `algorithm`; `tid` is the calling thread's id.
#[inline(always)]
unsafe fn try_lock_as(algorithm: Algorithm, m: &Served, tid: u32) -> libc::c_int {
    match relock_by_owner(m, || tid) {
        Some(libc::EDEADLK) => return libc::EBUSY,
        Some(result) => return result,
        None => {}
    }
    // SAFETY: forwarded contract.
    if !unsafe { try_acquire_as(algorithm, m, tid) } {
        return libc::EBUSY;
    }
    now_owned(algorithm, m, || tid);
    0
}

/// What the uncontended calls need to go on without a call: `m` as a
/// served mutex of this generation, and the calling thread's id; `None`
/// for a mutex glibc serves (`m` may be any mutex), one of an earlier
/// generation of a forked process (which [`served`] brings over), or an
/// id not at hand.
///
/// # Safety
/// `m` is a valid mutex the program passed to a pthread function.
#[inline(always)]
unsafe fn at_hand<'a>(m: *mut libc::pthread_mutex_t) -> Option<(&'a Served, u32)> {
    if !is_served(m) {
        return None;
    }
    // SAFETY: as in `served`.
    let m = unsafe { &*m.cast::<Served>() };
    if !is_current(m) {
        return None;
    }
    Some((m, current_tid_at_hand()?))
}

/// One attempt at `m`'s lock, for the algorithms whose word is their
/// owner's id with the caller's id at hand.
///
/// # Safety
/// `m` is served by `algorithm`; `tid` is the calling thread's id.
#[inline(always)]
unsafe fn try_acquire_as(algorithm: Algorithm, m: &Served, tid: u32) -> bool {
    let state = m.state.as_ptr();
    // SAFETY: as in `with_lock!`; the id is the calling thread's.
    match algorithm {
        Algorithm::Adaptive => unsafe { (*state.cast::<RawAdaptive<NoStats>>()).try_lock_as(tid) },
        Algorithm::FutexTid => unsafe { (*state.cast::<RawFutexTid<NoStats>>()).try_lock_as(tid) },
        Algorithm::Pi => unsafe { (*state.cast::<RawPi<NoStats>>()).try_lock_as(tid) },
        _ => with_lock!(algorithm, m, NoStats, l => l.try_lock()),
    }
}

/// The rest of a `ticket` mutex's [`lock`] after [`lock_at_once`]
/// took a ticket: waits for its turn, which may park (so the caller keeps
/// `errno` around it).
///
/// # Safety
/// As [`lock`], with `wait` from `lock_at_once` on this mutex.
pub unsafe fn wait_for_ticket(m: *mut libc::pthread_mutex_t, wait: ticket::Wait) -> libc::c_int {
    // SAFETY: forwarded contract.
    let m = unsafe { served(m) };
    // SAFETY: as in `with_lock!`: a served `ticket` mutex.
    unsafe { (*m.state.as_ptr().cast::<RawTicket<NoStats>>()).wait(wait) };
    now_owned(Algorithm::Ticket, m, current_tid);
    0
}

/// `pthread_mutex_unlock` with nobody to wake: the owner checks of a
/// recursive or error-checking mutex, then the algorithm's uncontended
/// release (one compare-exchange; `adaptive`'s a read and an exchange,
/// which wakes a waiter that flagged the word between the two, keeping
/// `errno`; `spin`'s and `ticket`'s whole unlock, which wakes nobody or
/// keeps `errno` around its wakes); no system call that changes `errno`
/// (so the caller need not save it), and, as [`lock_at_once`], no call
/// on the way for most algorithms. `Some(result)` when decided; `None`,
/// with nothing done, for what [`lock_at_once`] leaves to [`lock`], when
/// a waiter needs waking, when the mutex is free, and when the caller
/// does not hold a normal mutex (glibc lets any thread unlock one): then
/// [`unlock`]. (`spin`'s release on the full path, with `errno` kept
/// around it, cost its pair 14.4 ns against adaptive's 8.5 in a fast
/// phase of the host; `ticket`'s 13.44 against 9.48 here, pinned, medians
/// of 9 alternated runs.)
///
/// # Safety
/// As [`lock_at_once`].
#[inline(always)]
pub unsafe fn unlock_at_once(algorithm: Algorithm, m: *mut libc::pthread_mutex_t) -> Option<libc::c_int> {
    // SAFETY: forwarded contract.
    let (m, tid) = unsafe { at_hand(m) }?;
    let kind = m.kind.load(Relaxed) & TYPE_MASK;
    if keeps_owner(kind) {
        if m.owner.load(Relaxed) != tid {
            return Some(libc::EPERM);
        }
        let depth = m.depth.load(Relaxed);
        if depth > 1 {
            m.depth.store(depth - 1, Relaxed);
            return Some(0);
        }
    }
    // Forgotten before the release, after which the next holder may free
    // the mutex; kept again if the release is not done here.
    no_longer_owned(algorithm, m, kind);
    let state = m.state.as_ptr();
    // SAFETY: as in `with_lock!`, with the calling thread's id. For
    // `futex`, whose word names no owner, the mutex is held by somebody
    // when the compare-exchange succeeds, and a normal mutex may be
    // unlocked by any thread (an error-checking or recursive one was
    // checked to be the caller's above).
    let released = unsafe {
        match algorithm {
            Algorithm::Adaptive => (*state.cast::<RawAdaptive<NoStats>>()).unlock_if_uncontended_as(tid),
            Algorithm::FutexTid => (*state.cast::<RawFutexTid<NoStats>>()).unlock_if_uncontended_as(tid),
            Algorithm::Pi => (*state.cast::<RawPi<NoStats>>()).unlock_if_uncontended_as(tid),
            Algorithm::Futex => (*state.cast::<RawFutex<NoStats>>()).unlock_if_uncontended(),
            // Held by somebody (a free one, unlocked again, is the full
            // path's to answer), and a normal mutex may be released by any
            // thread.
            Algorithm::Spin => {
                let spin = &*state.cast::<RawSpin<NoStats>>();
                spin.is_locked() && {
                    spin.unlock();
                    true
                }
            }
            // Its whole unlock, as `spin`'s: its wakes, when a waiter
            // sleeps, keep errno.
            Algorithm::Ticket => {
                let ticket = &*state.cast::<RawTicket<NoStats>>();
                ticket.is_locked() && {
                    ticket.unlock();
                    true
                }
            }
            // Nobody queued behind the holder's node (held by somebody, as
            // `spin`'s: a free one is the full path's to answer).
            Algorithm::Mcs => (*state.cast::<RawMcs<NoStats>>()).unlock_if_uncontended(),
        }
    };
    if released {
        return Some(0);
    }
    if keeps_owner(kind) {
        // Still held by the caller, for `unlock` to check and release.
        m.owner.store(tid, Relaxed);
        m.depth.store(1, Relaxed);
    }
    None
}

/// `pthread_mutex_trylock`: EBUSY when taken (also by the calling thread,
/// unless the mutex is recursive).
///
/// # Safety
/// As [`lock`].
pub unsafe fn try_lock(algorithm: Algorithm, m: *mut libc::pthread_mutex_t) -> libc::c_int {
    // SAFETY: forwarded contract; the id is the calling thread's.
    unsafe { try_lock_as(algorithm, served(m), current_tid()) }
}

/// `pthread_mutex_timedlock` / `clocklock`.
///
/// # Safety
/// As [`lock`].
pub unsafe fn lock_until<R: Recorder>(
    algorithm: Algorithm,
    m: *mut libc::pthread_mutex_t,
    clock: libc::clockid_t,
    at: *const libc::timespec,
) -> libc::c_int {
    // SAFETY: forwarded contract.
    let served_mutex = unsafe { served(m) };
    if let Some(result) = relock_by_owner(served_mutex, current_tid) {
        return result;
    }
    if with_lock!(algorithm, served_mutex, R, l => l.try_lock()) {
        now_owned(algorithm, served_mutex, current_tid);
        return 0;
    }
    if at.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the program's timespec, not null.
    let at = unsafe { *at };
    let mut slices_missed = false;
    let taken = deadline::lock_by(clock, at, deadline::follows_wall_clock(algorithm), |deadline| {
        let taken = timed::<R>(algorithm, served_mutex, deadline);
        slices_missed |= !taken;
        taken
    });
    match taken {
        Ok(true) => {}
        Ok(false) => return libc::ETIMEDOUT,
        Err(error) => return error,
    }
    if slices_missed && algorithm != Algorithm::Spin {
        // Taken in a later slice of a wall-clock wait, maybe at once or
        // spinning: the wait was a long one, slept through, all the same.
        // (`spin` never sleeps.)
        LAST.with(|last| last.set(AcquireKind::Sleep));
    }
    now_owned(algorithm, served_mutex, current_tid);
    0
}

fn timed<R: Recorder>(algorithm: Algorithm, m: &Served, deadline: Instant) -> bool {
    let state = m.state.as_ptr();
    // SAFETY: as in `with_lock!`.
    unsafe {
        match algorithm {
            Algorithm::Adaptive => (*state.cast::<RawAdaptive<R>>()).lock_until(deadline),
            Algorithm::Futex => (*state.cast::<RawFutex<R>>()).lock_until(deadline),
            Algorithm::FutexTid => (*state.cast::<RawFutexTid<R>>()).lock_until(deadline),
            Algorithm::Pi => (*state.cast::<RawPi<R>>()).lock_until(deadline),
            Algorithm::Spin => (*state.cast::<RawSpin<R>>()).lock_until(deadline),
            Algorithm::Mcs => (*state.cast::<RawMcs<R>>()).lock_until(deadline),
            Algorithm::Ticket => (*state.cast::<RawTicket<R>>()).lock_until(deadline),
        }
    }
}

/// `pthread_mutex_unlock`.
///
/// # Safety
/// As [`lock`].
pub unsafe fn unlock(algorithm: Algorithm, m: *mut libc::pthread_mutex_t) -> libc::c_int {
    // SAFETY: forwarded contract.
    let m = unsafe { served(m) };
    let kind = m.kind.load(Relaxed) & TYPE_MASK;
    if keeps_owner(kind) {
        if m.owner.load(Relaxed) != current_tid() {
            return libc::EPERM;
        }
        let depth = m.depth.load(Relaxed);
        if depth > 1 {
            m.depth.store(depth - 1, Relaxed);
            return 0;
        }
    }
    no_longer_owned(algorithm, m, kind);
    if !with_lock!(algorithm, m, NoStats, l => l.is_locked()) {
        // Unlocking an unlocked normal mutex: undefined in POSIX, harmless
        // with glibc; keep it harmless.
        return 0;
    }
    // SAFETY: the lock is held. (Unlocking a normal mutex from another
    // thread is undefined in POSIX; glibc allows it, and so does every
    // algorithm but `pi`, whose kernel refuses it: EPERM then, as glibc's
    // PI mutex says, rather than 0 with the lock still held, which left
    // the program's waiters asleep for good. `adaptive`'s own unlock
    // subtracts the caller's tid from the word, so it is told to release
    // for whoever holds it.)
    match algorithm {
        // SAFETY: as in `with_lock!`; the lock is held (checked above).
        Algorithm::Adaptive => unsafe { (*m.state.as_ptr().cast::<RawAdaptive<NoStats>>()).unlock_from_any_thread() },
        Algorithm::Pi => {
            // SAFETY: as in `with_lock!`.
            let pi = unsafe { &*m.state.as_ptr().cast::<RawPi<NoStats>>() };
            // SAFETY: the lock is held (checked above).
            if !unsafe { pi.release() } {
                if !held_by_this_thread_before_its_fork(pi) {
                    return libc::EPERM;
                }
                // A child of `fork` whose handler has yet to start the new
                // generation: a library's child handler, registered before
                // this library's and so run first, unlocks what its prepare
                // handler locked, and the word still names this thread's
                // id in the parent, which the kernel refuses. Nobody else
                // runs in the child: released by hand.
                // SAFETY: as above; no other thread exists to use it.
                unsafe { pi.reset_to_held_by(0) };
            }
        }
        _ => with_lock!(algorithm, m, NoStats, l => l.unlock()),
    }
    0
}

/// Whether unlocking would fail with EPERM (an error-checking or
/// recursive mutex the calling thread does not own).
///
/// # Safety
/// As [`lock`].
pub unsafe fn unlock_would_fail(m: *mut libc::pthread_mutex_t) -> bool {
    // SAFETY: forwarded contract.
    let m = unsafe { served(m) };
    let kind = m.kind.load(Relaxed) & TYPE_MASK;
    keeps_owner(kind) && m.owner.load(Relaxed) != current_tid()
}

/// Whether a served mutex is a recursive one held more than once (a
/// nested hold, for the profiler).
///
/// # Safety
/// As [`lock`].
pub unsafe fn nested(m: *mut libc::pthread_mutex_t) -> bool {
    // SAFETY: forwarded contract.
    let m = unsafe { served(m) };
    m.kind.load(Relaxed) & TYPE_MASK == RECURSIVE && m.depth.load(Relaxed) > 1
}

/// `pthread_mutex_destroy`: EBUSY while locked.
///
/// # Safety
/// As [`lock`].
pub unsafe fn destroy(algorithm: Algorithm, m: *mut libc::pthread_mutex_t) -> libc::c_int {
    // SAFETY: forwarded contract.
    let m = unsafe { served(m) };
    if with_lock!(algorithm, m, NoStats, l => l.is_locked()) {
        libc::EBUSY
    } else {
        forget_given_up(m);
        0
    }
}

/// A `ticket` mutex destroyed or initialised again counts its tickets from
/// 0: the tickets given up in its old line must not be taken over in the
/// new one (a program that initialised its mutex again after a timed lock
/// gave up had two threads inside at once).
fn forget_given_up(m: &Served) {
    if super::algorithm() == Some(Algorithm::Ticket) {
        // SAFETY: as in `with_lock!`.
        unsafe { (*m.state.as_ptr().cast::<RawTicket<NoStats>>()).forget_given_up() };
    }
}

/// What `pthread_mutex_init` should do with these attributes.
pub enum Init {
    /// Serve it, with this type.
    Served(u32),
    /// Leave it to glibc (robust, PI, PP or process-shared).
    Glibc,
}

/// Reads the attributes (null: defaults).
///
/// # Safety
/// `attr` is null or a valid, initialised attribute object.
pub unsafe fn classify(attr: *const libc::pthread_mutexattr_t) -> Init {
    if attr.is_null() {
        return Init::Served(0);
    }
    let (mut kind, mut robust, mut protocol, mut pshared) = (0, 0, 0, 0);
    // SAFETY: reading an initialised attribute object.
    unsafe {
        pthread_mutexattr_gettype(attr, &mut kind);
        libc::pthread_mutexattr_getrobust(attr, &mut robust);
        pthread_mutexattr_getprotocol(attr, &mut protocol);
        libc::pthread_mutexattr_getpshared(attr, &mut pshared);
    }
    if robust != 0 || protocol != 0 || pshared != libc::PTHREAD_PROCESS_PRIVATE {
        Init::Glibc
    } else {
        Init::Served(kind as u32 & TYPE_MASK)
    }
}

extern "C" {
    fn pthread_mutexattr_gettype(attr: *const libc::pthread_mutexattr_t, kind: *mut libc::c_int) -> libc::c_int;
    fn pthread_mutexattr_getprotocol(attr: *const libc::pthread_mutexattr_t, protocol: *mut libc::c_int) -> libc::c_int;
}

/// Initialises a served mutex of type `kind`.
///
/// # Safety
/// `m` points to writable storage of a `pthread_mutex_t`.
pub unsafe fn init(m: *mut libc::pthread_mutex_t, kind: u32) {
    // SAFETY: writable storage of the right size; all-zero state is an
    // unlocked lock of every algorithm.
    unsafe {
        forget_given_up(&*m.cast::<Served>());
        std::ptr::write_bytes(m.cast::<u8>(), 0, std::mem::size_of::<Served>());
        let fresh = &*m.cast::<Served>();
        fresh.kind.store(kind, Relaxed);
        fresh.epoch.store(FORK_EPOCH.load(Relaxed) & !RESETTING, Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two threads fork at once: their prepare handlers may run before
    /// either child starts, and each child must still know its own forker.
    #[test]
    fn each_child_knows_the_thread_that_forked_it() {
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        let (second_done_tx, second_done_rx) = std::sync::mpsc::channel();
        let first = std::thread::spawn(move || {
            forking();
            first_tx.send(()).unwrap();
            second_done_rx.recv().unwrap();
            // As in the first thread's child: its handler runs in it.
            forked();
            let (in_parent, _, thread) = forker(FORK_EPOCH.load(Relaxed).wrapping_sub(1) & !RESETTING);
            (thread, in_parent, this_thread(), kernel_tid())
        });
        first_rx.recv().unwrap();
        std::thread::spawn(|| forking()).join().unwrap();
        second_done_tx.send(()).unwrap();
        let (forker_thread, forker_tid, thread, tid) = first.join().unwrap();
        assert_eq!((forker_thread, forker_tid), (thread, tid));
    }

    #[test]
    fn every_algorithm_is_unlocked_when_all_zero() {
        fn zero<T>(value: &T) -> bool {
            // SAFETY: reading the bytes of a live value.
            let bytes = unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>()) };
            bytes.iter().all(|&b| b == 0)
        }
        assert!(zero(&RawAdaptive::<NoStats>::new()));
        assert!(zero(&RawFutex::<NoStats>::new()));
        assert!(zero(&RawFutexTid::<NoStats>::new()));
        assert!(zero(&RawPi::<NoStats>::new()));
        assert!(zero(&RawTicket::<NoStats>::new()));
        assert!(zero(&RawMcs::<NoStats>::new()));
        assert!(zero(&RawSpin::<NoStats>::new()));
    }
}
