//! A program's `pthread_cond_t`, served by lockmeter's condvar with any
//! algorithm's mutex (or a glibc-kept one): no lost wake-ups, the clock
//! chosen at init honoured by timed waits, and cancellation as glibc's: a
//! thread cancelled while blocked in the wait re-acquires the mutex before
//! its cleanup handlers run.

use lockmeter_locks::{Condvar, WaitResult};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::Instant;

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

/// Re-acquires the mutex when dropped: on the normal path, and when a
/// cancellation unwinds out of the wait (POSIX: the mutex is held again
/// before the first cleanup handler runs).
struct Reacquire<F: FnMut()>(F);

impl<F: FnMut()> Drop for Reacquire<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// Waits on a served condvar: `release` and `reacquire` are the mutex's.
/// Returns 0 or ETIMEDOUT.
///
/// The wait is a cancellation point: asynchronous cancellation is enabled
/// only while the thread is blocked (between the release and the end of
/// the futex wait), as glibc does around its own blocking calls.
///
/// # Safety
/// As [`served`]; the caller holds the mutex.
pub unsafe fn wait(c: *mut libc::pthread_cond_t, release: impl FnOnce(), reacquire: impl FnMut(), deadline: Option<Instant>) -> libc::c_int {
    // SAFETY: forwarded contract.
    let condvar = &unsafe { served(c) }.condvar;
    let guard = Reacquire(reacquire);
    let previous = std::cell::Cell::new(0);
    let outcome = condvar.wait_with(
        || {
            release();
            let mut old = 0;
            // SAFETY: changes this thread's cancellation type.
            unsafe { pthread_setcanceltype(CANCEL_ASYNCHRONOUS, &mut old) };
            previous.set(old);
        },
        || {
            // SAFETY: restores it.
            unsafe { pthread_setcanceltype(previous.get(), std::ptr::null_mut()) };
        },
        deadline,
    );
    drop(guard);
    match outcome {
        WaitResult::Notified => 0,
        WaitResult::TimedOut => libc::ETIMEDOUT,
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
