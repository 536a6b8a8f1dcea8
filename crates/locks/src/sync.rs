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

/// The uncontended steps of a lock whose word is its owner's id, 0 when
/// free, with a waiters bit beside the id (`futex-tid`, and `pi`, whose
/// bit the kernel sets), for callers that have the id at hand: see
/// [`crate::RawAdaptive::try_lock_as`] and
/// [`crate::RawAdaptive::unlock_if_uncontended_as`], which say who needs
/// them.
macro_rules! owner_word_uncontended_steps {
    ($lock:ident) => {
        impl $lock<NoStats> {
            /// [`Self::try_lock`] for a caller that has its thread id at
            /// hand.
            ///
            /// # Safety
            /// `tid` is the calling thread's id, [`crate::current_tid`]'s
            /// value.
            #[inline]
            pub unsafe fn try_lock_as(&self, tid: u32) -> bool {
                self.word.compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed).is_ok()
            }

            /// The uncontended unlock: true if thread `tid` held the lock
            /// and nobody waited; false, with nothing done, otherwise, and
            /// then [`Self::unlock`] releases it.
            ///
            /// # Safety
            /// As [`Self::try_lock_as`].
            #[inline]
            pub unsafe fn unlock_if_uncontended_as(&self, tid: u32) -> bool {
                // Fails on a word with the waiters bit, and on one naming
                // another thread.
                self.word.compare_exchange(tid, 0, Ordering::Release, Ordering::Relaxed).is_ok()
            }
        }
    };
}
pub(crate) use owner_word_uncontended_steps;

#[cfg(not(loom))]
thread_local! {
    /// This thread's kernel id, 0 until first asked for.
    static TID: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The caller's kernel thread id, the value TID-based lock words store.
///
/// Read from glibc's thread descriptor where that is known to work (one
/// check and one load), else from a thread-local cache. The cache costs
/// more wherever it is read: in a shared library a call to
/// `__tls_get_addr` (an uncontended served `adaptive` pair in a C loop,
/// medians of 4 alternated runs: 18.3 ns with the descriptor's id against
/// 20.8 with the cache), and in an executable a call too, since the
/// thread-local's accessor is not inlined across crates (`lockmeter bench
/// sem` / `dir` at one thread against parking_lot in the same process,
/// two alternated runs of each build, medians of 5: sem 0.954/0.953x with
/// the cache, 0.964/0.961x with the descriptor; dir 0.983/0.984x against
/// 1.002/0.994x).
#[cfg(not(loom))]
#[inline]
pub fn current_tid() -> u32 {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    {
        if glibc_descriptor::usable() {
            return glibc_descriptor::tid();
        }
        glibc_descriptor::tid_until_checked()
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
    cached_tid()
}

/// [`current_tid`] where it is one load (glibc's thread descriptor, known
/// to hold the id), else `None`: for a fast path that must make no call
/// (a call makes it save registers on every pass); it takes its slower
/// path, which asks [`current_tid`], instead.
#[cfg(not(loom))]
#[inline(always)]
pub fn current_tid_at_hand() -> Option<u32> {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    {
        glibc_descriptor::usable().then(glibc_descriptor::tid)
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
    None
}

/// The caller's kernel thread id from the thread-local cache.
#[cfg(not(loom))]
#[inline]
fn cached_tid() -> u32 {
    let cached = TID.with(|t| t.get());
    if cached != 0 {
        return cached;
    }
    fetch_tid()
}

#[cfg(not(loom))]
#[cold]
fn fetch_tid() -> u32 {
    register_fork_handler();
    let tid = kernel_tid();
    TID.with(|t| t.set(tid));
    tid
}

/// glibc keeps every thread's kernel id in the thread's descriptor (the
/// `tid` of its `struct pthread`, which the thread pointer addresses), as
/// its own mutexes read it: one load, and never stale, since the kernel
/// writes the field itself at thread creation and in a child of `fork`.
/// The offset is that of x86_64 glibc's layout; the first thread that
/// asks checks it against `gettid` before anyone relies on it, and on a
/// mismatch every thread keeps using the cache.
#[cfg(all(not(loom), target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
mod glibc_descriptor {
    use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

    /// Offset of `tid` from the thread pointer in x86_64 glibc's
    /// `struct pthread`: after the 704-byte `tcbhead_t` and a list head.
    const TID_OFFSET: usize = 0x2d0;

    const UNCHECKED: u8 = 0;
    const USABLE: u8 = 1;
    const UNUSABLE: u8 = 2;
    static STATE: AtomicU8 = AtomicU8::new(UNCHECKED);

    #[inline(always)]
    pub(super) fn usable() -> bool {
        STATE.load(Relaxed) == USABLE
    }

    /// The calling thread's id as its descriptor holds it.
    #[inline(always)]
    pub(super) fn tid() -> u32 {
        let tid: u32;
        // SAFETY: on x86_64 glibc %fs holds the thread pointer, which
        // addresses the calling thread's descriptor, mapped for the
        // thread's whole life; the load has no other effect.
        unsafe {
            core::arch::asm!(
                "mov {tid:e}, dword ptr fs:[{offset}]",
                tid = out(reg) tid,
                offset = const TID_OFFSET,
                options(nostack, readonly, preserves_flags),
            );
        }
        tid
    }

    /// The id while the descriptor is not known to be usable: decides,
    /// once, whether it holds the id the kernel gives, and returns that.
    /// Registers the fork handler first (before any thread relies on the
    /// descriptor, so a child of `fork` always knows it is one: see
    /// [`super::forked`]). Leaves `errno` as it found it: its callers'
    /// uncontended paths promise a pthread replacement that they make no
    /// failing system call, and registering the handler allocates.
    #[cold]
    pub(super) fn tid_until_checked() -> u32 {
        crate::futex::keeping_errno(|| {
            super::register_fork_handler();
            if STATE.load(Relaxed) == UNCHECKED {
                let usable = tid() == super::kernel_tid();
                STATE.store(if usable { USABLE } else { UNUSABLE }, Relaxed);
            }
            if usable() { tid() } else { super::cached_tid() }
        })
    }
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

/// How many forks made this process from the first that used a lock
/// (0 in it): a count a lock keeps beside state that only the threads of
/// one process can take back (`spin`'s hungry waiters) tells a parent's
/// leftover from its own.
#[cfg(not(loom))]
static FORK_EPOCH: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// This process's fork epoch (see [`FORK_EPOCH`]), counted once the fork
/// handler is registered (by [`note_forks`] or any thread id's lookup).
#[cfg(not(loom))]
#[inline]
pub fn fork_epoch() -> u32 {
    FORK_EPOCH.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(loom)]
pub fn fork_epoch() -> u32 {
    0
}

/// Makes sure forks from now on are counted ([`fork_epoch`]).
#[cfg(not(loom))]
pub fn note_forks() {
    register_fork_handler();
}

#[cfg(loom)]
pub fn note_forks() {}

/// Registers, once per process, what a child of `fork` runs: its only
/// thread has a new kernel id but inherits the parent's thread-local cache
/// (a stale id in a lock word would make two threads look like one owner
/// once the parent's id is recycled), and its locks may name parent
/// threads (see [`forked`]).
#[cfg(not(loom))]
fn register_fork_handler() {
    use std::sync::Once;
    static REGISTER: Once = Once::new();
    extern "C" fn before_fork() {
        // Runs in the thread about to fork; the child's copy of this
        // thread's memory keeps it (see `forked_from`). Kept beside the
        // ids of earlier forks: a child that forks again still holds what
        // it held as the first fork made it, under that parent's id.
        let _ = FORKING_AS.try_with(|ids| {
            let mut known = ids.get();
            let me = kernel_tid();
            if !known.contains(&me) {
                known.rotate_right(1);
                known[0] = me;
                ids.set(known);
            }
        });
    }
    extern "C" fn in_child() {
        // Runs in the thread that called fork: the child's only thread.
        let _ = TID.try_with(|t| t.set(0));
        FORKED.store(true, std::sync::atomic::Ordering::Relaxed);
        FORK_EPOCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    REGISTER.call_once(|| {
        // SAFETY: registers plain functions that only touch thread-local
        // cells of the calling thread.
        unsafe { libc::pthread_atfork(Some(before_fork), None, Some(in_child)) };
    });
}

#[cfg(not(loom))]
thread_local! {
    /// The ids this thread had as it forked, latest first (0: none), over
    /// a chain of forks, a few deep.
    static FORKING_AS: std::cell::Cell<[u32; 4]> = const { std::cell::Cell::new([0; 4]) };
}

/// In a child of `fork`, asked by the thread that forked: whether `tid`
/// is an id this thread had in a parent as it forked (the locks it held
/// then still name it), and no thread of this process has it now (an id
/// freed in the parent may be reused here).
#[cfg(not(loom))]
pub fn was_me_before_fork(tid: u32) -> bool {
    forked()
        && tid != 0
        && FORKING_AS.try_with(|ids| ids.get().contains(&tid)).unwrap_or(false)
        && !is_thread_of_this_process(tid)
}


/// Whether kernel thread `tid` belongs to this process. In a child of
/// `fork` a lock may still name a parent thread, which does not exist
/// here. One system call: for the child's rare slow paths only.
#[cfg(not(loom))]
pub fn is_thread_of_this_process(tid: u32) -> bool {
    // `errno` kept: the paths a pthread replacement takes without keeping
    // it (an `mcs` lock's try taking a queue node) reach this in a child.
    crate::futex::keeping_errno(|| {
        // SAFETY: signal 0 only checks that the thread exists in the
        // group; nothing is delivered.
        let found = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid as libc::pid_t, 0) } == 0;
        found || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    })
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
            t.set(NEXT.fetch_add(1, StdOrdering::Relaxed) % ((1 << 22) - 1) + 1);
        }
        t.get()
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// `ask` gives every thread the kernel's id, and a child of `fork` the
    /// child's, not its parent's.
    fn gives_the_kernels_id_everywhere(ask: fn() -> u32) {
        assert_eq!(ask(), kernel_tid());
        let threads: Vec<_> = (0..4).map(|_| std::thread::spawn(move || (ask(), kernel_tid()))).collect();
        for thread in threads {
            let (asked, from_kernel) = thread.join().unwrap();
            assert_eq!(asked, from_kernel);
        }
        let parent = kernel_tid();
        assert!(in_forked_child(|| ask() == kernel_tid() && kernel_tid() != parent));
    }

    #[test]
    fn the_thread_id_is_the_kernels_in_every_thread_and_after_fork() {
        gives_the_kernels_id_everywhere(cached_tid);
        gives_the_kernels_id_everywhere(current_tid);
    }

    /// On x86_64 glibc the id comes from the thread's descriptor: were the
    /// offset wrong for this glibc, the check would refuse it and every
    /// lock would pay the slower cache without a word.
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    #[test]
    fn glibc_descriptors_id_is_used() {
        assert_eq!(current_tid(), kernel_tid());
        assert!(glibc_descriptor::usable());
        assert_eq!(glibc_descriptor::tid(), kernel_tid());
    }

    /// Once the descriptor is checked, the id is at hand in every thread
    /// (a served mutex's uncontended calls take their slow path without
    /// it), and it is the kernel's.
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    #[test]
    fn the_id_is_at_hand_once_checked() {
        let _ = current_tid();
        gives_the_kernels_id_everywhere(|| current_tid_at_hand().unwrap_or(0));
    }

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

/// The CPUs this process may run on (its affinity mask; at least 1), read
/// without allocating: `std::thread::available_parallelism` allocates to
/// read cgroup quotas, and a lock can be taken inside an allocator
/// (jemalloc takes pthread mutexes inside `malloc`), where allocating
/// again recursed.
#[cfg(not(loom))]
pub(crate) fn cpus_allowed() -> usize {
    // SAFETY: all-zero bytes are an empty cpu_set_t.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid set of the size given, filled by the kernel.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return 1;
    }
    // SAFETY: counts the bits of a valid set.
    (unsafe { libc::CPU_COUNT(&set) } as usize).max(1)
}

/// Whether `deadline` has passed. Under loom, time is a model flag that a
/// timer thread of the model sets (see `model_time_up`).
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn deadline_passed(deadline: Option<std::time::Instant>) -> bool {
    deadline.is_some_and(|d| std::time::Instant::now() >= d)
}

#[cfg(loom)]
loom::lazy_static! {
    pub(crate) static ref TIME_UP: loom::sync::atomic::AtomicBool = loom::sync::atomic::AtomicBool::new(false);
}

#[cfg(loom)]
pub(crate) fn deadline_passed(deadline: Option<std::time::Instant>) -> bool {
    deadline.is_some() && TIME_UP.load(Ordering::SeqCst)
}

/// Under loom: every deadline passes now; timed futex sleepers time out.
#[cfg(loom)]
pub fn model_time_up() {
    TIME_UP.store(true, Ordering::SeqCst);
    crate::futex::fire_timeouts();
}
