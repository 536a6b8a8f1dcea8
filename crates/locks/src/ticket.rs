//! `ticket`: a FIFO ticket lock with auto-tuned proportional backoff that
//! parks instead of collapsing under oversubscription.
//!
//! Seed 003: a waiter with `ahead` tickets in front of it checks the lock
//! only every `factor x ahead` pause instructions, so the holder's cache
//! line is left alone; `factor` is tuned per lock with the "try to make the
//! delay longer" policy (grow by 1/8 whenever a check finds that nothing
//! moved, shrink by 1/4 when a check finds the lock already ours: an
//! oversleep costs the whole lock a late hand-over, a check too early only
//! one waiter's cache read, so the factor settles just above the
//! hand-over time), capped
//! low when running under a hypervisor (cpuid's hypervisor bit), where a
//! long delay may cover a preempted vCPU.
//!
//! A pure ticket spinlock collapses when threads outnumber cores: the next
//! ticket holder may not be running, and every other waiter burns a CPU
//! meanwhile. So waiters park on futex slots in a global waiting array
//! keyed by (lock, ticket it waits for). Only the `cpus - 1` waiters at the
//! front of the line spin (further back, one of the threads before a
//! waiter cannot be running, so its turn waits for the scheduler anyway):
//! a waiter further back parks at once until it reaches that window, so it
//! is awake and spinning when its turn comes; a waiter in the window parks
//! only if its bounded spin runs out. Unlock wakes exactly the slot of the
//! new `now_serving`, never a herd.
//!
//! Lock state (12 bytes): `next_ticket`; `serving`, whose high 16 bits are
//! the ticket now served and whose low 16 bits count the waiters parked (or
//! about to park), so one atomic add both passes the lock on and tells the
//! unlocker whether anybody may sleep (no store-load race between two
//! words); `delay_factor`. Tickets are 16 bits: at most 65535 waiters.
//!
//! Pick it when strict FIFO order matters more than throughput. Timed lock
//! is not offered: a ticket once taken cannot be given back.

use crate::clock::{self, SpinBudget};
use crate::config;
use crate::record::{self, AcquireKind, NoStats, Recorder};
use crate::sync::{futex_wait, futex_wake, spin_hint, AtomicU32, Ordering};

/// Spin this long on our turn before parking.
const PARK_AFTER_NS: u64 = 20_000;
/// Proportional delay factor caps, in pause instructions per waiter ahead.
const MAX_DELAY_BARE_METAL: u32 = 1_000;
/// Seed 003's v4: keep the delay small in a virtual machine.
const MAX_DELAY_IN_GUEST: u32 = 64;

/// Tickets are compared in 16 bits.
const TICKET_MASK: u32 = 0xFFFF;
/// One served ticket, in the `serving` word.
const SERVED_ONE: u32 = 1 << 16;
/// One parked waiter, in the `serving` word.
const PARKED_ONE: u32 = 1;

/// The raw `ticket` lock.
#[repr(C)]
pub struct RawTicket<R: Recorder = NoStats> {
    next_ticket: AtomicU32,
    /// Ticket served (high 16 bits) | parked waiters (low 16 bits).
    serving: AtomicU32,
    /// Pause instructions per waiter ahead; 0 reads as 1.
    delay_factor: AtomicU32,
    recorder: R,
}

impl<R: Recorder> RawTicket<R> {
    crate::sync::const_unless_loom! {
        /// An unlocked lock.
        pub fn new() -> Self {
            RawTicket {
                next_ticket: AtomicU32::new(0),
                serving: AtomicU32::new(0),
                delay_factor: AtomicU32::new(0),
                recorder: R::INIT,
            }
        }
    }

    /// The statistics recorder.
    pub fn recorder(&self) -> &R {
        &self.recorder
    }

    fn now_serving(&self) -> u32 {
        self.serving.load(Ordering::Acquire) >> 16
    }

    /// Takes a ticket and waits for its turn.
    #[inline]
    pub fn lock(&self) {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed) & TICKET_MASK;
        if self.now_serving() == ticket {
            self.recorder.acquired(AcquireKind::NoWait, 0);
            return;
        }
        self.wait_for_turn(ticket);
    }

    /// Acquires the lock if nobody holds or waits for it.
    #[inline]
    pub fn try_lock(&self) -> bool {
        let serving = self.now_serving();
        let next = self.next_ticket.load(Ordering::Relaxed);
        // Taking a ticket is only possible when no ticket is out: then it
        // is immediately our turn.
        let ok = next & TICKET_MASK == serving
            && self
                .next_ticket
                .compare_exchange(next, next.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed)
                .is_ok();
        if ok {
            self.recorder.acquired(AcquireKind::NoWait, 0);
        } else {
            self.recorder.rejected();
        }
        ok
    }

    #[cold]
    fn wait_for_turn(&self, ticket: u32) {
        let start = record::wait_start::<R>();
        let cap = if running_in_guest() { MAX_DELAY_IN_GUEST } else { MAX_DELAY_BARE_METAL };
        let mut factor = self.delay_factor.load(Ordering::Relaxed).clamp(1, cap);
        let park_after = clock::ns_to_cycles(PARK_AFTER_NS);
        let mut budget = SpinBudget::new(park_after);
        let mut slept = false;
        loop {
            let serving = self.now_serving();
            if serving == ticket {
                break;
            }
            let ahead = ticket.wrapping_sub(serving) & TICKET_MASK;
            // Park at once when the turn cannot come without a wake-up: the
            // holder, the `ahead - 1` waiters before us and we are `ahead +
            // 1` threads; with `ahead >= cpus` one of those before us is not
            // on a CPU, so our turn waits for the scheduler, and a spin
            // meanwhile only keeps that thread off the CPU it needs (in
            // `sem` at 16 threads on 2 cores, the 20 µs spin of the thread
            // that had just queued again at the back cost every hand-over
            // 20 µs). Otherwise spin, bounded: a far waiter sleeps until
            // it is among the `cpus - 1` next, the next waiter until its
            // turn.
            let window = spin_window();
            if !config::spinning_enabled() || budget.exhausted() || ahead > window {
                let wake_at = if ahead > window {
                    ticket.wrapping_sub(window) & TICKET_MASK
                } else if ahead > 1 {
                    ticket.wrapping_sub(1) & TICKET_MASK
                } else {
                    ticket
                };
                self.park_until(wake_at);
                slept = true;
                budget = SpinBudget::new(park_after);
                continue;
            }
            // Proportional backoff (seed 003): delay = factor x ahead.
            let delay = if cfg!(loom) || !config::proportional_backoff() { 1 } else { factor.saturating_mul(ahead) };
            for _ in 0..delay {
                spin_hint();
            }
            let after = self.now_serving();
            if after == ticket {
                // Maybe we overslept our turn, and the lock sat idle: shrink.
                factor = (factor - factor / 4).max(1);
            } else if after == serving {
                // Nothing moved while we waited: checked too early, make the
                // delay longer ("try to make the delay longer").
                factor = (factor + factor / 8 + 1).min(cap);
            }
        }
        self.delay_factor.store(factor, Ordering::Relaxed);
        let kind = if slept { AcquireKind::Sleep } else { AcquireKind::Spin };
        self.recorder.acquired(kind, record::waited::<R>(start));
    }

    /// Sleeps until the ticket served has reached `target`.
    fn park_until(&self, target: u32) {
        let slot = slot_for(self as *const _ as usize, target);
        // Count ourselves on the slot, then register in `serving` with a
        // release RMW: an unlocker whose RMW comes later in the word's order
        // sees the registration, and through it the slot count.
        slot.sleepers.fetch_add(1, Ordering::Relaxed);
        self.serving.fetch_add(PARKED_ONE, Ordering::AcqRel);
        loop {
            let seq = slot.seq.load(Ordering::Acquire);
            // Signed 16-bit distance: has the ticket served reached `target`?
            let behind = target.wrapping_sub(self.now_serving()) & TICKET_MASK;
            if behind == 0 || behind > TICKET_MASK / 2 {
                break;
            }
            futex_wait(&slot.seq, seq, None);
        }
        self.serving.fetch_sub(PARKED_ONE, Ordering::Relaxed);
        slot.sleepers.fetch_sub(1, Ordering::Relaxed);
    }

    /// Passes the lock to the next ticket.
    ///
    /// # Safety
    /// The lock must be held.
    #[inline]
    pub unsafe fn unlock(&self) {
        self.recorder.releasing();
        let before = self.serving.fetch_add(SERVED_ONE, Ordering::AcqRel);
        if before & TICKET_MASK != 0 {
            self.wake_slot(((before >> 16) + 1) & TICKET_MASK);
        }
    }

    #[cold]
    fn wake_slot(&self, serving: u32) {
        let slot = slot_for(self as *const _ as usize, serving);
        if slot.sleepers.load(Ordering::Relaxed) != 0 {
            slot.seq.fetch_add(1, Ordering::Release);
            // Everyone on the slot: a collision with another lock or ticket
            // must not swallow the wake of the waiter we mean.
            futex_wake(&slot.seq, u32::MAX);
        }
    }

    /// Whether the lock is held (or waited for).
    pub fn is_locked(&self) -> bool {
        self.next_ticket.load(Ordering::Relaxed) & TICKET_MASK != self.now_serving()
    }
}

/// One futex slot of the waiting array.
#[repr(align(64))]
struct Slot {
    seq: AtomicU32,
    sleepers: AtomicU32,
}

#[cfg(not(loom))]
const SLOTS: usize = 256;
#[cfg(loom)]
const SLOTS: usize = 4;

#[cfg(not(loom))]
static WAITING_ARRAY: [Slot; SLOTS] = {
    #[allow(clippy::declare_interior_mutable_const)]
    const EMPTY: Slot = Slot { seq: AtomicU32::new(0), sleepers: AtomicU32::new(0) };
    [EMPTY; SLOTS]
};

#[cfg(not(loom))]
fn waiting_array() -> &'static [Slot; SLOTS] {
    &WAITING_ARRAY
}

#[cfg(loom)]
fn waiting_array() -> &'static [Slot; SLOTS] {
    loom::lazy_static! {
        static ref ARRAY: [Slot; SLOTS] = std::array::from_fn(|_| Slot {
            seq: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
        });
    }
    &ARRAY
}

fn slot_for(lock: usize, ticket: u32) -> &'static Slot {
    // A model must be deterministic, and addresses differ between loom's
    // executions: there, slots are keyed by ticket alone (which still lets
    // different tickets collide, as SLOTS is small).
    #[cfg(loom)]
    let lock = {
        let _ = lock;
        0usize
    };
    // Fibonacci hashing of (lock address, ticket).
    let key = (lock as u64 >> 4) ^ (ticket as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let index = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % SLOTS;
    &waiting_array()[index]
}

/// How many waiters, counting from the front of the line, can be running
/// beside the holder: one fewer than the CPUs this process may use (at
/// least 1). Further back, a waiter parks without spinning.
fn spin_window() -> u32 {
    #[cfg(not(loom))]
    {
        use std::sync::OnceLock;
        static WINDOW: OnceLock<u32> = OnceLock::new();
        *WINDOW.get_or_init(|| {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            (cpus.saturating_sub(1) as u32).clamp(1, TICKET_MASK / 2)
        })
    }
    // Models run as on 2 CPUs: with three threads, the last one parks at
    // once.
    #[cfg(loom)]
    {
        1
    }
}

/// Whether cpuid says we run under a hypervisor (leaf 1, ECX bit 31).
fn running_in_guest() -> bool {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    {
        use std::sync::OnceLock;
        static GUEST: OnceLock<bool> = OnceLock::new();
        // cpuid leaf 1 exists on every x86-64 CPU.
        *GUEST.get_or_init(|| core::arch::x86_64::__cpuid(1).ecx & (1 << 31) != 0)
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    {
        false
    }
}

#[cfg(not(loom))]
impl<R: Recorder> Default for RawTicket<R> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(loom))]
// SAFETY: exactly one ticket equals the one served at a time; its holder
// observed it with acquire ordering and passes it on with a release RMW.
unsafe impl<R: Recorder> lock_api::RawMutex for RawTicket<R> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type GuardMarker = lock_api::GuardSend;
    fn lock(&self) {
        RawTicket::lock(self)
    }
    fn try_lock(&self) -> bool {
        RawTicket::try_lock(self)
    }
    unsafe fn unlock(&self) {
        RawTicket::unlock(self)
    }
    fn is_locked(&self) -> bool {
        RawTicket::is_locked(self)
    }
}
