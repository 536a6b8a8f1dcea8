//! The C ABI: `lm_mutex_*` and `lm_cond_*` over [`AnyMutex`] and [`Condvar`],
//! with pthread-style return values.

use lockmeter_locks::{config, futex, Algorithm, AnyMutex, Condvar};
use std::ffi::{c_char, c_int, CStr};

/// `lm_mutex_t`: 40 bytes, like `pthread_mutex_t` (mutated through shared
/// pointers, hence the cell).
#[repr(C, align(8))]
pub struct LmMutex {
    storage: std::cell::UnsafeCell<[u8; 40]>,
}

/// `lm_cond_t`: 48 bytes, like `pthread_cond_t`.
#[repr(C, align(8))]
pub struct LmCond {
    storage: std::cell::UnsafeCell<[u8; 48]>,
}

const _: () = assert!(std::mem::size_of::<AnyMutex>() <= std::mem::size_of::<LmMutex>());
const _: () = assert!(std::mem::align_of::<AnyMutex>() <= std::mem::align_of::<LmMutex>());
const _: () = assert!(std::mem::size_of::<Condvar>() <= std::mem::size_of::<LmCond>());
const _: () = assert!(std::mem::align_of::<Condvar>() <= std::mem::align_of::<LmCond>());

/// The mutex inside `m`.
///
/// # Safety
/// `m` points to an `lm_mutex_t` that is all-zero or was initialised by
/// `lm_mutex_init`, and outlives the returned reference.
unsafe fn mutex<'a>(m: *const LmMutex) -> &'a AnyMutex {
    // SAFETY: the storage is large and aligned enough (checked above) and
    // holds a valid AnyMutex: all-zero is an unlocked adaptive mutex.
    unsafe { &*(m as *const AnyMutex) }
}

/// The condition variable inside `c` (same contract as [`mutex`]).
unsafe fn cond<'a>(c: *const LmCond) -> &'a Condvar {
    // SAFETY: as for `mutex`; all-zero is an idle Condvar.
    unsafe { &*(c as *const Condvar) }
}

fn algorithm_name(a: Algorithm) -> &'static CStr {
    match a {
        Algorithm::Adaptive => c"adaptive",
        Algorithm::Futex => c"futex",
        Algorithm::FutexTid => c"futex-tid",
        Algorithm::Pi => c"pi",
        Algorithm::Ticket => c"ticket",
        Algorithm::Mcs => c"mcs",
        Algorithm::Spin => c"spin",
    }
}

/// # Safety
/// `m` points to writable `lm_mutex_t` storage; `algorithm` is NULL or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn lm_mutex_init(m: *mut LmMutex, algorithm: *const c_char) -> c_int {
    let chosen = if algorithm.is_null() {
        Algorithm::Adaptive
    } else {
        // SAFETY: a NUL-terminated string, by the caller's contract.
        match unsafe { CStr::from_ptr(algorithm) }.to_str() {
            Ok("") => Algorithm::Adaptive,
            Ok(name) => match name.parse() {
                Ok(a) => a,
                Err(_) => return libc::EINVAL,
            },
            Err(_) => return libc::EINVAL,
        }
    };
    // SAFETY: writable, large and aligned enough (checked above).
    unsafe { std::ptr::write(m as *mut AnyMutex, AnyMutex::new(chosen)) };
    0
}

/// # Safety
/// `m` is an initialised (or all-zero) `lm_mutex_t`.
#[no_mangle]
pub unsafe extern "C" fn lm_mutex_lock(m: *mut LmMutex) -> c_int {
    // SAFETY: caller's contract.
    unsafe { mutex(m) }.lock();
    0
}

/// # Safety
/// As for `lm_mutex_lock`.
#[no_mangle]
pub unsafe extern "C" fn lm_mutex_trylock(m: *mut LmMutex) -> c_int {
    // SAFETY: caller's contract.
    if unsafe { mutex(m) }.try_lock() {
        0
    } else {
        libc::EBUSY
    }
}

/// # Safety
/// As for `lm_mutex_lock`; `abstime` points to a readable timespec.
#[no_mangle]
pub unsafe extern "C" fn lm_mutex_timedlock(m: *mut LmMutex, abstime: *const libc::timespec) -> c_int {
    // SAFETY: caller's contract.
    let lock = unsafe { mutex(m) };
    // As POSIX: the deadline is only checked if the call would block.
    if lock.try_lock() {
        return 0;
    }
    if abstime.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller passes a readable timespec.
    let at = unsafe { *abstime };
    let sliced = crate::replace::deadline::follows_wall_clock(lock.algorithm());
    match crate::replace::deadline::lock_by(libc::CLOCK_REALTIME, at, sliced, |deadline| lock.lock_until(deadline)) {
        Ok(true) => 0,
        Ok(false) => libc::ETIMEDOUT,
        Err(error) => error,
    }
}

/// # Safety
/// `m` is held by the calling thread.
#[no_mangle]
pub unsafe extern "C" fn lm_mutex_unlock(m: *mut LmMutex) -> c_int {
    // SAFETY: caller's contract.
    unlock(unsafe { mutex(m) })
}

/// As with a normal pthread mutex, the releasing thread need not be the
/// one that locked it (but for `pi`, as for glibc's PI mutex: EPERM, the
/// lock still held). A mutex nobody holds is EPERM too: released again,
/// `ticket` counted a turn nobody would take (every later lock hung) and
/// `mcs` followed a queue node that was gone (a crash).
fn unlock(lock: &AnyMutex) -> c_int {
    if !lock.is_locked() {
        return libc::EPERM;
    }
    // SAFETY: the mutex is held, by this thread or (the caller says) one
    // whose hold this thread ends.
    if unsafe { lock.unlock_from_any_thread() } {
        0
    } else {
        libc::EPERM
    }
}

/// # Safety
/// As for `lm_mutex_lock`.
#[no_mangle]
pub unsafe extern "C" fn lm_mutex_destroy(m: *mut LmMutex) -> c_int {
    // SAFETY: caller's contract.
    if unsafe { mutex(m) }.is_locked() {
        libc::EBUSY
    } else {
        0
    }
}

/// # Safety
/// As for `lm_mutex_lock`.
#[no_mangle]
pub unsafe extern "C" fn lm_mutex_algorithm(m: *const LmMutex) -> *const c_char {
    // SAFETY: caller's contract.
    algorithm_name(unsafe { mutex(m) }.algorithm()).as_ptr()
}

/// # Safety
/// `c` points to writable `lm_cond_t` storage.
#[no_mangle]
pub unsafe extern "C" fn lm_cond_init(c: *mut LmCond) -> c_int {
    // SAFETY: writable, large and aligned enough (checked above).
    unsafe { std::ptr::write(c as *mut Condvar, Condvar::new()) };
    0
}

/// # Safety
/// `c` is initialised; `m` is held by the calling thread.
#[no_mangle]
pub unsafe extern "C" fn lm_cond_wait(c: *mut LmCond, m: *mut LmMutex) -> c_int {
    // SAFETY: caller's contract.
    unsafe { wait(c, m, None) }
}

/// A wait as `pthread_cond_wait`'s, a cancellation point: a thread
/// cancelled while blocked holds the mutex again when its cleanup
/// handlers run (it could not be cancelled there at all).
///
/// # Safety
/// As for `lm_cond_wait`.
unsafe fn wait(c: *mut LmCond, m: *mut LmMutex, deadline: Option<futex::AbsoluteTimeout>) -> c_int {
    // SAFETY: caller's contract: the mutex is held; nothing here drops.
    unsafe {
        let lock = mutex(m);
        crate::replace::cond::wait_on(
            cond(c),
            || unlock(lock),
            || {
                lock.lock();
                0
            },
            deadline,
        )
    }
}

/// # Safety
/// As for `lm_cond_wait`; `abstime` points to a readable timespec.
#[no_mangle]
pub unsafe extern "C" fn lm_cond_timedwait(c: *mut LmCond, m: *mut LmMutex, abstime: *const libc::timespec) -> c_int {
    // SAFETY: caller's contract (a readable timespec).
    let Some(deadline) = (unsafe { crate::replace::cond::timeout(libc::CLOCK_REALTIME, abstime) }) else {
        return libc::EINVAL;
    };
    // SAFETY: caller's contract.
    unsafe { wait(c, m, Some(deadline)) }
}

/// # Safety
/// `c` is initialised.
#[no_mangle]
pub unsafe extern "C" fn lm_cond_signal(c: *mut LmCond) -> c_int {
    // SAFETY: caller's contract.
    unsafe { cond(c) }.notify_one();
    0
}

/// # Safety
/// `c` is initialised.
#[no_mangle]
pub unsafe extern "C" fn lm_cond_broadcast(c: *mut LmCond) -> c_int {
    // SAFETY: caller's contract.
    unsafe { cond(c) }.notify_all();
    0
}

/// # Safety
/// `c` is initialised.
#[no_mangle]
pub unsafe extern "C" fn lm_cond_destroy(c: *mut LmCond) -> c_int {
    // SAFETY: caller's contract.
    let condvar = unsafe { cond(c) };
    // Threads a signal or broadcast woke may not have left yet (POSIX
    // allows destroying right after a broadcast): they leave within their
    // next time slice, so the first looks yield to them. One still there
    // after a second is blocked: looked for every 100 us meanwhile (a
    // second of yields took a whole CPU).
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(1);
    for look in 0u32.. {
        if !condvar.has_waiters() {
            break;
        }
        if std::time::Instant::now() > give_up {
            return libc::EBUSY;
        }
        if look < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
    0
}

#[no_mangle]
pub extern "C" fn lm_algorithm_count() -> c_int {
    Algorithm::ALL.len() as c_int
}

#[no_mangle]
pub extern "C" fn lm_algorithm_name(i: c_int) -> *const c_char {
    u32::try_from(i)
        .ok()
        .and_then(Algorithm::from_index)
        .map_or(std::ptr::null(), |a| algorithm_name(a).as_ptr())
}

#[no_mangle]
pub extern "C" fn lm_set_spinning(enabled: c_int) {
    config::set_spinning(enabled != 0);
}
