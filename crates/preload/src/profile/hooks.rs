//! The exported pthread and semaphore functions of profile mode.
//!
//! Each function that acquires or initialises a lock is a two-instruction
//! entry point that loads its own return address (the program's call
//! site) into the next free argument register and jumps to the Rust
//! implementation: the call site costs nothing and needs no unwinder or
//! frame pointers. The rarer releases (destroys, among others) need no
//! call site and are plain functions. The frequent calls (lock, trylock
//! and unlock of mutexes, rwlocks and spinlocks, semaphore waits, condvar
//! wakes) are entry points that jump to a function chosen for the process
//! when the library is loaded (see `with_call_site_through!`).
//!
//! Every implementation calls glibc's real function exactly as the program
//! asked and returns its result untouched; blocking acquisitions try first
//! so an uncontended one needs a single timestamp.

use super::real::{self, call_real};
use super::{active, output, Acquired, Kind, SHARED};
use crate::cancel;
use crate::replace::{self, cond as served_cond, mutex as served};
use lockmeter_locks::{AcquireKind, Algorithm, NoStats};
use std::sync::atomic::{AtomicPtr, Ordering::{Acquire, Release}};
use libc::{c_int, clockid_t, pthread_mutex_t, pthread_rwlock_t, pthread_spinlock_t, sem_t, timespec};

type Mutex = *mut pthread_mutex_t;
type Rwlock = *mut pthread_rwlock_t;
type Spin = *mut pthread_spinlock_t;
type Sem = *mut sem_t;
type Cond = *mut libc::pthread_cond_t;
type Time = *const timespec;

/// Exports `$export`, which calls `$target` with the same arguments plus
/// the caller's return address in `$register` (the first register after
/// the function's own arguments in the System V calling convention).
macro_rules! with_call_site {
    ($export:ident, $register:literal => $target:ident) => {
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $export() {
            // At entry [rsp] holds the return address; a jump (not a call)
            // leaves the stack exactly as the caller made it, so the
            // target returns straight to the program.
            core::arch::naked_asm!(concat!("mov ", $register, ", qword ptr [rsp]"), "jmp {target}", target = sym $target)
        }
    };
}

/// As `with_call_site!` (the call site only for an acquisition: a release
/// names no `$register`), for the calls a program makes most: the entry
/// point jumps to the function `$path` points at, chosen for the process
/// once its mode is known. For the mutex (see `choose_mutex_paths`):
/// glibc's mutexes profiled, or ours served, profiled or not, each in a
/// function shaped for it alone, or glibc's own functions in a process
/// neither served nor profiled; for the rest (see
/// `choose_unserved_paths`, which the form `$path = $hook`, defining the
/// path, is for): glibc's own functions where nothing records them. A function
/// that holds several cases pays the largest one's frame on every call,
/// and choosing on every call costs more than the one jump through this
/// pointer (the served uncontended pair in a C loop, pinned, medians of
/// 15 alternated runs: 8.86 ns choosing by a compare of the mode and a
/// byte saying the process is served and not profiled, 7.45 through this
/// path, glibc 6.57; choosing by a table of the algorithms, 21 runs,
/// cost 1 ns more than the compare).
macro_rules! with_call_site_through {
    ($export:ident, $($register:literal)? => $path:ident) => {
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $export() {
            core::arch::naked_asm!(
                $(concat!("mov ", $register, ", qword ptr [rsp]"),)?
                "jmp qword ptr [rip + {path}]",
                path = sym $path,
            )
        }
    };
    ($export:ident, $($register:literal)? => $path:ident = $hook:ident) => {
        #[doc = concat!("Where `", stringify!($export), "` goes: [`", stringify!($hook), "`] until the library's constructor chooses (see `choose_unserved_paths`).")]
        static $path: AtomicPtr<()> = AtomicPtr::new($hook as *mut ());
        with_call_site_through!($export, $($register)? => $path);
    };
}

/// Where `pthread_mutex_lock` goes: in a process that replace mode
/// serves, an `unsafe extern "C" fn(Mutex, usize) -> c_int` (the mutex
/// and the call site); otherwise glibc's own `fn(Mutex) -> c_int` or
/// [`glibc_mutex_lock`]. Every case's until the library's constructor
/// chooses.
static MUTEX_LOCK_PATH: AtomicPtr<()> = AtomicPtr::new(mutex_lock_in_full as *mut ());
/// Where `pthread_mutex_unlock` goes: an `unsafe extern "C" fn(Mutex) ->
/// c_int`, every case's until the library's constructor chooses.
static MUTEX_UNLOCK_PATH: AtomicPtr<()> = AtomicPtr::new(mutex_unlock as *mut ());
/// Where `pthread_mutex_trylock` goes, as `MUTEX_LOCK_PATH`.
static MUTEX_TRYLOCK_PATH: AtomicPtr<()> = AtomicPtr::new(mutex_trylock as *mut ());

/// `pthread_mutex_lock` by its path, for a caller inside the library.
unsafe fn mutex_lock(m: Mutex, pc: usize) -> c_int {
    if replace::algorithm().is_none() {
        // The path may be glibc's, which takes no call site.
        // SAFETY: the caller's arguments.
        return unsafe { glibc_mutex_lock(m, pc) };
    }
    // SAFETY: in a served process the path takes the mutex and the call
    // site (see the static).
    let path: unsafe extern "C" fn(Mutex, usize) -> c_int = unsafe { std::mem::transmute(MUTEX_LOCK_PATH.load(Acquire)) };
    // SAFETY: the caller's arguments.
    unsafe { path(m, pc) }
}

/// `pthread_mutex_unlock` by its path, for a caller inside the library.
unsafe fn mutex_unlock_by_path(m: Mutex) -> c_int {
    // SAFETY: as in `mutex_lock`.
    let path: unsafe extern "C" fn(Mutex) -> c_int = unsafe { std::mem::transmute(MUTEX_UNLOCK_PATH.load(Acquire)) };
    // SAFETY: the caller's argument.
    unsafe { path(m) }
}

with_call_site_through!(pthread_mutex_lock, "rsi" => MUTEX_LOCK_PATH);
with_call_site_through!(pthread_mutex_unlock, => MUTEX_UNLOCK_PATH);
with_call_site_through!(pthread_mutex_trylock, "rsi" => MUTEX_TRYLOCK_PATH);
with_call_site!(pthread_mutex_timedlock, "rdx" => mutex_timedlock);
with_call_site!(pthread_mutex_clocklock, "rcx" => mutex_clocklock);
with_call_site!(pthread_mutex_init, "rdx" => mutex_init);
with_call_site_through!(pthread_rwlock_rdlock, "rsi" => RWLOCK_RDLOCK_PATH = rwlock_rdlock);
with_call_site_through!(pthread_rwlock_tryrdlock, "rsi" => RWLOCK_TRYRDLOCK_PATH = rwlock_tryrdlock);
with_call_site!(pthread_rwlock_timedrdlock, "rdx" => rwlock_timedrdlock);
with_call_site!(pthread_rwlock_clockrdlock, "rcx" => rwlock_clockrdlock);
with_call_site_through!(pthread_rwlock_wrlock, "rsi" => RWLOCK_WRLOCK_PATH = rwlock_wrlock);
with_call_site_through!(pthread_rwlock_trywrlock, "rsi" => RWLOCK_TRYWRLOCK_PATH = rwlock_trywrlock);
with_call_site!(pthread_rwlock_timedwrlock, "rdx" => rwlock_timedwrlock);
with_call_site!(pthread_rwlock_clockwrlock, "rcx" => rwlock_clockwrlock);
with_call_site!(pthread_rwlock_init, "rdx" => rwlock_init);
with_call_site_through!(pthread_rwlock_unlock, => RWLOCK_UNLOCK_PATH = rwlock_unlock);
with_call_site_through!(pthread_spin_lock, "rsi" => SPIN_LOCK_PATH = spin_lock);
with_call_site_through!(pthread_spin_trylock, "rsi" => SPIN_TRYLOCK_PATH = spin_trylock);
with_call_site_through!(pthread_spin_unlock, => SPIN_UNLOCK_PATH = spin_unlock);
with_call_site!(pthread_spin_init, "rdx" => spin_init);
with_call_site!(pthread_cond_wait, "rdx" => cond_wait);
with_call_site!(pthread_cond_timedwait, "rcx" => cond_timedwait);
with_call_site!(pthread_cond_clockwait, "r8" => cond_clockwait);
with_call_site_through!(pthread_cond_signal, => COND_SIGNAL_PATH = cond_signal);
with_call_site_through!(pthread_cond_broadcast, => COND_BROADCAST_PATH = cond_broadcast);
with_call_site_through!(sem_wait, "rsi" => SEM_WAIT_PATH = sem_wait_impl);
with_call_site_through!(sem_trywait, "rsi" => SEM_TRYWAIT_PATH = sem_trywait_impl);
with_call_site!(sem_timedwait, "rdx" => sem_timedwait_impl);
with_call_site!(sem_clockwait, "rcx" => sem_clockwait_impl);
with_call_site!(sem_init, "rcx" => sem_init_impl);

/// A wait the profiler has begun (`started`) that can be a cancellation
/// point (a condvar's, a semaphore's): one a cancellation unwinds out of
/// ends there (it showed as a thread waiting for ever). A condvar's wait
/// names its mutex (`reacquired`: address and call site), which the
/// thread holds again as the cancellation unwinds (glibc, and a served
/// wait, re-take it before the cleanup handlers run): that acquisition
/// begins a hold (the cleanup's unlock ended a hold never begun).
#[inline(always)]
fn cancellable(
    profiler: &'static super::Profiler,
    started: super::Started<'static>,
    reacquired: Option<(usize, usize)>,
    wait: impl FnOnce() -> c_int,
) -> c_int {
    struct Begun {
        profiler: &'static super::Profiler,
        started: super::Started<'static>,
        reacquired: Option<(usize, usize)>,
    }
    unsafe extern "C" fn end_cancelled_wait(argument: *mut libc::c_void) {
        // SAFETY: the `Begun` of the wait being unwound, alive in its frame.
        let begun = unsafe { &*argument.cast::<Begun>() };
        let (now, _) = begun.profiler.end_wait(begun.started, false);
        if let Some((mutex, pc)) = begun.reacquired {
            begun.profiler.acquired_exclusive(Kind::Mutex, mutex, pc, Acquired::CondReacquire, Some(now));
        }
    }
    let mut begun = Begun { profiler, started, reacquired };
    // SAFETY: `begun` lives in this frame until the wait returns; the
    // frames of the wait hold nothing that drops.
    unsafe { cancel::on_cancel(end_cancelled_wait, std::ptr::from_mut(&mut begun).cast(), wait) }
}

/// A blocking exclusive acquisition: try, then wait with the clock running.
/// `attempt` is the real trylock, `block` the real blocking call.
#[inline(always)]
fn exclusive(kind: Kind, address: usize, pc: usize, attempt: impl FnOnce() -> c_int, block: impl FnOnce() -> c_int) -> c_int {
    let Some(profiler) = active() else { return block() };
    let tried = attempt();
    if tried == 0 || tried == libc::EOWNERDEAD {
        if tried == libc::EOWNERDEAD {
            profiler.owner_died(kind, address, pc);
        }
        profiler.acquired_exclusive(kind, address, pc, Acquired::NoWait, None);
        return tried;
    }
    if tried != libc::EBUSY {
        return tried;
    }
    waited_exclusive(profiler, kind, address, pc, block)
}

#[inline(always)]
fn waited_exclusive(profiler: &super::Profiler, kind: Kind, address: usize, pc: usize, block: impl FnOnce() -> c_int) -> c_int {
    let started = profiler.begin_wait(kind, address, pc, kind == Kind::Rwlock);
    let result = block();
    let (now, waited) = profiler.end_wait(started, result == 0 || result == libc::EOWNERDEAD);
    if result == libc::EOWNERDEAD {
        profiler.owner_died(kind, address, pc);
    }
    match result {
        0 | libc::EOWNERDEAD => profiler.acquired_exclusive(kind, address, pc, Acquired::Waited(waited), Some(now)),
        libc::ETIMEDOUT => profiler.refused(kind, address, pc, super::EXCLUSIVE, Some(waited)),
        _ => {}
    }
    result
}

/// A trylock of an exclusive lock.
#[inline(always)]
fn exclusive_try(kind: Kind, address: usize, pc: usize, attempt: impl FnOnce() -> c_int) -> c_int {
    let result = attempt();
    if let Some(profiler) = active() {
        if result == libc::EOWNERDEAD {
            profiler.owner_died(kind, address, pc);
        }
        match result {
            0 | libc::EOWNERDEAD => profiler.acquired_exclusive(kind, address, pc, Acquired::NoWait, None),
            libc::EBUSY => profiler.refused(kind, address, pc, super::EXCLUSIVE, None),
            _ => {}
        }
    }
    result
}

/// A blocking shared acquisition (rwlock read, semaphore); `is_busy`
/// says whether the try failed because the lock was taken.
///
/// A semaphore's wait is a cancellation point even when the count lets it
/// through at once, as glibc's is (it tests before its fast path): the
/// try, which is none, let a thread cancelled while its cancellation was
/// disabled take the count and run on. And a wait that succeeds leaves
/// errno as it found it: the failed try's EAGAIN was left behind.
#[inline(always)]
fn shared(
    kind: Kind,
    address: usize,
    pc: usize,
    attempt: impl FnOnce() -> c_int,
    block: impl FnOnce() -> c_int,
    outcome: impl Fn(c_int) -> Outcome,
) -> c_int {
    let Some(profiler) = active() else { return block() };
    if kind == Kind::Sem {
        // SAFETY: acts on this thread's pending cancellation, if enabled:
        // nothing of the wait is begun yet.
        unsafe { pthread_testcancel() };
    }
    let entry_errno = errno();
    let tried = attempt();
    match outcome(tried) {
        Outcome::Acquired => {
            profiler.acquired_shared(kind, address, pc, Acquired::NoWait, None);
            return tried;
        }
        Outcome::Busy => {}
        Outcome::TimedOut | Outcome::Failed => return tried,
    }
    let started = profiler.begin_wait(kind, address, pc, false);
    let result = cancellable(profiler, started, None, block);
    let errno = if matches!(outcome(result), Outcome::Acquired) { entry_errno } else { errno() };
    let (now, waited) = profiler.end_wait(started, matches!(outcome(result), Outcome::Acquired));
    match outcome(result) {
        Outcome::Acquired => profiler.acquired_shared(kind, address, pc, Acquired::Waited(waited), Some(now)),
        Outcome::TimedOut => profiler.refused(kind, address, pc, SHARED, Some(waited)),
        Outcome::Busy | Outcome::Failed => {}
    }
    set_errno(errno);
    result
}

/// What a call's return value means.
enum Outcome {
    Acquired,
    Busy,
    TimedOut,
    Failed,
}

fn pthread_outcome(result: c_int) -> Outcome {
    match result {
        0 => Outcome::Acquired,
        libc::EBUSY => Outcome::Busy,
        libc::ETIMEDOUT => Outcome::TimedOut,
        _ => Outcome::Failed,
    }
}

fn sem_outcome(result: c_int) -> Outcome {
    if result == 0 {
        return Outcome::Acquired;
    }
    match errno() {
        libc::EAGAIN => Outcome::Busy,
        libc::ETIMEDOUT => Outcome::TimedOut,
        _ => Outcome::Failed,
    }
}

/// Runs a served lock operation leaving errno as the program had it: the
/// algorithms' futex calls set it, glibc's lock functions never do. (One
/// call for errno's location, not one for each access: the served lock +
/// signal + unlock with nobody waiting, in a C loop, pinned, medians of
/// 9 alternated runs, 14.20 ns -> 12.80 when the signal kept it.)
#[inline(always)]
fn keeping_errno<T>(operation: impl FnOnce() -> T) -> T {
    // SAFETY: the thread's errno location, valid as long as the thread.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let saved = unsafe { *errno };
    let result = operation();
    // SAFETY: as above.
    unsafe { *errno = saved };
    result
}

fn errno() -> c_int {
    // SAFETY: the thread's errno location is always valid.
    unsafe { *libc::__errno_location() }
}

fn set_errno(value: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = value };
}

/// A blocking exclusive acquisition hook: glibc's `$try` first, then its
/// blocking `$block` with the remaining arguments.
macro_rules! exclusive_hook {
    ($name:ident($lock:ident: $ty:ty $(, $arg:ident: $arg_ty:ty)*), $kind:expr, $try:path, $block:path) => {
        unsafe extern "C" fn $name($lock: $ty, $($arg: $arg_ty,)* pc: usize) -> c_int {
            // SAFETY: the program's own arguments, passed unchanged to
            // glibc's functions of the same signatures.
            unsafe {
                exclusive(
                    $kind,
                    $lock as usize,
                    pc,
                    || call_real!($try, fn($ty) -> c_int, $lock),
                    || call_real!($block, fn($ty $(, $arg_ty)*) -> c_int, $lock $(, $arg)*),
                )
            }
        }
    };
}

/// A blocking shared acquisition hook (rwlock read, semaphore), as
/// [`exclusive_hook`], with `$outcome` reading the return values.
macro_rules! shared_hook {
    ($name:ident($lock:ident: $ty:ty $(, $arg:ident: $arg_ty:ty)*), $kind:expr, $try:path, $block:path, $outcome:expr) => {
        unsafe extern "C" fn $name($lock: $ty, $($arg: $arg_ty,)* pc: usize) -> c_int {
            // SAFETY: as in `exclusive_hook`.
            unsafe {
                shared(
                    $kind,
                    $lock as usize,
                    pc,
                    || call_real!($try, fn($ty) -> c_int, $lock),
                    || call_real!($block, fn($ty $(, $arg_ty)*) -> c_int, $lock $(, $arg)*),
                    $outcome,
                )
            }
        }
    };
}

/// An init hook: glibc's `$real`, then (on success) the lock's first
/// site is this call, and an earlier lock at the address is retired.
macro_rules! init_hook {
    ($name:ident($lock:ident: $ty:ty $(, $arg:ident: $arg_ty:ty)*), $kind:expr, $real:path) => {
        unsafe extern "C" fn $name($lock: $ty, $($arg: $arg_ty,)* pc: usize) -> c_int {
            // SAFETY: the program's own arguments, passed unchanged.
            let result = unsafe { call_real!($real, fn($ty $(, $arg_ty)*) -> c_int, $lock $(, $arg)*) };
            if let (0, Some(profiler)) = (result, active()) {
                profiler.initialised($kind, $lock as usize, pc);
            }
            result
        }
    };
}

/// An exported destroy hook: glibc's `$real`, then (on success) a new
/// generation starts at that address.
macro_rules! destroy_hook {
    ($name:ident($lock:ident: $ty:ty), $real:path) => {
        /// Exported: destroys, then starts a new generation at that address.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($lock: $ty) -> c_int {
            // SAFETY: the program's own argument, passed unchanged.
            let result = unsafe { call_real!($real, fn($ty) -> c_int, $lock) };
            if let (0, Some(profiler)) = (result, active()) {
                profiler.retire($lock as usize);
            }
            result
        }
    };
}

// Mutexes.

/// The algorithm serving `m`, if replace mode serves it.
#[inline(always)]
fn serving(m: Mutex) -> Option<Algorithm> {
    replace::algorithm().filter(|_| served::is_served(m))
}

/// A served mutex's blocking acquisition: `block` is the served lock
/// call with the recorder that tells how the wait was spent.
#[inline(always)]
fn served_exclusive(algorithm: Algorithm, m: Mutex, pc: usize, block: impl FnOnce() -> c_int) -> c_int {
    let Some(profiler) = active() else { return block() };
    // SAFETY: a served mutex.
    let tried = unsafe { served::try_lock(algorithm, m) };
    if tried == 0 {
        profiler.acquired_exclusive(Kind::Mutex, m as usize, pc, Acquired::NoWait, None);
        return 0;
    }
    let started = profiler.begin_wait(Kind::Mutex, m as usize, pc, false);
    let result = block();
    let (now, waited) = profiler.end_wait(started, result == 0);
    match result {
        0 => {
            let how = match served::last_acquire() {
                AcquireKind::Sleep => Acquired::Slept(waited),
                AcquireKind::Spin => Acquired::Spun(waited),
                // The lock was released between the try above and the
                // algorithm's own first try: contended, but neither spun
                // nor slept (counted as spinning, `--lock futex`, which
                // never spins, showed thousands of spins).
                AcquireKind::NoWait => Acquired::Waited(waited),
            };
            profiler.acquired_exclusive(Kind::Mutex, m as usize, pc, how, Some(now));
        }
        libc::ETIMEDOUT => profiler.refused(Kind::Mutex, m as usize, pc, super::EXCLUSIVE, Some(waited)),
        _ => {}
    }
    result
}

/// `$function::<N>($arg, ...)`, N the index of `$algorithm`: each
/// algorithm has a copy of the function, shaped for it alone.
macro_rules! for_algorithm {
    ($algorithm:expr, $function:ident($($arg:expr),*)) => {
        match $algorithm {
            Algorithm::Adaptive => $function::<{ Algorithm::Adaptive as u32 }>($($arg),*),
            Algorithm::Futex => $function::<{ Algorithm::Futex as u32 }>($($arg),*),
            Algorithm::FutexTid => $function::<{ Algorithm::FutexTid as u32 }>($($arg),*),
            Algorithm::Pi => $function::<{ Algorithm::Pi as u32 }>($($arg),*),
            Algorithm::Ticket => $function::<{ Algorithm::Ticket as u32 }>($($arg),*),
            Algorithm::Mcs => $function::<{ Algorithm::Mcs as u32 }>($($arg),*),
            Algorithm::Spin => $function::<{ Algorithm::Spin as u32 }>($($arg),*),
        }
    };
}

/// The paths of `pthread_mutex_lock` and `pthread_mutex_unlock` for this
/// process, once its mode is known. The hot path of a served program is
/// the uncontended lock and unlock of a mutex: one attempt each, in small
/// functions that call nothing on the way, with the rest (errno kept,
/// glibc's mutexes, a forked process's first use of a mutex) a jump away.
/// (Uncontended pair of a served `adaptive` in a C loop, medians of 8
/// alternated runs: 24.1 ns when every call kept errno, 19.0 ns with one
/// attempt, glibc's own 18.4 ns. Pinned, medians of 15, in a faster phase
/// of the host: 10.23 ns with one attempt after deciding the mode, the
/// profiler and the mutex's generation on every call, in a function that
/// saved four registers; 7.50 now, glibc 6.62.)
fn choose_mutex_paths() {
    let [lock, trylock, unlock] = match replace::algorithm() {
        // Neither served nor profiled (the library linked for its C ABI,
        // or preloaded without a mode): glibc's own functions, whose
        // lock ignores the call site in its second register.
        None if super::never_profiled() => {
            [real::MUTEX_LOCK.get().cast(), real::MUTEX_TRYLOCK.get().cast(), real::MUTEX_UNLOCK.get().cast()]
        }
        None => [glibc_mutex_lock as *mut (), mutex_trylock as *mut (), mutex_unlock as *mut ()],
        Some(algorithm) if super::never_profiled() => for_algorithm!(algorithm, at_once_paths()),
        Some(_) => [mutex_lock_in_full as *mut (), mutex_trylock as *mut (), mutex_unlock as *mut ()],
    };
    MUTEX_LOCK_PATH.store(lock, Release);
    MUTEX_TRYLOCK_PATH.store(trylock, Release);
    MUTEX_UNLOCK_PATH.store(unlock, Release);
}

/// The calls on locks replace mode never serves (rwlocks, spinlocks,
/// semaphores), each with glibc's function of the same name.
static NEVER_SERVED: [(&AtomicPtr<()>, &real::Real); 10] = [
    (&RWLOCK_RDLOCK_PATH, &real::RWLOCK_RDLOCK),
    (&RWLOCK_TRYRDLOCK_PATH, &real::RWLOCK_TRYRDLOCK),
    (&RWLOCK_WRLOCK_PATH, &real::RWLOCK_WRLOCK),
    (&RWLOCK_TRYWRLOCK_PATH, &real::RWLOCK_TRYWRLOCK),
    (&RWLOCK_UNLOCK_PATH, &real::RWLOCK_UNLOCK),
    (&SPIN_LOCK_PATH, &real::SPIN_LOCK),
    (&SPIN_TRYLOCK_PATH, &real::SPIN_TRYLOCK),
    (&SPIN_UNLOCK_PATH, &real::SPIN_UNLOCK),
    (&SEM_WAIT_PATH, &real::SEM_WAIT),
    (&SEM_TRYWAIT_PATH, &real::SEM_TRYWAIT),
];

/// The paths of the other frequent calls, once the mode is known. The
/// condvar's wakes record nothing: served condvars' go to functions that
/// ask only whether the condvar is served, glibc's straight to glibc.
/// And in a process never profiled, every call on a lock lockmeter does
/// not serve goes straight to glibc's function (which ignores the call
/// site in its second register), as the mutex's do when nothing is
/// served: a program linked for the C ABI, or cured with `--no-profile`,
/// pays nothing for its rwlocks, spinlocks and semaphores. (Pinned C
/// loops, medians of 9 alternated runs, the library preloaded idle, ns a
/// pair (a signal alone) before and after, glibc alone: rwlock read 9.71
/// and 7.37 against 6.61, write 11.66 and 8.69 against 8.49, spinlock
/// 7.35 and 6.07 against 5.51, semaphore post and wait 8.08 and 7.02
/// against 6.79, a signal nobody waits for 3.97 and 3.25 against 2.94.)
/// The rarer calls (timed waits, init, destroy) keep their check of the
/// profiler.
fn choose_unserved_paths() {
    let [signal, broadcast] = match replace::algorithm() {
        Some(_) => [signal_where_served as *mut (), broadcast_where_served as *mut ()],
        None => [real::COND_SIGNAL.get().cast(), real::COND_BROADCAST.get().cast()],
    };
    COND_SIGNAL_PATH.store(signal, Release);
    COND_BROADCAST_PATH.store(broadcast, Release);
    if super::never_profiled() {
        for (path, glibc) in &NEVER_SERVED {
            path.store(glibc.get().cast(), Release);
        }
    }
}

/// The served, unprofiled paths (lock, trylock, unlock) of the algorithm
/// of index `ALGORITHM`.
fn at_once_paths<const ALGORITHM: u32>() -> [*mut (); 3] {
    [
        lock_at_once::<ALGORITHM> as *mut (),
        try_lock_at_once::<ALGORITHM> as *mut (),
        unlock_at_once::<ALGORITHM> as *mut (),
    ]
}

/// `pthread_mutex_lock` of a process served by the algorithm of index
/// `ALGORITHM` and not profiled. Everything after the attempt is a jump,
/// so an algorithm whose attempt calls nothing saves no register.
unsafe extern "C" fn lock_at_once<const ALGORITHM: u32>(m: Mutex, pc: usize) -> c_int {
    let algorithm = Algorithm::ALL[ALGORITHM as usize];
    // SAFETY: the program's mutex, served by `algorithm` if by any.
    match unsafe { served::lock_at_once(algorithm, m) } {
        Ok(result) => result,
        // SAFETY: a served ticket mutex, with its ticket.
        Err(served::Contended::TicketTaken(wait)) => unsafe { served_ticket_wait(m, wait) },
        // SAFETY: a served mutex.
        Err(served::Contended::Busy) => unsafe { served_mutex_lock(algorithm, m, pc) },
        // SAFETY: the program's own arguments.
        Err(served::Contended::Untouched) => unsafe { mutex_lock_in_full(m, pc) },
    }
}

/// `pthread_mutex_trylock` of a process served by the algorithm of index
/// `ALGORITHM` and not profiled, as [`lock_at_once`].
unsafe extern "C" fn try_lock_at_once<const ALGORITHM: u32>(m: Mutex, pc: usize) -> c_int {
    // SAFETY: the program's mutex, served by this algorithm if by any.
    match unsafe { served::try_lock_at_once(Algorithm::ALL[ALGORITHM as usize], m) } {
        Some(result) => result,
        // SAFETY: the program's own arguments.
        None => unsafe { mutex_trylock(m, pc) },
    }
}

/// `pthread_mutex_lock`, every case: the path until the mode is known,
/// and a served, profiled process's.
unsafe extern "C" fn mutex_lock_in_full(m: Mutex, pc: usize) -> c_int {
    match serving(m) {
        // SAFETY: a served mutex.
        Some(algorithm) => unsafe { served_mutex_lock(algorithm, m, pc) },
        // SAFETY: the program's own arguments.
        None => unsafe { glibc_mutex_lock(m, pc) },
    }
}

#[inline(never)]
unsafe fn served_ticket_wait(m: Mutex, wait: lockmeter_locks::ticket::Wait) -> c_int {
    // SAFETY: forwarded contract.
    keeping_errno(|| unsafe { served::wait_for_ticket(m, wait) })
}

#[inline(never)]
unsafe fn served_mutex_lock(algorithm: Algorithm, m: Mutex, pc: usize) -> c_int {
    keeping_errno(|| {
        if active().is_none() {
            // SAFETY: a served mutex.
            return unsafe { served::lock::<NoStats>(algorithm, m) };
        }
        served_exclusive(algorithm, m, pc, || unsafe { served::lock::<served::LastAcquire>(algorithm, m) })
    })
}

/// `pthread_mutex_lock` of a mutex that is glibc's (the entry point's
/// target when replace mode is off).
#[inline(never)]
unsafe extern "C" fn glibc_mutex_lock(m: Mutex, pc: usize) -> c_int {
    // SAFETY (all real calls in this file): the program's own arguments,
    // passed unchanged to glibc's function of the same signature.
    unsafe {
        exclusive(
            Kind::Mutex,
            m as usize,
            pc,
            || call_real!(real::MUTEX_TRYLOCK, fn(Mutex) -> c_int, m),
            || call_real!(real::MUTEX_LOCK, fn(Mutex) -> c_int, m),
        )
    }
}

unsafe extern "C" fn mutex_trylock(m: Mutex, pc: usize) -> c_int {
    if let Some(algorithm) = serving(m) {
        // errno kept: the uncontended try of an unprofiled process takes
        // the path decided at load, which makes no system call; this one
        // gets what that leaves, among it a mutex of an earlier fork
        // generation, whose bringing over may wait (a sleep there that a
        // signal interrupts leaves EINTR).
        // SAFETY: a served mutex.
        return keeping_errno(|| exclusive_try(Kind::Mutex, m as usize, pc, || unsafe { served::try_lock(algorithm, m) }));
    }
    unsafe { exclusive_try(Kind::Mutex, m as usize, pc, || call_real!(real::MUTEX_TRYLOCK, fn(Mutex) -> c_int, m)) }
}

unsafe extern "C" fn mutex_timedlock(m: Mutex, at: Time, pc: usize) -> c_int {
    if let Some(algorithm) = serving(m) {
        // SAFETY: a served mutex; the program's timespec.
        return keeping_errno(|| {
            served_exclusive(algorithm, m, pc, || unsafe {
                served::lock_until::<served::LastAcquire>(algorithm, m, libc::CLOCK_REALTIME, at)
            })
        });
    }
    unsafe {
        exclusive(
            Kind::Mutex,
            m as usize,
            pc,
            || call_real!(real::MUTEX_TRYLOCK, fn(Mutex) -> c_int, m),
            || call_real!(real::MUTEX_TIMEDLOCK, fn(Mutex, Time) -> c_int, m, at),
        )
    }
}

/// A hook that refuses what glibc refuses before it tries the lock
/// (`$refusal` unless `$accepts`), else is `$inner`.
macro_rules! refusing_hook {
    ($name:ident($($arg:ident: $ty:ty),*) = $inner:ident, $accepts:expr, $refusal:expr) => {
        unsafe extern "C" fn $name($($arg: $ty,)* pc: usize) -> c_int {
            if !$accepts {
                return $refusal;
            }
            // SAFETY: the program's own arguments.
            unsafe { $inner($($arg,)* pc) }
        }
    };
}

/// Whether a timed wait's deadline is a valid timespec. glibc's rwlock
/// and semaphore waits refuse another (EINVAL) before they try the lock,
/// as they do an unwaitable clock; its mutexes try first. (A null one is
/// passed on, for glibc to do with it as it does: its rwlocks check the
/// clock only with a deadline.)
fn valid_deadline(at: Time) -> bool {
    // SAFETY: the program's timespec, when not null.
    at.is_null() || (0..1_000_000_000).contains(&unsafe { (*at).tv_nsec })
}

/// Whether a clocked wait may use `clock`. glibc refuses any other
/// (EINVAL) before it tries the lock; a hook that tried first took a free
/// lock and returned 0 (a semaphore lost a count).
fn waitable_clock(clock: clockid_t) -> bool {
    clock == libc::CLOCK_REALTIME || clock == libc::CLOCK_MONOTONIC
}

refusing_hook!(mutex_clocklock(m: Mutex, clock: clockid_t, at: Time) = mutex_clocklock_on, waitable_clock(clock), libc::EINVAL);

unsafe extern "C" fn mutex_clocklock_on(m: Mutex, clock: clockid_t, at: Time, pc: usize) -> c_int {
    if let Some(algorithm) = serving(m) {
        // SAFETY: a served mutex; the program's clock and timespec.
        return keeping_errno(|| {
            served_exclusive(algorithm, m, pc, || unsafe { served::lock_until::<served::LastAcquire>(algorithm, m, clock, at) })
        });
    }
    unsafe {
        exclusive(
            Kind::Mutex,
            m as usize,
            pc,
            || call_real!(real::MUTEX_TRYLOCK, fn(Mutex) -> c_int, m),
            || call_real!(real::MUTEX_CLOCKLOCK, fn(Mutex, clockid_t, Time) -> c_int, m, clock, at),
        )
    }
}

/// `pthread_mutex_unlock` of a process served by the algorithm of index
/// `ALGORITHM` and not profiled, as [`lock_at_once`].
unsafe extern "C" fn unlock_at_once<const ALGORITHM: u32>(m: Mutex) -> c_int {
    // SAFETY: the program's mutex, served by this algorithm if by any.
    match unsafe { served::unlock_at_once(Algorithm::ALL[ALGORITHM as usize], m) } {
        Some(result) => result,
        // SAFETY: the program's own argument.
        None => unsafe { mutex_unlock(m) },
    }
}

/// `pthread_mutex_unlock`, every case: ends the hold, then unlocks.
#[inline(never)]
unsafe extern "C" fn mutex_unlock(m: Mutex) -> c_int {
    let unlock = || match serving(m) {
        // SAFETY: a served mutex.
        Some(algorithm) => keeping_errno(|| unsafe { served::unlock(algorithm, m) }),
        None => unsafe { call_real!(real::MUTEX_UNLOCK, fn(Mutex) -> c_int, m) },
    };
    let Some(profiler) = active() else { return unlock() };
    let release = profiler.releasing_exclusive(Kind::Mutex, m as usize);
    let result = unlock();
    profiler.released(release);
    result
}

unsafe extern "C" fn mutex_init(m: Mutex, attr: *const libc::pthread_mutexattr_t, pc: usize) -> c_int {
    // SAFETY: the program's attribute object and mutex storage.
    let result = match replace::algorithm().map(|_| unsafe { served::classify(attr) }) {
        Some(served::Init::Served(kind)) => {
            unsafe { served::init(m, kind) };
            0
        }
        _ => unsafe { call_real!(real::MUTEX_INIT, fn(Mutex, *const libc::pthread_mutexattr_t) -> c_int, m, attr) },
    };
    if let (0, Some(profiler)) = (result, active()) {
        profiler.initialised(Kind::Mutex, m as usize, pc);
    }
    result
}

/// Exported: destroys, then starts a new generation at that address.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_destroy(m: Mutex) -> c_int {
    let result = match serving(m) {
        // SAFETY: a served mutex.
        Some(algorithm) => unsafe { served::destroy(algorithm, m) },
        None => unsafe { call_real!(real::MUTEX_DESTROY, fn(Mutex) -> c_int, m) },
    };
    if let (0, Some(profiler)) = (result, active()) {
        profiler.retire(m as usize);
    }
    result
}

/// Exported: names what of the object the profile holds before it may
/// be unloaded (see `unloaded`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut libc::c_void) -> c_int {
    // SAFETY: the program's handle, passed on as it gave it.
    let close = || unsafe { call_real!(real::DLCLOSE, fn(*mut libc::c_void) -> c_int, handle) };
    match active() {
        Some(profiler) => super::unloaded::closing(profiler, handle, close),
        None => close(),
    }
}

// Reader-writer locks.

shared_hook!(rwlock_rdlock(l: Rwlock), Kind::Rwlock, real::RWLOCK_TRYRDLOCK, real::RWLOCK_RDLOCK, pthread_outcome);
shared_hook!(rwlock_timedrdlock_on(l: Rwlock, at: Time), Kind::Rwlock, real::RWLOCK_TRYRDLOCK, real::RWLOCK_TIMEDRDLOCK, pthread_outcome);
refusing_hook!(rwlock_timedrdlock(l: Rwlock, at: Time) = rwlock_timedrdlock_on, valid_deadline(at), libc::EINVAL);
shared_hook!(
    rwlock_clockrdlock_on(l: Rwlock, clock: clockid_t, at: Time),
    Kind::Rwlock,
    real::RWLOCK_TRYRDLOCK,
    real::RWLOCK_CLOCKRDLOCK,
    pthread_outcome
);

refusing_hook!(rwlock_clockrdlock(l: Rwlock, clock: clockid_t, at: Time) = rwlock_clockrdlock_on, at.is_null() || (waitable_clock(clock) && valid_deadline(at)), libc::EINVAL);
exclusive_hook!(rwlock_wrlock(l: Rwlock), Kind::Rwlock, real::RWLOCK_TRYWRLOCK, real::RWLOCK_WRLOCK);
exclusive_hook!(rwlock_timedwrlock_on(l: Rwlock, at: Time), Kind::Rwlock, real::RWLOCK_TRYWRLOCK, real::RWLOCK_TIMEDWRLOCK);
refusing_hook!(rwlock_timedwrlock(l: Rwlock, at: Time) = rwlock_timedwrlock_on, valid_deadline(at), libc::EINVAL);
exclusive_hook!(rwlock_clockwrlock_on(l: Rwlock, clock: clockid_t, at: Time), Kind::Rwlock, real::RWLOCK_TRYWRLOCK, real::RWLOCK_CLOCKWRLOCK);

refusing_hook!(rwlock_clockwrlock(l: Rwlock, clock: clockid_t, at: Time) = rwlock_clockwrlock_on, at.is_null() || (waitable_clock(clock) && valid_deadline(at)), libc::EINVAL);
init_hook!(rwlock_init(l: Rwlock, attr: *const libc::pthread_rwlockattr_t), Kind::Rwlock, real::RWLOCK_INIT);
destroy_hook!(pthread_rwlock_destroy(l: Rwlock), real::RWLOCK_DESTROY);

unsafe extern "C" fn rwlock_tryrdlock(l: Rwlock, pc: usize) -> c_int {
    let result = unsafe { call_real!(real::RWLOCK_TRYRDLOCK, fn(Rwlock) -> c_int, l) };
    if let Some(profiler) = active() {
        match result {
            0 => profiler.acquired_shared(Kind::Rwlock, l as usize, pc, Acquired::NoWait, None),
            libc::EBUSY => profiler.refused(Kind::Rwlock, l as usize, pc, SHARED, None),
            _ => {}
        }
    }
    result
}

unsafe extern "C" fn rwlock_trywrlock(l: Rwlock, pc: usize) -> c_int {
    unsafe { exclusive_try(Kind::Rwlock, l as usize, pc, || call_real!(real::RWLOCK_TRYWRLOCK, fn(Rwlock) -> c_int, l)) }
}

/// `pthread_rwlock_unlock` profiled: ends the write hold (if this thread
/// is the writer) or one read hold, then unlocks.
unsafe extern "C" fn rwlock_unlock(l: Rwlock) -> c_int {
    let Some(profiler) = active() else { return unsafe { call_real!(real::RWLOCK_UNLOCK, fn(Rwlock) -> c_int, l) } };
    let release = profiler.releasing_rwlock(l as usize);
    let result = unsafe { call_real!(real::RWLOCK_UNLOCK, fn(Rwlock) -> c_int, l) };
    profiler.released(release);
    result
}

// Spinlocks: every wait spins (glibc's spinlock never sleeps), so SPIN is
// known and SLEEP is 0.

exclusive_hook!(spin_lock(l: Spin), Kind::Spin, real::SPIN_TRYLOCK, real::SPIN_LOCK);
init_hook!(spin_init(l: Spin, pshared: c_int), Kind::Spin, real::SPIN_INIT);
destroy_hook!(pthread_spin_destroy(l: Spin), real::SPIN_DESTROY);

unsafe extern "C" fn spin_trylock(l: Spin, pc: usize) -> c_int {
    unsafe { exclusive_try(Kind::Spin, l as usize, pc, || call_real!(real::SPIN_TRYLOCK, fn(Spin) -> c_int, l)) }
}

/// `pthread_spin_unlock` profiled: ends the hold, then unlocks.
unsafe extern "C" fn spin_unlock(l: Spin) -> c_int {
    let Some(profiler) = active() else { return unsafe { call_real!(real::SPIN_UNLOCK, fn(Spin) -> c_int, l) } };
    let release = profiler.releasing_exclusive(Kind::Spin, l as usize);
    let result = unsafe { call_real!(real::SPIN_UNLOCK, fn(Spin) -> c_int, l) };
    profiler.released(release);
    result
}

// Condition variables: the wait releases the mutex (its hold ends) and
// re-acquires it before returning (an acquisition, counted apart since
// the condvar wait hides its cost); the wait itself is the condvar's row.

#[inline(always)]
fn cond(c: Cond, m: Mutex, pc: usize, wait: impl FnOnce() -> c_int) -> c_int {
    // SAFETY: a served mutex.
    if serving(m).is_some() && unsafe { served::unlock_would_fail(m) } {
        return libc::EPERM;
    }
    let Some(profiler) = active() else { return wait() };
    let release = profiler.releasing_exclusive(Kind::Mutex, m as usize);
    profiler.released(release);
    let started = profiler.begin_wait(Kind::Cond, c as usize, pc, false);
    let result = cancellable(profiler, started, Some((m as usize, pc)), wait);
    let (now, waited) = profiler.end_wait(started, result == 0);
    match result {
        0 => profiler.acquired_shared(Kind::Cond, c as usize, pc, Acquired::Waited(waited), Some(now)),
        libc::ETIMEDOUT => profiler.refused(Kind::Cond, c as usize, pc, SHARED, Some(waited)),
        _ => {}
    }
    if result == libc::EOWNERDEAD {
        profiler.owner_died(Kind::Mutex, m as usize, pc);
    }
    if result == 0 || result == libc::ETIMEDOUT || result == libc::EOWNERDEAD {
        profiler.acquired_exclusive(Kind::Mutex, m as usize, pc, Acquired::CondReacquire, Some(now));
    }
    result
}

/// A wait on a served condvar (replace mode), with the mutex served or
/// glibc's; `deadline` is `None` or (clock, abstime).
///
/// # Safety
/// The program's own condvar, mutex and timespec.
unsafe fn served_wait(c: Cond, m: Mutex, deadline: Option<(clockid_t, Time)>) -> c_int {
    let deadline = match deadline {
        None => None,
        // SAFETY: the program's timespec, or null.
        Some((clock, at)) => match unsafe { served_cond::timeout(clock, at) } {
            Some(timeout) => Some(timeout),
            None => return libc::EINVAL,
        },
    };
    match serving(m) {
        Some(algorithm) => {
            // The caller must own an error-checking or recursive mutex.
            // SAFETY: a served mutex.
            if unsafe { served::unlock_would_fail(m) } {
                return libc::EPERM;
            }
            // SAFETY: this thread holds the served mutex and the condvar is served.
            unsafe { served_cond::wait(c, || served::unlock(algorithm, m), || served::lock::<NoStats>(algorithm, m), deadline) }
        }
        // SAFETY: a glibc mutex the caller holds, released and re-taken
        // with glibc's own functions.
        None => unsafe {
            served_cond::wait(
                c,
                || call_real!(real::MUTEX_UNLOCK, fn(Mutex) -> c_int, m),
                || call_real!(real::MUTEX_LOCK, fn(Mutex) -> c_int, m),
                deadline,
            )
        },
    }
}

/// Whether replace mode serves this condvar (else it is glibc's).
#[inline(always)]
fn serving_condvar(c: Cond) -> bool {
    replace::algorithm().is_some() && served_cond::is_served(c)
}

/// Who waits on a condvar with a mutex.
enum CondWait {
    /// Replace mode serves the condvar.
    Served,
    /// Both are glibc's.
    Glibc,
    /// A glibc condvar (process-shared) with a served mutex, which
    /// glibc's wait cannot release: see [`bridged_wait`].
    Bridged(Algorithm),
}

/// How a wait on `c` with `m` goes.
fn serving_cond(c: Cond, m: Mutex) -> CondWait {
    if serving_condvar(c) {
        return CondWait::Served;
    }
    match serving(m) {
        Some(algorithm) => CondWait::Bridged(algorithm),
        None => CondWait::Glibc,
    }
}

/// A glibc mutex of this library's, which every bridged wait passes to
/// glibc's condvar wait in place of the served one.
struct Bridge(std::cell::UnsafeCell<pthread_mutex_t>);
// SAFETY: used only through glibc's own mutex functions.
unsafe impl Sync for Bridge {}
static BRIDGE: Bridge = Bridge(std::cell::UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));
extern "C" {
    fn pthread_setcancelstate(state: c_int, previous: *mut c_int) -> c_int;
    fn pthread_testcancel();
}

/// glibc's value of PTHREAD_CANCEL_DISABLE.
const CANCEL_DISABLE: c_int = 1;

/// How long a bridged wait waits before it returns, as a spurious wake-up
/// may.
const BRIDGE_SLICE: std::time::Duration = std::time::Duration::from_millis(10);

/// A wait on glibc's condvar `c` (a process-shared one) with the served
/// mutex `m`: glibc's wait cannot release a served mutex, and refused
/// (EINVAL), the usual `while (!ready) pthread_cond_wait(...)` spun for
/// ever holding the mutex. It releases `m`, waits on `c` with a glibc
/// mutex of its own for at most 10 ms, and takes `m` again. A signal
/// between the release and glibc's wait is not seen by it, so the wait
/// returns after its slice, as the spurious wake-up POSIX allows, and the
/// caller's loop looks again: a wake at most 10 ms late, never lost (a
/// waiter in another process needs a process-shared mutex anyway, which
/// is glibc's). Not a cancellation point inside the slice: a
/// cancellation there would run the cleanup handlers without `m`; it is
/// acted on once `m` is held again.
///
/// # Safety
/// The program's condvar, a served mutex the caller holds, and its
/// timespec, if any.
unsafe fn bridged_wait(c: Cond, m: Mutex, algorithm: Algorithm, deadline: Option<(clockid_t, Time)>) -> c_int {
    // SAFETY: a served mutex.
    if unsafe { served::unlock_would_fail(m) } {
        return libc::EPERM;
    }
    let slice_end = replace::deadline::monotonic_in(BRIDGE_SLICE);
    let mut cancel_state = 0;
    // SAFETY: this thread's cancellation state, restored below.
    unsafe { pthread_setcancelstate(CANCEL_DISABLE, &mut cancel_state) };
    let bridge = BRIDGE.0.get();
    // SAFETY: glibc's functions on glibc's mutex and condvar; the served
    // mutex, held by this thread, released and taken again.
    unsafe {
        call_real!(real::MUTEX_LOCK, fn(Mutex) -> c_int, bridge);
        served::unlock(algorithm, m);
        call_real!(real::COND_CLOCKWAIT, fn(Cond, Mutex, clockid_t, Time) -> c_int, c, bridge, libc::CLOCK_MONOTONIC, &slice_end);
        call_real!(real::MUTEX_UNLOCK, fn(Mutex) -> c_int, bridge);
        served::lock::<NoStats>(algorithm, m);
        pthread_setcancelstate(cancel_state, std::ptr::null_mut());
        pthread_testcancel();
    }
    // SAFETY: the program's timespec, checked valid by the caller.
    let passed = |(clock, at): (clockid_t, Time)| replace::deadline::left(clock, unsafe { *at }).is_ok_and(|left| left.is_zero());
    if deadline.is_some_and(passed) { libc::ETIMEDOUT } else { 0 }
}

unsafe extern "C-unwind" fn cond_wait(c: Cond, m: Mutex, pc: usize) -> c_int {
    match serving_cond(c, m) {
        CondWait::Bridged(algorithm) => keeping_errno(|| cond(c, m, pc, || unsafe { bridged_wait(c, m, algorithm, None) })),
        CondWait::Served => keeping_errno(|| cond(c, m, pc, || unsafe { served_wait(c, m, None) })),
        CondWait::Glibc => cond(c, m, pc, || unsafe { call_real!(real::COND_WAIT, fn(Cond, Mutex) -> c_int, c, m) }),
    }
}

unsafe extern "C-unwind" fn cond_timedwait(c: Cond, m: Mutex, at: Time, pc: usize) -> c_int {
    // Refused before the mutex is released (glibc does so too): the
    // profile ended the mutex's hold at the wait, and lost it.
    if !valid_deadline(at) {
        return libc::EINVAL;
    }
    match serving_cond(c, m) {
        // (glibc's condvar keeps its clock where only glibc reads it: the
        // deadline is checked on the wall clock, the default.)
        CondWait::Bridged(algorithm) => keeping_errno(|| cond(c, m, pc, || unsafe { bridged_wait(c, m, algorithm, Some((libc::CLOCK_REALTIME, at))) })),
        // SAFETY: a served condvar has its clock.
        CondWait::Served => keeping_errno(|| cond(c, m, pc, || unsafe { served_wait(c, m, Some((served_cond::clock(c), at))) })),
        CondWait::Glibc => cond(c, m, pc, || unsafe { call_real!(real::COND_TIMEDWAIT, fn(Cond, Mutex, Time) -> c_int, c, m, at) }),
    }
}

unsafe extern "C-unwind" fn cond_clockwait(c: Cond, m: Mutex, clock: clockid_t, at: Time, pc: usize) -> c_int {
    if !waitable_clock(clock) || !valid_deadline(at) {
        return libc::EINVAL;
    }
    match serving_cond(c, m) {
        CondWait::Bridged(algorithm) => keeping_errno(|| cond(c, m, pc, || unsafe { bridged_wait(c, m, algorithm, Some((clock, at))) })),
        CondWait::Served => keeping_errno(|| cond(c, m, pc, || unsafe { served_wait(c, m, Some((clock, at))) })),
        CondWait::Glibc => {
            cond(c, m, pc, || unsafe { call_real!(real::COND_CLOCKWAIT, fn(Cond, Mutex, clockid_t, Time) -> c_int, c, m, clock, at) })
        }
    }
}

/// Exported: in replace mode a served condvar (process-shared ones stay glibc's).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_init(c: Cond, attr: *const libc::pthread_condattr_t) -> c_int {
    // SAFETY: the program's attribute object and condvar storage.
    unsafe {
        if replace::algorithm().is_some() && !served_cond::wants_glibc(attr) {
            served_cond::init(c, attr);
            return 0;
        }
        call_real!(real::COND_INIT, fn(Cond, *const libc::pthread_condattr_t) -> c_int, c, attr)
    }
}

/// A condvar's wake: `served_wake` if `replacing` (replace mode is on)
/// and the condvar is served, else glibc's.
///
/// # Safety
/// The program's condvar; `glibc` the wake of glibc's it stands for.
#[inline(always)]
unsafe fn wake(c: Cond, replacing: bool, served_wake: unsafe fn(Cond), glibc: &real::Real) -> c_int {
    if replacing && served_cond::is_served(c) {
        // SAFETY: a served condvar. (The wake keeps errno itself: see
        // `Condvar::notify_one`.)
        unsafe { served_wake(c) };
        return 0;
    }
    // SAFETY: the program's condvar, glibc's.
    unsafe { call_real!(glibc, fn(Cond) -> c_int, c) }
}

/// `pthread_cond_signal`: wakes one waiter.
unsafe extern "C" fn cond_signal(c: Cond) -> c_int {
    // SAFETY: the program's condvar.
    unsafe { wake(c, replace::algorithm().is_some(), served_cond::signal, &real::COND_SIGNAL) }
}

/// `pthread_cond_signal` in a process replace mode serves.
unsafe extern "C" fn signal_where_served(c: Cond) -> c_int {
    // SAFETY: the program's condvar.
    unsafe { wake(c, true, served_cond::signal, &real::COND_SIGNAL) }
}

/// `pthread_cond_broadcast`: wakes every waiter.
unsafe extern "C" fn cond_broadcast(c: Cond) -> c_int {
    // SAFETY: the program's condvar.
    unsafe { wake(c, replace::algorithm().is_some(), served_cond::broadcast, &real::COND_BROADCAST) }
}

/// `pthread_cond_broadcast` in a process replace mode serves.
unsafe extern "C" fn broadcast_where_served(c: Cond) -> c_int {
    // SAFETY: the program's condvar.
    unsafe { wake(c, true, served_cond::broadcast, &real::COND_BROADCAST) }
}

/// Exported: destroys, then starts a new generation at that address.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_destroy(c: Cond) -> c_int {
    let result = if serving_condvar(c) {
        // SAFETY: a served condvar.
        unsafe { served_cond::destroy(c) };
        0
    } else {
        unsafe { call_real!(real::COND_DESTROY, fn(Cond) -> c_int, c) }
    };
    if let (0, Some(profiler)) = (result, active()) {
        profiler.retire(c as usize);
    }
    result
}

// Semaphores.

shared_hook!(sem_wait_impl(s: Sem), Kind::Sem, real::SEM_TRYWAIT, real::SEM_WAIT, sem_outcome);
shared_hook!(sem_timedwait_on(s: Sem, at: Time), Kind::Sem, real::SEM_TRYWAIT, real::SEM_TIMEDWAIT, sem_outcome);
refusing_hook!(sem_timedwait_impl(s: Sem, at: Time) = sem_timedwait_on, valid_deadline(at), {
    set_errno(libc::EINVAL);
    -1
});
shared_hook!(sem_clockwait_on(s: Sem, clock: clockid_t, at: Time), Kind::Sem, real::SEM_TRYWAIT, real::SEM_CLOCKWAIT, sem_outcome);

refusing_hook!(sem_clockwait_impl(s: Sem, clock: clockid_t, at: Time) = sem_clockwait_on, waitable_clock(clock) && valid_deadline(at), {
    set_errno(libc::EINVAL);
    -1
});
init_hook!(sem_init_impl(s: Sem, pshared: c_int, value: libc::c_uint), Kind::Sem, real::SEM_INIT);
destroy_hook!(sem_destroy(s: Sem), real::SEM_DESTROY);

unsafe extern "C" fn sem_trywait_impl(s: Sem, pc: usize) -> c_int {
    let result = unsafe { call_real!(real::SEM_TRYWAIT, fn(Sem) -> c_int, s) };
    if let Some(profiler) = active() {
        let errno = errno();
        match sem_outcome(result) {
            Outcome::Acquired => profiler.acquired_shared(Kind::Sem, s as usize, pc, Acquired::NoWait, None),
            Outcome::Busy => profiler.refused(Kind::Sem, s as usize, pc, SHARED, None),
            _ => {}
        }
        set_errno(errno);
    }
    result
}

mod c11;

// Leaving without exit handlers.

/// Exported: writes the profile, then leaves as `_exit` does.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    output::before_exit_now();
    unsafe { call_real!(real::EXIT_NOW, fn(c_int) -> !, status) }
}

/// Exported: as `_exit`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    output::before_exit_now();
    unsafe { call_real!(real::EXIT_NOW_C99, fn(c_int) -> !, status) }
}

extern "C" fn constructor() {
    // The on-CPU table, when `lockmeter run --oncpu` handed one over or one
    // is pinned system-wide: `adaptive` then spins exactly while the owner
    // runs. Without one, locks keep their fallback. Read before anything
    // here sets a variable: bash's getenv, which std's reads go through,
    // finds nothing after a setenv made before bash's main.
    // A handed table records the process `lockmeter run` started alone.
    // Its parent is lockmeter, which the table's variable names; but a
    // process of the tree whose parent ended comes to lockmeter too (the
    // subreaper of the tree), and one that executes then would pass that
    // check: the tree's root is what tells them apart.
    let handed_elsewhere = output::env(lockmeter_oncpu::FD_ENV).is_some() && !output::is_tree_root();
    // Such a process takes the system-wide table, if one is pinned.
    let installed = if handed_elsewhere {
        lockmeter_oncpu::install_recorded_elsewhere()
    } else {
        lockmeter_oncpu::install_from_environment()
    };
    let _ = ONCPU.set(match installed {
        Ok(lockmeter_oncpu::Origin::Handed(_)) => Ok("handed"),
        Ok(lockmeter_oncpu::Origin::Pinned) => Ok("pinned"),
        Err(why) => Err(why.to_string()),
    });
    // Before `mark_root`'s setenv, which in bash goes to bash's own
    // environment, where the program's getenv would then look.
    lockmeter_locks::config::read_environment_from(|name| {
        crate::environment::get(name).map(|value| value.to_string_lossy().into_owned())
    });
    output::mark_root();
    output::note_member();
    // The profiler starts here, not in whichever lock call comes first:
    // an allocator may lock a pthread mutex inside an allocation (jemalloc
    // does), and starting there would allocate inside the allocator while
    // it holds its mutex. Lock calls made while it starts are forwarded.
    super::library_constructed();
    let _ = active();
    // The lock library forgets its cached thread id in a child of fork
    // through a handler it registers at its first lookup of the id. Looked
    // up first inside a fork (a program's prepare handler taking a lock),
    // the handler missed that fork and the child kept the parent's id (a
    // `pi` child aborted); child handlers run in the order registered, so
    // it also has to come before replace mode's, which reads the id.
    let _ = lockmeter_locks::current_tid();
    crate::replace::register_fork_handler();
    choose_mutex_paths();
    choose_unserved_paths();
}

/// Which on-CPU table the constructor installed, or why none.
pub static ONCPU: std::sync::OnceLock<Result<&'static str, String>> = std::sync::OnceLock::new();

/// Runs when the library is loaded, before the program's `main`: profile
/// mode starts (and the root of a profiled tree is marked) and the on-CPU
/// table is mapped while the process is still single-threaded.
#[used]
#[unsafe(link_section = ".init_array")]
static CONSTRUCTOR: extern "C" fn() = constructor;
