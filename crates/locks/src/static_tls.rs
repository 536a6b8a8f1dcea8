//! Per-thread values in the static TLS block, for the hot paths of a
//! shared library.
//!
//! In a shared library (`liblockmeter.so`, preloaded into a program or
//! linked for the C ABI) a `thread_local!` is found by calling
//! `__tls_get_addr`: stable Rust emits only the dynamic TLS model there,
//! since the library might be loaded late. That call is a few ns, paid on
//! every lookup: a served `mcs` mutex made two a lock+unlock pair, the
//! profiler three. A value declared with
//! [`static_thread_local!`](crate::static_thread_local) sits in the static
//! TLS block instead (the initial-exec model): one load of the thread
//! pointer plus an offset the loader fixes once. Linked into a program,
//! the linker turns it into a constant offset, as a `thread_local!` there.
//!
//! The price, and the limits:
//! - a library using the model is flagged STATIC_TLS, and when `dlopen`
//!   loads it after start-up its whole TLS segment (272 bytes for this
//!   build of `liblockmeter.so`) must fit in the spare room glibc keeps in
//!   the static block (about 1.7 KB on glibc 2.36), which other libraries
//!   loaded the same way share: past it, `dlopen` fails ("cannot allocate
//!   memory in static TLS block"), for this library or for one loaded
//!   after it. `GLIBC_TUNABLES=glibc.rtld.optional_static_tls=BYTES`
//!   sets the room. Preloaded or linked at build time, the library's
//!   block is laid out at start-up and takes none of it;
//! - the values start as all-zero bytes in every thread and have no
//!   destructor ([`ZeroInit`]), so nothing runs at a thread's start or
//!   end, and a value is there for the thread's whole life, its
//!   destructors' time included;
//! - each value is a hidden symbol named after its crate, version, line
//!   and column, and is private to the module declaring it (a symbol of a
//!   Rust dylib's could not be reached from another);
//! - x86_64 Linux with glibc only (musl's loader refuses to `dlopen` a
//!   library using the model); elsewhere the macro declares a const
//!   `thread_local!`, whose lack of destructor makes it as lasting.

/// Types whose all-zero bytes are a valid value, with no destructor: what
/// a new thread's static TLS block holds before anything runs.
///
/// # Safety
/// All-zero bytes must be a valid value of the type, and dropping it must
/// do nothing.
pub unsafe trait ZeroInit {}

// SAFETY: zero is a valid integer, `false`, and a null pointer, and none
// of them drops anything.
unsafe impl ZeroInit for bool {}
// SAFETY: as above.
unsafe impl ZeroInit for u32 {}
// SAFETY: as above.
unsafe impl ZeroInit for u64 {}
// SAFETY: as above.
unsafe impl ZeroInit for usize {}
// SAFETY: as above.
unsafe impl<T> ZeroInit for *mut T {}
// SAFETY: as above.
unsafe impl<T> ZeroInit for *const T {}
// SAFETY: a cell is its value's bytes, and drops only its value.
unsafe impl<T: ZeroInit> ZeroInit for std::cell::Cell<T> {}

/// The all-zero value of a [`ZeroInit`] type.
#[doc(hidden)]
pub const fn zeroed<T: ZeroInit>() -> T {
    // SAFETY: `ZeroInit`'s contract.
    unsafe { std::mem::zeroed() }
}

/// Declares a per-thread value in the static TLS block, starting as
/// all-zero bytes ([`static_tls`](crate::static_tls) says when that
/// pays): `static NAME: Type;` makes `NAME`, whose `with(|value| ...)`
/// lends the calling thread's value. The type must implement
/// [`ZeroInit`](crate::static_tls::ZeroInit). The value is private to
/// the declaring module.
///
/// The declaration is an item (of a module, not of a function body):
///
/// ```
/// use std::cell::Cell;
///
/// lockmeter_locks::static_thread_local! {
///     /// Operations of this thread.
///     static OPERATIONS: Cell<u64>;
/// }
///
/// fn main() {
///     OPERATIONS.with(|n| n.set(n.get() + 1));
///     assert_eq!(OPERATIONS.with(Cell::get), 1);
///     assert_eq!(std::thread::spawn(|| OPERATIONS.with(Cell::get)).join().unwrap(), 0);
/// }
/// ```
#[macro_export]
macro_rules! static_thread_local {
    ($(#[$attr:meta])* static $name:ident: $ty:ty;) => {
        $crate::static_thread_local!(@declare $(#[$attr])* $name, $ty, concat!(
            "lockmeter_tls_", env!("CARGO_CRATE_NAME"), "_", env!("CARGO_PKG_VERSION"), "_",
            stringify!($name), "_", line!(), "_", column!()
        ));
    };
    (@declare $(#[$attr:meta])* $name:ident, $ty:ty, $symbol:expr) => {
        $(#[$attr])*
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Clone, Copy)]
        struct $name;

        // Hidden: the library or program linking it has its own.
        #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
        ::core::arch::global_asm!(
            ".pushsection .tbss,\"awT\",@nobits",
            ".balign {align}",
            concat!(".globl ", $symbol),
            concat!(".hidden ", $symbol),
            concat!(".type ", $symbol, ", @object"),
            concat!(".size ", $symbol, ", {size}"),
            concat!($symbol, ":"),
            ".zero {size}",
            ".popsection",
            align = const ::core::mem::align_of::<$ty>(),
            size = const ::core::mem::size_of::<$ty>(),
        );

        #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
        const _: () = {
            impl $name {
                /// Lends the calling thread's value to `use_value`.
                #[inline(always)]
                fn with<R>(self, use_value: impl FnOnce(&$ty) -> R) -> R {
                    let address: *const $ty;
                    // SAFETY: on x86_64 Linux %fs:0 holds the thread
                    // pointer, and the GOT entry the loader fills holds
                    // the value's offset from it: the calling thread's
                    // copy, aligned and sized for the type. (Not `pure`:
                    // a function may go on in another thread, an async
                    // one across an await, where a merged lookup would
                    // name the first thread's copy.)
                    unsafe {
                        ::core::arch::asm!(
                            "mov {address}, qword ptr fs:[0]",
                            concat!("add {address}, qword ptr [rip + ", $symbol, "@GOTTPOFF]"),
                            address = out(reg) address,
                            options(nostack, readonly),
                        );
                    }
                    // SAFETY: a new thread's block is zeroed, a valid
                    // value (`ZeroInit`), and kept for the thread's life;
                    // the borrow ends with the call, inside this thread.
                    use_value(unsafe { &*address })
                }
            }
        };

        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
        const _: () = {
            ::std::thread_local! {
                static VALUE: $ty = const { $crate::static_tls::zeroed::<$ty>() };
            }

            impl $name {
                /// Lends the calling thread's value to `use_value`.
                #[inline(always)]
                fn with<R>(self, use_value: impl FnOnce(&$ty) -> R) -> R {
                    // Never destroyed (no destructor), so never refused.
                    VALUE.with(use_value)
                }
            }
        };

        // The type may start as zero bytes (`zeroed` asks `ZeroInit`).
        const _: fn() -> $ty = $crate::static_tls::zeroed::<$ty>;
    };
}
