//! The concurrency facade every algorithm compiles against.
//!
//! Normally this is `std` plus the real futex system call; under `cfg(loom)`
//! it is `loom`'s model atomics plus a modelled futex, so the model tests in
//! `tests/loom.rs` explore every interleaving of the very same algorithm code
//! (the way tokio and crossbeam structure their loom tests).

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

/// Orders this thread's SeqCst store before its next SeqCst load of another
/// location: the two halves of a Dekker handshake (each side writes its
/// own flag, then reads the other's; at least one sees the other's write).
/// The C++ memory model guarantees that for SeqCst accesses alone, and on
/// x86 it costs nothing more (the store is a locked instruction). loom
/// models SeqCst accesses as acquire/release only, so there a SeqCst fence
/// stands in for the guarantee.
#[inline(always)]
pub(crate) fn store_load_barrier() {
    #[cfg(loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// A hint that this thread is busy-waiting. Under loom it yields to the
/// model scheduler, which is what lets a spin loop terminate there.
#[inline(always)]
pub(crate) fn spin_hint() {
    #[cfg(not(loom))]
    std::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// How many iterations a busy-wait may run before it must re-check its time
/// budget; under loom, every iteration is a model branch, so loops are cut
/// short to keep the state space small.
#[cfg(not(loom))]
pub(crate) const MODEL_SPIN_LIMIT: Option<u32> = None;
#[cfg(loom)]
pub(crate) const MODEL_SPIN_LIMIT: Option<u32> = Some(2);

pub(crate) use crate::futex::{
    wait as futex_wait, wait_bits as futex_wait_bits, wake as futex_wake, wake_bits as futex_wake_bits, WaitOutcome,
};

/// Declares a constructor once: `const` normally (lock_api needs a constant
/// `INIT`), plain under loom, whose atomics cannot be built in a constant.
macro_rules! const_unless_loom {
    ($(#[$attr:meta])* $vis:vis fn $name:ident() -> $ret:ty $body:block) => {
        #[cfg(not(loom))]
        $(#[$attr])*
        $vis const fn $name() -> $ret $body

        #[cfg(loom)]
        $(#[$attr])*
        $vis fn $name() -> $ret $body
    };
}
pub(crate) use const_unless_loom;

#[cfg(not(loom))]
thread_local! {
    /// This thread's kernel id, 0 until first asked for.
    static TID: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The caller's kernel thread id, the value TID-based lock words store.
#[cfg(not(loom))]
#[inline]
pub fn current_tid() -> u32 {
    let cached = TID.with(|t| t.get());
    if cached != 0 {
        return cached;
    }
    fetch_tid()
}

#[cfg(not(loom))]
#[cold]
fn fetch_tid() -> u32 {
    forget_tid_after_fork();
    let tid = kernel_tid();
    TID.with(|t| t.set(tid));
    tid
}

/// The caller's kernel thread id, asked of the kernel (one system call),
/// past the cache [`current_tid`] reads: for fork handlers, which may run
/// before the cache is cleared in a child.
#[cfg(not(loom))]
pub fn kernel_tid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Set in a child of `fork`: a lock taken before the fork still holds the
/// parent thread's id, which the child's thread does not have.
#[cfg(not(loom))]
static FORKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process is a child of `fork` (of a process that had used a
/// lock): a releasing thread may then not be the id its lock word holds.
#[cfg(not(loom))]
#[inline(always)]
pub fn forked() -> bool {
    FORKED.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(loom)]
pub fn forked() -> bool {
    false
}

/// After `fork` the child's only thread has a new kernel id but inherits the
/// parent's thread-local cache; a stale id in a lock word would make two
/// threads look like one owner once the parent's id is recycled.
#[cfg(not(loom))]
fn forget_tid_after_fork() {
    use std::sync::Once;
    static REGISTER: Once = Once::new();
    extern "C" fn in_child() {
        // Runs in the thread that called fork: the child's only thread.
        let _ = TID.try_with(|t| t.set(0));
        FORKED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    REGISTER.call_once(|| {
        // SAFETY: registers a plain function that only touches a
        // thread-local cell of the calling thread.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
}

/// Whether kernel thread `tid` belongs to this process. In a child of
/// `fork` a lock may still name a parent thread, which does not exist
/// here. One system call: for the child's rare slow paths only.
#[cfg(not(loom))]
pub fn is_thread_of_this_process(tid: u32) -> bool {
    // SAFETY: signal 0 only checks that the thread exists in the group;
    // nothing is delivered.
    let found = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid as libc::pid_t, 0) } == 0;
    found || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(loom)]
pub fn is_thread_of_this_process(_tid: u32) -> bool {
    true
}

/// For tests: runs `check` in a child of `fork` and returns its answer.
/// The child only runs `check` (which must touch nothing but memory: the
/// other threads of a test process are gone there) and exits.
#[cfg(all(test, not(loom)))]
pub(crate) fn in_forked_child(check: impl FnOnce() -> bool) -> bool {
    // SAFETY: the child runs `check`, then `_exit`s without unwinding or
    // running the parent's destructors.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let passed = check();
        unsafe { libc::_exit(if passed { 0 } else { 1 }) };
    }
    assert!(pid > 0, "fork failed");
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

/// Under loom every model thread runs on one OS thread, so ids come from a
/// per-model-thread counter instead of `gettid`.
#[cfg(loom)]
pub fn current_tid() -> u32 {
    use std::sync::atomic::{AtomicU32 as StdAtomicU32, Ordering as StdOrdering};
    static NEXT: StdAtomicU32 = StdAtomicU32::new(1);
    loom::thread_local! {
        static TID: std::cell::Cell<u32> = std::cell::Cell::new(0);
    }
    TID.with(|t| {
        if t.get() == 0 {
            t.set(NEXT.fetch_add(1, StdOrdering::Relaxed) % ((1 << 29) - 1) + 1);
        }
        t.get()
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The calling thread is one of this process's threads; a thread that
    /// has exited is not, once the kernel has reaped it (a joined thread's
    /// task may outlive the join by a moment).
    #[test]
    fn a_thread_of_this_process_is_told_from_one_that_exited() {
        assert!(is_thread_of_this_process(current_tid()));
        let gone = std::thread::spawn(current_tid).join().unwrap();
        let start = std::time::Instant::now();
        while is_thread_of_this_process(gone) {
            assert!(start.elapsed() < std::time::Duration::from_secs(2), "thread {gone} exited but still counts");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
