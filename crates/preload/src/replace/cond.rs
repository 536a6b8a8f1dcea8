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
pub unsafe fn wait(
    c: *mut libc::pthread_cond_t,
    release: impl FnOnce() -> libc::c_int,
    mut reacquire: impl FnMut() -> libc::c_int,
    deadline: Option<Instant>,
) -> libc::c_int {
    // SAFETY: forwarded contract.
    let condvar = &unsafe { served(c) }.condvar;
    let released = std::cell::Cell::new(0);
    let relocked = std::cell::Cell::new(0);
    let guard = Reacquire(|| {
        // A mutex that could not be released is still held: no re-lock.
        if released.get() == 0 {
            relocked.set(reacquire());
        }
    });
    let previous = std::cell::Cell::new(0);
    let outcome = condvar.wait_with(
        || {
            let result = release();
            released.set(result);
            if result != 0 {
                // The wait must not block: end it at once (every waiter may
                // wake spuriously, which POSIX allows).
                condvar.notify_all();
                return;
            }
            let mut old = 0;
            // SAFETY: changes this thread's cancellation type.
            unsafe { pthread_setcanceltype(CANCEL_ASYNCHRONOUS, &mut old) };
            previous.set(old);
        },
        || {
            if released.get() == 0 {
                // SAFETY: restores it.
                unsafe { pthread_setcanceltype(previous.get(), std::ptr::null_mut()) };
            }
        },
        deadline,
    );
    drop(guard);
    if released.get() != 0 {
        return released.get();
    }
    // A robust mutex whose owner died while we waited: EOWNERDEAD, with
    // the mutex held, as from pthread_mutex_lock.
    if relocked.get() != 0 {
        return relocked.get();
    }
    match outcome {
        WaitResult::Notified => 0,
        WaitResult::TimedOut => libc::ETIMEDOUT,
    }
}

/// `pthread_cond_destroy`: returns once every woken waiter has left the
/// condvar (POSIX allows destroying it, and freeing its memory, right
/// after a broadcast), as glibc does.
///
/// # Safety
/// As [`served`].
pub unsafe fn destroy(c: *mut libc::pthread_cond_t) {
    // SAFETY: forwarded contract.
    let condvar = &unsafe { served(c) }.condvar;
    while condvar.has_waiters() {
        std::thread::yield_now();
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
