//! C11 `<threads.h>` mutexes and condition variables. glibc's `mtx_*` and
//! `cnd_*` are its pthread functions on the same objects (an `mtx_t` is a
//! `pthread_mutex_t`, a `cnd_t` a `pthread_cond_t`), called inside libc
//! where no interposed symbol sees them: a C11 program's locks were
//! neither profiled (its report said no lock was used) nor served. Each is
//! exported here as an entry point with the program's call site, going to
//! the implementation of its pthread twin, whose error number is mapped to
//! a `thrd_*` result as glibc maps it.

use super::{cond_timedwait, cond_wait, mutex_init, mutex_lock, mutex_timedlock, mutex_trylock, mutex_unlock_by_path};
use super::{cond_broadcast, cond_signal, pthread_cond_destroy, pthread_cond_init, pthread_mutex_destroy};
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

/// `$export`, an entry point with the program's call site in `$register`,
/// whose target `$target` is its pthread twin `$twin` (`$abi`: a wait
/// that is a cancellation point unwinds).
macro_rules! twin_with_call_site {
    ($abi:literal $export:ident, $register:literal => $target:ident($($arg:ident: $type:ty),*) = $twin:ident) => {
        with_call_site!($export, $register => $target);

        unsafe extern $abi fn $target($($arg: $type,)* pc: usize) -> c_int {
            // SAFETY: the program's own arguments, an `mtx_t` being a
            // `pthread_mutex_t` and a `cnd_t` a `pthread_cond_t`.
            thrd_result(unsafe { $twin($($arg,)* pc) })
        }
    };
}

twin_with_call_site!("C" mtx_lock, "rsi" => c11_mtx_lock(m: Mutex) = mutex_lock);
twin_with_call_site!("C" mtx_trylock, "rsi" => c11_mtx_trylock(m: Mutex) = mutex_trylock);
twin_with_call_site!("C" mtx_timedlock, "rdx" => c11_mtx_timedlock(m: Mutex, at: Time) = mutex_timedlock);
twin_with_call_site!("C-unwind" cnd_wait, "rdx" => c11_cnd_wait(c: Cond, m: Mutex) = cond_wait);
twin_with_call_site!("C-unwind" cnd_timedwait, "rcx" => c11_cnd_timedwait(c: Cond, m: Mutex, at: Time) = cond_timedwait);
with_call_site!(mtx_init, "rdx" => c11_mtx_init);

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

/// Exports `$export`, its pthread twin's call (`$call`) with the result
/// as a `thrd_*`.
macro_rules! twin {
    ($export:ident($($arg:ident: $type:ty),*) = $call:expr) => {
        #[doc = concat!("Exported: `", stringify!($export), "`.")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $export($($arg: $type),*) -> c_int {
            // SAFETY: as the twins' above.
            thrd_result(unsafe { $call })
        }
    };
}

twin!(mtx_unlock(m: Mutex) = mutex_unlock_by_path(m));
// A condvar of the default attributes.
twin!(cnd_init(c: Cond) = pthread_cond_init(c, std::ptr::null()));
twin!(cnd_signal(c: Cond) = cond_signal(c));
twin!(cnd_broadcast(c: Cond) = cond_broadcast(c));

/// Exported: `mtx_destroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mtx_destroy(m: Mutex) {
    // SAFETY: as the twins' above.
    unsafe { pthread_mutex_destroy(m) };
}

/// Exported: `cnd_destroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cnd_destroy(c: Cond) {
    // SAFETY: as the twins' above.
    unsafe { pthread_cond_destroy(c) };
}
