//! A program's `pthread_cond_t`, served by lockmeter's condvar with any
//! algorithm's mutex (or a glibc-kept one): no lost wake-ups, the clock
//! chosen at init honoured by timed waits, and cancellation as glibc's: a
//! thread cancelled while blocked in the wait re-acquires the mutex before
//! its cleanup handlers run.

use crate::cancel;
use lockmeter_locks::{futex, Condvar};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// A served condvar in the program's storage.
#[repr(C)]
pub struct Served {
    condvar: Condvar,
    clock: AtomicU32,
    _unused: [u32; 6],
    /// glibc's `__wrefs`: bit 0 marks a process-shared condvar it keeps.
    glibc_flags: AtomicU32,
    _tail: [u32; 2],
}

const _: () = assert!(std::mem::size_of::<Served>() == std::mem::size_of::<libc::pthread_cond_t>());
const _: () = assert!(std::mem::offset_of!(Served, glibc_flags) == 36);

/// Whether lockmeter serves this condvar (else it is glibc's).
pub fn is_served(c: *mut libc::pthread_cond_t) -> bool {
    // SAFETY: the program passed a pthread_cond_t.
    unsafe { (*c.cast::<Served>()).glibc_flags.load(Relaxed) & 1 == 0 }
}

/// # Safety
/// `c` is a served condvar.
unsafe fn served<'a>(c: *mut libc::pthread_cond_t) -> &'a Served {
    // SAFETY: same size, alignment at most glibc's; all-zero is an idle
    // condvar on CLOCK_REALTIME (PTHREAD_COND_INITIALIZER).
    unsafe { &*c.cast::<Served>() }
}

/// The clock a served condvar's timed waits use.
///
/// # Safety
/// As [`served`].
pub unsafe fn clock(c: *mut libc::pthread_cond_t) -> libc::clockid_t {
    // SAFETY: forwarded contract.
    unsafe { served(c) }.clock.load(Relaxed) as libc::clockid_t
}

/// A timed wait's deadline as the program gave it, `at` on `clock`
/// (CLOCK_REALTIME or CLOCK_MONOTONIC): handed to the kernel as it is, so
/// that a wait on the wall clock ends when the clock is set past `at`, as
/// glibc's does, and a deadline too far to count waits for ever. None for
/// a null `at` or nanoseconds out of range (EINVAL).
///
/// # Safety
/// `at` is null or points to a timespec.
pub unsafe fn timeout(clock: libc::clockid_t, at: *const libc::timespec) -> Option<futex::AbsoluteTimeout> {
    if at.is_null() {
        return None;
    }
    // SAFETY: the program's timespec, not null.
    let mut at = unsafe { *at };
    if !(0..1_000_000_000).contains(&at.tv_nsec) {
        return None;
    }
    if at.tv_sec < 0 {
        // Passed; the kernel refuses a time before the epoch.
        at = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    }
    if clock == libc::CLOCK_MONOTONIC {
        return Some(futex::AbsoluteTimeout::Monotonic(at));
    }
    if !futex::realtime_timeouts_work() {
        // Converted to the monotonic clock once, here: a later jump of the
        // wall clock does not move it.
        return super::deadline::on_monotonic(clock, at).ok().map(futex::AbsoluteTimeout::Monotonic);
    }
    Some(futex::AbsoluteTimeout::Realtime(at))
}

/// `pthread_cond_init` of a served condvar with the attribute's clock.
///
/// # Safety
/// `c` is writable storage of a pthread_cond_t; `attr` null or initialised.
pub unsafe fn init(c: *mut libc::pthread_cond_t, attr: *const libc::pthread_condattr_t) {
    let mut clock = libc::CLOCK_REALTIME;
    if !attr.is_null() {
        // SAFETY: an initialised attribute object.
        unsafe { libc::pthread_condattr_getclock(attr, &mut clock) };
    }
    // SAFETY: writable storage of the right size.
    unsafe {
        std::ptr::write_bytes(c.cast::<u8>(), 0, std::mem::size_of::<Served>());
        served(c).clock.store(clock as u32, Relaxed);
    }
}

/// Whether `attr` asks for a process-shared condvar (glibc keeps those).
///
/// # Safety
/// `attr` null or initialised.
pub unsafe fn wants_glibc(attr: *const libc::pthread_condattr_t) -> bool {
    if attr.is_null() {
        return false;
    }
    let mut pshared = libc::PTHREAD_PROCESS_PRIVATE;
    // SAFETY: an initialised attribute object.
    unsafe { libc::pthread_condattr_getpshared(attr, &mut pshared) };
    pshared != libc::PTHREAD_PROCESS_PRIVATE
}

extern "C" {
    fn pthread_setcanceltype(kind: libc::c_int, previous: *mut libc::c_int) -> libc::c_int;
}

/// glibc's value of PTHREAD_CANCEL_ASYNCHRONOUS.
const CANCEL_ASYNCHRONOUS: libc::c_int = 1;

/// What a cancelled wait must still do, for its cleanup handler.
struct Abandoned<'a> {
    condvar: &'a Condvar,
    reacquire: &'a mut dyn FnMut() -> libc::c_int,
}

/// Run by glibc when a cancellation unwinds out of the wait: leaves the
/// condvar, passes on a wake it may have taken (a signal that woke this
/// thread as it was cancelled was lost to the other waiters: 63 of 100),
/// and takes the mutex again (POSIX: held again before the first cleanup
/// handler of the program runs).
unsafe extern "C" fn leave_cancelled_wait(argument: *mut libc::c_void) {
    // SAFETY: the `Abandoned` of the wait being unwound, alive in its frame.
    let abandoned = unsafe { &mut *argument.cast::<Abandoned>() };
    abandoned.condvar.leave();
    futex::wake(abandoned.condvar.futex_word(), 1);
    (abandoned.reacquire)();
}

/// Waits on a served condvar: `release` and `reacquire` are the mutex's.
/// Returns 0 or ETIMEDOUT (or the mutex's error).
///
/// The wait is a cancellation point, as glibc's: asynchronous
/// cancellation is enabled around the one system call that blocks, and
/// nothing of Rust's is there to unwind (this frame and its callers hold
/// nothing that drops: unwinding Rust code with pending drops, or out of a
/// function that cannot unwind, aborted the program). A cancellation runs
/// `leave_cancelled_wait` as glibc unwinds past this frame.
///
/// # Safety
/// As [`served`]; the caller holds the mutex.
pub unsafe fn wait(
    c: *mut libc::pthread_cond_t,
    release: impl FnOnce() -> libc::c_int,
    reacquire: impl FnMut() -> libc::c_int,
    deadline: Option<futex::AbsoluteTimeout>,
) -> libc::c_int {
    // SAFETY: forwarded contract.
    unsafe { wait_on(&served(c).condvar, release, reacquire, deadline) }
}

/// [`wait`] on `condvar`, wherever it lives (a served `pthread_cond_t`, or
/// the C library's `lm_cond_t`).
///
/// # Safety
/// The caller holds the mutex `release` releases; the frames above hold
/// nothing that drops (a cancellation unwinds through them).
pub unsafe fn wait_on(
    condvar: &Condvar,
    release: impl FnOnce() -> libc::c_int,
    mut reacquire: impl FnMut() -> libc::c_int,
    deadline: Option<futex::AbsoluteTimeout>,
) -> libc::c_int {
    let seen = condvar.enter();
    let released = release();
    if released != 0 {
        // A mutex that could not be released is still held: no wait.
        condvar.leave();
        return released;
    }
    let mut abandoned = Abandoned { condvar, reacquire: &mut reacquire };
    // SAFETY: `abandoned` lives in this frame until the call returns, and
    // the frames of the wait hold nothing that drops.
    let outcome = unsafe {
        cancel::on_cancel(leave_cancelled_wait, std::ptr::from_mut(&mut abandoned).cast(), || {
            let mut previous = 0;
            // SAFETY: changes this thread's cancellation type; from here
            // to its restoring only the system call runs.
            pthread_setcanceltype(CANCEL_ASYNCHRONOUS, &mut previous);
            // Woken, or the sequence moved on already: notified. A signal
            // handler that ran notified nothing: while the sequence is
            // unchanged the wait goes on, to the same deadline, as glibc's
            // does (every signal returned 0, and a caller that waits with
            // `if`, or counts a 0 as notified, as C++'s wait_for does,
            // went on with nothing signalled; a timed wait is interrupted
            // even under SA_RESTART).
            let outcome = loop {
                match futex::wait_until(condvar.futex_word(), seen, deadline, futex::ANY_BITS) {
                    futex::WaitOutcome::Interrupted => continue,
                    outcome => break outcome,
                }
            };
            // SAFETY: restores it.
            pthread_setcanceltype(previous, std::ptr::null_mut());
            outcome
        })
    };
    let timed_out = outcome == futex::WaitOutcome::TimedOut;
    condvar.leave();
    // A robust mutex whose owner died while we waited: EOWNERDEAD, with
    // the mutex held, as from pthread_mutex_lock.
    match (reacquire(), timed_out) {
        (0, false) => 0,
        (0, true) => libc::ETIMEDOUT,
        (error, _) => error,
    }
}

/// How often `pthread_cond_destroy` yields to woken waiters before it
/// naps between looks.
const DESTROY_YIELDS: u32 = 1_000;

/// `pthread_cond_destroy`: returns once every woken waiter has left the
/// condvar (POSIX allows destroying it, and freeing its memory, right
/// after a broadcast), as glibc does.
///
/// # Safety
/// As [`served`].
pub unsafe fn destroy(c: *mut libc::pthread_cond_t) {
    // SAFETY: forwarded contract.
    let condvar = &unsafe { served(c) }.condvar;
    // Woken waiters leave within their next time slice, unless descheduled
    // or in a signal handler. Waiters never woken (undefined in POSIX)
    // never leave: glibc's destroy sleeps for ever then, and this one,
    // after its yields, naps rather than keep a CPU busy for ever. The nap
    // is the system call itself, not glibc's nanosleep, a cancellation
    // point: destroy is not one (cancelled there, a thread unwound through
    // this library's frames).
    let mut yields = 0;
    while condvar.has_waiters() {
        if yields < DESTROY_YIELDS {
            yields += 1;
            std::thread::yield_now();
        } else {
            let nap = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
            // SAFETY: a relative sleep on a valid clock; `nap` outlives the
            // call, and no remaining time is asked for.
            unsafe { libc::syscall(libc::SYS_clock_nanosleep, libc::CLOCK_MONOTONIC, 0, &nap, std::ptr::null_mut::<libc::timespec>()) };
        }
    }
}

/// `pthread_cond_signal`.
///
/// # Safety
/// As [`served`].
pub unsafe fn signal(c: *mut libc::pthread_cond_t) {
    // SAFETY: forwarded contract.
    unsafe { served(c) }.condvar.notify_one();
}

/// `pthread_cond_broadcast`.
///
/// # Safety
/// As [`served`].
pub unsafe fn broadcast(c: *mut libc::pthread_cond_t) {
    // SAFETY: forwarded contract.
    unsafe { served(c) }.condvar.notify_all();
}
