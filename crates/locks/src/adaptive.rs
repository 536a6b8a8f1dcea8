//! `adaptive`: a futex mutex that spins only while its owner runs.
//!
//! The idea is the kernel mutex's optimistic spinning brought to userspace:
//! - spin only while the owner is on a CPU (seed 002, `rq->curr == owner`),
//!   asked of the owner-state oracle (`oracle.rs`);
//! - stop spinning and queue as soon as the lock changes owner (seed 000:
//!   under heavy contention, chasing a lock that keeps changing hands is
//!   wasted cycles);
//! - spin at most once per wake-up (Weisbecker's reply in seed 002: a waiter
//!   that re-enters the spin loop after losing turns the mutex into a
//!   spinlock), unless no thread waits for a CPU: then a sleep would only
//!   leave this CPU idle, and the waiter spins again, for up to 100 µs per
//!   wake-up, while the owner runs (see `idle_cpu.rs`);
//! - the spinner backs off between reads of the lock word, doubling up to
//!   ~400 ns and a sixteenth of the time spun so far (seed 003's point:
//!   every read takes the line from the owner; and its proportional
//!   backoff: the later a release is seen, the longer the wait it ends);
//! - a spinner that sees the lock free gives its owner a short grace to
//!   take it back before competing (an owner looping around a short
//!   critical section keeps it on its CPU, where it does most work; the
//!   grace adapts per lock to how soon owners come back, between ~50 and
//!   256 ns, past which an idle lock costs more than moving it; an owner
//!   back at once sends the spinner into a long back-off, and the handoff
//!   bound below keeps that fair; on a lock whose owners do not come back,
//!   seven missed graces in a row, only one release in 16 gets a grace);
//! - whether a release should go to the spinner at all is measured per
//!   lock: now and then the spinner leaves the lock to its owner for a few
//!   microseconds counting releases, then takes one release and times its
//!   own hold, and the faster way wins a vote (see
//!   `count_kept_acquisitions`). A critical section that works on much
//!   data runs slower on a CPU it just moved to, by more than the overlap
//!   of two threads gains: on such a lock the grace grows to 2 µs, any
//!   return sends the spinner into the long back-off, and queued waiters
//!   give the owner the same grace (concurrency restriction, as in
//!   Malthusian locks, where it is measured to pay);
//! - only one waiter spins on the lock word at a time, the others sleep
//!   behind it (the kernel's OSQ, reduced to its head: on a machine with few
//!   CPUs a second spinner can only steal the owner's CPU);
//! - sleep on a process-private futex; unlock issues a wake only when the
//!   WAITERS bit says somebody sleeps and the SPINNER bit does not say a
//!   waiter spins: a spinner takes the lock anyway, so a wake would cost
//!   the owner a system call to add a competitor (the kernel mutex does the
//!   same: a waiter that spins is not woken, and the unlock's wake goes to
//!   sleepers only). The unlock then leaves WAITERS on the free word, and
//!   the duty of waking passes to whoever unlocks next (see
//!   `unlock_contended`).
//!
//! Lock word (seed 001's TID|FUTEX_WAITERS policy):
//!
//! ```text
//!  31        30        29        28      27         26..22   21 ....... 0
//! [WAITERS] [HANDOFF] [SPINNER] [TIMED] [COUNTING] [count]  [owner tid]
//! ```
//! (owner tid 0 when free; TIMED, COUNTING and the count only while a
//! probe runs, see `count_kept_acquisitions`)
//! Uncontended lock is one compare-exchange 0 -> tid, unlock a read that
//! finds tid alone and an exchange with 0 (a flag that comes between the
//! two is cleared by the exchange, and what it asked for is done after
//! the release, for the waiter that raised it: see
//! `flags_taken_by_the_release`; a release for another thread, as the C
//! ABI allows, reads the word and subtracts the tid it names: flags that
//! came meanwhile stay, and are seen in the value it returns). A word with
//! flags beside the owner takes the contended unlock, whose releasing
//! compare-exchange also decides whether to wake: whether a waiter spins
//! is a bit of the same word, so the decision and the release are one
//! atomic step, and nothing of the lock is touched after it but the futex
//! wake (which takes the address only). A POSIX mutex may be unlocked,
//! taken by the next holder, destroyed and freed while its unlocker is
//! still returning (glibc bug 13690); until this word carried SPINNER,
//! the unlock released first and then read the spinner slot and cleared
//! WAITERS.
//! A free word may still carry WAITERS, SPINNER and a probe's COUNTING
//! and count: lock takes it keeping them. A word with HANDOFF and no
//! owner is *reserved*: its unlocker is handing it to the starving
//! requester, and nobody else may take it (see
//! `is_free`), so the unlocker may still touch it.
//!
//! Starvation is bounded by *handoff*: a waiter passed over for longer than
//! the bound (`config::handoff_bound`, 1 ms by default) claims the `handoff`
//! slot and sets HANDOFF; the next unlock then gives the lock to it instead
//! of releasing it. Handing a lock to a thread that is not running stalls
//! everybody until it gets a CPU, which is how fair locks collapse under
//! oversubscription; so the requester keeps spinning while the owner runs
//! (it will usually be on a CPU when the lock arrives), and only a waiter
//! passed over for a whole bound asks, so handoffs stay rare next to the
//! acquisitions that barge, and so do their convoys. Other waiters starving
//! meanwhile queue for the slot in FIFO order, on the slot's futex
//! (bitset-woken apart from the requester): back on the lock word's
//! queue, every barging thread would go ahead of them again. The freed
//! slot is never held for the sleeper woken from that queue (a running
//! starving waiter may take it first, so no handoff waits for a sleeper to
//! be scheduled), but a woken waiter beaten to it keeps its place at the
//! head of the queue, and does not take the lock while another holds the
//! slot. Under heavy oversubscription most threads wait in that queue and
//! the rest keep the lock busy (concurrency restriction, as in Malthusian
//! locks); a woken thread then takes milliseconds to get a CPU, so while
//! claims of the freed slot come that slowly, a freed slot wakes sixteen
//! of the queue and the first to run claims it (see `wake_next_in_line`).
//!
//! Pick `adaptive` by default: it is as cheap as a plain futex mutex when
//! uncontended, spins through short and microsecond critical sections, and
//! sleeps rather than burns CPU when the owner is off CPU.

use crate::clock::{self, SpinBudget};
use crate::config;
use crate::idle_cpu;
use crate::oracle::{OwnerState, OwnerWatch};
use crate::record::{self, AcquireKind, NoStats, Recorder};
use crate::sync::{
    current_tid, futex_wait, futex_wait_bits, futex_wake, futex_wake_bits, spin_hint, AtomicU32,
    Ordering, WaitOutcome,
};
#[cfg(not(loom))]
use std::sync::atomic::AtomicU64;
use std::time::Instant;

/// Mask of the owner tid in the lock word (Linux thread ids stay below
/// 2^22, `PID_MAX_LIMIT`).
const OWNER_MASK: u32 = (1 << 22) - 1;
/// While a probe's window is open (COUNTING, see
/// `count_kept_acquisitions`), every release adds one here, up to the
/// field's maximum. (Counted in the unlock's contended path, where a word
/// with flags goes anyway: counting in `try_acquire`, inlined into every
/// lock, cost `lockmeter bench dir` 3-6% at 2 threads though it never
/// counted there.)
const COUNT_ONE: u32 = 1 << 22;
const COUNT_MASK: u32 = 0x1f << 22;
const COUNTING: u32 = 1 << 27;
/// Set beside the owner by a waiter that took the lock in a probe, to time
/// its hold (see `count_kept_acquisitions`): the word no longer equals the
/// owner's id, so its unlock takes the contended path, which ends the
/// timing.
const TIMED: u32 = 1 << 28;
/// Set, while sleepers are announced (WAITERS), by the one waiter spinning
/// on the owner, and cleared when it stops: an unlock that finds it leaves
/// the lock to that waiter instead of waking a sleeper. Without sleepers
/// the unlock has nothing to decide, and the bit stays off so that the
/// owner's compare-exchanges (0 -> tid, tid -> 0) keep succeeding while a
/// waiter spins (set whenever a waiter spun, it cost `sem` at 2-256
/// threads 10-40%: every lock and unlock of a looping owner failed its
/// first compare-exchange).
const SPINNER: u32 = 1 << 29;
/// Set while the next unlock must hand the lock to the `handoff` requester.
/// Invariant: HANDOFF set on a held word implies `handoff` holds an
/// unclaimed request; on a word without owner (reserved), the unlocker that
/// cleared the owner is claiming or has claimed it.
const HANDOFF: u32 = 1 << 30;
/// Set while some waiter may be asleep on the lock word.
const WAITERS: u32 = 1 << 31;

/// A released `word` with the release counted, if a probe's window is open
/// (see `count_kept_acquisitions`).
#[inline(always)]
fn counted(word: u32) -> u32 {
    if word & COUNTING != 0 && word & COUNT_MASK != COUNT_MASK {
        word + COUNT_ONE
    } else {
        word
    }
}

/// True for about one in 2^`bits` readings of the cycle counter. Its low
/// bits may be fixed (a guest's scaled TSC): hash the whole reading, then
/// take the top bits.
fn one_in_2_to_the(bits: u32, reading: u64) -> bool {
    reading.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits) == 0
}

/// A waiter found the word reserved: its unlocker is between the release
/// and the hand-over, a few atomic operations, unless it was preempted
/// there; yielding lets it finish on this CPU if so.
fn yield_to_unlocker() {
    #[cfg(not(loom))]
    std::thread::yield_now();
    #[cfg(loom)]
    spin_hint();
}

/// Whether a waiter may take the lock from `word`: no owner, and no
/// hand-over in flight (a reserved word belongs to the handoff requester).
fn is_free(word: u32) -> bool {
    word & (OWNER_MASK | HANDOFF) == 0
}

/// In the handoff slot: the unlocker has taken the request (it can no
/// longer be withdrawn).
const CLAIMED: u32 = 1 << 30;
/// In the handoff slot: the requester now owns the lock.
const GRANTED: u32 = 1 << 31;
/// In the handoff slot: the request's HANDOFF came between an unlock's
/// read of the word and its exchange, which released the lock and took
/// the flag with it (see `flags_taken_by_the_release`): the requester is
/// to flag the word again. Until it is told, it may not withdraw (its
/// unlocker writes this bit, and may do so only while somebody waits on
/// the lock).
const FLAG_AGAIN: u32 = 1 << 29;
/// In the handoff slot, beside the id of a thread of a child of `fork`:
/// that thread is taking back a parent thread's request (see
/// `withdraw_for_a_parent_thread`). The slot stays taken until it has
/// cleared the request's HANDOFF, so no later request can be flagged
/// before that clear and lose its flag to it.
const WITHDRAWING: u32 = 1 << 28;

/// Futex bits of the three kinds of sleeper on the handoff slot: the
/// requester waiting for its grant; starving waiters queued for the slot
/// itself; and queued waiters that were woken once and lost the slot
/// (`HEAD_BITS`), woken before the others (see `wake_next_in_line`). Each
/// kind is woken without waking the others.
const REQUESTER_BITS: u32 = 1;
const QUEUED_BITS: u32 = 2;
const HEAD_BITS: u32 = 4;
/// How many of the handoff slot's queue a freed slot wakes at once while
/// claims come slowly and many wait (see `wake_next_in_line`).
#[cfg(not(loom))]
const SLOT_WAKE_BATCH: u32 = 16;
/// Claims of the freed slot come slowly when they take longer than this
/// after the wake, on average.
#[cfg(not(loom))]
const SLOW_CLAIM_NS: u64 = 2_000_000;
/// Many wait when at least this many threads of the process sleep in
/// handoff queues. With 10 µs sections (P=20000 D=50) at 16 threads,
/// where at most 15 can queue, claims also averaged 1.4-1.8 ms, and
/// batches lengthened the p99 wait from 0.7-1.5 ms to 2.2-4.2 ms.
#[cfg(not(loom))]
const MANY_QUEUED: u32 = 32;

/// The handoff slots' queues, over the process's locks: how long a
/// queue takes to claim its slot after a wake, and how many threads
/// sleep in them. The delay is the scheduler's (how soon a woken thread
/// gets a CPU), which every lock of the process sees alike; pairing one
/// lock's wake with another's claim reads it short, which only keeps
/// the single wake.
#[cfg(not(loom))]
struct SlotQueues {
    /// When a queue was last woken (cycles).
    woken_at: AtomicU64,
    /// The delay from a wake to the next claim, averaged over the last
    /// ~32 claims (ns): in `dir` most claims come within 250 µs and a few
    /// after 1.3-2 ms (a running waiter newly past the bound), and a
    /// shorter average crossed the threshold on those.
    average_claim_ns: AtomicU64,
    /// Threads asleep in a queue now.
    sleeping: AtomicU32,
}

#[cfg(not(loom))]
static SLOT_QUEUES: SlotQueues = SlotQueues::new();

#[cfg(not(loom))]
impl SlotQueues {
    const fn new() -> Self {
        SlotQueues { woken_at: AtomicU64::new(0), average_claim_ns: AtomicU64::new(0), sleeping: AtomicU32::new(0) }
    }

    fn woke(&self) {
        self.woken_at.store(clock::cycles(), Ordering::Relaxed);
    }

    /// A waiter claimed a slot. (A plain load and store: a racing
    /// claim's update may be lost, which only delays the average.)
    fn claimed(&self) {
        let since_wake = clock::cycles().wrapping_sub(self.woken_at.load(Ordering::Relaxed));
        let delay_ns = clock::cycles_to_ns(since_wake).min(8 * SLOW_CLAIM_NS);
        let average = self.average_claim_ns.load(Ordering::Relaxed);
        self.average_claim_ns.store(average - average / 32 + delay_ns / 32, Ordering::Relaxed);
    }

    /// A waiter goes to sleep in a queue.
    fn fell_asleep(&self) {
        self.sleeping.fetch_add(1, Ordering::Relaxed);
    }

    /// A waiter asleep in a queue woke.
    fn woke_up(&self) {
        self.sleeping.fetch_sub(1, Ordering::Relaxed);
    }

    /// How many queued waiters a freed slot should wake.
    fn wake_batch(&self) -> u32 {
        let many_wait = self.sleeping.load(Ordering::Relaxed) >= MANY_QUEUED;
        if many_wait && self.average_claim_ns.load(Ordering::Relaxed) > SLOW_CLAIM_NS {
            SLOT_WAKE_BATCH
        } else {
            1
        }
    }
}

/// The longest a waiter spins on a running owner (the budget's cap). A
/// futex sleep and wake-up costs a few microseconds on each side; past
/// ~100 µs of spinning the CPU burnt is worth more than the latency saved.
const MAX_SPIN_NS: u32 = 100_000;
/// The budget never shrinks below this: short spins are nearly free and
/// cover the common sub-microsecond critical section.
const MIN_SPIN_NS: u32 = 2_048;
/// How long a waiter queued behind the spinner reads the word before it
/// sleeps: about the cost of a futex sleep and wake-up, which it saves when
/// the critical section is short.
const QUEUED_SPIN_NS: u64 = 2_000;
/// How long a waiter may spin again, per wake-up, while sleeping would
/// leave a CPU idle (see `idle_cpu.rs`).
const IDLE_CPU_SPIN_NS: u64 = 100_000;
/// The spinner's wait between two reads of the lock word doubles, from one
/// pause, up to this: a tenth of the shortest critical section spinning
/// is for, so a release is seen at most that late. (Time, not a count of
/// pauses: a pause lasts 10 ns on one core and 50 on the next.)
const MAX_SPIN_BACKOFF_NS: u64 = 400;
/// Below that cap the wait is also at most this fraction (1/16) of the
/// time spun so far, so a release is seen within ~6% of the wait however
/// short the section (seed 003's proportional backoff, in time): a 2 µs
/// section seen up to 400 ns late loses a tenth of the lock's throughput
/// at 2 threads.
const SPIN_BACKOFF_SHARE: u64 = 16;
/// Budget of a fresh lock (a zeroed budget field reads as this).
const INITIAL_SPIN_NS: u32 = MAX_SPIN_NS / 2;
/// The grace a spinner gives a releasing owner to take the lock back:
/// adapted per lock to twice the longest return seen, between these.
/// The grace pays only while the owner comes back sooner than the lock
/// would move to the spinner (a few cache-line transfers, ~100-200 ns):
/// an owner away longer leaves the lock idle for the whole grace, and a
/// grace that covers it makes the spinner watch the owner re-take the
/// lock again and again (a 500 ns section with 500 ns between acquisitions
/// ran at half speed with a 3 µs cap).
const MIN_GRACE_NS: u32 = 48;
const MAX_GRACE_NS: u32 = 256;
/// A lock whose last seven graces all missed still gives one at one
/// release in 2^this (see `grace_worth_giving`).
const FLOOR_GRACE_SAMPLE_BITS: u32 = 4;
/// A return within this counts as at once (one or two reads of the word).
const AT_ONCE_RETURN_NS: u32 = 128;
/// Grace of a fresh lock.
const INITIAL_GRACE_NS: u32 = 96;
/// The spinner's wait before its next read after the owner came back at
/// once: such an owner loops around a short critical section, and every
/// read costs it a cache miss. Worse, a spinner whose budget runs out
/// while it watches sleeps, and the owner pays a futex wake for it at its
/// next unlock: the longer this wait, the rarer those wakes. 24 µs, a few
/// futex sleep-and-wake costs, is still soon enough to see the owner leave
/// (in `sem`, parking_lot's ratio at 2/4/16/64/256 threads, medians of 6
/// alternated runs: 0.90/0.77/0.52/0.69/0.67x at 12 µs, 1.21/1.00/0.74/
/// 0.80/0.82x at 24 µs), and the handoff bound serves a spinner it never
/// leaves to.
const RETURNING_OWNER_BACKOFF_NS: u64 = 24_000;
/// The wait between two reads of the lock word during the grace.
const GRACE_POLL_NS: u64 = 24;
/// The longest grace on a lock that keeps with its owner (see
/// `count_kept_acquisitions`): such an owner may do more between two
/// acquisitions than a quick loop (the bundled cache program takes a
/// second lock and a reader lock between two lookups), and waiting that
/// out is still cheaper than moving the lock.
const KEEPING_MAX_GRACE_NS: u32 = 2_000;
/// How long a probe leaves the lock to its owner, counting releases.
/// Long enough for a dozen short loops, short enough to cost a lock that
/// should be handed over little.
#[cfg(not(loom))]
const PROBE_WINDOW_NS: u64 = 4_000;
/// One release in 2^this that a spinner sees is probed: rarely on a lock
/// that hands over (the window costs it), often on one that keeps (the
/// window is what it does anyway).
#[cfg(not(loom))]
const HANDING_OVER_PROBE_BITS: u32 = 11;
#[cfg(not(loom))]
const KEEPING_PROBE_BITS: u32 = 4;
/// While a waiter spins, unlocks leave the sleepers asleep (see
/// `unlock_contended`); so that none starves, the spinner, which is only
/// waiting anyway, wakes the longest sleeper if none was woken for this
/// long (and so does a waiter about to sleep: a preempted spinner wakes
/// nobody). The sleeper, if passed over for the handoff bound, then asks for
/// the lock. ~10 000 wakes a second at most, paid off the owner's CPU.
const SLEEPER_WAKE_INTERVAL_NS: u64 = 100_000;
/// The unit of the last-wake stamp kept in the tuning word (7 bits, so the
/// stamp wraps every ~2 ms: a wrap can delay a wake by one interval).
const WAKE_STAMP_UNIT_NS: u64 = 16_384;
const WAKE_STAMP_MASK: u32 = 0x7f;
const WAKE_INTERVAL_STAMPS: u32 = (SLEEPER_WAKE_INTERVAL_NS / WAKE_STAMP_UNIT_NS) as u32;

/// The spinner's next wait between reads, in pauses, after waiting
/// `pauses` and spinning `spun_ns` in all: doubled, up to `max_pauses`
/// and to a `SPIN_BACKOFF_SHARE`th of the time spun.
#[inline]
fn next_spin_backoff(pauses: u32, max_pauses: u32, spun_ns: u64) -> u32 {
    let proportional = clock::pauses_in(spun_ns / SPIN_BACKOFF_SHARE);
    pauses.saturating_mul(2).min(max_pauses).min(proportional)
}

/// Now, in the units of the last-wake stamp.
fn wake_stamp_now() -> u32 {
    (clock::cycles_to_ns(clock::cycles()) / WAKE_STAMP_UNIT_NS) as u32 & WAKE_STAMP_MASK
}

/// Whether a sleeper is overdue for a wake at stamp `now`, the last one
/// having been woken at stamp `last` (both wrap at the mask).
fn sleeper_wake_due(now: u32, last: u32) -> bool {
    now.wrapping_sub(last) & WAKE_STAMP_MASK >= WAKE_INTERVAL_STAMPS
}

/// Per-lock tuning, one word, from the low bits up: the spin budget in
/// units of 32 ns (12 bits); when a sleeper was last woken for being
/// overdue (7 bits, see `SLEEPER_WAKE_INTERVAL_NS`); the grace in units of
/// 16 ns (7 bits); how many graces in a row found no owner coming back (3
/// bits, saturating); and the hand-over votes (3 bits, see
/// [`Tuning::keeps_lock_with_owner`]). 0 in the budget or the grace reads
/// as its initial value. Updates are plain load-modify-store: a racing
/// update may be lost, which only delays the adaptation by one spin.
#[derive(Clone, Copy)]
struct Tuning(u32);

impl Tuning {
    const BUDGET_UNIT_NS: u32 = 32;
    const BUDGET_MASK: u32 = (1 << 12) - 1;
    const WAKE_SHIFT: u32 = 12;
    const GRACE_SHIFT: u32 = 19;
    const GRACE_UNIT_NS: u32 = 16;
    const GRACE_UNITS_MASK: u32 = 0x7f;
    const MISSES_SHIFT: u32 = 26;
    const MISSES_MAX: u32 = 7;
    const VOTES_SHIFT: u32 = 29;
    const VOTES_MAX: u32 = 7;

    fn spin_budget_ns(self) -> u32 {
        match self.0 & Self::BUDGET_MASK {
            0 => INITIAL_SPIN_NS,
            units => units * Self::BUDGET_UNIT_NS,
        }
    }

    fn with_spin_budget_ns(self, ns: u32) -> Tuning {
        let units = (ns / Self::BUDGET_UNIT_NS).clamp(1, Self::BUDGET_MASK);
        Tuning((self.0 & !Self::BUDGET_MASK) | units)
    }

    fn last_wake_stamp(self) -> u32 {
        (self.0 >> Self::WAKE_SHIFT) & WAKE_STAMP_MASK
    }

    fn with_last_wake_stamp(self, stamp: u32) -> Tuning {
        Tuning((self.0 & !(WAKE_STAMP_MASK << Self::WAKE_SHIFT)) | (stamp & WAKE_STAMP_MASK) << Self::WAKE_SHIFT)
    }

    /// The grace as learnt, within the bound of the current policy.
    fn grace_ns(self) -> u32 {
        let learnt = match (self.0 >> Self::GRACE_SHIFT) & Self::GRACE_UNITS_MASK {
            0 => INITIAL_GRACE_NS,
            units => units * Self::GRACE_UNIT_NS,
        };
        learnt.min(self.max_grace_ns())
    }

    fn with_grace_ns(self, ns: u32) -> Tuning {
        let units = ns.clamp(MIN_GRACE_NS, self.max_grace_ns()) / Self::GRACE_UNIT_NS;
        Tuning((self.0 & !(Self::GRACE_UNITS_MASK << Self::GRACE_SHIFT)) | units << Self::GRACE_SHIFT)
    }

    /// The longest grace: an owner that keeps the lock may be waited for
    /// longer (see `KEEPING_MAX_GRACE_NS`).
    fn max_grace_ns(self) -> u32 {
        if self.keeps_lock_with_owner() {
            KEEPING_MAX_GRACE_NS
        } else {
            MAX_GRACE_NS
        }
    }

    /// Graces in a row that ended with the lock still free (saturating).
    fn grace_misses(self) -> u32 {
        (self.0 >> Self::MISSES_SHIFT) & Self::MISSES_MAX
    }

    fn with_grace_misses(self, misses: u32) -> Tuning {
        Tuning((self.0 & !(Self::MISSES_MAX << Self::MISSES_SHIFT)) | misses.min(Self::MISSES_MAX) << Self::MISSES_SHIFT)
    }

    /// Whether the probes found that this lock does more work left with
    /// its owner than handed to its waiters (see
    /// `count_kept_acquisitions`): a saturating count of votes, up for
    /// keeping and down for handing over, read as keeping from the middle
    /// up. A fresh lock hands over.
    fn keeps_lock_with_owner(self) -> bool {
        self.votes() > Self::VOTES_MAX / 2
    }

    fn votes(self) -> u32 {
        self.0 >> Self::VOTES_SHIFT
    }

    #[cfg(not(loom))]
    fn with_vote(self, keep: bool) -> Tuning {
        let votes = if keep { (self.votes() + 1).min(Self::VOTES_MAX) } else { self.votes().saturating_sub(1) };
        Tuning((self.0 & !(Self::VOTES_MAX << Self::VOTES_SHIFT)) | votes << Self::VOTES_SHIFT)
    }
}

/// What a probe's window measured of the lock left with its owner: the
/// cycles per acquisition, or `None` if nobody released it in the window.
#[cfg(not(loom))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct KeptCycle(Option<u64>);

#[cfg(not(loom))]
impl KeptCycle {
    /// From a window of `window` cycles that counted `releases`
    /// (saturated at the field's maximum, which makes it an upper bound).
    fn of(window: u64, releases: u32) -> Self {
        KeptCycle((releases != 0).then(|| window / u64::from(releases)))
    }

    /// Whether keeping is the shorter way, against `handed_over` cycles
    /// per acquisition handed over. A window nobody took the lock in says
    /// the owner does not come back soon: handing over wins. (Asking
    /// keeping to win by an eighth, to favour fairness, left the cache
    /// program's lock handing over about half the time: its window pays
    /// a slow lock and unlock per acquisition, COUNTING being set, and
    /// reads 300-450 ns against 450-600 handed over.)
    fn shorter_than(self, handed_over: u64) -> bool {
        self.0.is_some_and(|kept| kept < handed_over)
    }
}

/// A probe's hold, timed until its unlock (see `count_kept_acquisitions`).
#[cfg(not(loom))]
#[derive(Clone, Copy)]
struct TimedHold {
    /// The lock's address.
    lock: usize,
    /// When the probe saw the release it took.
    seen_free_at: u64,
    kept: KeptCycle,
}

#[cfg(not(loom))]
thread_local! {
    static TIMED_HOLD: std::cell::Cell<Option<TimedHold>> = const { std::cell::Cell::new(None) };
}

/// The raw `adaptive` mutex. `R` receives statistics ([`NoStats`] records
/// nothing, at no cost).
#[repr(C)]
pub struct RawAdaptive<R: Recorder = NoStats> {
    word: AtomicU32,
    /// tid of the one waiter allowed to spin on `word`, or 0. While
    /// sleepers are announced it also sets SPINNER in the word, which is
    /// what the unlock reads.
    spinner: AtomicU32,
    /// A starving waiter's request: its tid, plus CLAIMED / GRANTED.
    handoff: AtomicU32,
    /// What this lock has learnt of its owners (see [`Tuning`]).
    tuning: AtomicU32,
    recorder: R,
}

/// How a grace given to a releasing owner ended.
#[derive(Debug, PartialEq, Eq)]
enum Grace {
    /// The owner took the lock back; `stays`: it will keep it a while, so
    /// the spinner backs off long: it came back within a couple of reads,
    /// as an owner looping around a short critical section does, or this
    /// lock keeps with its owner (see `count_kept_acquisitions`).
    Returned { stays: bool },
    /// Another thread took it.
    OwnerChanged,
    /// Nobody took it: the word as last read.
    StillFree(u32),
}

/// How one spin ended.
#[derive(Debug, PartialEq, Eq)]
enum SpinEnd {
    Acquired,
    /// Somebody else took the lock (seed 000: stop and queue).
    OwnerChanged,
    /// The owner is off CPU (seed 002: `rq->curr != owner`).
    OwnerNotRunning,
    /// Spun for the whole budget; the owner holds the lock too long.
    /// `held_throughout`: one owner held it the whole time (the spinner
    /// never saw it free or change hands), so how long a spin would have
    /// been enough is learnt only when this waiter gets the lock (see
    /// `learn_from_outlasted_spin`).
    BudgetSpent { held_throughout: bool },
    /// Spinning was switched off, or the deadline passed.
    Stopped,
}

impl<R: Recorder> RawAdaptive<R> {
    crate::sync::const_unless_loom! {
        /// An unlocked mutex.
        pub fn new() -> Self {
            RawAdaptive {
                word: AtomicU32::new(0),
                spinner: AtomicU32::new(0),
                handoff: AtomicU32::new(0),
                tuning: AtomicU32::new(0),
                recorder: R::INIT,
            }
        }
    }

    /// The statistics recorder.
    pub fn recorder(&self) -> &R {
        &self.recorder
    }

    /// Acquires the lock, sleeping if needed.
    #[inline]
    pub fn lock(&self) {
        let tid = current_tid();
        if self.try_acquire(tid) {
            self.recorder.acquired(AcquireKind::NoWait, 0);
            return;
        }
        self.lock_contended(tid, None);
    }

    /// Acquires the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> bool {
        let tid = current_tid();
        let ok = self.try_acquire(tid);
        if ok {
            self.recorder.acquired(AcquireKind::NoWait, 0);
        } else {
            self.recorder.rejected();
        }
        ok
    }

    /// Acquires the lock unless `deadline` passes first.
    pub fn lock_until(&self, deadline: Instant) -> bool {
        let tid = current_tid();
        if self.try_acquire(tid) {
            self.recorder.acquired(AcquireKind::NoWait, 0);
            return true;
        }
        self.lock_contended(tid, Some(deadline))
    }

    /// Takes the lock if it is free: 0 -> tid, or, on a free word with
    /// flags (sleepers announced, a waiter spinning), the flags kept.
    #[inline(always)]
    fn try_acquire(&self, tid: u32) -> bool {
        match self.word.compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => true,
            Err(word) => {
                is_free(word)
                    && self.word.compare_exchange(word, tid | word, Ordering::Acquire, Ordering::Relaxed).is_ok()
            }
        }
    }

    /// Releases the lock.
    ///
    /// # Safety
    /// The calling thread must hold the lock.
    #[inline]
    pub unsafe fn unlock(&self) {
        let tid = current_tid();
        if cfg!(any(loom, debug_assertions)) && !crate::sync::forked() {
            let owner = self.word.load(Ordering::Relaxed) & OWNER_MASK;
            check_protocol(owner == tid, "an unlock by a thread that does not hold the lock");
        }
        self.recorder.releasing();
        // A read, then, on a word that holds the caller's id and nothing
        // else, an exchange with 0, as std's and futex-tid's unlocks
        // release; any other word (flags, or a parent thread's id in a
        // child of `fork`) goes to `release_word`, whose compare-exchange
        // releases it and decides the wake in one step. The exchange,
        // not a compare-exchange or a subtraction: after a critical
        // section that stores, the other two slow the whole loop on the
        // AMD EPYC guest (`lockmeter bench dir` at one thread, alternated
        // builds in the host's fast phase, Mops/s against std's 36-37:
        // compare-exchange 27.8-28.4, subtraction 29.5-31.1, read and
        // exchange 35.5-36.8, exchange alone 37.0-37.1). The read costs
        // nothing there, and on a word with flags it replaces a failed
        // compare-exchange. A flag can still come between the read and
        // the exchange, which then frees the word without it: what the
        // flag asked for is done after the release (see
        // `flags_taken_by_the_release`).
        if let Err(word) = self.release_as(tid) {
            self.release_word(word);
        }
    }

    /// The uncontended release: on a word read to hold `tid` alone, an
    /// exchange with 0; a flag that came between the two is served after.
    /// On any other word nothing is done, and the word is returned.
    #[inline(always)]
    fn release_as(&self, tid: u32) -> Result<(), u32> {
        let word = self.word.load(Ordering::Relaxed);
        if word != tid {
            return Err(word);
        }
        #[cfg(all(test, not(loom)))]
        tests::BETWEEN_READ_AND_EXCHANGE.with(|hook| {
            if let Some(flag) = hook.get() {
                flag(std::ptr::from_ref(self).cast());
            }
        });
        // AcqRel: a HANDOFF it takes makes the request it flags visible.
        let was = self.word.swap(0, Ordering::AcqRel);
        self.released();
        if was != tid {
            self.flags_taken_by_the_release(was);
        }
        Ok(())
    }

    /// A waiter flagged the word between the unlock's read and its
    /// exchange, which released the lock and cleared the flags in
    /// `was`. Nothing of the lock may be touched after a release unless
    /// somebody still waits on it (a mutex may be freed by its next
    /// holder at once), so:
    /// - WAITERS: wake one sleeper, who marks the word again when it takes
    ///   the lock or sleeps (as after the contended unlock, which clears
    ///   the mark and wakes one); with a spinner (SPINNER) the contended
    ///   unlock would leave the waking to it, but the mark it would keep
    ///   is gone, so wake anyway. The wake takes the address only.
    /// - HANDOFF: a starving waiter asked for the lock and waits for it.
    ///   Its request is unclaimed in the slot, and the requester may not
    ///   withdraw it while its flag is missing (see `withdraw_handoff`),
    ///   so the slot is ours to write: mark it FLAG_AGAIN and wake the
    ///   requester, which flags the word again (now held by another
    ///   thread, or free, when it competes for it as any waiter). The
    ///   barging thread that took the word meanwhile is the starvation
    ///   this costs: one acquisition, in a window of nanoseconds.
    /// - SPINNER: nothing; the spinner's own clearing tolerates it gone.
    /// - COUNTING (a probe's window opened in the gap): the window counts
    ///   nothing more and votes for handing over; one vote of several.
    ///
    /// `errno` is left as it was: a pthread replacement's uncontended
    /// unlock releases this way and promises the program no system call
    /// that could change it (a wake on memory freed meanwhile fails).
    #[cold]
    fn flags_taken_by_the_release(&self, was: u32) {
        crate::futex::keeping_errno(|| {
            if was & HANDOFF != 0 {
                // (The exchange's acquire made the request visible. The
                // flag came after the unlock's read: a live thread's, whose
                // request stays open until told, also in a child of
                // `fork`, where a parent thread's flag was on the word
                // before any read there, and is taken back holding the
                // slot: see `withdraw_for_a_parent_thread`.)
                let told = self.mark_open_request(FLAG_AGAIN).is_some();
                check_protocol(told, "a HANDOFF taken by a release without its request waiting");
                if told {
                    futex_wake_bits(&self.handoff, 1, REQUESTER_BITS);
                }
            }
            if was & WAITERS != 0 {
                futex_wake(&self.word, 1);
            }
        });
    }

    /// Releases the lock on behalf of whichever thread holds it, as
    /// `pthread_mutex_unlock` of a normal mutex allows (the C ABI and the
    /// pthread replacement use it).
    ///
    /// # Safety
    /// The lock must be held, and its holder must not also release it.
    pub unsafe fn unlock_from_any_thread(&self) {
        let word = self.word.load(Ordering::Relaxed);
        if word & OWNER_MASK != 0 {
            self.recorder.releasing();
            self.release_word(word);
        }
    }

    /// Releases the lock for the thread its word names, `word` being a
    /// recent read of it (only the holder writes a held word's owner bits,
    /// so the owner it names is current; flags may have come since).
    fn release_word(&self, word: u32) {
        let owner = word & OWNER_MASK;
        if word != owner {
            // A word with flags: the contended path's compare-exchange
            // releases it and decides the wake in one step.
            return self.unlock_contended(owner, word);
        }
        // A subtraction of the owner's id (`lock xadd`): only flags can
        // come meanwhile, and it keeps them and returns them.
        // AcqRel: a HANDOFF read here makes the request it flags visible.
        let was = self.word.fetch_sub(owner, Ordering::AcqRel);
        if was == owner {
            self.released();
        } else {
            self.flagged_while_releasing(was);
        }
    }

    /// A flag came between `release_word`'s read and its subtraction,
    /// which released the lock keeping it: `was` is the word just before.
    #[cold]
    fn flagged_while_releasing(&self, was: u32) {
        if was & HANDOFF != 0 {
            // A starving waiter asked just now: the word is reserved for
            // it (HANDOFF, no owner), as the contended unlock leaves it.
            return self.hand_over_reserved();
        }
        self.released();
        if was & WAITERS != 0 && was & SPINNER == 0 {
            // A waiter announced itself, and may already sleep on the word
            // as it was. WAITERS stays on the free word (nothing may touch
            // a released lock), and the next unlock, finding it, takes the
            // contended path, which clears it. A probe's window opened
            // meanwhile misses this release: a count, not the protocol.
            futex_wake(&self.word, 1);
        }
    }

    /// Marks the point after which a releasing thread must not touch the
    /// lock: another thread may have taken, destroyed and freed it. Tests
    /// hook in here to reuse the memory as a new owner would.
    #[inline(always)]
    fn released(&self) {
        #[cfg(all(test, not(loom)))]
        tests::AFTER_RELEASE.with(|hook| {
            if let Some(reuse) = hook.get() {
                reuse(std::ptr::from_ref(self).cast());
            }
        });
    }

    /// Whether some thread holds the lock (or it is being handed over).
    pub fn is_locked(&self) -> bool {
        !is_free(self.word.load(Ordering::Relaxed))
    }

    /// Forgets every waiter and leaves the lock held by thread `tid`: for a
    /// child of `fork`, where the thread that forked keeps the locks it
    /// held (`tid` is its id in the child) and the other threads the state
    /// names do not exist.
    ///
    /// # Safety
    /// No other thread may use the lock during the call, and `tid` is to
    /// unlock it.
    pub unsafe fn reset_to_held_by(&self, tid: u32) {
        self.spinner.store(0, Ordering::Relaxed);
        self.handoff.store(0, Ordering::Relaxed);
        self.word.store(tid & OWNER_MASK, Ordering::Release);
    }

    /// The holder's kernel thread id, if held.
    pub fn owner(&self) -> Option<u32> {
        let owner = self.word.load(Ordering::Relaxed) & OWNER_MASK;
        (owner != 0).then_some(owner)
    }

    #[cold]
    fn lock_contended(&self, tid: u32, deadline: Option<Instant>) -> bool {
        let mut owes_queue_a_wake = false;
        let acquired = self.lock_contended_loop(tid, deadline, &mut owes_queue_a_wake);
        if owes_queue_a_wake {
            // Woken as the next in line for the handoff slot but left
            // without taking it: wake the next one, or the queue would
            // sleep on with the slot free.
            self.wake_next_in_line();
        }
        acquired
    }

    fn lock_contended_loop(&self, tid: u32, deadline: Option<Instant>, owes_queue_a_wake: &mut bool) -> bool {
        let wait_start = record::wait_start::<R>();
        let started = clock::cycles();
        let handoff_after = clock::ns_to_cycles(config::handoff_bound().as_nanos() as u64);
        let mut may_spin = config::spinning_enabled();
        let mut spun = false;
        let mut slept = false;
        // When a spin that one owner outlasted began (see `learn_from_outlasted_spin`).
        let mut outlasted_spin_began = None;
        // Until when this wake-up may spin again rather than leave a CPU
        // idle, and whether the last spin saw the owner off its CPU.
        let mut idle_spin_until = None;
        let mut owner_off_cpu = false;
        loop {
            let word = self.word.load(Ordering::Relaxed);

            // The lock is being handed to a starving waiter: its unlocker
            // is between two atomic operations, done in a moment.
            // A timed waiter still gives up on time: the unlocker may have
            // been preempted there.
            if word & OWNER_MASK == 0 && !is_free(word) {
                if crate::sync::deadline_passed(deadline) {
                    return self.give_up(slept, wait_start);
                }
                yield_to_unlocker();
                continue;
            }

            // Woken from the handoff slot's queue, in a batch, and another
            // starving waiter holds the slot: back to the queue's head,
            // without taking the lock even if it is free (see
            // `wake_next_in_line`). (Its spin was spent before it queued.)
            let queued_behind_the_slot = *owes_queue_a_wake && self.handoff.load(Ordering::Relaxed) != 0;

            // The lock is free: take it, keeping the flags (a spinner may
            // be spinning). A thread that has slept sets WAITERS, since
            // others may still sleep behind it.
            if is_free(word) && !queued_behind_the_slot {
                let keep = (word & (WAITERS | SPINNER | COUNTING | COUNT_MASK)) | if slept { WAITERS } else { 0 };
                if self
                    .word
                    .compare_exchange(word, tid | keep, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return self.acquired_after_wait(slept, wait_start, outlasted_spin_began);
                }
                continue;
            }

            // Spin on the owner, if nobody else is spinning already; once
            // per wake-up at most.
            if may_spin && self.become_the_spinner(tid) {
                if word & WAITERS != 0 {
                    // Sleepers are announced: tell the unlock a spinner
                    // will take the lock (see `SPINNER`).
                    self.word.fetch_or(SPINNER, Ordering::Relaxed);
                }
                may_spin = false;
                spun = true;
                let keep = if slept { WAITERS } else { 0 };
                let spin_began = clock::cycles();
                let end = self.spin_on_owner(word & OWNER_MASK, tid | keep, deadline);
                owner_off_cpu = end == SpinEnd::OwnerNotRunning;
                if end == SpinEnd::Acquired {
                    // (Taking the word cleared SPINNER.)
                    self.spinner.store(0, Ordering::Relaxed);
                    return self.acquired_after_wait(slept, wait_start, outlasted_spin_began);
                }
                if end == (SpinEnd::BudgetSpent { held_throughout: true }) {
                    outlasted_spin_began = Some(spin_began);
                }
                // Stop spinning, then read the word again (the loop's
                // first read): an unlock that saw us spinning left its
                // wake undone, trusting us to take the lock. Clearing the
                // bit and the unlock's release are atomic operations on
                // the same word: either the unlock sees the bit gone and
                // wakes, or we see the lock free and take it.
                self.spinner.store(0, Ordering::Relaxed);
                if self.word.load(Ordering::Relaxed) & SPINNER != 0 {
                    self.word.fetch_and(!SPINNER, Ordering::Relaxed);
                }
                continue;
            }

            // Somebody else spins on the owner: queue behind it briefly
            // instead of sleeping at once (the rest of the OSQ idea: a queued
            // spinner only reads, so it adds no cache-line traffic). Most
            // critical sections are shorter than a sleep and a wake-up.
            if may_spin {
                may_spin = false;
                spun = true;
                let keep = if slept { WAITERS } else { 0 };
                if self.wait_behind_spinner(tid | keep) {
                    return self.acquired_after_wait(slept, wait_start, outlasted_spin_began);
                }
                continue;
            }

            if crate::sync::deadline_passed(deadline) {
                return self.give_up(slept, wait_start);
            }

            // Passed over for too long: ask the owner to hand the lock over.
            if (spun || slept) && clock::cycles().wrapping_sub(started) > handoff_after {
                match self.handoff.compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => {
                        #[cfg(not(loom))]
                        SLOT_QUEUES.claimed();
                        // Freeing the slot wakes the next in line, whatever
                        // the outcome.
                        *owes_queue_a_wake = false;
                        match self.wait_for_handoff(tid, deadline) {
                            Some(true) => return self.acquired_after_wait(true, wait_start, outlasted_spin_began),
                            Some(false) => return self.give_up(true, wait_start),
                            None => continue, // the lock was free: compete for it normally
                        }
                    }
                    // A parent thread's request, left by `fork`: no unlock
                    // would free the slot before it is flagged, and queued
                    // waiters would sleep for ever.
                    Err(_) if self.withdraw_for_a_parent_thread() => continue,
                    Err(taken) => {
                        // Another starving waiter holds the slot. Queue for
                        // the slot (FIFO, in the kernel's futex queue)
                        // instead of for the lock word: a waiter woken from
                        // the word that loses to a barging thread goes back
                        // to the word queue's tail, and under heavy
                        // oversubscription that tail is seconds long.
                        if queued_behind_the_slot {
                            // Sleepers on the word may be behind us: keep
                            // them announced, on a free word too.
                            if slept {
                                self.word.fetch_or(WAITERS, Ordering::Relaxed);
                            }
                        } else if slept && !self.keep_sleepers_announced(self.word.load(Ordering::Relaxed)) {
                            continue; // the lock is free: take it
                        }
                        // Woken from the queue already and beaten to the
                        // slot: keep our place at its head.
                        let bits = if *owes_queue_a_wake { HEAD_BITS } else { QUEUED_BITS };
                        #[cfg(not(loom))]
                        SLOT_QUEUES.fell_asleep();
                        let outcome = futex_wait_bits(&self.handoff, taken, deadline, bits);
                        #[cfg(not(loom))]
                        SLOT_QUEUES.woke_up();
                        *owes_queue_a_wake = true;
                        if outcome == WaitOutcome::TimedOut {
                            return self.give_up(slept, wait_start);
                        }
                        continue;
                    }
                }
            }

            // Spinning ended, and nobody waits for a CPU: sleeping would
            // leave this one idle, and the waiter an unlock wakes would
            // wait for the owner's (see `idle_cpu.rs`). Spin again instead,
            // for a bounded time per wake-up. Re-entering the spin is what
            // Weisbecker warns of in seed 002, but his cost is a CPU taken
            // from other threads, and here no thread wants it. Not when
            // the owner was seen off its CPU: with no thread waiting for a
            // CPU, it is blocked, and seed 002 sleeps then.
            if !owner_off_cpu && config::spinning_enabled() && config::spin_while_a_cpu_would_idle() {
                let now = clock::cycles();
                let until = *idle_spin_until.get_or_insert(now + clock::ns_to_cycles(IDLE_CPU_SPIN_NS));
                if now < until && idle_cpu::a_cpu_would_idle() {
                    may_spin = true;
                    continue;
                }
            }

            // Sleep: announce ourselves with WAITERS, then wait for a wake.
            if word & WAITERS == 0
                && self
                    .word
                    .compare_exchange(word, word | WAITERS, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            if word & WAITERS != 0 {
                // Others sleep already. The spinner wakes overdue ones, but
                // a spinner preempted in its slot wakes nobody while the
                // unlocks leave the waking to it; waiters going to sleep
                // keep arriving under oversubscription, so they check too.
                self.wake_an_overdue_sleeper();
            }
            match futex_wait(&self.word, word | WAITERS, deadline) {
                WaitOutcome::TimedOut => return self.give_up(true, wait_start),
                // (A signal handler that ran ended a sleep as a wake does.)
                WaitOutcome::Woken | WaitOutcome::Interrupted => {
                    slept = true;
                    idle_spin_until = None;
                }
                // The word changed before this waiter slept: an owner
                // that relocks within nanoseconds beats nearly every
                // waiter into the kernel. It took no wake, so it owes the
                // sleepers no mark; counted as a sleeper, it re-marked the
                // word when it took the lock, and the owner's next unlock
                // woke a sleeper for nothing.
                WaitOutcome::ValueChanged => {}
            }
            may_spin = config::spinning_enabled();
        }
    }

    /// Before a waiter that has slept on the word sleeps elsewhere: it may
    /// have taken the last unlock's wake (which cleared WAITERS), so make
    /// sure a held word is marked, or the sleepers behind it would never
    /// be woken. Returns false if the lock is free (the caller takes it).
    fn keep_sleepers_announced(&self, mut word: u32) -> bool {
        loop {
            if is_free(word) {
                return false;
            }
            if word & WAITERS != 0 {
                return true;
            }
            match self.word.compare_exchange(word, word | WAITERS, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => word = now,
            }
        }
    }

    /// A timed lock gives up. A waiter that has slept may have been the
    /// one woken by the last unlock (which cleared WAITERS): leaving
    /// silently would strand the other sleepers, so it passes the wake on:
    /// it re-marks a held word with WAITERS, or wakes a sleeper to take a
    /// free one.
    #[cold]
    fn give_up(&self, slept: bool, wait_start: u64) -> bool {
        self.recorder.timed_out(record::waited::<R>(wait_start));
        if slept && !self.keep_sleepers_announced(self.word.load(Ordering::Relaxed)) {
            futex_wake(&self.word, 1);
        }
        false
    }

    fn acquired_after_wait(&self, slept: bool, wait_start: u64, outlasted_spin_began: Option<u64>) -> bool {
        if let Some(began) = outlasted_spin_began {
            self.learn_from_outlasted_spin(clock::cycles().wrapping_sub(began));
        }
        let kind = if slept { AcquireKind::Sleep } else { AcquireKind::Spin };
        self.recorder.acquired(kind, record::waited::<R>(wait_start));
        true
    }

    /// Busy-waits while `owner` holds the lock and runs; takes the lock if
    /// it is released. `new_word` is what to store on success.
    fn spin_on_owner(&self, owner: u32, new_word: u32, deadline: Option<Instant>) -> SpinEnd {
        let budget = SpinBudget::new(clock::ns_to_cycles(self.tuning().spin_budget_ns() as u64));
        let mut watch = OwnerWatch::new(owner);
        let end = self.spin_while_owner_runs(owner, new_word, deadline, budget, &mut watch);
        self.recorder.spun(end.1, watch.last_decider());
        end.0
    }

    /// The loop of [`Self::spin_on_owner`]; returns how it ended and the
    /// cycles spent.
    #[inline(always)]
    fn spin_while_owner_runs(
        &self,
        mut owner: u32,
        new_word: u32,
        deadline: Option<Instant>,
        mut budget: SpinBudget,
        watch: &mut OwnerWatch,
    ) -> (SpinEnd, u64) {
        let max_pauses = if cfg!(loom) { 1 } else { clock::pauses_in(MAX_SPIN_BACKOFF_NS) };
        let mut pauses = 1;
        let mut held_throughout = true;
        // What the probe's window measured, until its second half.
        #[cfg(not(loom))]
        let mut probed = None;
        loop {
            let mut word = self.word.load(Ordering::Relaxed);
            if word & OWNER_MASK != owner {
                held_throughout = false;
            }
            #[cfg(not(loom))]
            if is_free(word) {
                if let Some(kept) = probed.take() {
                    // The probe's second half: take this release, timed.
                    if self.take_timed(word, new_word, kept) {
                        return (SpinEnd::Acquired, budget.elapsed());
                    }
                    continue;
                }
                if self.probe_due(budget.last_reading()) {
                    let window_opened = clock::cycles();
                    probed = Some(self.count_kept_acquisitions());
                    // The window is not spinning on the owner: a budget
                    // it spent would send the spinner to sleep, and the
                    // owner would pay its wake-up.
                    budget.extend(clock::cycles().wrapping_sub(window_opened));
                    continue;
                }
            }
            if is_free(word) && config::owner_return_grace() && self.grace_worth_giving() {
                match self.give_owner_grace(owner) {
                    Grace::Returned { stays: true } => {
                        pauses = if cfg!(loom) { 1 } else { clock::pauses_in(RETURNING_OWNER_BACKOFF_NS) };
                        continue;
                    }
                    Grace::Returned { stays: false } => continue,
                    Grace::OwnerChanged => continue,
                    Grace::StillFree(free) => word = free,
                }
            }
            let current = word & OWNER_MASK;
            if is_free(word) {
                // Released: take it. Failing means another thread got it
                // first: the owner changed, stop (seed 000).
                // Keep a probe's window bits, as every take does (a
                // spinner closes its own window before it takes, but a
                // word whose takes all keep them needs no more argument).
                let keep = word & (WAITERS | COUNTING | COUNT_MASK);
                let taken =
                    self.word.compare_exchange(word, new_word | keep, Ordering::Acquire, Ordering::Relaxed).is_ok();
                let elapsed = budget.elapsed();
                if taken {
                    self.spin_succeeded(elapsed);
                    return (SpinEnd::Acquired, elapsed);
                }
                if config::bail_on_owner_change() {
                    return (SpinEnd::OwnerChanged, elapsed);
                }
                continue;
            }
            // A new owner means heavy contention; queue instead (seed 000).
            // A reserved word is one too: the lock goes to a starving waiter.
            // (Without the bail-out, an experiment, chase the new owner.)
            if current != owner {
                if config::bail_on_owner_change() {
                    return (SpinEnd::OwnerChanged, budget.elapsed());
                }
                if current == 0 {
                    spin_hint();
                    continue;
                }
                owner = current;
                *watch = OwnerWatch::new(owner);
            }
            // The run-time switch (seed 002's NO_MUTEX_SPIN).
            if !config::spinning_enabled() || crate::sync::deadline_passed(deadline) {
                return (SpinEnd::Stopped, budget.elapsed());
            }
            // The owner is off CPU: it cannot release the lock until it is
            // scheduled again, so spinning only delays it (seed 002).
            if watch.state().0 == OwnerState::NotRunning {
                return (SpinEnd::OwnerNotRunning, budget.elapsed());
            }
            if budget.exhausted() {
                self.spin_budget_spent();
                return (SpinEnd::BudgetSpent { held_throughout }, budget.elapsed());
            }
            if word & WAITERS != 0 {
                if word & SPINNER == 0 {
                    // Sleepers came while we spun.
                    self.word.fetch_or(SPINNER, Ordering::Relaxed);
                }
                self.wake_an_overdue_sleeper();
            }
            // Back off between reads (seed 003): each read pulls the lock's
            // cache line away from the owner, who needs it to unlock and,
            // with short critical sections, to lock again right away.
            for _ in 0..pauses {
                spin_hint();
            }
            if config::spinner_backoff() {
                pauses = next_spin_backoff(pauses, max_pauses, clock::cycles_to_ns(budget.elapsed()));
            }
        }
    }

    /// Waits, reading only, while another thread holds the spinner slot,
    /// for at most QUEUED_SPIN_NS; takes the lock if it is seen free.
    ///
    /// On a lock that keeps with its owner it first gives the owner its
    /// grace, as the spinner does: taking a release at once is the
    /// hand-over such a lock is better without (in the cache program,
    /// with the spinner backing off, queued waiters took 177 k of 1.6 M
    /// acquisitions that way). Not queueing at all on such a lock did as
    /// well there, but cost `lockmeter bench dir` 6% at 64 threads, where
    /// owners are often preempted and a queued waiter takes over.
    fn wait_behind_spinner(&self, new_word: u32) -> bool {
        let mut budget = SpinBudget::new(clock::ns_to_cycles(QUEUED_SPIN_NS));
        let mut last_owner = 0;
        loop {
            let mut word = self.word.load(Ordering::Relaxed);
            if is_free(word) && last_owner != 0 && self.tuning().keeps_lock_with_owner() {
                match self.give_owner_grace(last_owner) {
                    Grace::StillFree(free) => word = free,
                    _ if budget.exhausted() => return false,
                    _ => continue, // the owner is back, or another took it
                }
            }
            if is_free(word) {
                let keep = word & (WAITERS | SPINNER | COUNTING | COUNT_MASK);
                return self.word.compare_exchange(word, new_word | keep, Ordering::Acquire, Ordering::Relaxed).is_ok();
            }
            last_owner = word & OWNER_MASK;
            if budget.exhausted() || !config::spinning_enabled() {
                return false;
            }
            spin_hint();
        }
    }

    /// Called by the spinner, and by a waiter about to sleep, while
    /// sleepers are announced: wakes the longest sleeper if none was woken
    /// this way for `SLEEPER_WAKE_INTERVAL_NS`.
    /// Returns whether it woke (tried to wake) one.
    ///
    /// Under loom it never does: the stamp reads a clock whose absolute
    /// value differs between executions, and the models must show that
    /// no sleeper depends on these extra wakes to be woken at all.
    fn wake_an_overdue_sleeper(&self) -> bool {
        if cfg!(loom) {
            return false;
        }
        let stamp = wake_stamp_now();
        let tuning = self.tuning();
        if !sleeper_wake_due(stamp, tuning.last_wake_stamp()) {
            return false;
        }
        self.tuning.store(tuning.with_last_wake_stamp(stamp).0, Ordering::Relaxed);
        futex_wake(&self.word, 1);
        true
    }

    fn tuning(&self) -> Tuning {
        Tuning(self.tuning.load(Ordering::Relaxed))
    }

    /// A spin that succeeded after `elapsed` cycles: make sure the budget
    /// covers twice that, so the next similar wait also succeeds.
    fn spin_succeeded(&self, elapsed: u64) {
        let needed = (clock::cycles_to_ns(elapsed).saturating_mul(2)).min(MAX_SPIN_NS as u64) as u32;
        let tuning = self.tuning();
        if needed > tuning.spin_budget_ns() {
            self.tuning.store(tuning.with_spin_budget_ns(needed).0, Ordering::Relaxed);
        }
    }

    /// A waiter whose spin one owner outlasted took the lock `since_spin`
    /// cycles after that spin began. Had that been within the cap, a
    /// longer spin would have taken the lock without the sleep and the
    /// wake-up: grow the budget as a successful spin would. Without this
    /// the budget only ever learns from spins that succeed, and one owner
    /// held past it (a preemption, a long section) halves it below the
    /// critical section, where no spin succeeds again: with 36 µs
    /// sections at 2 threads the budget sat at its 2 µs floor and 95% of
    /// the acquisitions slept (seed 002: spinning is for exactly the
    /// microsecond sections the owner releases while still running).
    fn learn_from_outlasted_spin(&self, since_spin: u64) {
        if clock::cycles_to_ns(since_spin) <= MAX_SPIN_NS as u64 {
            self.spin_succeeded(since_spin);
        }
    }

    /// A spin that ran out: this lock is held longer than spinning pays
    /// for, so halve the budget (down to the floor).
    fn spin_budget_spent(&self) {
        let tuning = self.tuning();
        let halved = (tuning.spin_budget_ns() / 2).max(MIN_SPIN_NS);
        self.tuning.store(tuning.with_spin_budget_ns(halved).0, Ordering::Relaxed);
    }

    /// Whether to give a releasing owner a grace at all. Seven graces in a
    /// row that found the lock still free say the owners of this lock do
    /// not come back (a grace merely at its floor does not: in `sem` a
    /// quarter of the graces miss, and skipping them there cost 10-20%),
    /// and a grace would only delay every hand-over, by a poll and two
    /// clock reads (at 2 threads with 500 ns sections 500 ns apart, every
    /// acquisition spun and every grace found the lock still free: ~100 ns
    /// of the 667 each took). Such a lock still gets a grace at one release
    /// in 16 (a hash of the clock picks it), so an owner that starts
    /// looping around a short section is noticed and the grace grows again.
    fn grace_worth_giving(&self) -> bool {
        if cfg!(loom) || self.tuning().grace_misses() < Tuning::MISSES_MAX {
            return true;
        }
        one_in_2_to_the(FLOOR_GRACE_SAMPLE_BITS, clock::cycles())
    }

    /// The lock was seen free: give `owner` a moment to take it back.
    ///
    /// A lock taken again at once (a loop around a short critical section)
    /// does most work staying where it is: moving it costs several
    /// cache-line transfers, more than such a section, and the owner that
    /// finds it gone must queue, which costs more still. So the spinner
    /// reads the word a few more times before competing; the grace adapts
    /// per lock to twice the longest return seen, and halves each time the
    /// owner does not come back (then it only delayed the hand-over). A
    /// spinner kept waiting this way is served by the handoff bound.
    fn give_owner_grace(&self, owner: u32) -> Grace {
        let tuning = self.tuning();
        let grace = tuning.grace_ns();
        let grace_cycles = clock::ns_to_cycles(grace as u64);
        let poll_pauses = clock::pauses_in(GRACE_POLL_NS);
        let start = clock::cycles();
        let mut polls = 0;
        // At least one read, however late this thread runs: a grace that
        // never looked at the word would call a returned owner absent.
        while polls == 0
            || (clock::cycles().wrapping_sub(start) < grace_cycles
                && crate::sync::MODEL_SPIN_LIMIT.is_none_or(|limit| polls < limit))
        {
            for _ in 0..poll_pauses {
                spin_hint();
            }
            polls += 1;
            let word = self.word.load(Ordering::Relaxed);
            match word & OWNER_MASK {
                0 if is_free(word) => {}
                // Reserved: being handed to a starving waiter.
                0 => return Grace::OwnerChanged,
                returned if returned == owner => {
                    let waited = clock::cycles_to_ns(clock::cycles().wrapping_sub(start)) as u32;
                    let covering = waited.saturating_mul(2);
                    if covering > grace || tuning.grace_misses() != 0 {
                        let grown = tuning.with_grace_ns(covering.max(grace)).with_grace_misses(0);
                        self.tuning.store(grown.0, Ordering::Relaxed);
                    }
                    return Grace::Returned {
                        stays: waited <= AT_ONCE_RETURN_NS || tuning.keeps_lock_with_owner(),
                    };
                }
                _ => return Grace::OwnerChanged,
            }
        }
        let halved = tuning.with_grace_ns(grace / 2).with_grace_misses(tuning.grace_misses() + 1);
        if halved.0 != tuning.0 {
            self.tuning.store(halved.0, Ordering::Relaxed);
        }
        Grace::StillFree(self.word.load(Ordering::Relaxed))
    }

    /// Whether to probe the release just seen (see
    /// `count_kept_acquisitions`), given a recent clock `reading` (a
    /// fresh one would delay every hand-over by its cost, ~1% at 2
    /// threads with 500 ns sections).
    #[cfg(not(loom))]
    fn probe_due(&self, reading: u64) -> bool {
        let bits = if self.tuning().keeps_lock_with_owner() { KEEPING_PROBE_BITS } else { HANDING_OVER_PROBE_BITS };
        config::owner_return_grace() && one_in_2_to_the(bits, reading)
    }

    /// The first half of a probe: measures what this lock does per
    /// acquisition left with its owner. The second half (`take_timed`,
    /// `end_timed_hold`) measures it handed over, and votes (see
    /// [`Tuning::keeps_lock_with_owner`]).
    ///
    /// Handing a released lock to a waiter on another CPU lets the two
    /// overlap: the waiter's critical section runs while the old owner
    /// works outside. But the data the section touches moves with it, and
    /// when the section works on much of it (a table, a tree), the moved
    /// section runs longer than it would have on the old owner's CPU, by
    /// more than the overlap gains: the bundled cache program, 4 threads on
    /// 2 CPUs, did 2.1 M lookups/s with every release handed to the
    /// spinner, 3.1 M with the lock left to its owner, against 2.8 M under
    /// glibc, whose sleeping waiters leave it to the owner by accident.
    /// A section that touches little (`lockmeter bench duty`) is the
    /// opposite case. Which case holds is measured, not guessed, both ways
    /// on one lock a moment apart:
    /// - kept: the spinner leaves the lock alone for `PROBE_WINDOW_NS`
    ///   with COUNTING set in the word, and counts the releases made
    ///   meanwhile (one per acquisition). It must not read the word in
    ///   between: every read takes the line from the owner, and timing the
    ///   owner's next release by reading closely made the kept cycle in
    ///   the cache program read 450-750 ns against 320 ns unwatched;
    /// - handed over: the spinner takes the next release itself, marking
    ///   the word TIMED; its own unlock measures from the release it saw
    ///   to its own: what the lock does per acquisition handed over, the
    ///   move's cost included.
    ///
    /// The shorter way wins the vote. A lock that keeps with its owner
    /// then waits longer for a returning owner and backs off longer after
    /// one (see `give_owner_grace`), and its queued waiters give the owner
    /// the same grace (`wait_behind_spinner`): fewer threads on the lock is
    /// the concurrency restriction of Malthusian locks, applied only where
    /// it is measured to pay. The handoff bound still serves any waiter
    /// passed over for too long.
    #[cfg(not(loom))]
    #[cold]
    fn count_kept_acquisitions(&self) -> KeptCycle {
        self.word.fetch_or(COUNTING, Ordering::Relaxed);
        let opened = clock::cycles();
        let window = clock::ns_to_cycles(PROBE_WINDOW_NS);
        while clock::cycles().wrapping_sub(opened) < window {
            spin_hint();
        }
        let closed = self.word.fetch_and(!(COUNTING | COUNT_MASK), Ordering::Relaxed);
        KeptCycle::of(clock::cycles().wrapping_sub(opened), (closed & COUNT_MASK) / COUNT_ONE)
    }

    /// The second half of a probe: takes the free `word`, timed (see
    /// `count_kept_acquisitions`). Returns whether it did.
    #[cfg(not(loom))]
    #[cold]
    fn take_timed(&self, word: u32, new_word: u32, kept: KeptCycle) -> bool {
        let seen_free_at = clock::cycles();
        let timed = new_word | TIMED | (word & (WAITERS | COUNTING | COUNT_MASK));
        if self.word.compare_exchange(word, timed, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return false;
        }
        TIMED_HOLD.set(Some(TimedHold { lock: std::ptr::from_ref(self).addr(), seen_free_at, kept }));
        true
    }

    /// The unlock of a hold a probe took (TIMED): casts the vote.
    #[cfg(not(loom))]
    #[cold]
    fn end_timed_hold(&self) {
        let Some(hold) = TIMED_HOLD.take() else { return };
        if hold.lock != std::ptr::from_ref(self).addr() {
            return;
        }
        let handed_over = clock::cycles().wrapping_sub(hold.seen_free_at);
        let tuning = self.tuning();
        self.tuning.store(tuning.with_vote(hold.kept.shorter_than(handed_over)).0, Ordering::Relaxed);
    }

    /// Waits for the lock to be handed over. The caller has installed its
    /// tid in `handoff`. Returns `Some(true)` once the lock is ours,
    /// `Some(false)` on timeout, `None` if the request was withdrawn because
    /// the lock was free.
    fn wait_for_handoff(&self, tid: u32, deadline: Option<Instant>) -> Option<bool> {
        loop {
            match self.flag_and_wait_for_handoff(tid, deadline) {
                // An unlock's exchange took our flag: flag the word again
                // (its new owner's), or compete if it is free.
                None if self.handoff.load(Ordering::Relaxed) == tid | FLAG_AGAIN => {
                    if crate::sync::deadline_passed(deadline) {
                        // Nobody else writes a slot with FLAG_AGAIN.
                        self.handoff.store(0, Ordering::Release);
                        self.wake_next_in_line();
                        return Some(false);
                    }
                    self.handoff.store(tid, Ordering::Relaxed);
                }
                outcome => return outcome,
            }
        }
    }

    /// One request of [`Self::wait_for_handoff`]: `None` also when the
    /// flag was taken (the slot reads FLAG_AGAIN).
    fn flag_and_wait_for_handoff(&self, tid: u32, deadline: Option<Instant>) -> Option<bool> {
        // Flag the held word so the owner's unlock takes the slow path; the
        // owner it names is the one to watch (read again after the flag, the
        // word could be reserved already, naming nobody: tid 0's CPU clock
        // is the caller's own, which always runs, and the requester spun
        // its whole budget instead of sleeping).
        let mut owner = 0;
        loop {
            let word = self.word.load(Ordering::Relaxed);
            // Granted already (by an unlocker that read the slot before we
            // flagged the word): flagging our own word would leave a
            // HANDOFF bit with no request behind it. A word that names us
            // while the slot holds our request unclaimed is no grant: we
            // hold the lock from before and wait for another thread to
            // release it for us, as a normal pthread mutex allows (taken
            // for a grant, the wait slept on the slot for ever, its
            // release flagging no request).
            if word & OWNER_MASK == tid && self.handoff.load(Ordering::Acquire) != tid {
                break;
            }
            if word & OWNER_MASK == 0 {
                // Nobody to hand it over: withdraw and compete normally.
                if self.handoff.compare_exchange(tid, 0, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
                    self.wake_next_in_line();
                    return None;
                }
                break; // already claimed (cannot happen without HANDOFF, kept safe)
            }
            // Release: an unlocker that sees HANDOFF must also see our tid
            // in the slot.
            if self
                .word
                .compare_exchange(word, word | HANDOFF | WAITERS, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                owner = word & OWNER_MASK;
                break;
            }
        }
        // Wait for the grant: spin while the owner runs, so we are on a CPU
        // when the lock arrives; then sleep on the handoff slot.
        let mut budget = SpinBudget::new(clock::ns_to_cycles(self.tuning().spin_budget_ns() as u64));
        let mut watch = OwnerWatch::new(owner);
        let mut spinning = config::spinning_enabled() && owner != 0;
        loop {
            let slot = self.handoff.load(Ordering::Acquire);
            if slot == tid | GRANTED {
                // The lock is ours; free the slot for the next requester.
                self.handoff.store(0, Ordering::Release);
                self.wake_next_in_line();
                return Some(true);
            }
            if slot == tid | FLAG_AGAIN {
                return None;
            }
            if slot == tid && crate::sync::deadline_passed(deadline) {
                if self.withdraw_handoff(tid) {
                    return Some(false);
                }
                // Claimed meanwhile: the grant is on its way, unless its
                // unlocker was preempted between claiming and granting.
                yield_to_unlocker();
                continue;
            }
            if spinning && (budget.exhausted() || watch.state().0 == OwnerState::NotRunning) {
                spinning = false;
            }
            if spinning {
                spin_hint();
            } else {
                let d = if slot == tid { deadline } else { None };
                futex_wait_bits(&self.handoff, slot, d, REQUESTER_BITS);
            }
        }
    }

    /// Takes a handoff request back, the word flagged. HANDOFF is cleared
    /// before the slot is freed, keeping the invariant (HANDOFF implies a
    /// request in the slot). Returns false if the unlocker claimed the
    /// request first, or if an unlock's exchange took the flag: that
    /// unlocker is about to write FLAG_AGAIN in the slot, which must not
    /// be freed (and the lock with it) before it has.
    fn withdraw_handoff(&self, tid: u32) -> bool {
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            if word & HANDOFF == 0 {
                // Taken by an exchange, or by the grant's exclusive-or
                // after the request was claimed: either way, wait. (In a
                // child of `fork` too: a thread taking back a parent
                // thread's request clears that request's flag holding the
                // slot, never this one's.)
                return false;
            }
            if word & OWNER_MASK == 0 {
                // Reserved: the unlocker has released the word to us and
                // is claiming the request; the grant is on its way.
                return false;
            }
            match self.word.compare_exchange(word, word & !HANDOFF, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => word = now,
            }
        }
        // Release: the next requester (acquiring the slot) must see HANDOFF
        // cleared before it sets its own.
        let withdrawn = self.handoff.compare_exchange(tid, 0, Ordering::Release, Ordering::Relaxed).is_ok();
        if withdrawn {
            self.wake_next_in_line();
        }
        withdrawn
    }

    /// The handoff slot was freed: wake the starving waiter queued longest
    /// for it, or, while claims come slowly, a batch of them (see
    /// `wake_queued`). One or two system calls per handoff.
    ///
    /// The slot goes to whichever starving waiter claims it first, and the
    /// one just woken needs a CPU before it can: under oversubscription a
    /// running waiter, newly past the bound, usually gets there first.
    /// Sent back to the queue's tail, the woken one lost its place at every
    /// turn; at 256 threads on 2 cores a thread spent 2.3 of 3 s that way,
    /// woken four times, and did 16 operations (in 3 of 8 runs a thread did
    /// 1-13). Those that lost sleep at the head instead, woken first;
    /// reserving the slot for the woken one instead would make every
    /// handoff wait for a sleeper to be scheduled (that starved threads in
    /// 4 of 8 runs).
    ///
    /// Why a batch while claims come slowly: under heavy oversubscription
    /// nearly every waiter passes the bound (its wait includes the time it
    /// waits for a CPU), and most threads sleep here: in `lockmeter bench
    /// duty` P=1000 D=8 at 256 threads on 2 cores, 211-252 of them at any
    /// moment, while the rest keep the lock busy (concurrency restriction,
    /// as in Malthusian locks: why throughput holds). Fairness is then how
    /// fast the queue turns, and a woken thread waits behind the running
    /// ones for a CPU: grants came 4 ms apart at the median, 19 at the
    /// 90th percentile, and a 3 s run gave each thread about two turns. Of
    /// a batch, the first to run claims the slot; the others find it held
    /// and go back to the head without taking the lock, even when it is
    /// free (see `lock_contended_loop`). Waking a batch at every turn cost
    /// `sem` 28-75% at 64 and 256 threads even in batches of two: there
    /// the slot turns a thousand times a second, and every extra thread
    /// woken takes a CPU from an owner. So the batch waits for claims
    /// that come slowly while many wait (`SlotQueues`), which in `sem`
    /// they do not.
    fn wake_next_in_line(&self) {
        #[cfg(not(loom))]
        self.wake_queued(SLOT_QUEUES.wake_batch());
        // Under loom a single wake: the models' executions must not
        // depend on a process-wide average left by earlier ones.
        #[cfg(loom)]
        self.wake_queued(1);
    }

    /// Wakes up to `batch` waiters queued for the handoff slot, those at
    /// the head first. Returns how many it woke from the head and from the
    /// rest of the queue.
    fn wake_queued(&self, batch: u32) -> (u32, u32) {
        #[cfg(not(loom))]
        SLOT_QUEUES.woke();
        let head = futex_wake_bits(&self.handoff, batch, HEAD_BITS);
        let rest = if head < batch { futex_wake_bits(&self.handoff, batch - head, QUEUED_BITS) } else { 0 };
        (head, rest)
    }

    /// The release found flags beside the owner: `word` is the word it
    /// found, and `owner` still holds the lock. One compare-exchange
    /// releases it and, in the same step, decides on the wake.
    #[cold]
    fn unlock_contended(&self, owner: u32, mut word: u32) {
        #[cfg(not(loom))]
        if word & TIMED != 0 {
            self.end_timed_hold();
        }
        loop {
            check_protocol(word & OWNER_MASK == owner, "a held word's owner changed during its unlock");
            if word & HANDOFF != 0 {
                if self.withdraw_for_a_parent_thread() {
                    word = self.word.load(Ordering::Relaxed);
                    continue;
                }
                // A starving waiter asked for the lock: release the owner
                // but keep HANDOFF, which reserves the word for it. Nobody
                // else may take a reserved word and the requester can no
                // longer withdraw (see `withdraw_handoff`), so the lock
                // cannot change hands, let alone be freed, until
                // `hand_over` has given it to the requester.
                // AcqRel: reading HANDOFF makes the request it flags visible.
                let reserved = counted(word) & !(OWNER_MASK | TIMED);
                match self.word.compare_exchange(word, reserved, Ordering::AcqRel, Ordering::Relaxed) {
                    Ok(_) => return self.hand_over_reserved(),
                    Err(now) => {
                        word = now;
                        continue;
                    }
                }
            }
            if word & (SPINNER | COUNTING) != 0 && self.free_a_parent_spinner() {
                word = self.word.load(Ordering::Relaxed);
                continue;
            }
            // Somebody sleeps and nobody spins: release, clear the mark
            // and wake one sleeper, who re-marks the word when it takes
            // the lock (others may sleep behind it). With a waiter
            // spinning, release keeping the mark: the spinner takes the
            // lock, so waking a sleeper would only pay a system call for a
            // competitor that finds the lock gone and sleeps again (in
            // `sem` at 16 threads on 2 CPUs, nearly every such wake found
            // nobody queued yet and every such sleep failed at once); the
            // next unlock decides again. A spinner that stops clears its
            // bit in this word, so this compare-exchange fails and the
            // decision is taken again.
            let wake = word & WAITERS != 0 && word & SPINNER == 0;
            let released = counted(word) & !(OWNER_MASK | TIMED | if wake { WAITERS } else { 0 });
            match self.word.compare_exchange(word, released, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => {
                    self.released();
                    if wake {
                        futex_wake(&self.word, 1);
                    }
                    return;
                }
                Err(now) => word = now,
            }
        }
    }

    /// The word is reserved for the handoff requester: claim its request
    /// and hand it the lock.
    fn hand_over_reserved(&self) {
        if let Some(request) = self.mark_open_request(CLAIMED) {
            return self.hand_over(request);
        }
        check_protocol(false, "a reserved word without its request");
        // Never seen; should it happen, unreserve the word rather than
        // leave it taken by nobody, and let a sleeper take it.
        self.word.fetch_and(!HANDOFF, Ordering::Relaxed);
        self.released();
        futex_wake(&self.word, 1);
    }

    /// Marks the handoff slot's request with `mark` if it is open (a
    /// requester's id alone: not claimed, granted, or told to flag again);
    /// returns the request. Called by the unlocker that took a HANDOFF off
    /// the word, whose acquire made the request visible.
    fn mark_open_request(&self, mark: u32) -> Option<u32> {
        let request = self.handoff.load(Ordering::Relaxed);
        let open = request & !OWNER_MASK == 0 && request != 0;
        (open && self.handoff.compare_exchange(request, request | mark, Ordering::Relaxed, Ordering::Relaxed).is_ok())
            .then_some(request)
    }

    /// In a child of `fork`: if the handoff request is a parent thread's,
    /// made as the process forked, withdraw it for that thread (an unlock
    /// would hand it the lock, leaving the lock held by nobody; unflagged,
    /// it would keep the slot for ever). Called by the unlock holding a
    /// word flagged with HANDOFF, and by a waiter that finds the slot
    /// taken. Returns whether the caller is to look again: it withdrew
    /// the request, or another thread of this process is withdrawing one.
    ///
    /// The slot is held (WITHDRAWING, with this thread's id) while
    /// HANDOFF is cleared, and freed after, as `withdraw_handoff` does: a
    /// clear from a read of the slot that a new request had taken over
    /// since erased that request's flag, with no unlock ever to tell it
    /// (it waited for ever, or withdrew without its flag, while an unlock
    /// that took the flag by its exchange could still be on its way to
    /// the slot of a lock its next holder may free). A withdrawal that a
    /// fork interrupted names a thread of the parent: it is taken over.
    fn withdraw_for_a_parent_thread(&self) -> bool {
        let request = self.handoff.load(Ordering::Relaxed);
        if request & WITHDRAWING != 0 && !is_left_by_fork(request) {
            // Done in a few instructions, unless that thread was preempted.
            yield_to_unlocker();
            return true;
        }
        let open = request & (CLAIMED | GRANTED) == 0 && request != 0;
        if !open || !is_left_by_fork(request) {
            return false;
        }
        let withdrawing = current_tid() | WITHDRAWING;
        if self.handoff.compare_exchange(request, withdrawing, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return true;
        }
        #[cfg(all(test, not(loom)))]
        tests::WHILE_WITHDRAWING_FOR_A_PARENT.with(|hook| {
            if let Some(check) = hook.get() {
                check(std::ptr::from_ref(self).cast());
            }
        });
        self.word.fetch_and(!HANDOFF, Ordering::Relaxed);
        // Release: the next requester must see HANDOFF cleared before it
        // sets its own.
        self.handoff.store(0, Ordering::Release);
        self.wake_next_in_line();
        true
    }

    /// Takes the spinner slot for `tid`. In a child of `fork` the slot may
    /// name a parent thread, which will never spin here: it is taken over.
    fn become_the_spinner(&self, tid: u32) -> bool {
        match self.spinner.compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => true,
            Err(parent) if is_left_by_fork(parent) => {
                self.spinner.compare_exchange(parent, tid, Ordering::Acquire, Ordering::Relaxed).is_ok()
            }
            Err(_) => false,
        }
    }

    /// In a child of `fork`, called holding the lock with SPINNER set: if
    /// the spinner is a parent thread, spinning as the process forked, it
    /// will never take the lock nor pass the wake on: clear its bit.
    /// Returns whether it did.
    fn free_a_parent_spinner(&self) -> bool {
        let spinner = self.spinner.load(Ordering::Relaxed);
        if spinner == 0 || !is_left_by_fork(spinner) {
            return false;
        }
        if self.spinner.compare_exchange(spinner, 0, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            // Its bit, and the window of a probe it was making.
            self.word.fetch_and(!(SPINNER | COUNTING | COUNT_MASK), Ordering::Relaxed);
        }
        true
    }

    /// Makes `requester` the owner of the reserved word: no barging thread
    /// can take it in between.
    fn hand_over(&self, requester: u32) {
        // Keep WAITERS (others may sleep) and SPINNER (a waiter may be
        // spinning, now on the requester); clear HANDOFF: served. The
        // reserved word has no owner, so one exclusive-or does both.
        let reserved = self.word.fetch_xor(HANDOFF | requester, Ordering::Release);
        check_protocol(
            reserved & !(SPINNER | COUNTING | COUNT_MASK) == HANDOFF | WAITERS,
            "a hand-over of a word that was not reserved",
        );
        self.handoff.store(requester | GRANTED, Ordering::Release);
        futex_wake_bits(&self.handoff, 1, REQUESTER_BITS);
    }
}

/// Whether `tid` (a spinner's, or a handoff request's with its flags) is
/// a thread left behind by `fork`: in a child, the lock's memory may still
/// name a parent thread, which does not exist here. Asked only in a child,
/// so the parent's slow paths pay nothing.
fn is_left_by_fork(tid: u32) -> bool {
    crate::sync::forked() && !crate::sync::is_thread_of_this_process(tid & OWNER_MASK)
}

/// An invariant of the lock-word protocol, checked in debug builds and in
/// the loom models (which run optimised).
#[inline(always)]
fn check_protocol(holds: bool, broken: &str) {
    if cfg!(any(loom, debug_assertions)) {
        assert!(holds, "adaptive: {broken}");
    }
}

impl RawAdaptive<NoStats> {
    /// [`Self::try_lock`] for a caller that has its thread id at hand
    /// already (the pthread replacement reads it once per call).
    ///
    /// # Safety
    /// `tid` is the calling thread's id, [`crate::current_tid`]'s value.
    #[inline(always)]
    pub unsafe fn try_lock_as(&self, tid: u32) -> bool {
        self.try_acquire(tid)
    }

    /// Releases the lock if thread `tid`, the caller, holds it and no
    /// waiter needs waking: the uncontended unlock, a read and an
    /// exchange, as [`Self::unlock`]'s, leaving `errno` as it was (a
    /// waiter that flags the word between the two is woken after the
    /// release, `errno` kept around the system call). False, with nothing
    /// done, otherwise; then [`Self::unlock`] (or
    /// [`Self::unlock_from_any_thread`]) releases it. For callers that
    /// must know `errno` is untouched (a pthread replacement keeps it as
    /// the program left it, and saving it costs more than the unlock).
    /// Only on a lock that records nothing: a recorder hears of a release
    /// before it happens, and this one may not.
    ///
    /// # Safety
    /// As [`Self::try_lock_as`].
    #[inline]
    pub unsafe fn unlock_if_uncontended_as(&self, tid: u32) -> bool {
        // Declines a word with flags (WAITERS, SPINNER, HANDOFF, a
        // probe's), and one that names another thread.
        self.release_as(tid).is_ok()
    }
}

#[cfg(not(loom))]
impl<R: Recorder> Default for RawAdaptive<R> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(loom))]
// SAFETY: the lock word guarantees mutual exclusion: a thread returns from
// lock/try_lock only after installing its tid with an acquire CAS on an
// unlocked word (or after being handed the word by its holder), and unlock
// releases with release ordering.
unsafe impl<R: Recorder> lock_api::RawMutex for RawAdaptive<R> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    // The lock word stores the owner's tid: it must be released by the
    // thread that took it.
    type GuardMarker = lock_api::GuardNoSend;

    fn lock(&self) {
        RawAdaptive::lock(self)
    }
    fn try_lock(&self) -> bool {
        RawAdaptive::try_lock(self)
    }
    unsafe fn unlock(&self) {
        RawAdaptive::unlock(self)
    }
    fn is_locked(&self) -> bool {
        RawAdaptive::is_locked(self)
    }
}

// A timed-out attempt leaves at most a WAITERS bit (one spare wake), and
// passes on any wake it may have consumed (give_up).
crate::clock::timed_by_deadline!(RawAdaptive);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A tid no thread of this process has.
    const OTHER: u32 = OWNER_MASK - 7;

    /// The interleaving in which a timed waiter is woken by an unlock
    /// (which cleared WAITERS), the lock is taken again by a barger, and
    /// the timed waiter gives up: it must re-mark the word, or the barger's
    /// fast unlock would wake nobody.
    #[test]
    fn giving_up_re_marks_a_held_word() {
        let lock = RawAdaptive::<NoStats>::new();
        lock.word.store(OTHER, Ordering::Relaxed);
        lock.give_up(true, 0);
        assert_eq!(lock.word.load(Ordering::Relaxed), OTHER | WAITERS);
    }

    /// Same, with the lock free when the timed waiter gives up: it wakes a
    /// sleeper to take it. The sleeper here went to sleep behind a holder
    /// whose unlock woke someone else.
    #[test]
    fn giving_up_on_a_free_word_wakes_a_sleeper() {
        let lock = Arc::new(RawAdaptive::<NoStats>::new());
        lock.word.store(OTHER | WAITERS, Ordering::Relaxed);
        let sleeper = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                lock.lock();
                unsafe { lock.unlock() };
            })
        };
        // Let it fall asleep on the word, then release as an unlock that
        // woke another thread would: WAITERS cleared, nobody woken.
        std::thread::sleep(std::time::Duration::from_millis(50));
        lock.word.store(0, Ordering::Release);
        lock.give_up(true, 0);
        let start = Instant::now();
        while !sleeper.is_finished() {
            assert!(start.elapsed() < std::time::Duration::from_secs(5), "the sleeper was never woken");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        sleeper.join().unwrap();
    }

    /// Nobody takes the lock during the grace: the spinner may take it,
    /// and the grace halves, down to its floor (on such a lock it only
    /// delays hand-overs).
    #[test]
    fn grace_shrinks_while_owners_do_not_return() {
        let lock = RawAdaptive::<NoStats>::new();
        assert_eq!(lock.tuning().grace_ns(), INITIAL_GRACE_NS);
        assert_eq!(lock.give_owner_grace(OTHER), Grace::StillFree(0));
        assert_eq!(lock.tuning().grace_ns(), INITIAL_GRACE_NS / 2);
        for _ in 0..8 {
            assert_eq!(lock.give_owner_grace(OTHER), Grace::StillFree(0));
        }
        assert_eq!(lock.tuning().grace_ns(), MIN_GRACE_NS);
        assert_eq!(lock.tuning().spin_budget_ns(), INITIAL_SPIN_NS, "the budget is a separate field");
    }

    /// After seven graces in a row that no owner came back to, a grace is
    /// given at a sample of releases only, until an owner comes back.
    #[test]
    fn graces_nobody_returns_to_are_given_rarely() {
        let lock = RawAdaptive::<NoStats>::new();
        for _ in 0..Tuning::MISSES_MAX {
            assert!((0..100).all(|_| lock.grace_worth_giving()), "too few misses to skip a grace");
            assert_eq!(lock.give_owner_grace(OTHER), Grace::StillFree(0));
        }
        let given = (0..100_000).filter(|_| lock.grace_worth_giving()).count();
        assert!((1_000..20_000).contains(&given), "{given} graces in 100,000 releases after the misses");
        // The owner comes back (as one looping around a short section).
        lock.word.store(OTHER, Ordering::Relaxed);
        assert!(matches!(lock.give_owner_grace(OTHER), Grace::Returned { .. }));
        assert!((0..100).all(|_| lock.grace_worth_giving()), "a return restores the grace");
        let grace = lock.tuning().grace_ns();
        assert!((MIN_GRACE_NS..=MAX_GRACE_NS).contains(&grace), "grace {grace} ns: the misses field is apart from it");
        assert_eq!(lock.tuning().spin_budget_ns(), INITIAL_SPIN_NS, "and from the budget");
    }

    /// An unlock with a sleeper announced and a waiter spinning releases
    /// the lock but leaves the mark (the spinner will take the lock; no
    /// wake). With nobody spinning, it clears the mark and wakes.
    #[test]
    fn unlock_leaves_the_wake_to_a_spinner() {
        let lock = RawAdaptive::<NoStats>::new();
        let tid = current_tid();
        lock.word.store(tid | WAITERS | SPINNER, Ordering::Relaxed);
        lock.spinner.store(OTHER, Ordering::Relaxed);
        unsafe { lock.unlock() };
        assert_eq!(lock.word.load(Ordering::Relaxed), WAITERS | SPINNER, "free, still marked");
        assert!(!lock.is_locked());

        // The marked free word is taken keeping the flags, by the fast
        // paths too.
        assert!(lock.try_lock());
        assert_eq!(lock.word.load(Ordering::Relaxed), tid | WAITERS | SPINNER);

        // The spinner stops.
        lock.spinner.store(0, Ordering::Relaxed);
        lock.word.fetch_and(!SPINNER, Ordering::Relaxed);
        unsafe { lock.unlock() };
        assert_eq!(lock.word.load(Ordering::Relaxed), 0, "nobody spins: the mark is cleared and a sleeper woken");
    }

    thread_local! {
        /// Called by `released` on this thread, with the lock's address.
        pub(super) static AFTER_RELEASE: std::cell::Cell<Option<fn(*const ())>> = const { std::cell::Cell::new(None) };
        /// Called by `unlock` on this thread between its read of the word
        /// and its exchange, with the lock's address: where a waiter's
        /// flag can come unseen.
        pub(super) static BETWEEN_READ_AND_EXCHANGE: std::cell::Cell<Option<fn(*const ())>> =
            const { std::cell::Cell::new(None) };
        /// Called on this thread by `withdraw_for_a_parent_thread` once it
        /// holds the slot and before it clears HANDOFF, with the lock's
        /// address.
        pub(super) static WHILE_WITHDRAWING_FOR_A_PARENT: std::cell::Cell<Option<fn(*const ())>> =
            const { std::cell::Cell::new(None) };
    }

    /// The live lock a `BETWEEN_READ_AND_EXCHANGE` hook is called with.
    fn hooked_lock<'a>(lock: *const ()) -> &'a RawAdaptive<NoStats> {
        // SAFETY: the tests below pass a live `RawAdaptive<NoStats>`,
        // which outlives the unlock that calls the hook.
        unsafe { &*lock.cast::<RawAdaptive<NoStats>>() }
    }

    /// Whether thread `tid` of this process is blocked in a futex system
    /// call, read from its `/proc` entry.
    fn asleep_in_futex(tid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall"))
            .is_ok_and(|call| call.split_whitespace().next() == Some(libc::SYS_futex.to_string().as_str()))
    }

    static GAP_SLEEPER: AtomicU32 = AtomicU32::new(0);

    /// A sleeper announces itself between an unlock's read and its
    /// exchange, which clears the mark as it releases: the unlock wakes
    /// it (a sleeper left unmarked on a free word would sleep until some
    /// later contended unlock happened to wake it, or for ever).
    #[test]
    fn a_sleeper_marked_after_the_unlock_read_the_word_is_woken() {
        let lock = Arc::new(RawAdaptive::<NoStats>::new());
        lock.lock();
        let marked = lock.word.load(Ordering::Relaxed) | WAITERS;
        let sleeper = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                // Sleeps once the hook has marked the word; times out if
                // nobody wakes it.
                while lock.word.load(Ordering::Relaxed) != marked {
                    std::thread::yield_now();
                }
                GAP_SLEEPER.store(current_tid(), Ordering::Relaxed);
                futex_wait(&lock.word, marked, Some(Instant::now() + std::time::Duration::from_secs(2)))
            })
        };
        fn mark_and_let_it_sleep(lock: *const ()) {
            let lock = hooked_lock(lock);
            lock.word.fetch_or(WAITERS, Ordering::Relaxed);
            let started = Instant::now();
            while !(GAP_SLEEPER.load(Ordering::Relaxed) != 0 && asleep_in_futex(GAP_SLEEPER.load(Ordering::Relaxed))) {
                assert!(started.elapsed().as_secs() < 5, "the sleeper never slept");
                std::thread::yield_now();
            }
        }
        BETWEEN_READ_AND_EXCHANGE.with(|hook| hook.set(Some(mark_and_let_it_sleep)));
        unsafe { lock.unlock() };
        BETWEEN_READ_AND_EXCHANGE.with(|hook| hook.set(None));
        assert_eq!(sleeper.join().unwrap(), WaitOutcome::Woken);
        assert_eq!(lock.word.load(Ordering::Relaxed), 0, "released, the mark gone with the wake");
    }

    /// A requester that starts when told (`go` set to 1), asks for the
    /// handoff, and reports what `wait_for_handoff` returned, the word
    /// then, and its id (it unlocks a lock handed to it). With
    /// `until_handed`, a request that found the lock free is made again.
    fn gap_requester(
        lock: &Arc<RawAdaptive<NoStats>>,
        go: &'static AtomicU32,
        until_handed: bool,
    ) -> std::sync::mpsc::Receiver<(Option<bool>, u32, u32)> {
        let (send, receive) = std::sync::mpsc::channel();
        let lock = lock.clone();
        std::thread::spawn(move || {
            while go.load(Ordering::Relaxed) == 0 {
                std::thread::yield_now();
            }
            let me = current_tid();
            lock.handoff.store(me, Ordering::Relaxed);
            go.store(me, Ordering::Relaxed);
            let mut granted = lock.wait_for_handoff(me, None);
            while until_handed && granted.is_none() {
                lock.handoff.store(me, Ordering::Relaxed);
                granted = lock.wait_for_handoff(me, None);
            }
            let word = lock.word.load(Ordering::Relaxed);
            if granted == Some(true) {
                unsafe { lock.unlock() };
            }
            send.send((granted, word, me)).unwrap();
        });
        receive
    }

    /// Lets the requester (`go`) flag the word, and waits until it sleeps.
    fn let_the_requester_flag(lock: &RawAdaptive<NoStats>, go: &AtomicU32) {
        go.store(1, Ordering::Relaxed);
        let started = Instant::now();
        while !(lock.word.load(Ordering::Relaxed) & HANDOFF != 0 && asleep_in_futex(go.load(Ordering::Relaxed))) {
            assert!(started.elapsed().as_secs() < 5, "the requester never flagged the word and slept");
            std::thread::yield_now();
        }
    }

    thread_local! {
        /// The `go` of the requester the hook below lets flag the word.
        static GAP_GO: std::cell::Cell<Option<&'static AtomicU32>> = const { std::cell::Cell::new(None) };
    }

    /// Unlocks `lock`, held by this thread, letting a requester (started
    /// by `go`) flag the word between the unlock's read and its exchange.
    fn unlock_while_a_requester_flags(
        lock: &Arc<RawAdaptive<NoStats>>,
        go: &'static AtomicU32,
        until_handed: bool,
    ) -> std::sync::mpsc::Receiver<(Option<bool>, u32, u32)> {
        let requester = gap_requester(lock, go, until_handed);
        fn let_it_flag(lock: *const ()) {
            let go = GAP_GO.with(|go| go.get()).expect("the test names its requester");
            let_the_requester_flag(hooked_lock(lock), go);
        }
        GAP_GO.with(|gap_go| gap_go.set(Some(go)));
        BETWEEN_READ_AND_EXCHANGE.with(|hook| hook.set(Some(let_it_flag)));
        unsafe { lock.unlock() };
        BETWEEN_READ_AND_EXCHANGE.with(|hook| hook.set(None));
        requester
    }

    static FREED_GAP_REQUEST: AtomicU32 = AtomicU32::new(0);

    /// A starving waiter flags the word for a handoff between an unlock's
    /// read and its exchange, which releases the lock and takes the flag:
    /// the requester is told, finds the lock free and withdraws to
    /// compete for it (without the telling it would sleep on its request
    /// for ever, and every starving waiter behind it in the slot's queue).
    #[test]
    fn a_requester_whose_flag_the_release_took_is_told() {
        let lock = Arc::new(RawAdaptive::<NoStats>::new());
        lock.lock();
        let requester = unlock_while_a_requester_flags(&lock, &FREED_GAP_REQUEST, false);
        let told = requester.recv_timeout(std::time::Duration::from_secs(5));
        if told.is_err() {
            // Let the requester finish before failing.
            lock.handoff.store(FREED_GAP_REQUEST.load(Ordering::Relaxed) | FLAG_AGAIN, Ordering::Relaxed);
            futex_wake_bits(&lock.handoff, 1, REQUESTER_BITS);
            panic!("the requester was not told its flag was taken");
        }
        assert_eq!(told.unwrap().0, None, "the lock was free: withdrawn, to compete for it");
        assert_eq!(lock.handoff.load(Ordering::Relaxed), 0, "the slot is free");
        assert_eq!(lock.word.load(Ordering::Relaxed), 0);
    }

    static HELD_GAP_REQUEST: AtomicU32 = AtomicU32::new(0);

    /// As above, but a barging thread (this one) takes the word before the
    /// requester wakes: the requester flags the barger's word and its
    /// unlock hands the lock over.
    #[test]
    fn a_handoff_flag_taken_by_the_release_is_raised_again() {
        let lock = Arc::new(RawAdaptive::<NoStats>::new());
        let tid = current_tid();
        lock.lock();
        let requester = unlock_while_a_requester_flags(&lock, &HELD_GAP_REQUEST, true);
        // The requester was asleep: this relock is done long before its
        // wake-up is (should this thread be preempted first, the
        // requester finds the lock free, withdraws as the test above
        // shows, and asks again).
        lock.lock();
        let started = Instant::now();
        while lock.word.load(Ordering::Relaxed) & HANDOFF == 0 {
            assert!(started.elapsed().as_secs() < 5, "the requester never flagged the word again");
            std::thread::yield_now();
        }
        assert_eq!(lock.word.load(Ordering::Relaxed) & OWNER_MASK, tid);
        unsafe { lock.unlock() };
        let (granted, word, me) = requester.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
        assert_eq!(granted, Some(true));
        assert_eq!(word & OWNER_MASK, me, "handed over");
        assert!(!lock.is_locked());
    }

    /// What a new owner leaves in the lock's memory after taking the lock,
    /// destroying it and reusing the memory: here, a lock word with
    /// WAITERS alone (a free, marked word is the pattern an unlock that
    /// touched the word after its release would rewrite) and no spinner.
    fn reuse_the_memory(lock: *const ()) {
        // SAFETY: the tests below pass a live `RawAdaptive<NoStats>`.
        let lock = unsafe { &*lock.cast::<RawAdaptive<NoStats>>() };
        lock.word.store(WAITERS, Ordering::Relaxed);
        lock.spinner.store(0, Ordering::Relaxed);
        lock.handoff.store(0, Ordering::Relaxed);
    }

    /// A POSIX mutex may be taken, destroyed and freed by the next holder
    /// the moment it is released, while its unlocker is still returning
    /// (glibc bug 13690). So nothing of the lock is touched after the
    /// release: with sleepers announced and nobody spinning (the unlock
    /// wakes one), with a spinner (it does not), and uncontended. The
    /// memory is reused at the release, and must read as reused after.
    #[test]
    fn an_unlock_touches_nothing_of_the_lock_after_releasing_it() {
        AFTER_RELEASE.with(|hook| hook.set(Some(reuse_the_memory)));
        let tid = current_tid();
        for (held, case) in [
            (tid | WAITERS, "sleepers announced, nobody spinning"),
            (tid | WAITERS | SPINNER, "sleepers announced, a waiter spinning"),
            (tid | SPINNER, "a waiter spinning"),
            (tid, "uncontended"),
        ] {
            let lock = RawAdaptive::<NoStats>::new();
            lock.word.store(held, Ordering::Relaxed);
            unsafe { lock.unlock() };
            assert_eq!(lock.word.load(Ordering::Relaxed), WAITERS, "{case}: the word was written after the release");
        }
        AFTER_RELEASE.with(|hook| hook.set(None));
    }

    /// A sleeper is due a wake once the interval has passed since the
    /// last, across the stamp's wrap.
    #[test]
    fn a_sleeper_is_due_a_wake_once_per_interval() {
        let interval = WAKE_INTERVAL_STAMPS;
        assert!(!sleeper_wake_due(10, 10));
        assert!(!sleeper_wake_due(10 + interval - 1, 10));
        assert!(sleeper_wake_due(10 + interval, 10));
        assert!(!sleeper_wake_due(2, WAKE_STAMP_MASK - 1), "wrapped: 3 stamps since");
        assert!(sleeper_wake_due(interval - 2, WAKE_STAMP_MASK - 1), "wrapped: the interval since");
    }

    /// An overdue wake is issued and moves the stamp to now; the fields
    /// beside the stamp are untouched.
    #[test]
    fn an_overdue_wake_moves_the_stamp_to_now() {
        let lock = RawAdaptive::<NoStats>::new();
        let before = wake_stamp_now();
        let overdue = before.wrapping_sub(WAKE_INTERVAL_STAMPS + 1) & WAKE_STAMP_MASK;
        lock.tuning.store(lock.tuning().with_last_wake_stamp(overdue).0, Ordering::Relaxed);
        let woke = lock.wake_an_overdue_sleeper();
        let after = wake_stamp_now();
        let elapsed = after.wrapping_sub(before) & WAKE_STAMP_MASK;
        // (A test thread descheduled for ~2 ms, a whole wrap, proves nothing.)
        if elapsed < WAKE_STAMP_MASK / 2 {
            assert!(woke, "none woken for longer than the interval");
            let stored = lock.tuning().last_wake_stamp();
            assert!(stored.wrapping_sub(before) & WAKE_STAMP_MASK <= elapsed, "stamp {stored} not in [{before}, {after}]");
        }
        assert_eq!(lock.tuning().spin_budget_ns(), INITIAL_SPIN_NS, "the budget is a separate field");
        assert_eq!(lock.tuning().grace_ns(), INITIAL_GRACE_NS, "the grace is a separate field");
    }

    /// The owner back in the word ends the grace as a return; anybody
    /// else as an owner change (the spinner then bails out, seed 000).
    #[test]
    fn grace_tells_a_returning_owner_from_a_new_one() {
        let lock = RawAdaptive::<NoStats>::new();
        lock.word.store(OTHER | WAITERS, Ordering::Relaxed);
        assert!(matches!(lock.give_owner_grace(OTHER), Grace::Returned { .. }));
        assert_eq!(lock.give_owner_grace(OTHER - 1), Grace::OwnerChanged);
        assert!(lock.tuning().grace_ns() >= INITIAL_GRACE_NS, "a return never shrinks the grace");
    }

    /// Runs `f` while another thread takes and releases `lock` in a loop.
    fn beside_a_looping_owner<T>(lock: &Arc<RawAdaptive>, f: impl FnOnce() -> T) -> T {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let owner = {
            let (lock, stop) = (lock.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    lock.lock();
                    std::hint::black_box(());
                    unsafe { lock.unlock() };
                }
            })
        };
        let result = f();
        stop.store(true, Ordering::Relaxed);
        owner.join().unwrap();
        result
    }

    /// A loop that re-takes the lock at once, against a spinner: the grace
    /// grows past its initial value (the owner is seen coming back), and
    /// the spinner still gets the lock (the handoff bound serves it).
    #[test]
    fn grace_grows_for_an_owner_that_relocks_at_once() {
        let lock = Arc::new(RawAdaptive::<NoStats>::new());
        let (acquisitions, largest_grace) = beside_a_looping_owner(&lock, || {
            let start = Instant::now();
            let mut acquisitions = 0;
            // The largest grace seen: it also halves whenever an owner
            // happens not to come back (a preemption), so its last value
            // is noise. Until it grows, for up to 3 s: on a loaded machine
            // the two threads may seldom run at once, and without
            // contention no grace is given.
            let mut largest_grace = 0;
            while largest_grace <= INITIAL_GRACE_NS && start.elapsed() < std::time::Duration::from_secs(3) {
                lock.lock();
                acquisitions += 1;
                unsafe { lock.unlock() };
                largest_grace = largest_grace.max(lock.tuning().grace_ns());
            }
            (acquisitions, largest_grace)
        });
        assert!(acquisitions > 0);
        assert!(
            largest_grace > INITIAL_GRACE_NS,
            "grace at most {largest_grace} ns in 3 s of a tight loop"
        );
    }

    /// Early in a spin the reads stay close together, so a short section's
    /// release is seen soon; later the wait doubles up to the cap.
    #[test]
    fn the_spinner_backs_off_in_proportion_to_its_wait() {
        let max = clock::pauses_in(MAX_SPIN_BACKOFF_NS);
        let early = next_spin_backoff(max, max, 800);
        assert!(early <= clock::pauses_in(50), "{early} pauses after 800 ns of spinning");
        assert_eq!(next_spin_backoff(1, max, 1_000_000), 2, "doubling, from one pause");
        assert_eq!(next_spin_backoff(max, max, 1_000_000), max, "the cap holds however long the wait");
    }

    /// The rule: a wait that a spin of at most the cap would have covered
    /// grows the budget to twice it; a longer one leaves the budget alone.
    #[test]
    fn an_outlasted_spin_learns_what_would_have_done() {
        let lock = RawAdaptive::<NoStats>::new();
        lock.tuning.store(Tuning(0).with_spin_budget_ns(MIN_SPIN_NS).0, Ordering::Relaxed);
        lock.learn_from_outlasted_spin(clock::ns_to_cycles(MAX_SPIN_NS as u64 * 5));
        assert_eq!(lock.tuning().spin_budget_ns(), MIN_SPIN_NS, "a sleep longer than any spin teaches nothing");
        lock.learn_from_outlasted_spin(clock::ns_to_cycles(30_000));
        let budget = lock.tuning().spin_budget_ns();
        assert!((59_000..=61_000).contains(&budget), "budget {budget} ns after a 30 µs wait");
    }

    /// The same through the lock: with the budget at its floor, far below
    /// a 30 µs critical section, every spin runs out and the waiter
    /// sleeps until the owner's unlock wakes it. Learning only from spins
    /// that succeed, the budget stayed at the floor for good; now the
    /// waiter learns that a longer spin would have taken the lock.
    #[test]
    fn a_budget_below_the_critical_section_grows_back() {
        let lock = Arc::new(RawAdaptive::<NoStats>::new());
        lock.tuning.store(Tuning(0).with_spin_budget_ns(MIN_SPIN_NS).0, Ordering::Relaxed);
        // 0: owner's turn; 1: the owner holds the lock; 2: the waiter is done.
        let phase = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let owner = {
            let (lock, phase, stop) = (lock.clone(), phase.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    lock.lock();
                    phase.store(1, Ordering::Release);
                    let held = Instant::now();
                    while held.elapsed() < std::time::Duration::from_micros(30) {
                        std::hint::spin_loop();
                    }
                    unsafe { lock.unlock() };
                    while phase.load(Ordering::Acquire) == 1 && !stop.load(Ordering::Relaxed) {
                        std::thread::yield_now();
                    }
                    phase.store(0, Ordering::Release);
                }
            })
        };
        let mut largest_budget = 0;
        // A trial teaches only when the owner runs through its section:
        // preempted, it is off CPU (the waiter sleeps without spinning)
        // or outlasts any spin. An idle machine needs a few trials; one
        // loaded with other work (a build beside the tests) needed more
        // than 200.
        let give_up_at = Instant::now() + std::time::Duration::from_secs(10);
        let mut trials = 0;
        while Instant::now() < give_up_at {
            trials += 1;
            while phase.load(Ordering::Acquire) != 1 {
                std::hint::spin_loop();
            }
            lock.lock();
            unsafe { lock.unlock() };
            largest_budget = largest_budget.max(lock.tuning().spin_budget_ns());
            phase.store(2, Ordering::Release);
            if largest_budget >= 20_000 {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        owner.join().unwrap();
        assert!(largest_budget >= 20_000, "budget at most {largest_budget} ns behind 30 µs critical sections, {trials} trials");
    }

    /// The hand-over votes are a field of their own; the verdict they
    /// give moves the grace's bound, and a lock that hands over again
    /// waits no longer than before it kept.
    #[test]
    fn votes_decide_whether_the_lock_keeps_with_its_owner() {
        let fields = |t: Tuning| (t.spin_budget_ns(), t.grace_misses(), t.last_wake_stamp());
        let mut tuning =
            Tuning(0).with_spin_budget_ns(MIN_SPIN_NS).with_grace_misses(3).with_last_wake_stamp(WAKE_STAMP_MASK);
        let others = fields(tuning);
        assert_eq!(others, (MIN_SPIN_NS, 3, WAKE_STAMP_MASK));
        assert!(!tuning.keeps_lock_with_owner(), "a fresh lock hands over");
        for _ in 0..Tuning::VOTES_MAX + 3 {
            tuning = tuning.with_vote(true);
        }
        assert!(tuning.keeps_lock_with_owner());
        assert_eq!(tuning.votes(), Tuning::VOTES_MAX, "the votes saturate");
        tuning = tuning.with_grace_ns(10 * KEEPING_MAX_GRACE_NS);
        assert_eq!(tuning.grace_ns(), KEEPING_MAX_GRACE_NS);
        for _ in 0..=Tuning::VOTES_MAX / 2 {
            tuning = tuning.with_vote(false);
        }
        assert!(!tuning.keeps_lock_with_owner(), "as many votes against turn it back");
        assert_eq!(tuning.grace_ns(), MAX_GRACE_NS);
        assert_eq!(fields(tuning), others, "the other fields are untouched");
    }

    /// While a probe's window is open, every release is counted, up to the
    /// field's maximum (never carrying into the flags), and the window's
    /// bits stay on the word through locks and unlocks.
    #[test]
    fn an_open_window_counts_releases_and_saturates() {
        let lock = RawAdaptive::<NoStats>::new();
        lock.word.store(COUNTING, Ordering::Relaxed);
        assert!(lock.try_lock());
        assert_eq!(lock.word.load(Ordering::Relaxed), current_tid() | COUNTING);
        unsafe { lock.unlock() };
        assert_eq!(lock.word.load(Ordering::Relaxed), COUNTING | COUNT_ONE);
        for _ in 0..2 * (COUNT_MASK / COUNT_ONE) {
            lock.lock();
            unsafe { lock.unlock() };
        }
        assert_eq!(lock.word.load(Ordering::Relaxed), COUNTING | COUNT_MASK);
        lock.word.fetch_and(!(COUNTING | COUNT_MASK), Ordering::Relaxed);
        lock.lock();
        unsafe { lock.unlock() };
        assert_eq!(lock.word.load(Ordering::Relaxed), 0, "closed, nothing is counted");
    }

    /// A window counts the releases of a thread looping on the lock, and
    /// leaves the word as it found it.
    #[test]
    fn a_window_measures_an_owner_that_keeps_the_lock() {
        let lock = Arc::new(RawAdaptive::<NoStats>::new());
        // Either thread may be off its CPU for a whole window (other tests
        // run beside this one): a window the owner held throughout counts
        // nothing, one stretched by a preemption reads long per release
        // (both vote for handing over). Try for up to 6 s (2 s missed
        // once, with a model checker's build running beside the tests).
        let best = beside_a_looping_owner(&lock, || {
            let started = Instant::now();
            let mut best = None;
            while best.is_none_or(|ns| ns > PROBE_WINDOW_NS) && started.elapsed() < std::time::Duration::from_secs(6) {
                if let Some(cycles) = lock.count_kept_acquisitions().0 {
                    best = Some(best.unwrap_or(u64::MAX).min(clock::cycles_to_ns(cycles)));
                }
            }
            best
        });
        assert!(best.is_some_and(|ns| ns <= PROBE_WINDOW_NS), "{best:?} ns per release at best");
        assert_eq!(lock.word.load(Ordering::Relaxed), 0);
    }

    /// A probe's timed hold votes at its unlock, which clears TIMED: for
    /// keeping when the window measured less per acquisition than the hold
    /// took, for handing over when nobody took the lock in the window.
    #[test]
    fn a_timed_hold_votes_at_its_unlock() {
        let lock = RawAdaptive::<NoStats>::new();
        let tid = current_tid();
        assert!(lock.take_timed(0, tid, KeptCycle::of(4, 4)));
        assert_eq!(lock.word.load(Ordering::Relaxed), tid | TIMED);
        unsafe { lock.unlock() };
        assert_eq!(lock.word.load(Ordering::Relaxed), 0, "released, TIMED cleared");
        assert_eq!(lock.tuning().votes(), 1);
        assert!(lock.take_timed(0, tid, KeptCycle::of(4, 0)));
        unsafe { lock.unlock() };
        assert_eq!(lock.tuning().votes(), 0);
        // A timed hold released by another thread, for its holder, casts
        // no vote from the releasing thread's stale stash.
        lock.tuning.store(Tuning(0).with_vote(true).0, Ordering::Relaxed);
        TIMED_HOLD.set(Some(TimedHold { lock: 0, seen_free_at: 0, kept: KeptCycle::of(4, 0) }));
        lock.word.store(OTHER | TIMED, Ordering::Relaxed);
        unsafe { lock.unlock_from_any_thread() };
        assert_eq!(lock.word.load(Ordering::Relaxed), 0);
        assert_eq!(lock.tuning().votes(), 1);
    }

    /// The window's estimate: per release, `None` when nobody released.
    #[test]
    fn the_kept_cycle_is_per_release() {
        assert_eq!(KeptCycle::of(4_000, 10), KeptCycle(Some(400)));
        assert_eq!(KeptCycle::of(4_000, 0), KeptCycle(None));
        assert!(KeptCycle::of(4_000, 10).shorter_than(401));
        assert!(!KeptCycle::of(4_000, 10).shorter_than(400));
        assert!(!KeptCycle::of(4_000, 0).shorter_than(u64::MAX), "an owner that did not come back");
    }

    /// A thread that locks again a lock it holds, which another thread
    /// then releases for it (a normal pthread mutex allows any thread to
    /// unlock), gets it, even past the wait that asks for a handoff: the
    /// word naming it was taken for a grant, and it slept on the handoff
    /// slot for ever. A third thread waits beside it.
    #[test]
    fn a_lock_released_for_its_waiting_holder_reaches_it() {
        let lock: &'static RawAdaptive<NoStats> = Box::leak(Box::new(RawAdaptive::new()));
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            lock.lock();
            let other = std::thread::spawn(move || {
                // After the holder's request for a handoff.
                std::thread::sleep(std::time::Duration::from_millis(10));
                lock.lock();
                // SAFETY: this thread holds it now.
                unsafe { lock.unlock() };
            });
            let releaser = std::thread::spawn(move || {
                // Past the handoff bound (1 ms of waiting).
                std::thread::sleep(std::time::Duration::from_millis(50));
                // SAFETY: the lock is held (by the first thread), and its
                // holder does not release it itself.
                unsafe { lock.unlock_from_any_thread() };
            });
            lock.lock();
            // SAFETY: held again by this thread.
            unsafe { lock.unlock() };
            releaser.join().unwrap();
            other.join().unwrap();
            let _ = done.send(());
        });
        assert!(finished.recv_timeout(std::time::Duration::from_secs(10)).is_ok(), "the waiting holder never got the lock");
        assert!(!lock.is_locked());
    }

    /// A requester whose request was granted before it flagged the word
    /// (the unlocker read the slot first) owns the lock on entering the
    /// wait; it must not set HANDOFF on its own word, which would leave a
    /// HANDOFF bit with no request: its own unlock would reserve the word
    /// for nobody.
    #[test]
    fn a_grant_that_arrives_before_the_flag_leaves_no_handoff_bit() {
        let lock = RawAdaptive::<NoStats>::new();
        let tid = current_tid();
        lock.word.store(tid | WAITERS, Ordering::Relaxed);
        lock.handoff.store(tid | GRANTED, Ordering::Relaxed);
        assert_eq!(lock.wait_for_handoff(tid, None), Some(true));
        assert_eq!(lock.word.load(Ordering::Relaxed), tid | WAITERS, "no HANDOFF on our own word");
        assert_eq!(lock.handoff.load(Ordering::Relaxed), 0, "slot freed for the next requester");
        unsafe { lock.unlock() };
        assert!(!lock.is_locked());
    }

    /// An unlock that finds a handoff request hands the lock over: the
    /// requester owns the word (sleepers still announced) and the slot says
    /// granted.
    #[test]
    fn an_unlock_hands_the_lock_to_the_requester() {
        let lock = RawAdaptive::<NoStats>::new();
        let tid = current_tid();
        lock.word.store(tid | HANDOFF | WAITERS, Ordering::Relaxed);
        lock.handoff.store(OTHER, Ordering::Relaxed);
        unsafe { lock.unlock() };
        assert_eq!(lock.word.load(Ordering::Relaxed), OTHER | WAITERS);
        assert_eq!(lock.handoff.load(Ordering::Relaxed), OTHER | GRANTED);
    }

    /// Between the release and the hand-over the word has no owner but
    /// HANDOFF: it is reserved for the requester. Nobody may take it, and
    /// the requester may no longer withdraw (its grant is on the way).
    #[test]
    fn a_reserved_word_is_taken_by_nobody_and_not_withdrawn_from() {
        let lock = RawAdaptive::<NoStats>::new();
        let reserved = HANDOFF | WAITERS;
        lock.word.store(reserved, Ordering::Relaxed);
        lock.handoff.store(OTHER, Ordering::Relaxed);
        assert!(lock.is_locked());
        assert!(!lock.try_lock());
        assert!(!lock.wait_behind_spinner(current_tid()));
        assert!(!lock.withdraw_handoff(OTHER));
        assert_eq!(lock.word.load(Ordering::Relaxed), reserved);
        assert_eq!(lock.handoff.load(Ordering::Relaxed), OTHER, "the request stays for the unlocker to claim");
    }

    /// A hand-over whose unlocker stalls between its release and its grant
    /// does not keep a timed waiter past its deadline.
    #[test]
    fn a_timed_waiter_gives_up_on_a_reserved_word_at_its_deadline() {
        let lock = Arc::new(RawAdaptive::<NoStats>::new());
        let reserved = HANDOFF | WAITERS;
        lock.word.store(reserved, Ordering::Relaxed);
        lock.handoff.store(OTHER, Ordering::Relaxed);
        let (done, outcome) = std::sync::mpsc::channel();
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                let acquired = lock.lock_until(Instant::now() + std::time::Duration::from_millis(20));
                done.send(acquired).unwrap();
            })
        };
        let result = outcome.recv_timeout(std::time::Duration::from_secs(5));
        if result.is_err() {
            // Let the waiter finish before failing: free the word.
            lock.handoff.store(0, Ordering::Relaxed);
            lock.word.store(0, Ordering::Relaxed);
        }
        waiter.join().unwrap();
        assert_eq!(result, Ok(false), "the waiter kept yielding past its deadline");
        assert_eq!(lock.word.load(Ordering::Relaxed), reserved, "the reservation is left alone");
    }

    /// A requester may still withdraw while the word is held: it clears
    /// HANDOFF, and the owner's unlock then releases normally.
    #[test]
    fn a_requester_withdraws_from_a_held_word() {
        let lock = RawAdaptive::<NoStats>::new();
        let tid = current_tid();
        lock.word.store(tid | HANDOFF | WAITERS, Ordering::Relaxed);
        lock.handoff.store(OTHER, Ordering::Relaxed);
        assert!(lock.withdraw_handoff(OTHER));
        assert_eq!(lock.handoff.load(Ordering::Relaxed), 0);
        unsafe { lock.unlock() };
        assert!(!lock.is_locked());
        assert!(lock.try_lock(), "released, not handed over");
        unsafe { lock.unlock() };
    }

    /// The pthread replacement and the C ABI release a normal mutex for
    /// whichever thread holds it, as glibc does; announced sleepers stay
    /// announced or are woken, never lost.
    #[test]
    fn a_lock_held_by_another_thread_can_be_released_for_it() {
        let lock = Arc::new(RawAdaptive::<NoStats>::new());
        let holder = {
            let lock = lock.clone();
            std::thread::spawn(move || lock.lock())
        };
        holder.join().unwrap();
        assert!(lock.is_locked());
        unsafe { lock.unlock_from_any_thread() };
        assert!(!lock.is_locked());
        assert!(lock.try_lock());
        unsafe { lock.unlock() };

        lock.word.store(OTHER | WAITERS, Ordering::Relaxed);
        unsafe { lock.unlock_from_any_thread() };
        assert_eq!(lock.word.load(Ordering::Relaxed), 0, "nobody spins: the mark is cleared and a sleeper woken");
    }

    /// A lock taken before `fork` and released in the child: the word
    /// holds the parent thread's id, not the child's, and the release must
    /// still leave it free (the atfork pattern: lock in prepare, unlock in
    /// both processes).
    #[test]
    fn a_child_of_fork_releases_what_its_parent_took() {
        let lock = RawAdaptive::<NoStats>::new();
        lock.lock();
        let free = crate::sync::in_forked_child(|| {
            unsafe { lock.unlock() };
            lock.try_lock() && lock.word.load(Ordering::Relaxed) == current_tid()
        });
        assert!(free, "the child's release did not leave the word free");
        unsafe { lock.unlock() };
        assert!(!lock.is_locked());
    }

    /// In a child of `fork` as in its parent, a timed requester whose flag
    /// an unlock's exchange took keeps its request past its deadline until
    /// that unlock tells it (FLAG_AGAIN), then gives up: freed before, the
    /// slot, and the lock its next holder may free, would still be read by
    /// the unlock on its way there.
    #[test]
    fn a_timed_requester_in_a_child_of_fork_waits_to_be_told_its_flag_was_taken() {
        let lock = Arc::new(RawAdaptive::<NoStats>::new());
        // (So that the child knows it is one.)
        crate::sync::note_forks();
        let waited = crate::sync::in_forked_child(|| {
            lock.lock();
            let (send, outcome) = std::sync::mpsc::channel();
            let requester = {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    let me = current_tid();
                    lock.handoff.store(me, Ordering::Relaxed);
                    let deadline = Instant::now() + std::time::Duration::from_millis(20);
                    send.send(lock.wait_for_handoff(me, Some(deadline))).unwrap();
                })
            };
            let started = Instant::now();
            while lock.word.load(Ordering::Relaxed) & HANDOFF == 0 && started.elapsed().as_secs() < 5 {
                std::thread::yield_now();
            }
            // An unlock's exchange took the flag, and its mark is late.
            lock.word.fetch_and(!HANDOFF, Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(100));
            let request = lock.handoff.load(Ordering::Relaxed);
            let kept = request != 0 && request & !OWNER_MASK == 0;
            lock.handoff.store(request | FLAG_AGAIN, Ordering::Relaxed);
            futex_wake_bits(&lock.handoff, 1, REQUESTER_BITS);
            let result = outcome.recv_timeout(std::time::Duration::from_secs(5));
            if result.is_ok() {
                requester.join().unwrap();
            }
            kept && result == Ok(Some(false)) && lock.handoff.load(Ordering::Relaxed) == 0
        });
        assert!(waited, "the timed requester freed the slot before it was told, or did not give up once told");
    }

    static SLOT_HELD_WHILE_WITHDRAWING: AtomicU32 = AtomicU32::new(0);

    /// A child of `fork` takes a parent thread's request back holding the
    /// slot until it has cleared the request's flag: a request that took
    /// the slot first would be flagged, then lose its flag to that clear
    /// with no unlock to tell it.
    #[test]
    fn a_withdrawal_for_a_parent_thread_holds_the_slot_until_the_flag_is_cleared() {
        fn check(lock: *const ()) {
            let lock = hooked_lock(lock);
            let held = lock.handoff.load(Ordering::Relaxed) & WITHDRAWING != 0;
            let flagged = lock.word.load(Ordering::Relaxed) & HANDOFF != 0;
            SLOT_HELD_WHILE_WITHDRAWING.store(u32::from(held && flagged) + 1, Ordering::Relaxed);
        }
        let freed = unlock_in_a_child_of_fork(
            |lock, parent_thread| {
                lock.handoff.store(parent_thread, Ordering::Relaxed);
                lock.word.fetch_or(HANDOFF | WAITERS, Ordering::Relaxed);
                WHILE_WITHDRAWING_FOR_A_PARENT.with(|hook| hook.set(Some(check)));
            },
            |lock| {
                WHILE_WITHDRAWING_FOR_A_PARENT.with(|hook| hook.set(None));
                SLOT_HELD_WHILE_WITHDRAWING.load(Ordering::Relaxed) == 2
                    && lock.handoff.load(Ordering::Relaxed) == 0
                    && lock.try_lock()
            },
        );
        assert!(freed, "the slot was open while the parent thread's flag was cleared, or the lock was not freed");
    }

    /// A child of a child of `fork`, whose lock's slot says a thread of the
    /// first child was taking a parent thread's request back as it forked:
    /// that thread does not exist here, so the unlock takes the withdrawal
    /// over (waiting for it, the unlock waited for ever).
    #[test]
    fn a_withdrawal_interrupted_by_fork_is_taken_over() {
        let freed = unlock_in_a_child_of_fork(
            |lock, parent_thread| {
                lock.handoff.store(parent_thread | WITHDRAWING, Ordering::Relaxed);
                lock.word.fetch_or(HANDOFF | WAITERS, Ordering::Relaxed);
                // The unlock below would wait for ever without the takeover.
                std::thread::spawn(|| {
                    std::thread::sleep(std::time::Duration::from_secs(5));
                    // SAFETY: ends the child, which the parent reads as failed.
                    unsafe { libc::_exit(2) };
                });
            },
            |lock| !lock.is_locked() && lock.handoff.load(Ordering::Relaxed) == 0 && lock.try_lock(),
        );
        assert!(freed, "the child's unlock waited for a withdrawal nobody in it makes");
    }

    /// A child of `fork` whose lock still names a parent thread as its
    /// spinner: that thread will never take the lock, so the child's unlock
    /// frees the slot and wakes a sleeper itself; and closes the spinner's
    /// probe window if one was open (nobody else would, and every lock and
    /// unlock would take the slow path for good).
    #[test]
    fn a_child_of_fork_frees_what_a_parent_spinner_left() {
        for (left, broken) in [
            (WAITERS | SPINNER, "left the wake to a spinner that does not exist there"),
            (COUNTING | COUNT_ONE, "left a parent spinner's window open"),
        ] {
            let freed = unlock_in_a_child_of_fork(
                |lock, parent_thread| {
                    lock.word.fetch_or(left, Ordering::Relaxed);
                    lock.spinner.store(parent_thread, Ordering::Relaxed);
                },
                |lock| lock.spinner.load(Ordering::Relaxed) == 0 && lock.word.load(Ordering::Relaxed) == 0,
            );
            assert!(freed, "the child's unlock {broken}");
        }
    }

    /// A child of `fork` whose lock is reserved for a parent thread's
    /// handoff request: handing the lock to that thread would leave it held
    /// by nobody, so the child's unlock withdraws the request and frees it.
    #[test]
    fn a_child_of_fork_does_not_hand_the_lock_to_a_parent_thread() {
        let freed = unlock_in_a_child_of_fork(
            |lock, parent_thread| {
                lock.handoff.store(parent_thread, Ordering::Relaxed);
                lock.word.fetch_or(HANDOFF | WAITERS, Ordering::Relaxed);
            },
            |lock| !lock.is_locked() && lock.handoff.load(Ordering::Relaxed) == 0 && lock.try_lock(),
        );
        assert!(freed, "the child's unlock handed the lock to a thread that does not exist there");
    }

    /// A child of `fork` whose handoff slot holds a parent thread's request
    /// that was not yet flagged on the word: a child waiter passed over
    /// for the bound must not queue behind it (nobody would ever free the
    /// slot), but take the slot over and be served.
    #[test]
    fn a_child_of_fork_does_not_queue_behind_a_parent_request() {
        let lock = Arc::new(RawAdaptive::<NoStats>::new());
        let parent_thread = current_tid();
        let served = crate::sync::in_forked_child(|| {
            lock.lock();
            lock.handoff.store(parent_thread, Ordering::Relaxed);
            let (done_tx, done) = std::sync::mpsc::channel();
            spawn_waiter(&lock, &done_tx, ());
            // Past the bound asleep on the word, then woken (as a barging
            // unlock would) with the lock still held: it goes for the slot.
            std::thread::sleep(std::time::Duration::from_millis(30));
            futex_wake(&lock.word, u32::MAX);
            std::thread::sleep(std::time::Duration::from_millis(50));
            unsafe { lock.unlock() };
            done.recv_timeout(std::time::Duration::from_secs(5)).is_ok()
        });
        assert!(served, "the child's waiter slept behind a parent thread's handoff request");
    }

    /// In a child of `fork`: takes a lock, lets `leave` mark it as a
    /// parent thread (whose id it is given) would have left it, unlocks,
    /// and returns what `then` finds.
    fn unlock_in_a_child_of_fork(
        leave: impl FnOnce(&RawAdaptive, u32),
        then: impl FnOnce(&RawAdaptive) -> bool,
    ) -> bool {
        let lock = RawAdaptive::<NoStats>::new();
        let parent_thread = current_tid();
        crate::sync::in_forked_child(|| {
            lock.lock();
            leave(&lock, parent_thread);
            unsafe { lock.unlock() };
            then(&lock)
        })
    }

    /// Starts a thread that takes `lock` and, holding it, reports `tag`.
    /// Returns its thread id.
    fn spawn_waiter<T: Send + 'static>(lock: &Arc<RawAdaptive>, served: &std::sync::mpsc::Sender<T>, tag: T) -> u32 {
        let (lock, served) = (lock.clone(), served.clone());
        let (tid_tx, tid) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            tid_tx.send(current_tid()).unwrap();
            lock.lock();
            served.send(tag).unwrap();
            unsafe { lock.unlock() };
        });
        tid.recv().unwrap()
    }

    /// Waits until every thread of `tids` is asleep (state S in
    /// /proc/self/task/TID/stat, read twice 2 ms apart), or panics after
    /// 10 s. A fixed pause is not enough on a machine busy with other
    /// work: a woken waiter may wait that long for a CPU before it sleeps
    /// again where the test expects it.
    fn until_asleep(tids: &[u32]) {
        let asleep = |tid: &u32| {
            let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
            // The state follows the command name's closing parenthesis.
            stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('S'))
        };
        let give_up_at = Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if tids.iter().all(asleep) {
                std::thread::sleep(std::time::Duration::from_millis(2));
                if tids.iter().all(asleep) {
                    return;
                }
            }
            assert!(Instant::now() < give_up_at, "waiters {tids:?} not all asleep after 10 s");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Two starving waiters queue for a busy handoff slot; the request in
    /// it leaves, and the lock is free when the first in line wakes, so it
    /// takes the lock without the slot. It must pass the wake on, or the
    /// second sleeps in the queue forever with the slot free.
    #[test]
    fn a_waiter_leaving_the_slot_queue_wakes_the_next() {
        let lock = Arc::new(RawAdaptive::<NoStats>::new());
        lock.lock();
        lock.handoff.store(OTHER, Ordering::Relaxed); // a requester that never comes
        let (done_tx, done) = std::sync::mpsc::channel();
        let tids: Vec<u32> = (0..2).map(|_| spawn_waiter(&lock, &done_tx, ())).collect();
        // Let both sleep on the word past the handoff bound, wake them
        // (as a barging unlock would) to find the slot busy, and let them
        // queue for it.
        std::thread::sleep(std::time::Duration::from_millis(30));
        until_asleep(&tids);
        futex_wake(&lock.word, u32::MAX);
        until_asleep(&tids);
        assert!(done.try_recv().is_err(), "the lock is held");
        // The request leaves (it never flagged the word: its slot is
        // freed as a withdrawal frees it) and the lock is released: the
        // first in line finds it free.
        lock.handoff.store(0, Ordering::Release);
        lock.wake_next_in_line();
        unsafe { lock.unlock() };
        for waiter in 0..2 {
            let served = done.recv_timeout(std::time::Duration::from_secs(5));
            assert!(served.is_ok(), "waiter {waiter} still asleep 5 s after the lock became free");
        }
    }

    /// A lock held by this thread, its handoff slot taken by a request that
    /// never comes, and a channel for waiters to say they were served.
    fn held_with_the_slot_taken() -> (Arc<RawAdaptive>, std::sync::mpsc::Sender<&'static str>, std::sync::mpsc::Receiver<&'static str>) {
        let lock = Arc::new(RawAdaptive::<NoStats>::new());
        lock.lock();
        lock.handoff.store(OTHER, Ordering::Relaxed);
        let (served_tx, served) = std::sync::mpsc::channel();
        (lock, served_tx, served)
    }

    /// Puts `count` waiters to sleep in the queue for the handoff slot,
    /// which a request that never comes holds: each sleeps on the word
    /// past the handoff bound, is woken (as a barging unlock would), finds
    /// the slot busy and queues. Returns their thread ids.
    fn queue_for_the_slot(lock: &Arc<RawAdaptive>, served: &std::sync::mpsc::Sender<&'static str>, count: u32, tag: &'static str) -> Vec<u32> {
        let tids: Vec<u32> = (0..count).map(|_| spawn_waiter(lock, served, tag)).collect();
        std::thread::sleep(std::time::Duration::from_millis(50));
        until_asleep(&tids);
        futex_wake(&lock.word, u32::MAX);
        until_asleep(&tids);
        tids
    }

    /// The batch waits for claims that come slowly while many wait: claims
    /// 5 ms after the wake turn it on once enough sleep in queues, quick
    /// claims turn it off again.
    #[test]
    fn a_freed_slot_wakes_a_batch_only_while_claims_come_slowly_and_many_wait() {
        let queues = SlotQueues::new();
        assert_eq!(queues.wake_batch(), 1);
        for _ in 0..24 {
            queues.woke();
            std::thread::sleep(std::time::Duration::from_millis(5));
            queues.claimed();
        }
        assert_eq!(queues.wake_batch(), 1, "claims 5 ms after the wake, nobody asleep");
        for _ in 0..MANY_QUEUED {
            queues.fell_asleep();
        }
        assert_eq!(queues.wake_batch(), SLOT_WAKE_BATCH, "claims 5 ms after the wake, {MANY_QUEUED} asleep");
        queues.woke_up();
        assert_eq!(queues.wake_batch(), 1, "one fewer asleep");
        queues.fell_asleep();
        for _ in 0..100 {
            queues.woke();
            queues.claimed();
        }
        assert_eq!(queues.wake_batch(), 1, "claims at once");
    }

    /// A freed slot wakes a batch of the queue, and waiters woken that find
    /// the slot taken again (a running starving thread got there first)
    /// keep their place: the next freed slot wakes them before any waiter
    /// that queued after them. The lock is held throughout, so nobody
    /// leaves the queue but by a wake.
    #[test]
    fn waiters_that_lost_the_slot_keep_their_place_in_line() {
        let (lock, served_tx, served) = held_with_the_slot_taken();
        let first = queue_for_the_slot(&lock, &served_tx, SLOT_WAKE_BATCH, "first");
        // The slot frees and another starving thread takes it before the
        // woken ones get to it: a whole batch woken, from the queue.
        lock.handoff.store(OTHER - 1, Ordering::Relaxed);
        assert_eq!(lock.wake_queued(SLOT_WAKE_BATCH), (0, SLOT_WAKE_BATCH));
        until_asleep(&first);
        queue_for_the_slot(&lock, &served_tx, 1, "later");
        // Again: the batch woken is the first ones, back at the head, not
        // the one that queued after them.
        lock.handoff.store(OTHER - 2, Ordering::Relaxed);
        assert_eq!(lock.wake_queued(SLOT_WAKE_BATCH), (SLOT_WAKE_BATCH, 0));
        until_asleep(&first);
        assert_eq!(lock.wake_queued(SLOT_WAKE_BATCH), (SLOT_WAKE_BATCH, 0), "the woken lost again and went back to the head");
        until_asleep(&first);
        // Everyone is served once the slot and the lock are free.
        lock.handoff.store(0, Ordering::Relaxed);
        lock.wake_queued(SLOT_WAKE_BATCH);
        unsafe { lock.unlock() };
        let served: Vec<_> = (0..=SLOT_WAKE_BATCH).map(|_| served.recv_timeout(std::time::Duration::from_secs(5))).collect();
        assert!(served.iter().all(Result::is_ok), "waiters still asleep 5 s after the lock became free: {served:?}");
        assert!(served.contains(&Ok("later")));
    }

    /// A waiter woken from the slot's queue while another waiter holds the
    /// slot does not take the lock, free as it is: it goes back to the
    /// head of the queue, and takes the lock once the slot is empty.
    #[test]
    fn a_waiter_woken_from_the_queue_leaves_a_free_lock_to_the_slot() {
        let (lock, served_tx, served) = held_with_the_slot_taken();
        queue_for_the_slot(&lock, &served_tx, 1, "queued");
        // Another starving waiter claims the freed slot; the lock is free
        // when the queued one wakes.
        lock.handoff.store(OTHER - 1, Ordering::Relaxed);
        unsafe { lock.unlock() };
        assert_eq!(lock.wake_queued(1), (0, 1));
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(served.try_recv().is_err(), "the woken waiter took the lock from under the slot's holder");
        assert_eq!(lock.owner(), None);
        // (Polled: on a busy machine the woken thread may take a while to
        // run and queue again; a wake before then finds nobody.)
        let woken = (0..500)
            .map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                lock.wake_queued(1)
            })
            .find(|&woken| woken != (0, 0));
        assert_eq!(woken, Some((1, 0)), "it went back to the queue's head");
        std::thread::sleep(std::time::Duration::from_millis(100));
        // The slot empties: the next wake lets it take the lock.
        lock.handoff.store(0, Ordering::Relaxed);
        lock.wake_next_in_line();
        assert_eq!(served.recv_timeout(std::time::Duration::from_secs(5)), Ok("queued"));
    }
}

/// loom models of the lock word's probe bits (the parking protocol's own
/// models are in `tests/loom*.rs`). Under loom no probe runs (it is timed
/// against a real clock), so the models open the window themselves.
#[cfg(all(test, loom))]
mod models {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    /// Two threads take and release the lock while a probe's window is
    /// open, as `count_kept_acquisitions` leaves it: exclusion holds,
    /// each release is counted once, whichever path it takes (the
    /// uncontended one included: COUNTING sends it to the contended one),
    /// and the window's bits survive every take and release.
    #[test]
    fn an_open_window_counts_every_release() {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.check(|| {
            let shared = Arc::new((RawAdaptive::<NoStats>::new(), UnsafeCell::new(0u32)));
            shared.0.word.store(COUNTING, Ordering::Relaxed);
            let critical = |shared: &(RawAdaptive<NoStats>, UnsafeCell<u32>)| {
                shared.0.lock();
                shared.1.with_mut(|v| unsafe { *v += 1 });
                unsafe { shared.0.unlock() };
            };
            let other = {
                let shared = shared.clone();
                loom::thread::spawn(move || critical(&shared))
            };
            critical(&shared);
            other.join().unwrap();
            assert_eq!(shared.1.with(|v| unsafe { *v }), 2);
            let word = shared.0.word.load(Ordering::Relaxed);
            assert_eq!(word & !WAITERS, COUNTING | 2 * COUNT_ONE, "word {word:#x}");
        });
    }
}
