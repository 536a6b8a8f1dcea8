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
//! Timed lock is not offered: leaving the queue is not supported.

use crate::clock::{self, SpinBudget};
use crate::config;
use crate::record::{self, AcquireKind, NoStats, Recorder};
use crate::sync::{futex_wait, futex_wake, spin_hint, AtomicPtr, AtomicU32, Ordering};
use std::ptr;

/// Spin this long on our node before parking.
const PARK_AFTER_NS: u64 = 20_000;

const WAITING: u32 = 0;
const PARKED: u32 = 1;
const GRANTED: u32 = 2;

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
// a node is reachable through the lock only while its thread waits or holds.
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
        let node = node_pool::take();
        let predecessor = self.tail.swap(node, Ordering::AcqRel);
        if predecessor.is_null() {
            self.holder.store(node, Ordering::Relaxed);
            self.recorder.acquired(AcquireKind::NoWait, 0);
            return;
        }
        self.wait_in_queue(node, predecessor);
    }

    #[cold]
    fn wait_in_queue(&self, node: *mut Node, predecessor: *mut Node) {
        let start = record::wait_start::<R>();
        // SAFETY: the predecessor's node stays alive until it has passed
        // the lock on, which requires reading the `next` we store here.
        unsafe { (*predecessor).next.store(node, Ordering::Release) };
        // SAFETY: `node` is ours until we hand it back at unlock.
        let state = unsafe { &(*node).state };
        let mut budget = SpinBudget::new(clock::ns_to_cycles(PARK_AFTER_NS));
        let mut slept = false;
        // Spin briefly on our own node...
        while state.load(Ordering::Acquire) != GRANTED {
            if !config::spinning_enabled() || budget.exhausted() {
                // ...then park, unless the grant arrived meanwhile.
                if state.compare_exchange(WAITING, PARKED, Ordering::Acquire, Ordering::Acquire).is_ok() {
                    slept = true;
                    while state.load(Ordering::Acquire) != GRANTED {
                        futex_wait(state, PARKED, None);
                    }
                }
                break;
            }
            spin_hint();
        }
        self.holder.store(node, Ordering::Relaxed);
        let kind = if slept { AcquireKind::Sleep } else { AcquireKind::Spin };
        self.recorder.acquired(kind, record::waited::<R>(start));
    }

    /// Acquires the lock if the queue is empty.
    #[inline]
    pub fn try_lock(&self) -> bool {
        let node = node_pool::take();
        let ok = self
            .tail
            .compare_exchange(ptr::null_mut(), node, Ordering::Acquire, Ordering::Relaxed)
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
        let node = self.holder.load(Ordering::Relaxed);
        // SAFETY: `node` is the holder's node, alive while the lock is held.
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
        // SAFETY: the successor's node is alive until it is granted and has
        // unlocked in turn; the wake below uses its address only.
        let state = unsafe { &(*next).state } as *const AtomicU32;
        // SAFETY: as above; the swap is the last dereference.
        if unsafe { (*state).swap(GRANTED, Ordering::Release) } == PARKED {
            futex_wake(state, 1);
        }
        // SAFETY: the successor has read our `next` already (it was set).
        unsafe { node_pool::give(node) };
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

/// The per-thread free list of queue nodes.
mod node_pool {
    use super::*;
    use std::cell::Cell;

    struct Pool {
        head: Cell<*mut Node>,
    }

    impl Drop for Pool {
        fn drop(&mut self) {
            let mut node = self.head.get();
            while !node.is_null() {
                // SAFETY: nodes on the free list are owned by the list.
                let boxed = unsafe { Box::from_raw(node) };
                node = boxed.next_free;
            }
        }
    }

    #[cfg(not(loom))]
    thread_local! {
        static POOL: Pool = const { Pool { head: Cell::new(ptr::null_mut()) } };
    }
    #[cfg(loom)]
    loom::thread_local! {
        static POOL: Pool = Pool { head: Cell::new(ptr::null_mut()) };
    }

    /// A reset node, from this thread's free list or freshly allocated
    /// (also when thread-locals are already gone, at thread exit).
    pub(super) fn take() -> *mut Node {
        let recycled = POOL
            .try_with(|pool| {
                let node = pool.head.get();
                if !node.is_null() {
                    // SAFETY: a free node belongs to the list.
                    pool.head.set(unsafe { (*node).next_free });
                }
                node
            })
            .unwrap_or(ptr::null_mut());
        if recycled.is_null() {
            return Box::into_raw(Box::new(Node {
                next: AtomicPtr::new(ptr::null_mut()),
                state: AtomicU32::new(WAITING),
                next_free: ptr::null_mut(),
            }));
        }
        // SAFETY: the node is ours and unreachable from any lock.
        unsafe {
            (*recycled).next.store(ptr::null_mut(), Ordering::Relaxed);
            (*recycled).state.store(WAITING, Ordering::Relaxed);
        }
        recycled
    }

    /// Returns a node no lock can reach any more.
    ///
    /// # Safety
    /// `node` came from `take` and is unreachable by other threads.
    pub(super) unsafe fn give(node: *mut Node) {
        let kept = POOL
            .try_with(|pool| {
                // SAFETY: the node is ours (caller's contract).
                unsafe { (*node).next_free = pool.head.get() };
                pool.head.set(node);
            })
            .is_ok();
        if !kept {
            // SAFETY: as above; thread-locals are gone, so free it.
            drop(unsafe { Box::from_raw(node) });
        }
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
