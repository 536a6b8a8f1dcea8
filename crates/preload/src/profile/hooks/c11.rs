//! C11 `<threads.h>` mutexes and condition variables. glibc's `mtx_*` and
//! `cnd_*` are its pthread functions on the same objects (an `mtx_t` is a
//! `pthread_mutex_t`, a `cnd_t` a `pthread_cond_t`), called inside libc
//! where no interposed symbol sees them: a C11 program's locks were
//! neither profiled (its report said no lock was used) nor served. Each is
//! exported here as an entry point with the program's call site, going to
//! the implementation of its pthread twin, whose error number is mapped to
//! a `thrd_*` result as glibc maps it.

use super::{cond_timedwait, cond_wait, mutex_init, mutex_lock, mutex_timedlock, mutex_trylock, served_mutex_unlock};
use super::{pthread_cond_broadcast, pthread_cond_destroy, pthread_cond_init, pthread_cond_signal, pthread_mutex_destroy};
use super::{Cond, Mutex, Time};
use libc::c_int;

// glibc's <threads.h>.
const THRD_SUCCESS: c_int = 0;
const THRD_BUSY: c_int = 1;
const THRD_ERROR: c_int = 2;
const THRD_NOMEM: c_int = 3;
const THRD_TIMEDOUT: c_int = 4;
const MTX_RECURSIVE: c_int = 1;
const MTX_TIMED: c_int = 2;

/// A pthread function's result as its C11 twin returns it (glibc's
/// `thrd_err_map`).
fn thrd_result(error: c_int) -> c_int {
    match error {
        0 => THRD_SUCCESS,
        libc::ENOMEM => THRD_NOMEM,
        libc::ETIMEDOUT => THRD_TIMEDOUT,
        libc::EBUSY => THRD_BUSY,
        _ => THRD_ERROR,
    }
}

with_call_site!(mtx_lock, "rsi" => c11_mtx_lock);
with_call_site!(mtx_trylock, "rsi" => c11_mtx_trylock);
with_call_site!(mtx_timedlock, "rdx" => c11_mtx_timedlock);
with_call_site!(mtx_init, "rdx" => c11_mtx_init);
with_call_site!(cnd_wait, "rdx" => c11_cnd_wait);
with_call_site!(cnd_timedwait, "rcx" => c11_cnd_timedwait);

unsafe extern "C" fn c11_mtx_lock(m: Mutex, pc: usize) -> c_int {
    // SAFETY (every call in this file): the program's own arguments, an
    // `mtx_t` being a `pthread_mutex_t` and a `cnd_t` a `pthread_cond_t`.
    thrd_result(unsafe { mutex_lock(m, pc) })
}

unsafe extern "C" fn c11_mtx_trylock(m: Mutex, pc: usize) -> c_int {
    thrd_result(unsafe { mutex_trylock(m, pc) })
}

unsafe extern "C" fn c11_mtx_timedlock(m: Mutex, at: Time, pc: usize) -> c_int {
    thrd_result(unsafe { mutex_timedlock(m, at, pc) })
}

/// As glibc's: a recursive mutex (plain or timed) is a recursive pthread
/// mutex, any other type a normal one.
unsafe extern "C" fn c11_mtx_init(m: Mutex, kind: c_int, pc: usize) -> c_int {
    let recursive = kind == MTX_RECURSIVE || kind == MTX_RECURSIVE | MTX_TIMED;
    let pthread_kind = if recursive { libc::PTHREAD_MUTEX_RECURSIVE } else { libc::PTHREAD_MUTEX_NORMAL };
    let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
    // SAFETY: an attribute object of our own, initialised before use and
    // destroyed after.
    unsafe {
        libc::pthread_mutexattr_init(attr.as_mut_ptr());
        libc::pthread_mutexattr_settype(attr.as_mut_ptr(), pthread_kind);
        let result = mutex_init(m, attr.as_ptr(), pc);
        libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
        thrd_result(result)
    }
}

/// Exported: `mtx_unlock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mtx_unlock(m: Mutex) -> c_int {
    thrd_result(unsafe { served_mutex_unlock(m) })
}

/// Exported: `mtx_destroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mtx_destroy(m: Mutex) {
    unsafe { pthread_mutex_destroy(m) };
}

/// Exported: `cnd_init`, a condvar of the default attributes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cnd_init(c: Cond) -> c_int {
    thrd_result(unsafe { pthread_cond_init(c, std::ptr::null()) })
}

/// Exported: `cnd_signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cnd_signal(c: Cond) -> c_int {
    thrd_result(unsafe { pthread_cond_signal(c) })
}

/// Exported: `cnd_broadcast`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cnd_broadcast(c: Cond) -> c_int {
    thrd_result(unsafe { pthread_cond_broadcast(c) })
}

/// Exported: `cnd_destroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cnd_destroy(c: Cond) {
    unsafe { pthread_cond_destroy(c) };
}

// A wait is a cancellation point, as the pthread wait it is.
unsafe extern "C-unwind" fn c11_cnd_wait(c: Cond, m: Mutex, pc: usize) -> c_int {
    thrd_result(unsafe { cond_wait(c, m, pc) })
}

unsafe extern "C-unwind" fn c11_cnd_timedwait(c: Cond, m: Mutex, at: Time, pc: usize) -> c_int {
    thrd_result(unsafe { cond_timedwait(c, m, at, pc) })
}
