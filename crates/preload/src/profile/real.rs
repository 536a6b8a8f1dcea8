//! glibc's own lock functions, resolved on first use (the mutex's lock,
//! trylock and unlock by the library's constructor when the process is
//! neither served nor profiled: its mutex calls then jump to them) with
//! `dlsym(RTLD_NEXT, ...)` (or `dlvsym` where glibc keeps an old version
//! beside the current one), so another interposer loaded after lockmeter
//! still sees the calls (but for the condvar's: `dlvsym` passes over a
//! definition without glibc's version).
//!
//! Resolution is lazy because other libraries' constructors lock before
//! ours runs. If resolving re-enters a hook on the same thread (an
//! allocator that locks a pthread mutex inside `dlsym`'s `malloc`), the
//! inner call goes straight to glibc's `__pthread_*` alias (bound at load time), which
//! needs no resolution.

use libc::{c_char, c_int, c_void};
use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, Ordering};

/// One real function.
pub struct Real {
    name: &'static [u8],
    version: Option<&'static [u8]>,
    pointer: AtomicPtr<c_void>,
    fallback: *mut c_void,
}

// SAFETY: `fallback` is the address of a function in glibc, never written.
unsafe impl Sync for Real {}

thread_local! {
    static RESOLVING: Cell<bool> = const { Cell::new(false) };
}

impl Real {
    /// `name` and `version` NUL-terminated; `fallback` null or a function
    /// with the same signature that needs no resolution.
    pub const fn new(name: &'static [u8], version: Option<&'static [u8]>, fallback: *mut c_void) -> Real {
        Real { name, version, pointer: AtomicPtr::new(std::ptr::null_mut()), fallback }
    }

    /// The function's address.
    #[inline(always)]
    pub fn get(&self) -> *mut c_void {
        let pointer = self.pointer.load(Ordering::Acquire);
        if !pointer.is_null() {
            return pointer;
        }
        self.resolve()
    }

    #[cold]
    fn resolve(&self) -> *mut c_void {
        if RESOLVING.with(Cell::get) && !self.fallback.is_null() {
            return self.fallback;
        }
        RESOLVING.with(|r| r.set(true));
        // SAFETY: both names are NUL-terminated static strings.
        let mut found = unsafe {
            match self.version {
                Some(version) => {
                    libc::dlvsym(libc::RTLD_NEXT, self.name.as_ptr().cast::<c_char>(), version.as_ptr().cast::<c_char>())
                }
                None => libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr().cast::<c_char>()),
            }
        };
        if found.is_null() && self.version.is_some() {
            // SAFETY: as above.
            found = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr().cast::<c_char>()) };
        }
        RESOLVING.with(|r| r.set(false));
        if found.is_null() {
            found = self.fallback;
        }
        if found.is_null() {
            let name = String::from_utf8_lossy(&self.name[..self.name.len() - 1]).into_owned();
            crate::profile::output::fatal(&format!("cannot find glibc's {name}"));
        }
        self.pointer.store(found, Ordering::Release);
        found
    }
}

// glibc exports its internal aliases only under a non-default version,
// which a plain reference cannot bind to: name the version explicitly.
macro_rules! glibc_aliases {
    ($($local:ident = $symbol:literal: fn($($ty:ty),*);)*) => {
        $(core::arch::global_asm!(concat!(".symver ", stringify!($local), ", ", $symbol, "@GLIBC_2.2.5"));)*
        extern "C" {
            $(fn $local($(_: $ty),*) -> c_int;)*
        }
    };
}

glibc_aliases! {
    glibc_mutex_lock = "__pthread_mutex_lock": fn(*mut libc::pthread_mutex_t);
    glibc_mutex_trylock = "__pthread_mutex_trylock": fn(*mut libc::pthread_mutex_t);
    glibc_mutex_unlock = "__pthread_mutex_unlock": fn(*mut libc::pthread_mutex_t);
    glibc_mutex_init = "__pthread_mutex_init": fn(*mut libc::pthread_mutex_t, *const libc::pthread_mutexattr_t);
    glibc_mutex_destroy = "__pthread_mutex_destroy": fn(*mut libc::pthread_mutex_t);
    glibc_rwlock_rdlock = "__pthread_rwlock_rdlock": fn(*mut libc::pthread_rwlock_t);
    glibc_rwlock_wrlock = "__pthread_rwlock_wrlock": fn(*mut libc::pthread_rwlock_t);
    glibc_rwlock_tryrdlock = "__pthread_rwlock_tryrdlock": fn(*mut libc::pthread_rwlock_t);
    glibc_rwlock_trywrlock = "__pthread_rwlock_trywrlock": fn(*mut libc::pthread_rwlock_t);
    glibc_rwlock_unlock = "__pthread_rwlock_unlock": fn(*mut libc::pthread_rwlock_t);
}

macro_rules! reals {
    ($($id:ident = $name:literal $(@ $version:literal)? $(=> $fallback:ident)?;)*) => {
        $(
            pub static $id: Real = Real::new(
                concat!($name, "\0").as_bytes(),
                reals!(@version $($version)?),
                reals!(@fallback $($fallback)?),
            );
        )*
    };
    (@version) => { None };
    (@version $v:literal) => { Some(concat!($v, "\0").as_bytes()) };
    (@fallback) => { std::ptr::null_mut() };
    (@fallback $f:ident) => { $f as *mut c_void };
}

reals! {
    MUTEX_LOCK = "pthread_mutex_lock" => glibc_mutex_lock;
    MUTEX_TRYLOCK = "pthread_mutex_trylock" => glibc_mutex_trylock;
    MUTEX_TIMEDLOCK = "pthread_mutex_timedlock";
    MUTEX_CLOCKLOCK = "pthread_mutex_clocklock";
    MUTEX_UNLOCK = "pthread_mutex_unlock" => glibc_mutex_unlock;
    MUTEX_INIT = "pthread_mutex_init" => glibc_mutex_init;
    MUTEX_DESTROY = "pthread_mutex_destroy" => glibc_mutex_destroy;
    RWLOCK_RDLOCK = "pthread_rwlock_rdlock" => glibc_rwlock_rdlock;
    RWLOCK_WRLOCK = "pthread_rwlock_wrlock" => glibc_rwlock_wrlock;
    RWLOCK_TRYRDLOCK = "pthread_rwlock_tryrdlock" => glibc_rwlock_tryrdlock;
    RWLOCK_TRYWRLOCK = "pthread_rwlock_trywrlock" => glibc_rwlock_trywrlock;
    RWLOCK_TIMEDRDLOCK = "pthread_rwlock_timedrdlock";
    RWLOCK_TIMEDWRLOCK = "pthread_rwlock_timedwrlock";
    RWLOCK_CLOCKRDLOCK = "pthread_rwlock_clockrdlock";
    RWLOCK_CLOCKWRLOCK = "pthread_rwlock_clockwrlock";
    RWLOCK_UNLOCK = "pthread_rwlock_unlock" => glibc_rwlock_unlock;
    RWLOCK_INIT = "pthread_rwlock_init";
    RWLOCK_DESTROY = "pthread_rwlock_destroy";
    SPIN_LOCK = "pthread_spin_lock";
    SPIN_TRYLOCK = "pthread_spin_trylock";
    SPIN_UNLOCK = "pthread_spin_unlock";
    SPIN_INIT = "pthread_spin_init";
    SPIN_DESTROY = "pthread_spin_destroy";
    COND_WAIT = "pthread_cond_wait" @ "GLIBC_2.3.2";
    COND_TIMEDWAIT = "pthread_cond_timedwait" @ "GLIBC_2.3.2";
    COND_CLOCKWAIT = "pthread_cond_clockwait";
    COND_DESTROY = "pthread_cond_destroy" @ "GLIBC_2.3.2";
    COND_INIT = "pthread_cond_init" @ "GLIBC_2.3.2";
    COND_SIGNAL = "pthread_cond_signal" @ "GLIBC_2.3.2";
    COND_BROADCAST = "pthread_cond_broadcast" @ "GLIBC_2.3.2";
    SEM_WAIT = "sem_wait";
    SEM_TRYWAIT = "sem_trywait";
    SEM_TIMEDWAIT = "sem_timedwait";
    SEM_CLOCKWAIT = "sem_clockwait";
    SEM_INIT = "sem_init";
    SEM_DESTROY = "sem_destroy";
    EXIT_NOW = "_exit";
    DLCLOSE = "dlclose";
    EXIT_NOW_C99 = "_Exit";
}

/// Calls a real function through its resolved address with the given
/// signature.
macro_rules! call_real {
    ($real:expr, fn($($ty:ty),*) -> $ret:ty, $($arg:expr),*) => {{
        let f: unsafe extern "C" fn($($ty),*) -> $ret = std::mem::transmute($real.get());
        f($($arg),*)
    }};
}
pub(crate) use call_real;
