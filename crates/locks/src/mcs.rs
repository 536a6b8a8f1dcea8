//! `mcs`: the Mellor-Crummey-Scott queue lock, with waiters that spin
//! briefly on their own queue node and then park on it.
//!
//! Each waiter appends a node to the queue (one swap on `tail`) and watches
//! only its own node, so a crowd of waiters never touches the lock's cache
//! line; the holder passes the lock to its successor by writing to the
//! successor's node. Strict FIFO.
//!
//! Queue nodes live with the thread, not the lock (a thread-local free
//! list), so the lock is two pointers: `tail` (the last waiter, null when
//! free) and `holder` (the holder's node, read back at unlock).
//!
//! Like every FIFO lock, it hands the lock to the next waiter even if that
//! waiter is not running; the brief spin keeps the next waiter awake for
//! short critical sections, the park keeps oversubscribed waiters off the
//! CPU. Pick it for fairness with many waiters on a short critical section.
//!
//! A timed waiter that runs out of time cannot unlink its node (its
//! neighbours may be reading it): it marks the node *abandoned* instead,
//! in the same compare-exchange race that a grant would win, and leaves it
//! in the queue. The unlocker whose grant meets an abandoned node passes
//! through it, as its holder would (it takes the lock on its behalf and
//! releases it at once), and gives the node back to the pool (Scott and
//! Scherer's abortable queue locks, reduced to abandonment). Polling
//! `try_lock` instead, which succeeds only with the queue empty, timed out
//! under steady contention however often the lock changed hands.

use crate::clock::{self, SpinBudget};
use crate::config;
use crate::record::{self, AcquireKind, NoStats, Recorder};
use crate::sync::{futex_wait, futex_wake, spin_hint, AtomicPtr, AtomicU32, Ordering};
use std::ptr;
use std::time::Instant;

/// Spin this long on our node before parking.
const PARK_AFTER_NS: u64 = 20_000;

const WAITING: u32 = 0;
const PARKED: u32 = 1;
const GRANTED: u32 = 2;
/// Left by a timed waiter whose deadline passed: the queue owns the node.
const ABANDONED: u32 = 3;

/// A queue node; one per thread per lock it holds or waits for.
#[repr(align(64))]
struct Node {
    next: AtomicPtr<Node>,
    state: AtomicU32,
    /// Next node in the owning thread's free list (only while free).
    next_free: *mut Node,
}

/// The raw `mcs` lock.
#[repr(C)]
pub struct RawMcs<R: Recorder = NoStats> {
    tail: AtomicPtr<Node>,
    holder: AtomicPtr<Node>,
    recorder: R,
}

// SAFETY: the raw pointers are only dereferenced under the MCS protocol:
// a node is reachable through the lock only while its thread waits or
// holds, or, abandoned by a timed waiter, until the unlock that reaches
// it passes through it. (Nodes go back to a pool and are never freed, but
// under loom, where they are, so that a model catches a node used after
// it was given back.)
unsafe impl<R: Recorder> Send for RawMcs<R> {}
// SAFETY: as above.
unsafe impl<R: Recorder> Sync for RawMcs<R> {}

impl<R: Recorder> RawMcs<R> {
    crate::sync::const_unless_loom! {
        /// An unlocked lock.
        pub fn new() -> Self {
            RawMcs { tail: AtomicPtr::new(ptr::null_mut()), holder: AtomicPtr::new(ptr::null_mut()), recorder: R::INIT }
        }
    }

    /// The statistics recorder.
    pub fn recorder(&self) -> &R {
        &self.recorder
    }

    /// Joins the queue and waits for the lock.
    #[inline]
    pub fn lock(&self) {
        if let Some((node, predecessor)) = self.join_queue() {
            self.wait_in_queue(node, predecessor, None);
        }
    }

    /// Joins the queue and waits for the lock until `deadline`; false if
    /// it passed first (the node stays in the queue, abandoned, for the
    /// unlocker that reaches it to pass through and free).
    pub fn lock_until(&self, deadline: Instant) -> bool {
        match self.join_queue() {
            Some((node, predecessor)) => self.wait_in_queue(node, predecessor, Some(deadline)),
            None => true,
        }
    }

    /// Appends a node to the queue: `None` when the queue was empty and
    /// the lock is ours, else the node and its predecessor.
    #[inline(always)]
    fn join_queue(&self) -> Option<(*mut Node, *mut Node)> {
        let node = node_pool::take();
        let predecessor = self.tail.swap(node, Ordering::AcqRel);
        if predecessor.is_null() {
            self.holder.store(node, Ordering::Relaxed);
            self.recorder.acquired(AcquireKind::NoWait, 0);
            return None;
        }
        Some((node, predecessor))
    }

    /// Waits for the grant, spinning briefly on our own node, then parked;
    /// with a `deadline`, gives up when it passes: false.
    #[cold]
    fn wait_in_queue(&self, node: *mut Node, predecessor: *mut Node, deadline: Option<Instant>) -> bool {
        let start = record::wait_start::<R>();
        // SAFETY: the predecessor's node stays alive until it has passed
        // the lock on, which requires reading the `next` we store here.
        unsafe { (*predecessor).next.store(node, Ordering::Release) };
        // SAFETY: `node` is ours until we hand it back at unlock, or
        // abandon it.
        let state = unsafe { &(*node).state };
        let mut budget = SpinBudget::new(clock::ns_to_cycles(PARK_AFTER_NS));
        let mut slept = false;
        loop {
            let seen = state.load(Ordering::Acquire);
            if seen == GRANTED {
                break;
            }
            if crate::sync::deadline_passed(deadline) {
                // Abandoned, unless the grant came first: then the lock is
                // ours after all.
                if state.compare_exchange(seen, ABANDONED, Ordering::Acquire, Ordering::Acquire).is_ok() {
                    self.recorder.timed_out(record::waited::<R>(start));
                    return false;
                }
                continue;
            }
            if seen == PARKED {
                futex_wait(state, PARKED, deadline);
            } else if !config::spinning_enabled() || budget.exhausted() {
                // Park, unless the grant arrived meanwhile.
                if state.compare_exchange(WAITING, PARKED, Ordering::Acquire, Ordering::Acquire).is_ok() {
                    slept = true;
                }
            } else {
                spin_hint();
            }
        }
        self.holder.store(node, Ordering::Relaxed);
        let kind = if slept { AcquireKind::Sleep } else { AcquireKind::Spin };
        self.recorder.acquired(kind, record::waited::<R>(start));
        true
    }

    /// Acquires the lock if the queue is empty.
    #[inline]
    pub fn try_lock(&self) -> bool {
        let node = node_pool::take();
        // Release as well: the node's reset by `take` must be visible to the
        // waiter that queues behind it and links into it (published with
        // Acquire alone, the waiter's link could be overwritten by it).
        let ok = self
            .tail
            .compare_exchange(ptr::null_mut(), node, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        if ok {
            self.holder.store(node, Ordering::Relaxed);
            self.recorder.acquired(AcquireKind::NoWait, 0);
        } else {
            // SAFETY: the node never entered the queue.
            unsafe { node_pool::give(node) };
            self.recorder.rejected();
        }
        ok
    }

    /// Passes the lock to the next in the queue, or frees it.
    ///
    /// # Safety
    /// The lock must be held by the calling thread.
    #[inline]
    pub unsafe fn unlock(&self) {
        self.recorder.releasing();
        let mut node = self.holder.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` is the holder's node (or an abandoned one this
            // unlock holds the lock for), alive while the lock is held.
            let mut next = unsafe { (*node).next.load(Ordering::Acquire) };
            if next.is_null() {
                // No known successor: free the lock if we are still the tail.
                if self
                    .tail
                    .compare_exchange(node, ptr::null_mut(), Ordering::Release, Ordering::Relaxed)
                    .is_ok()
                {
                    // SAFETY: no other thread can reach the node any more.
                    unsafe { node_pool::give(node) };
                    return;
                }
                // A successor swapped itself in and is about to link: wait.
                loop {
                    // SAFETY: as above.
                    next = unsafe { (*node).next.load(Ordering::Acquire) };
                    if !next.is_null() {
                        break;
                    }
                    spin_hint();
                }
            }
            // SAFETY: the successor's node is alive until it is granted and
            // has unlocked in turn (or, abandoned, until an unlock passes
            // through it); the wake below uses its address only.
            let state = unsafe { &(*next).state } as *const AtomicU32;
            // SAFETY: as above; after a grant the swap is the last
            // dereference.
            let before = unsafe { (*state).swap(GRANTED, Ordering::AcqRel) };
            // SAFETY: the successor wrote our `next` (read above) and never
            // touches our node again; nothing else reaches it now.
            unsafe { node_pool::give(node) };
            match before {
                PARKED => {
                    futex_wake(state, 1);
                }
                // Its waiter gave up: the lock is ours again, held for the
                // abandoned node, which nobody else reaches now but its
                // own successor's link.
                ABANDONED => {
                    node = next;
                    continue;
                }
                _ => {}
            }
            return;
        }
    }

    /// Whether the lock is held (or waited for).
    pub fn is_locked(&self) -> bool {
        !self.tail.load(Ordering::Relaxed).is_null()
    }

    /// Forgets every waiter and leaves the lock held by thread `tid`: for a
    /// child of `fork`, where the thread that forked keeps the locks it
    /// held (`tid` is its id in the child) and the other threads the state
    /// names do not exist.
    ///
    /// # Safety
    /// No other thread may use the lock during the call, and `tid` is to
    /// unlock it.
    pub unsafe fn reset_to_held_by(&self, _tid: u32) {
        // The holder's node is the forking thread's, in memory the child
        // has a copy of; the nodes queued behind it are gone threads'.
        let mut node = self.holder.load(Ordering::Relaxed);
        if node.is_null() || self.tail.load(Ordering::Relaxed).is_null() {
            node = node_pool::take();
            self.holder.store(node, Ordering::Relaxed);
        }
        // SAFETY: the holder's node, which nobody else reaches now.
        unsafe { (*node).next.store(ptr::null_mut(), Ordering::Relaxed) };
        self.tail.store(node, Ordering::Release);
    }
}

// A timed-out attempt leaves its node abandoned in the queue, which the
// unlock that reaches it passes through.
crate::clock::timed_by_deadline!(RawMcs);

/// Where queue nodes come from: a per-thread free list, refilled from a
/// shared one and from pages mapped for the purpose, never from `malloc`.
///
/// An allocator that takes pthread mutexes (jemalloc: a thread's first
/// allocation, and every aligned one) takes them inside its `malloc`; when
/// those mutexes are served by this lock, a node allocated with `malloc`
/// needed a node for the allocator's mutex, whose allocation needed
/// another, until the stack ran out. So nodes are carved from mapped
/// pages and never unmapped: a thread that exits leaves its free nodes on
/// the shared list for the next thread (a node can end on another thread's
/// list, since the unlocker keeps the holder's node), so the nodes ever
/// made are bounded by the most ever in use or cached at once.
///
/// The free list is a plain cell, whose first use allocates nothing. Its
/// hand-over at exit is a pthread key's destructor, not a thread-local's:
/// registering a thread-local destructor allocates (glibc's
/// `__cxa_thread_atexit_impl` calls `calloc`), which inside jemalloc's own
/// mutex call crashed it; setting one of the first 32 keys allocates
/// nothing. (Were the key a later one, a thread's list would not be handed
/// over: at most `CACHED_MAX` nodes lost per exiting thread.)
mod node_pool {
    use super::*;
    use std::cell::Cell;
    use std::sync::atomic::compiler_fence;

    /// Free nodes a thread keeps; more go to the shared list.
    const CACHED_MAX: u32 = 8;

    /// A thread's free nodes: a plain cell, whose first use allocates
    /// nothing (one thread-local, read once per take and per give).
    struct Pool {
        free: Cell<*mut Node>,
        cached: Cell<u32>,
        /// The thread's hand-over at exit is arranged (or cannot be).
        armed: Cell<bool>,
        /// The thread is changing `free`: a signal handler that takes or
        /// gives a node meanwhile uses the shared list instead (see
        /// `changing_free`).
        busy: Cell<bool>,
    }

    impl Pool {
        /// Runs `change` on the free list, unless this thread was
        /// interrupted changing it (a signal handler taking a lock):
        /// then `None`, the list untouched. A handler that took two locks
        /// and released the first, then the second, gave back the node
        /// the interrupted take had read and was about to unlink, which
        /// the take then unlinked from a stale read: one node both in use
        /// and free, and two locks held through it (two served mutexes
        /// shared a queue node after about 40,000 such signals).
        #[inline(always)]
        fn changing_free<T>(&self, change: impl FnOnce(&Pool) -> T) -> Option<T> {
            if self.busy.replace(true) {
                return None;
            }
            // The flag is set before the list is read, and cleared after
            // it is written, as a handler on this thread would see them.
            compiler_fence(std::sync::atomic::Ordering::SeqCst);
            let result = change(self);
            compiler_fence(std::sync::atomic::Ordering::SeqCst);
            self.busy.set(false);
            Some(result)
        }
    }

    // SAFETY: all-zero bytes are an empty pool (a null list, no count,
    // flags off), and cells of plain values drop nothing.
    unsafe impl crate::static_tls::ZeroInit for Pool {}

    #[cfg(not(loom))]
    crate::static_thread_local! {
        /// The thread's pool, in the static TLS block: a served mutex's
        /// lock and unlock each look it up.
        static POOL: Pool;
    }
    #[cfg(loom)]
    loom::thread_local! {
        static POOL: Pool = Pool { free: Cell::new(ptr::null_mut()), cached: Cell::new(0), armed: Cell::new(false), busy: Cell::new(false) };
        static REAPER: Reaper = Reaper;
    }

    /// The calling thread's pool, lent to `use_pool` (`None` once the
    /// thread's thread-locals are gone, as they can be under loom).
    #[inline(always)]
    fn with_pool<T>(use_pool: impl FnOnce(&Pool) -> T) -> Option<T> {
        #[cfg(not(loom))]
        return Some(POOL.with(use_pool));
        #[cfg(loom)]
        return POOL.try_with(use_pool).ok();
    }

    /// Hands the calling thread's free nodes to the shared list.
    fn hand_over() {
        let first = with_pool(|pool| {
            pool.cached.set(0);
            // Nodes given back after this (later keys' destructors
            // taking locks) arm the hand-over again.
            pool.armed.set(false);
            pool.free.replace(ptr::null_mut())
        })
        .unwrap_or(ptr::null_mut());
        if !first.is_null() {
            shared::give_chain(first);
        }
    }

    /// The pthread key whose destructor hands a thread's nodes over
    /// (`u32::MAX`: none). Made as the library loads (an initialiser in
    /// `.init_array`), so among the first keys, whose values a thread keeps
    /// in itself: made at a thread's first lock, after a program's own 32
    /// keys, setting it would allocate, and it went unset (8 nodes lost
    /// per exiting thread).
    #[cfg(not(loom))]
    static EXIT_KEY: AtomicU32 = AtomicU32::new(u32::MAX);

    #[cfg(not(loom))]
    extern "C" fn at_thread_exit(_: *mut libc::c_void) {
        hand_over();
    }

    #[cfg(not(loom))]
    extern "C" fn make_exit_key() {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: a valid out-pointer and a plain extern "C" destructor.
        if unsafe { libc::pthread_key_create(&mut key, Some(at_thread_exit)) } == 0 {
            EXIT_KEY.store(key, Ordering::Release);
        }
    }

    #[cfg(not(loom))]
    #[used]
    #[unsafe(link_section = ".init_array")]
    static MAKE_EXIT_KEY: extern "C" fn() = make_exit_key;

    /// Arranges the thread's hand-over at exit (when its pool's `armed`
    /// was not set).
    #[cfg(not(loom))]
    fn arm() {
        let key = EXIT_KEY.load(Ordering::Acquire);
        // glibc keeps the first 32 keys' values in the thread itself;
        // setting a later one can allocate.
        if key < 32 {
            // SAFETY: a key of ours; any non-null value runs the destructor.
            unsafe { libc::pthread_setspecific(key, ptr::NonNull::<u8>::dangling().as_ptr().cast()) };
        }
    }

    /// Under loom, a thread-local's destructor (loom's threads run them).
    #[cfg(loom)]
    struct Reaper;

    #[cfg(loom)]
    impl Drop for Reaper {
        fn drop(&mut self) {
            hand_over();
        }
    }

    #[cfg(loom)]
    fn arm() {
        REAPER.with(|_| ());
    }

    /// A reset node: from this thread's free list, the shared list, or
    /// fresh.
    pub(super) fn take() -> *mut Node {
        let recycled = with_pool(|pool| {
            pool.changing_free(|pool| {
                let node = pool.free.get();
                if !node.is_null() {
                    // SAFETY: a free node belongs to the list.
                    pool.free.set(unsafe { (*node).next_free });
                    // (Nodes kept over the cap are not counted.)
                    pool.cached.set(pool.cached.get().saturating_sub(1));
                }
                node
            })
        })
        .flatten()
        .unwrap_or(ptr::null_mut());
        let node = if recycled.is_null() { shared::take() } else { recycled };
        // SAFETY: the node is ours and unreachable from any lock.
        unsafe {
            (*node).next.store(ptr::null_mut(), Ordering::Relaxed);
            (*node).state.store(WAITING, Ordering::Relaxed);
        }
        node
    }

    /// Returns a node no lock can reach any more.
    ///
    /// # Safety
    /// `node` came from `take` and is unreachable by other threads.
    pub(super) unsafe fn give(node: *mut Node) {
        let kept = with_pool(|pool| {
            if pool.cached.get() >= CACHED_MAX {
                return false;
            }
            let listed = pool.changing_free(|pool| {
                // SAFETY: the node is ours (caller's contract).
                unsafe { (*node).next_free = pool.free.get() };
                pool.free.set(node);
                pool.cached.set(pool.cached.get() + 1);
            });
            if listed.is_some() && !pool.armed.replace(true) {
                arm();
            }
            listed.is_some()
        })
        .unwrap_or(false);
        if !kept {
            shared::give(node);
        }
    }

    /// Puts a chain of free nodes (`first` to `last`) in this thread's
    /// pool, over its cap: for a thread that cannot list them now (it holds
    /// the shared list, interrupted). Lost if its thread-locals are gone,
    /// or if its pool is being changed too (handlers nested in handlers).
    #[cfg(not(loom))]
    fn keep_chain(first: *mut Node, last: *mut Node) {
        let _ = with_pool(|pool| {
            pool.changing_free(|pool| {
                // SAFETY: the chain's nodes are free and the caller's.
                unsafe { (*last).next_free = pool.free.get() };
                pool.free.set(first);
            })
        });
    }

    /// The nodes threads left when they exited, and fresh pages of nodes.
    #[cfg(not(loom))]
    mod shared {
        use super::*;

        static LIST: AtomicPtr<Node> = AtomicPtr::new(ptr::null_mut());
        /// The kernel id of the thread changing the list, 0 when none.
        static BUSY: AtomicU32 = AtomicU32::new(0);

        /// Holds the list, and says so: it is held for a few instructions
        /// at a time, so the wait is a short spin, then yields (a holder
        /// preempted). Not held (false) when this thread holds it already:
        /// a signal handler that took a lock interrupted it there (it spun
        /// on itself for ever). A holder that is no thread of this process
        /// held it when the process forked, and the list is taken over
        /// (a child's fork handler that took a lock before the library's
        /// own handler ran waited on it for ever).
        fn hold() -> bool {
            let me = crate::sync::current_tid();
            let mut tries = 0u32;
            loop {
                match BUSY.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => return true,
                    Err(holder) if holder == me => return false,
                    Err(holder) if holder != 0 && tries >= 64 && !crate::sync::is_thread_of_this_process(holder) => {
                        if BUSY.compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                            return true;
                        }
                    }
                    Err(_) => {}
                }
                tries += 1;
                if tries < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }

        fn release() {
            BUSY.store(0, Ordering::Release);
        }

        /// A node from the list, or the first of a fresh page when the list
        /// is empty (or held by this very thread, interrupted).
        pub(super) fn take() -> *mut Node {
            if !hold() {
                return fresh_page();
            }
            let node = LIST.load(Ordering::Relaxed);
            if !node.is_null() {
                // SAFETY: listed nodes are free and owned by the list.
                LIST.store(unsafe { (*node).next_free }, Ordering::Relaxed);
            }
            release();
            if node.is_null() {
                fresh_page()
            } else {
                node
            }
        }

        /// Lists the free nodes chained from `first` by `next_free` (keeps
        /// them in this thread's pool if the list is this thread's,
        /// interrupted).
        pub(super) fn give_chain(first: *mut Node) {
            let mut last = first;
            // SAFETY: the chain's nodes are free and the caller's.
            while !unsafe { (*last).next_free }.is_null() {
                last = unsafe { (*last).next_free };
            }
            if !hold() {
                super::keep_chain(first, last);
                return;
            }
            // SAFETY: as above; the list is held.
            unsafe { (*last).next_free = LIST.load(Ordering::Relaxed) };
            LIST.store(first, Ordering::Relaxed);
            release();
        }

        /// Lists a free node.
        pub(super) fn give(node: *mut Node) {
            // SAFETY: the node is free and the caller's.
            unsafe { (*node).next_free = ptr::null_mut() };
            give_chain(node);
        }

        /// Maps a page of nodes: returns one, lists the rest in one hold.
        fn fresh_page() -> *mut Node {
            const PAGE: usize = 4096;
            // SAFETY: an anonymous private mapping, never unmapped.
            let page = unsafe {
                libc::mmap(ptr::null_mut(), PAGE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
            };
            assert!(page != libc::MAP_FAILED, "mcs: cannot map memory for queue nodes");
            let nodes = page.cast::<Node>();
            let count = PAGE / std::mem::size_of::<Node>();
            // Node i is inside the page, aligned (the page is, and nodes
            // are a multiple of their alignment), and zeroed: all-zero
            // bytes are a free node (null pointers, state 0) ending a chain.
            for i in 1..count - 1 {
                // SAFETY: nodes i and i + 1 are inside the mapping.
                unsafe { (*nodes.add(i)).next_free = nodes.add(i + 1) };
            }
            // SAFETY: node 1 is inside the mapping.
            give_chain(unsafe { nodes.add(1) });
            nodes
        }
    }

    /// Under loom: plain allocations (the model checks the lock, not this
    /// pool).
    #[cfg(loom)]
    mod shared {
        use super::*;

        pub(super) fn take() -> *mut Node {
            Box::into_raw(Box::new(Node { next: AtomicPtr::new(ptr::null_mut()), state: AtomicU32::new(WAITING), next_free: ptr::null_mut() }))
        }

        pub(super) fn give(node: *mut Node) {
            // SAFETY: under loom nodes are boxes, and this one is free.
            drop(unsafe { Box::from_raw(node) });
        }

        pub(super) fn give_chain(mut node: *mut Node) {
            while !node.is_null() {
                // SAFETY: a free node of the chain, read before it goes.
                let next = unsafe { (*node).next_free };
                give(node);
                node = next;
            }
        }
    }
}

impl RawMcs<NoStats> {
    /// Releases the lock if nobody queues behind its holder: one
    /// compare-exchange of the tail, and the holder's node back to this
    /// thread's pool, never a system call. False, with nothing done,
    /// otherwise (a successor linked or linking, or a free lock); then
    /// [`Self::unlock`] releases it. For callers that must know no system
    /// call ran (a pthread replacement keeps `errno` as the program left
    /// it, and saving it costs more than the unlock). Only on a lock that
    /// records nothing: a recorder hears of a release before it happens,
    /// and this one may not.
    ///
    /// # Safety
    /// As [`Self::unlock`]: the lock must be held.
    #[inline]
    pub unsafe fn unlock_if_uncontended(&self) -> bool {
        if self.tail.load(Ordering::Relaxed).is_null() {
            return false;
        }
        let node = self.holder.load(Ordering::Relaxed);
        // SAFETY: the holder's node, alive while the lock is held.
        if !unsafe { (*node).next.load(Ordering::Acquire) }.is_null() {
            return false;
        }
        // Fails when a successor swapped itself in as the tail.
        if self.tail.compare_exchange(node, ptr::null_mut(), Ordering::Release, Ordering::Relaxed).is_err() {
            return false;
        }
        // SAFETY: no other thread can reach the node any more.
        unsafe { node_pool::give(node) };
        true
    }
}

#[cfg(not(loom))]
impl<R: Recorder> Default for RawMcs<R> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(loom))]
// SAFETY: MCS: the lock passes from a node to its successor with a release
// swap of GRANTED that the successor reads with acquire.
unsafe impl<R: Recorder> lock_api::RawMutex for RawMcs<R> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    // The holder's node is returned to the unlocking thread's pool; keep
    // guards on their thread so pools stay balanced.
    type GuardMarker = lock_api::GuardNoSend;
    fn lock(&self) {
        RawMcs::lock(self)
    }
    fn try_lock(&self) -> bool {
        RawMcs::try_lock(self)
    }
    unsafe fn unlock(&self) {
        RawMcs::unlock(self)
    }
    fn is_locked(&self) -> bool {
        RawMcs::is_locked(self)
    }
}

#[cfg(not(loom))]
// SAFETY: as for `RawMutex`: the fair unlock is the unlock.
unsafe impl<R: Recorder> lock_api::RawMutexFair for RawMcs<R> {
    /// Every unlock is fair: it passes the lock to the next node in the queue, and a
    /// newcomer lines up behind the waiters (no barging).
    unsafe fn unlock_fair(&self) {
        RawMcs::unlock(self)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64};

    static X: RawMcs = RawMcs::new();
    static Y: RawMcs = RawMcs::new();
    static A: RawMcs = RawMcs::new();
    static B: RawMcs = RawMcs::new();
    static HANDLED: AtomicU64 = AtomicU64::new(0);
    static SIGNALLING: AtomicBool = AtomicBool::new(true);

    /// Takes two locks and releases them in the order taken (not the
    /// reverse): the node of the first goes back to the pool before the
    /// second's.
    extern "C" fn take_two_release_in_order(_: libc::c_int) {
        A.lock();
        B.lock();
        // SAFETY: both held by this thread.
        unsafe {
            A.unlock();
            B.unlock();
        }
        HANDLED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// A signal handler taking locks while the interrupted code takes or
    /// gives a queue node leaves every node in one place: two locks held
    /// at once never share one (before the pool's re-entry check, two did
    /// after some tens of thousands of signals, and from then on every
    /// lock of the thread ran on that one node).
    #[test]
    fn a_signal_handler_taking_locks_leaves_every_node_in_one_place() {
        // SAFETY: a handler that touches only these statics and its locks,
        // for a signal nothing else in this test binary uses.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = take_two_release_in_order as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigaction(libc::SIGUSR2, &action, std::ptr::null_mut());
        }
        // SAFETY: the calling thread's handle, alive until the join below.
        let me = unsafe { libc::pthread_self() };
        let signaller = std::thread::spawn(move || {
            while SIGNALLING.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: signals the test's thread, which outlives this one.
                unsafe { libc::pthread_kill(me, libc::SIGUSR2) };
                std::thread::yield_now();
            }
        });
        // A pool broken this way can also leave a lock queued behind
        // itself: the test fails then too, by its watchdog.
        std::thread::spawn(|| {
            std::thread::sleep(std::time::Duration::from_secs(30));
            eprintln!("mcs: a signal handler taking locks hung the thread it interrupted");
            std::process::abort();
        });
        let started = Instant::now();
        let mut shared = 0u64;
        while HANDLED.load(std::sync::atomic::Ordering::Relaxed) < 200_000 && started.elapsed().as_secs() < 5 && shared == 0 {
            assert!(X.try_lock() && Y.try_lock());
            if X.tail.load(Ordering::Relaxed) == Y.tail.load(Ordering::Relaxed) {
                shared += 1;
            }
            // SAFETY: both held by this thread.
            unsafe {
                Y.unlock();
                X.unlock();
            }
        }
        SIGNALLING.store(false, std::sync::atomic::Ordering::Relaxed);
        signaller.join().unwrap();
        // SAFETY: ignored from now on (a signal still pending is dropped).
        unsafe { libc::signal(libc::SIGUSR2, libc::SIG_IGN) };
        let handled = HANDLED.load(std::sync::atomic::Ordering::Relaxed);
        assert!(handled > 1000, "only {handled} signals handled");
        assert_eq!(shared, 0, "two locks held at once shared a queue node ({handled} signals handled)");
    }
}
