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
//! Parking alone does not save a FIFO lock from collapse: with more threads
//! in line than CPUs, each hand-over goes to a thread the scheduler must
//! first wake and run, so the lock passes at the rate of context switches
//! (`sem` at 16-256 threads on 2 CPUs: ~0.1 Mops/s against 6 at 2 threads).
//! So the line is kept as short as the CPUs (concurrency restriction, as in
//! Malthusian locks): a thread takes a ticket only while at most
//! `cpus - 1` are out; otherwise it waits at the *gate*, asleep, and the
//! threads in line keep passing the lock among themselves at spinning
//! speed. A gate sleeper is woken when the lock goes idle, and one that has
//! waited `ADMISSION_BOUND` closes the gate behind it: no new ticket is
//! taken until it has one, so every thread is admitted within about that
//! bound and the threads in line rotate. Order is FIFO among the threads in
//! line, and each waits at most the bound plus a drained line beyond that.
//! The line is looked at only while the gate word says so (somebody at the
//! gate, or the line marked full): an uncontended lock reads the gate word
//! alone. A thread that finds itself beyond the window (it came while the
//! line filled up) marks the line full, and the unlock that empties the
//! line clears the mark, so a line overshoots the window by the few threads
//! that arrive before the mark, once per busy spell.
//!
//! Lock state (16 bytes): `next_ticket`; `serving`, whose high 16 bits are
//! the ticket now served and whose low 15 bits count the waiters parked (or
//! about to park), so that the atomic operation that passes the lock on
//! also tells the unlocker whether anybody may sleep (no store-load race
//! between two words), and whose bit 15 says an unlock is looking for
//! given-up tickets (below); `delay_factor`; `gate`, threads at the gate (low 16 bits), how
//! many of them closed it (15 bits) and the line-full mark (the top bit).
//! Tickets are 16 bits: at most 65535 threads in line. The parked count
//! has 15 bits, and a timed waiter counts twice while it sleeps: 32768
//! parked (16384 timed) would carry into the releasing bit and lose their
//! wake. The gate keeps the line near the CPUs' count; it overshoots only
//! by the threads that pass the gate's check before one of them marks the
//! line full, so only that many threads arriving at once could reach it.
//! Past 32767 closers the count stops (the others close the gate
//! uncounted).
//!
//! A timed waiter whose deadline passes cannot take its ticket back (the
//! tickets behind it are counted from it): it *gives it up*, recording
//! (lock, ticket) in a process-wide table of given-up tickets, and the
//! unlock that would serve that ticket serves the next one instead,
//! taking the given-up turn as its holder would have (Scott and Scherer's
//! abortable queue locks, reduced to abandonment, as `mcs` does it). The
//! unlock decides that while it still holds the lock: with waiters parked
//! (every timed waiter counts as one), it marks `serving` *releasing*,
//! looks for the next tickets in the table, and releases past those given
//! up; a waiter that gives up records its entry, then reads `serving`
//! (Dekker's handshake: either the unlock's look finds the entry, or the
//! waiter's read sees the mark or the release), waits out a mark, and
//! takes its entry back if its turn was served. (A release by
//! compare-exchange, which a waiter's change to `serving` after recording
//! was to fail, succeeded on a word that parking waiters had changed back
//! to the value it read, and served a given-up ticket to nobody: a loom
//! model found it.) (Deciding after the release, an unlock preempted there could
//! take over a ticket of the same number from a later line, by then the
//! lock's or a new lock's at the same address.) The entry is reserved
//! before the waiter takes its ticket, so giving up cannot fail for want
//! of room; with the table full, a timed lock polls `try_lock` instead
//! (correct, not fair), as it did before the table existed: that
//! succeeds only between two holders, and timed out with 200 ms to spare
//! while the lock changed hands thousands of times. A timed waiter counts
//! itself as parked for its whole wait, so the unlock that reaches its
//! ticket takes the slow path, the only one that looks at the table.
//!
//! Pick it when FIFO order matters more than throughput: strict while the
//! waiters fit on the CPUs, a rotation with a bounded wait beyond.

use crate::clock::{self, SpinBudget};
use crate::config;
use crate::record::{self, AcquireKind, NoStats, Recorder};
use crate::sync::{futex_wait_bits, futex_wake_bits, spin_hint, store_load_barrier, AtomicPtr, AtomicU32, Ordering};
use std::time::Instant;

/// Spin this long on our turn before parking.
const PARK_AFTER_NS: u64 = 20_000;
/// A thread kept at the gate this long closes it behind itself: no new
/// ticket is taken until it has one. Long enough that the threads in line
/// pass the lock many times between two rotations (a rotation costs a
/// context switch or two), short against a scheduler's time slice times the
/// threads sharing a CPU.
const ADMISSION_BOUND_NS: u64 = 10_000_000;
/// In `gate`: one thread waiting at the gate, ...
const GATE_WAITER: u32 = 1;
const GATE_WAITERS_MASK: u32 = 0xFFFF;
/// ... and one of them past the bound, closing it.
const GATE_CLOSER: u32 = 1 << 16;
const GATE_CLOSERS_MASK: u32 = 0x7FFF << 16;
/// ... and the line was seen longer than the window: newcomers must look
/// at it before taking a ticket. Set by a thread that joined beyond the
/// window, cleared by the unlock that empties the line.
const LINE_FULL: u32 = 1 << 31;
/// A closer yields this many times waiting for the line to drain (it
/// drains within a few turns of a short critical section), then naps
/// between looks, so that a lock held long (across I/O) does not keep its
/// closers spinning: `CLOSER_NAP_NS`, and while the same turn is served
/// (one holder keeps the lock), each nap twice the last, up to
/// `CLOSER_MAX_NAP_NS`. (The unlock that empties the line wakes one gate
/// sleeper; the naps bound a wake taken by another, which finds the gate
/// closed and sleeps on, leaving the lock idle until the closer looks:
/// under a busy line the naps stay short.) With 200 µs naps alone, a
/// thread retrying 100 ms timed locks on a mutex held 3 s (each given-up
/// ticket keeps the line long until the holder's unlock) used 242 ms of
/// CPU and 8,651 context switches; a FIFO peer, `mcs`, 2 ms and 30.
const CLOSER_YIELDS: u32 = 64;
const CLOSER_NAP_NS: u64 = 200_000;
const CLOSER_MAX_NAP_NS: u64 = 6_400_000;
/// The gate's key in the waiting array, beyond every 16-bit ticket.
const GATE_KEY: u32 = 1 << 16;
/// Futex bits of the two kinds of sleeper a waiting-array slot may hold:
/// ticket holders (all woken, a collision must not swallow a wake) and
/// gate sleepers (one woken: a herd would all join the line at once).
const TICKET_BITS: u32 = 1;
const GATE_BITS: u32 = 2;

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
/// The parked waiters' count in the `serving` word.
const PARKED_MASK: u32 = 0x7FFF;
/// In the `serving` word: an unlock is looking for given-up tickets
/// behind its own, the lock still held.
const RELEASING: u32 = 0x8000;

/// What [`RawTicket::enter`] left to wait for: the turn of the ticket
/// it took, or the gate.
#[must_use = "the lock is not held until `RawTicket::wait` returns"]
pub struct Wait {
    turn: Option<u32>,
}

/// The raw `ticket` lock.
#[repr(C)]
pub struct RawTicket<R: Recorder = NoStats> {
    next_ticket: AtomicU32,
    /// Ticket served (high 16 bits) | RELEASING | parked waiters (low 15
    /// bits).
    serving: AtomicU32,
    /// Pause instructions per waiter ahead; 0 reads as 1.
    delay_factor: AtomicU32,
    /// Threads at the gate, those of them closing it, and the line-full
    /// mark (see `GATE_*` and `LINE_FULL`).
    gate: AtomicU32,
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
                gate: AtomicU32::new(0),
                recorder: R::INIT,
            }
        }
    }

    /// For the loom models only: a lock whose first `out` tickets are out
    /// (the model serves them with `unlock`), its line marked full or not
    /// (marked, a newcomer goes through the gate; unmarked, it joins the
    /// line and marks it).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn with_line_for_model(out: u32, marked_full: bool) -> Self {
        let lock = Self::new();
        lock.next_ticket.store(out, Ordering::Relaxed);
        lock.gate.store(if marked_full { LINE_FULL } else { 0 }, Ordering::Relaxed);
        lock
    }

    /// For the loom models only: the gate word (nobody at the gate, no
    /// mark left, once the lock is idle).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn gate_word_for_model(&self) -> u32 {
        self.gate.load(Ordering::Relaxed)
    }

    /// The statistics recorder.
    pub fn recorder(&self) -> &R {
        &self.recorder
    }

    fn now_serving(&self) -> u32 {
        self.serving.load(Ordering::Acquire) >> 16
    }

    /// Tickets out: the holder's and the waiters'.
    #[inline(always)]
    fn tickets_out(&self) -> u32 {
        let next = self.next_ticket.load(Ordering::SeqCst);
        next.wrapping_sub(self.serving.load(Ordering::SeqCst) >> 16) & TICKET_MASK
    }

    /// Whether a new ticket may be taken now: the line has room beside the
    /// CPUs' worth of threads already in it, and nobody closed the gate.
    #[inline(always)]
    fn admitted(&self) -> bool {
        // (A window is at least 1: a line of one needs no look at it.)
        self.gate.load(Ordering::Relaxed) & GATE_CLOSERS_MASK == 0 && {
            let out = self.tickets_out();
            out <= 1 || out <= spin_window()
        }
    }

    /// Takes a ticket and waits for its turn.
    #[inline(always)]
    pub fn lock(&self) {
        if let Err(wait) = self.enter() {
            self.wait(wait);
        }
    }

    /// The steps of [`Self::lock`] that never wait nor make a system call:
    /// take a ticket if nobody is at the gate, and the lock if it is the
    /// ticket's turn. `Err` when the lock must be waited for, by
    /// [`Self::wait`] (which may park, and so change `errno`: a pthread
    /// replacement keeps it around that step only).
    #[inline(always)]
    pub fn enter(&self) -> Result<(), Wait> {
        // Nobody at the gate and the line not marked full: take a ticket
        // without reading the line. Reading it here, on every lock, cost
        // the uncontended pair 3-4 ns (`sem` at one thread, 38-40 against
        // 44-48 Mops/s); the gate word alone costs nothing measurable.
        if self.gate.load(Ordering::Relaxed) != 0 {
            return Err(Wait { turn: None });
        }
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed) & TICKET_MASK;
        if self.now_serving() == ticket {
            self.recorder.acquired(AcquireKind::NoWait, 0);
            return Ok(());
        }
        Err(Wait { turn: Some(ticket) })
    }

    /// The rest of [`Self::lock`] after [`Self::enter`] returned `wait`:
    /// waits for the ticket's turn, or at the gate and then for a ticket.
    #[cold]
    pub fn wait(&self, wait: Wait) {
        self.wait_until(wait, None);
    }

    /// Takes a ticket and waits for its turn until `deadline`; false if it
    /// passed first (the ticket, if it took one, given up: see the
    /// module's doc).
    pub fn lock_until(&self, deadline: Instant) -> bool {
        let Some(reservation) = given_up_tickets().reserve(self.address()) else {
            return clock::poll_until(deadline, || self.try_lock());
        };
        match self.enter() {
            Ok(()) => {
                given_up_tickets().release(reservation);
                true
            }
            Err(wait) => self.wait_until(wait, Some(Timed { deadline, reservation })),
        }
    }

    /// The lock's address, its key among the given-up tickets.
    fn address(&self) -> *mut () {
        self as *const Self as *mut ()
    }

    /// [`Self::wait`]; `timed`, giving up when its deadline passes: false.
    #[cold]
    fn wait_until(&self, wait: Wait, timed: Option<Timed>) -> bool {
        match wait.turn {
            Some(ticket) => self.wait_for_turn(ticket, None, timed),
            None => {
                let start = record::wait_start::<R>();
                let slept_at_gate = if self.admitted() {
                    false
                } else {
                    match self.wait_at_gate_within(ADMISSION_BOUND_NS, timed.as_ref().map(|t| t.deadline)) {
                        Some(waited) => waited,
                        None => {
                            if let Some(timed) = timed {
                                given_up_tickets().release(timed.reservation);
                            }
                            self.recorder.timed_out(record::waited::<R>(start));
                            return false;
                        }
                    }
                };
                self.take_ticket(slept_at_gate.then_some(start), timed)
            }
        }
    }

    /// Takes a ticket and waits for its turn (`timed`: until its deadline,
    /// false if it passed first). `gate_wait_start`: when this thread began
    /// waiting at the gate, if it slept there: a turn served at once then
    /// still ends a wait, and a sleep.
    #[inline(always)]
    fn take_ticket(&self, gate_wait_start: Option<u64>, timed: Option<Timed>) -> bool {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed) & TICKET_MASK;
        if self.now_serving() == ticket {
            if let Some(timed) = timed {
                given_up_tickets().release(timed.reservation);
            }
            match gate_wait_start {
                Some(start) => self.recorder.acquired(AcquireKind::Sleep, record::waited::<R>(start)),
                None => self.recorder.acquired(AcquireKind::NoWait, 0),
            }
            return true;
        }
        self.wait_for_turn(ticket, gate_wait_start, timed)
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

    /// Waits for `ticket`'s turn; `timed`, gives the ticket up when its
    /// deadline passes first: false. `gate_wait_start`: when this thread
    /// began waiting at the gate, if it slept there: the wait is timed from
    /// then, and recorded as a sleep however the turn is then waited for.
    #[cold]
    fn wait_for_turn(&self, ticket: u32, gate_wait_start: Option<u64>, timed: Option<Timed>) -> bool {
        let start = gate_wait_start.unwrap_or_else(record::wait_start::<R>);
        let deadline = timed.as_ref().map(|t| t.deadline);
        let mut reservation = timed.map(|t| t.reservation);
        // A timed waiter counts as parked for its whole wait: the unlock
        // that reaches its ticket then takes the path that looks for given
        // up tickets. (Taken back when the turn comes; left, with a ticket
        // given up, for the unlock that takes it over.)
        if deadline.is_some() {
            self.serving.fetch_add(PARKED_ONE, Ordering::SeqCst);
        }
        let cap = if running_in_guest() { MAX_DELAY_IN_GUEST } else { MAX_DELAY_BARE_METAL };
        let mut factor = self.delay_factor.load(Ordering::Relaxed).clamp(1, cap);
        let park_after = clock::ns_to_cycles(PARK_AFTER_NS);
        let mut budget = SpinBudget::new(park_after);
        let mut slept = gate_wait_start.is_some();
        // Joined beyond the window (newcomers took the fast path while the
        // line filled up): mark the line full, so that the next ones look
        // at it and wait at the gate instead.
        if ticket.wrapping_sub(self.now_serving()) & TICKET_MASK > spin_window() {
            self.mark_line_full();
        }
        loop {
            let serving = self.now_serving();
            if serving == ticket {
                break;
            }
            if let Some(reserved) = reservation.take_if(|_| crate::sync::deadline_passed(deadline)) {
                if self.give_up(ticket, reserved) {
                    self.recorder.timed_out(record::waited::<R>(start));
                    return false;
                }
                // Its turn had come: the lock is ours.
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
                self.park_until(wake_at, deadline);
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
        if deadline.is_some() {
            self.serving.fetch_sub(PARKED_ONE, Ordering::Relaxed);
        }
        if let Some(reservation) = reservation {
            given_up_tickets().release(reservation);
        }
        self.delay_factor.store(factor, Ordering::Relaxed);
        let kind = if slept { AcquireKind::Sleep } else { AcquireKind::Spin };
        self.recorder.acquired(kind, record::waited::<R>(start));
        true
    }

    /// Gives up `ticket`, whose deadline passed, in `reservation`'s entry;
    /// false if its turn had come first (the lock is then ours). Records
    /// the entry, then reads `serving`, waiting out an unlock that is
    /// looking at the table: the other half of the handshake in
    /// [`Self::release_past_given_up`]. If the read comes before that
    /// unlock's mark, its look comes after the record, and finds it; if
    /// after its release, that release either served our ticket (then
    /// nobody took the entry: we take it back) or passed over it.
    #[cold]
    fn give_up(&self, ticket: u32, reservation: Reservation) -> bool {
        let table = given_up_tickets();
        let given_up = table.give_up(reservation, self.address(), ticket);
        store_load_barrier();
        let mut spins = 0;
        let serving = loop {
            let serving = self.serving.load(Ordering::SeqCst);
            if serving & RELEASING == 0 {
                break serving;
            }
            // The unlock is a few instructions from its release, unless it
            // was preempted there, perhaps by us (a real-time waiter on the
            // unlocker's CPU would spin for ever): spin briefly, then nap.
            if spins < RELEASING_SPINS {
                spins += 1;
                spin_hint();
            } else {
                nap();
            }
        };
        !(serving >> 16 == ticket && table.claim(given_up.entry, given_up.state()))
    }

    /// Sets LINE_FULL, unless it is set already. (A stale read that sees
    /// a mark the emptying unlock is clearing skips the set: the line then
    /// overshoots a little more, until the next thread beyond the window.)
    #[cold]
    fn mark_line_full(&self) {
        if self.gate.load(Ordering::Relaxed) & LINE_FULL == 0 {
            self.gate.fetch_or(LINE_FULL, Ordering::Relaxed);
        }
    }

    /// Waits, asleep, until the line has room (see the module's doc). A
    /// thread that has waited past `bound_ns` closes the gate and waits for
    /// the line to drain, which it soon does: nobody else joins it
    /// meanwhile. It yields first, then naps (a lock held long).
    /// Returns whether it waited (slept or yielded) rather than finding
    /// room at once; None if `deadline` passed first.
    ///
    /// A gate sleeper sleeps on the waiting array, like a parked ticket
    /// holder, so that the unlock wakes it without touching the lock's
    /// memory after releasing it (the next holder may destroy and free the
    /// lock at once); the unlock reads `gate` before its release instead.
    #[cold]
    fn wait_at_gate_within(&self, bound_ns: u64, deadline: Option<Instant>) -> Option<bool> {
        let arrived = clock::cycles();
        let mut waited_at_all = false;
        let bound = clock::ns_to_cycles(bound_ns);
        let slot = slot_for(self as *const _ as usize, GATE_KEY);
        forget_sleepers_after_fork();
        let mut closer = false;
        let mut counted_as_closer = false;
        let mut closer_yields = 0;
        let mut closer_nap_ns = CLOSER_NAP_NS;
        let mut served_at_last_nap = None;
        let mut timed_out = false;
        slot.sleepers.fetch_add(1, Ordering::Relaxed);
        // SeqCst, with the unlocker's read of `gate`, which precedes its
        // release: either it sees us here, or we see its ticket still out,
        // and then the holder of a later ticket (whose read of `gate`
        // follows that release) sees us.
        self.gate.fetch_add(GATE_WAITER, Ordering::SeqCst);
        store_load_barrier();
        loop {
            let seq = slot.seq.load(Ordering::Acquire);
            if self.tickets_out() <= spin_window() && (closer || self.gate.load(Ordering::Relaxed) & GATE_CLOSERS_MASK == 0) {
                break;
            }
            waited_at_all = true;
            if crate::sync::deadline_passed(deadline) {
                timed_out = true;
                break;
            }
            if closer {
                if closer_yields < CLOSER_YIELDS {
                    closer_yields += 1;
                    yield_cpu();
                } else {
                    let served = self.now_serving();
                    closer_nap_ns = match served_at_last_nap {
                        Some(last) if last == served => (closer_nap_ns * 2).min(CLOSER_MAX_NAP_NS),
                        _ => CLOSER_NAP_NS,
                    };
                    served_at_last_nap = Some(served);
                    let nap = Instant::now() + std::time::Duration::from_nanos(closer_nap_ns);
                    futex_wait_bits(&slot.seq, seq, Some(earlier(nap, deadline)), GATE_BITS);
                }
                continue;
            }
            let waited = clock::cycles().wrapping_sub(arrived);
            // Under loom no clock bounds a wait: the models show that the
            // wakes alone admit every thread.
            if !cfg!(loom) && waited >= bound {
                counted_as_closer = self.count_closer();
                closer = true;
                continue;
            }
            let closing_time = Instant::now() + std::time::Duration::from_nanos(clock::cycles_to_ns(bound.saturating_sub(waited)));
            futex_wait_bits(&slot.seq, seq, Some(earlier(closing_time, deadline)), GATE_BITS);
        }
        let leaving = GATE_WAITER + if counted_as_closer { GATE_CLOSER } else { 0 };
        let before = self.gate.fetch_sub(leaving, Ordering::SeqCst);
        slot.sleepers.fetch_sub(1, Ordering::Relaxed);
        if timed_out {
            // The wake an emptied line sent may have been this thread's to
            // take: pass it on to the next gate sleeper.
            if before & GATE_WAITERS_MASK > 1 {
                self.wake_gate();
            }
            return None;
        }
        Some(waited_at_all)
    }

    /// Counts this thread among the gate's closers, unless 32767 are
    /// counted already: one more would carry into the line-full mark. The
    /// gate is just as closed either way, so such a thread closes it
    /// uncounted. Returns whether it was counted, which is what it takes
    /// back when it leaves.
    fn count_closer(&self) -> bool {
        let mut gate = self.gate.load(Ordering::Relaxed);
        loop {
            if gate & GATE_CLOSERS_MASK == GATE_CLOSERS_MASK {
                return false;
            }
            match self.gate.compare_exchange_weak(gate, gate + GATE_CLOSER, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => gate = now,
            }
        }
    }

    /// Sleeps until the ticket served has reached `target`, or `deadline`
    /// has passed.
    fn park_until(&self, target: u32, deadline: Option<Instant>) {
        let slot = slot_for(self as *const _ as usize, target);
        forget_sleepers_after_fork();
        // Count ourselves on the slot, then register in `serving` with a
        // release RMW: an unlocker whose RMW comes later in the word's order
        // sees the registration, and through it the slot count.
        slot.sleepers.fetch_add(1, Ordering::Relaxed);
        self.serving.fetch_add(PARKED_ONE, Ordering::AcqRel);
        loop {
            let seq = slot.seq.load(Ordering::Acquire);
            // Signed 16-bit distance: has the ticket served reached `target`?
            let behind = target.wrapping_sub(self.now_serving()) & TICKET_MASK;
            if behind == 0 || behind > TICKET_MASK / 2 || crate::sync::deadline_passed(deadline) {
                break;
            }
            futex_wait_bits(&slot.seq, seq, deadline, TICKET_BITS);
        }
        self.serving.fetch_sub(PARKED_ONE, Ordering::Relaxed);
        slot.sleepers.fetch_sub(1, Ordering::Relaxed);
    }

    /// Passes the lock to the next ticket (over the tickets given up right
    /// behind ours, whose turns this thread takes and ends at once).
    /// Leaves `errno` as it was (its only system calls, the wakes, keep it).
    ///
    /// # Safety
    /// The lock must be held.
    #[inline]
    pub unsafe fn unlock(&self) {
        self.recorder.releasing();
        // Everything that touches the lock is done before the release:
        // once released, the lock is the next holder's, who may destroy
        // and free it.
        store_load_barrier();
        let gate = self.gate.load(Ordering::SeqCst);
        let next = if gate & (GATE_WAITERS_MASK | LINE_FULL) != 0 { self.next_ticket.load(Ordering::SeqCst) } else { 0 };
        let serving = self.serving.load(Ordering::Relaxed);
        let ours = serving >> 16;
        self.clear_line_full_if_emptied(gate, next, ours.wrapping_add(1));
        // Nobody parked, and so no timed waiter (each counts as parked for
        // its whole wait) that could have given its ticket up: one
        // compare-exchange releases. (A waiter parking meanwhile fails it.)
        let released = if serving & PARKED_MASK == 0
            && self
                .serving
                .compare_exchange(serving, serving.wrapping_add(SERVED_ONE), Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
        {
            serving.wrapping_add(SERVED_ONE)
        } else {
            self.release_past_given_up(ours, gate)
        };
        // Released: from here on only the waiting array's memory.
        let passed_to = released >> 16;
        if released & PARKED_MASK != 0 {
            // Each turn served wakes its slot's sleepers: a waiter further
            // back sleeps until a turn before its own (see `wait_for_turn`).
            let mut turn = ours;
            while turn != passed_to {
                turn = turn.wrapping_add(1) & TICKET_MASK;
                self.wake_slot(turn);
            }
        }
        // Threads at the gate and nobody left in line: the lock would idle
        // while they sleep. (A ticket taken since `next` was read makes
        // this wake a spare one, never a missing one.)
        if gate & GATE_WAITERS_MASK != 0 && next & TICKET_MASK == passed_to {
            self.wake_gate();
        }
    }

    /// The line empties when the lock passes to `passed_to`: it is full no
    /// more. Cleared before the release, while the lock is still ours to
    /// touch. (A ticket taken meanwhile only makes the mark late, and the
    /// next thread to join beyond the window sets it again.)
    #[inline(always)]
    fn clear_line_full_if_emptied(&self, gate: u32, next: u32, passed_to: u32) {
        if gate & LINE_FULL != 0 && next.wrapping_sub(passed_to) & TICKET_MASK == 0 {
            self.gate.fetch_and(!LINE_FULL, Ordering::Relaxed);
        }
    }

    /// The release with waiters parked: marks `serving` releasing, takes
    /// over the given-up tickets right behind `ours` (each one's waiter
    /// counted among the parked goes with it), and releases past them,
    /// clearing the mark, in one addition. Returns `serving` as released.
    /// The other half of [`Self::give_up`]'s handshake.
    #[cold]
    fn release_past_given_up(&self, ours: u32, gate: u32) -> u32 {
        self.serving.fetch_or(RELEASING, Ordering::SeqCst);
        store_load_barrier();
        let table = given_up_tickets();
        let mut taken_over = 0;
        while table.count.load(Ordering::SeqCst) != 0 && table.take_over(self.address(), ours.wrapping_add(1 + taken_over) & TICKET_MASK) {
            taken_over += 1;
        }
        // The line may end with the tickets taken over, and a thread that
        // came to the gate since `gate` was read is then asleep there with
        // nobody left to wake it: the holder of a later ticket reads
        // `gate` after its release, and a given-up ticket has none. So the
        // line's end is read again, and an emptied line wakes the gate
        // after the release, whoever the read of `gate` saw there.
        let emptied = taken_over != 0 && {
            let next = self.next_ticket.load(Ordering::SeqCst);
            self.clear_line_full_if_emptied(gate, next, ours.wrapping_add(1 + taken_over));
            next.wrapping_sub(ours.wrapping_add(1 + taken_over)) & TICKET_MASK == 0
        };
        let release = ((1 + taken_over) * SERVED_ONE).wrapping_sub(taken_over * PARKED_ONE).wrapping_sub(RELEASING);
        let released = self.serving.fetch_add(release, Ordering::SeqCst).wrapping_add(release);
        if emptied {
            slot_for(self as *const _ as usize, GATE_KEY).wake_even_unseen(1, GATE_BITS);
        }
        released
    }

    /// Forgets the tickets given up on this lock, for a lock whose state is
    /// being reset, initialised again or dropped: its tickets count from 0
    /// again, and an entry left from the old line would have an unlock
    /// pass over a live waiter's ticket.
    pub fn forget_given_up(&self) {
        let table = given_up_tickets();
        if table.count.load(Ordering::Relaxed) != 0 {
            table.forget(self.address());
        }
    }

    /// Wakes the ticket holders parked on the slot of `serving`. Only the
    /// slot's memory is touched, never the lock's.
    /// Leaves `errno` as it was, as [`Self::wake_gate`] does: the unlock
    /// makes no other system call, so a pthread mutex served by `ticket`
    /// releases without keeping it.
    #[cold]
    fn wake_slot(&self, serving: u32) {
        // Everyone on the slot: a collision with another lock or ticket
        // must not swallow the wake of the waiter we mean.
        crate::futex::keeping_errno(|| slot_for(self as *const _ as usize, serving).wake(u32::MAX, TICKET_BITS));
    }

    /// Wakes one gate sleeper (the line is empty). Only the slot's memory
    /// is touched. A gate of another lock sharing the slot may take the
    /// wake; the sleeper it was meant for then waits out its bound.
    #[cold]
    fn wake_gate(&self) {
        crate::futex::keeping_errno(|| slot_for(self as *const _ as usize, GATE_KEY).wake(1, GATE_BITS));
    }

    /// Whether the lock is held (or waited for).
    pub fn is_locked(&self) -> bool {
        self.next_ticket.load(Ordering::Relaxed) & TICKET_MASK != self.now_serving()
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
        self.forget_given_up();
        // Ticket 0 served and held; nobody in line, parked or at the gate.
        self.serving.store(0, Ordering::Relaxed);
        self.gate.store(0, Ordering::Relaxed);
        self.next_ticket.store(1, Ordering::Release);
    }
}

/// A timed wait's deadline, and the entry reserved for its ticket should
/// it give it up.
struct Timed {
    deadline: Instant,
    reservation: Reservation,
}

/// An entry of the given-up tickets' table, reserved by a timed waiter
/// (and then given up in).
#[must_use = "a reservation is given up or released"]
struct Reservation {
    entry: &'static GivenUp,
    /// The entry's generation (its state without the kind bits).
    generation: u32,
}

impl Reservation {
    /// The entry's state once given up.
    fn state(&self) -> u32 {
        self.generation | ENTRY_GIVEN_UP
    }
}

/// How long a waiter that gives up spins on an unlock's RELEASING mark
/// before it naps between looks.
const RELEASING_SPINS: u32 = 1_000;

/// A short sleep (see [`RELEASING_SPINS`]).
fn nap() {
    #[cfg(not(loom))]
    std::thread::sleep(std::time::Duration::from_micros(20));
    #[cfg(loom)]
    spin_hint();
}

/// The earlier of `a` and an optional `deadline`.
fn earlier(a: Instant, deadline: Option<Instant>) -> Instant {
    deadline.map_or(a, |d| d.min(a))
}

/// An entry of the given-up tickets' table: `state` is free, reserved by
/// a timed waiter, or given up (`lock` and `ticket` say which), with a
/// generation above the two low bits that each reuse advances, so that a
/// compare-exchange on a state read before a reuse fails.
#[repr(align(16))]
struct GivenUp {
    state: AtomicU32,
    ticket: AtomicU32,
    lock: AtomicPtr<()>,
}

const ENTRY_FREE: u32 = 0;
const ENTRY_RESERVED: u32 = 1;
const ENTRY_GIVEN_UP: u32 = 2;
const ENTRY_KIND: u32 = 3;
const ENTRY_GENERATION: u32 = 4;

/// The process's given-up tickets (see the module's doc), and how many. A
/// lock's entries are among the `PROBES` entries from its address's hash:
/// a lock has as many timed waiters in line as that at most, more than its
/// line holds (the CPUs' worth: see the gate); beyond, timed locks poll.
struct GivenUpTickets {
    count: AtomicU32,
    entries: [GivenUp; GIVEN_UP_ENTRIES],
}

#[cfg(not(loom))]
const GIVEN_UP_ENTRIES: usize = 1024;
#[cfg(loom)]
const GIVEN_UP_ENTRIES: usize = 4;
const PROBES: usize = if GIVEN_UP_ENTRIES < 64 { GIVEN_UP_ENTRIES } else { 64 };

impl GivenUpTickets {
    /// The entries `lock` may use.
    fn probed(&self, lock: *mut ()) -> impl Iterator<Item = &GivenUp> {
        let first = slot_index(lock as usize, 0, GIVEN_UP_ENTRIES);
        (0..PROBES).map(move |k| &self.entries[(first + k) % GIVEN_UP_ENTRIES])
    }

    /// Reserves an entry for a timed waiter of `lock`; None if none of its
    /// entries is free.
    fn reserve(&'static self, lock: *mut ()) -> Option<Reservation> {
        forget_given_up_tickets_after_fork();
        self.probed(lock).find_map(|entry| {
            let state = entry.state.load(Ordering::Relaxed);
            let generation = state & !ENTRY_KIND;
            // Acquire, with the release that freed the entry: the last
            // owner's writes to it come before ours.
            (state & ENTRY_KIND == ENTRY_FREE
                && entry.state.compare_exchange(state, generation | ENTRY_RESERVED, Ordering::Acquire, Ordering::Relaxed).is_ok())
            .then_some(Reservation { entry, generation })
        })
    }

    /// Frees a reservation its waiter did not need.
    fn release(&self, reservation: Reservation) {
        let next = reservation.generation.wrapping_add(ENTRY_GENERATION) | ENTRY_FREE;
        reservation.entry.state.store(next, Ordering::Release);
    }

    /// Records `ticket` of `lock` as given up in the reserved entry.
    fn give_up(&self, reservation: Reservation, lock: *mut (), ticket: u32) -> Reservation {
        // Counted before it is recorded, and uncounted after it is taken:
        // the count is never below the entries given up and not taken, so
        // a release that reads 0 has none to look for. (Counted after, a
        // release that took another entry meanwhile took its count off
        // first, read 0 for this one, and served its ticket to nobody: a
        // loom model found it.)
        self.count.fetch_add(1, Ordering::SeqCst);
        let entry = reservation.entry;
        entry.lock.store(lock, Ordering::Relaxed);
        entry.ticket.store(ticket, Ordering::Relaxed);
        entry.state.store(reservation.state(), Ordering::SeqCst);
        reservation
    }

    /// Takes over `ticket` of `lock` if it was given up: true when taken
    /// (and its entry freed).
    fn take_over(&self, lock: *mut (), ticket: u32) -> bool {
        self.probed(lock).any(|entry| {
            let state = entry.state.load(Ordering::SeqCst);
            state & ENTRY_KIND == ENTRY_GIVEN_UP
                && entry.lock.load(Ordering::Relaxed) == lock
                && entry.ticket.load(Ordering::Relaxed) == ticket
                && self.claim(entry, state)
        })
    }

    /// Takes every entry of `lock` given up (a reset lock's, see
    /// [`RawTicket::forget_given_up`]).
    fn forget(&self, lock: *mut ()) {
        for entry in self.probed(lock) {
            let state = entry.state.load(Ordering::Acquire);
            if state & ENTRY_KIND == ENTRY_GIVEN_UP && entry.lock.load(Ordering::Relaxed) == lock {
                self.claim(entry, state);
            }
        }
    }

    /// Takes `entry` if it is still in `state` (given up, that generation),
    /// and frees it for the next generation.
    fn claim(&self, entry: &GivenUp, state: u32) -> bool {
        let next = (state & !ENTRY_KIND).wrapping_add(ENTRY_GENERATION) | ENTRY_FREE;
        // Release as well: the entry's next owner writes after our reads
        // (loom found the next owner's ticket lost to the last one's).
        if entry.state.compare_exchange(state, next, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return false;
        }
        self.count.fetch_sub(1, Ordering::Relaxed);
        true
    }
}

#[cfg(not(loom))]
static GIVEN_UP_TICKETS: GivenUpTickets = GivenUpTickets {
    count: AtomicU32::new(0),
    entries: {
        #[allow(clippy::declare_interior_mutable_const)]
        const FREE: GivenUp = GivenUp { state: AtomicU32::new(0), ticket: AtomicU32::new(0), lock: AtomicPtr::new(std::ptr::null_mut()) };
        [FREE; GIVEN_UP_ENTRIES]
    },
};

#[cfg(not(loom))]
fn given_up_tickets() -> &'static GivenUpTickets {
    &GIVEN_UP_TICKETS
}

/// A child of `fork` has none of the parent's other threads: the entries
/// they had reserved are freed there (the first reservation registers the
/// handler). Given-up tickets stay: a lock the forking thread held may
/// have one behind it, which its unlock in the child must pass over (a
/// `TicketMutex` freed them all once, and its next lock in the child
/// waited for ever). A lock initialised again or reset in the child
/// forgets its own (`forget_given_up`, by `Drop` and by the pthread
/// replacement's init, destroy and reset).
#[cfg(not(loom))]
fn forget_given_up_tickets_after_fork() {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    extern "C" fn in_child() {
        let mut given_up = 0;
        for entry in GIVEN_UP_TICKETS.entries.iter() {
            let state = entry.state.load(Ordering::Relaxed);
            match state & ENTRY_KIND {
                ENTRY_GIVEN_UP => given_up += 1,
                ENTRY_RESERVED => entry.state.store((state & !ENTRY_KIND).wrapping_add(ENTRY_GENERATION) | ENTRY_FREE, Ordering::Relaxed),
                _ => {}
            }
        }
        // A thread caught between counting its entry and recording it.
        GIVEN_UP_TICKETS.count.store(given_up, Ordering::Relaxed);
    }
    REGISTER.call_once(|| {
        // SAFETY: registers a plain function that only stores to atomics
        // of a static.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
}

#[cfg(loom)]
fn forget_given_up_tickets_after_fork() {}

#[cfg(loom)]
fn given_up_tickets() -> &'static GivenUpTickets {
    loom::lazy_static! {
        static ref TABLE: GivenUpTickets = GivenUpTickets {
            count: AtomicU32::new(0),
            entries: std::array::from_fn(|_| GivenUp {
                state: AtomicU32::new(0),
                ticket: AtomicU32::new(0),
                lock: AtomicPtr::new(std::ptr::null_mut()),
            }),
        };
    }
    &TABLE
}

/// One futex slot of the waiting array.
#[repr(align(64))]
struct Slot {
    seq: AtomicU32,
    sleepers: AtomicU32,
}

impl Slot {
    /// Wakes up to `count` sleepers of kind `bits`, if anybody sleeps here.
    fn wake(&self, count: u32, bits: u32) {
        if self.sleepers.load(Ordering::Relaxed) != 0 {
            self.wake_even_unseen(count, bits);
        }
    }

    /// [`Self::wake`] without looking at the sleepers' count first, for a
    /// waker whose view of it may be older than a sleeper's arrival: the
    /// sequence bump alone makes a sleeper that read the old one look
    /// again.
    fn wake_even_unseen(&self, count: u32, bits: u32) {
        self.seq.fetch_add(1, Ordering::Release);
        futex_wake_bits(&self.seq, count, bits);
    }
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

/// The waiting array's sleeper counts belong to the process: a child of
/// `fork` inherits the counts of the parent's threads asleep at the fork,
/// threads it does not have, and every unlock that finds its lock's slot
/// counted would make a futex wake to nobody (a lock whose gate had
/// sleepers at the fork: each unlock that empties its line). So the first
/// thread to sleep here registers a handler that zeroes them in the child,
/// whose only thread is the one that forked, asleep nowhere.
#[cfg(not(loom))]
fn forget_sleepers_after_fork() {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    extern "C" fn in_child() {
        for slot in WAITING_ARRAY.iter() {
            slot.sleepers.store(0, Ordering::Relaxed);
        }
    }
    REGISTER.call_once(|| {
        // SAFETY: registers a plain function that only stores to atomics
        // of a static.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
}

#[cfg(loom)]
fn forget_sleepers_after_fork() {}

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
    &waiting_array()[slot_index(lock, ticket, SLOTS)]
}

/// The index of (lock address, ticket) in a table of `len` entries.
fn slot_index(lock: usize, ticket: u32, len: usize) -> usize {
    // A model must be deterministic, and addresses differ between loom's
    // executions: there, entries are keyed by ticket alone (which still lets
    // different tickets collide, as the tables are small).
    #[cfg(loom)]
    let lock = {
        let _ = lock;
        0usize
    };
    // Fibonacci hashing of (lock address, ticket).
    let key = (lock as u64 >> 4) ^ (ticket as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % len
}

/// How many waiters, counting from the front of the line, can be running
/// beside the holder: one fewer than the CPUs this process may use (at
/// least 1). Further back, a waiter parks without spinning.
#[inline(always)]
fn spin_window() -> u32 {
    #[cfg(not(loom))]
    {
        // Read on every lock (the gate's check): a plain cached load, 0
        // until first computed.
        static WINDOW: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        match WINDOW.load(Ordering::Relaxed) {
            0 => {
                let cpus = crate::sync::cpus_allowed();
                let window = (cpus.saturating_sub(1) as u32).clamp(1, TICKET_MASK / 2);
                WINDOW.store(window, Ordering::Relaxed);
                window
            }
            window => window,
        }
    }
    // Models run as on 2 CPUs: with three threads, the last one parks at
    // once.
    #[cfg(loom)]
    {
        1
    }
}

/// Gives the CPU to another thread: a gate closer waiting for the line to
/// drain lets the threads in it run.
fn yield_cpu() {
    #[cfg(not(loom))]
    std::thread::yield_now();
    #[cfg(loom)]
    spin_hint();
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

// A timed-out attempt gives its ticket up, and the unlock that serves it
// passes the lock on.
crate::clock::timed_by_deadline!(RawTicket);

/// A lock dropped with tickets given up behind a holder (a guard leaked
/// with `mem::forget`) leaves no entry that a new lock at its address
/// would take over. (Moved without a drop, it takes its line with it, and
/// a new lock at the old address may still meet the old entries: a lock
/// with its line in it is not moved by correct code.)
#[cfg(not(loom))]
impl<R: Recorder> Drop for RawTicket<R> {
    fn drop(&mut self) {
        self.forget_given_up();
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
    #[inline]
    fn lock(&self) {
        RawTicket::lock(self)
    }
    fn try_lock(&self) -> bool {
        RawTicket::try_lock(self)
    }
    #[inline]
    unsafe fn unlock(&self) {
        RawTicket::unlock(self)
    }
    fn is_locked(&self) -> bool {
        RawTicket::is_locked(self)
    }
}

#[cfg(not(loom))]
// SAFETY: as for `RawMutex`: the fair unlock is the unlock.
unsafe impl<R: Recorder> lock_api::RawMutexFair for RawTicket<R> {
    /// Every unlock is fair: it passes the lock to the next ticket in line, and a
    /// newcomer lines up behind the waiters (no barging).
    unsafe fn unlock_fair(&self) {
        RawTicket::unlock(self)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Fills `lock`'s line past the window with tickets nobody holds, marked
    /// full as the thread that filled it would have: a newcomer waits at
    /// the gate. Returns the tickets out.
    fn fill_the_line<R: Recorder>(lock: &RawTicket<R>) -> u32 {
        let out = spin_window() + 1;
        lock.next_ticket.store(out, Ordering::Relaxed);
        lock.gate.store(LINE_FULL, Ordering::Relaxed);
        out
    }

    /// Returns once a thread counts itself at `lock`'s gate.
    fn until_a_thread_is_at_the_gate<R: Recorder>(lock: &RawTicket<R>) {
        let start = Instant::now();
        while lock.gate.load(Ordering::Relaxed) & GATE_WAITERS_MASK == 0 {
            assert!(start.elapsed() < Duration::from_secs(5), "no thread reached the gate");
            std::thread::yield_now();
        }
    }

    /// A lock this thread holds, and a thread that waits for it with a
    /// timed lock of `timeout`: its result.
    fn held_and_timed(timeout: Duration) -> (Arc<RawTicket<NoStats>>, std::thread::JoinHandle<bool>) {
        let lock = Arc::new(RawTicket::<NoStats>::new());
        lock.lock();
        let timed = {
            let lock = lock.clone();
            std::thread::spawn(move || lock.lock_until(Instant::now() + timeout))
        };
        (lock, timed)
    }

    /// Joins `thread`, which must finish within 5 s: else `why`.
    fn finishes(thread: std::thread::JoinHandle<()>, why: &str) {
        let start = Instant::now();
        while !thread.is_finished() {
            assert!(start.elapsed() < Duration::from_secs(5), "{why}");
            std::thread::sleep(Duration::from_millis(1));
        }
        thread.join().unwrap();
    }

    /// With `lock` held by this thread, a thread that locks it and parks
    /// (its spin over: the unlock then takes the path that looks for
    /// given-up tickets); then this thread's unlock, after which the
    /// waiter must finish within 5 s: else `why`.
    fn unlock_to_a_parked_waiter<L>(lock: L, why: &str)
    where
        L: std::ops::Deref<Target = RawTicket<NoStats>> + Clone + Send + 'static,
    {
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                lock.lock();
                unsafe { lock.unlock() };
            })
        };
        while lock.serving.load(Ordering::Relaxed) & PARKED_MASK == 0 {
            std::thread::yield_now();
        }
        unsafe { lock.unlock() };
        finishes(waiter, why);
    }

    /// A timed waiter whose deadline passes in line gives its ticket up:
    /// the unlock that serves it passes the lock on to the waiter behind,
    /// and the table is left empty.
    #[test]
    fn the_unlock_passes_a_given_up_ticket_on() {
        let (lock, timed) = held_and_timed(Duration::from_millis(30));
        // The timed waiter holds ticket 1; the plain one will hold 2.
        while lock.next_ticket.load(Ordering::Relaxed) < 2 {
            std::thread::yield_now();
        }
        let plain = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                lock.lock();
                unsafe { lock.unlock() };
            })
        };
        assert!(!timed.join().unwrap(), "the timed waiter got a lock that was held throughout");
        unsafe { lock.unlock() };
        finishes(plain, "the given-up ticket was served to nobody");
        assert!(!lock.is_locked());
        assert_eq!(lock.serving.load(Ordering::Relaxed) & PARKED_MASK, 0, "a parked count left behind");
        let me = &*lock as *const RawTicket<NoStats> as *mut ();
        assert!(!given_up_tickets().take_over(me, 1), "the given-up ticket is still in the table");
    }

    /// A lock reset in a child of `fork` counts its tickets from 0 again:
    /// a ticket given up in the old line must not be taken over in the new
    /// one, where it is a live waiter's (the unlock took it over, and took
    /// off a parked count the reset had already dropped: the count borrowed
    /// from the ticket served, 65535 parked left behind).
    #[test]
    fn a_reset_lock_forgets_its_given_up_tickets() {
        let (lock, timed) = held_and_timed(Duration::from_millis(10));
        assert!(!timed.join().unwrap());
        // As the child's refresh does: held by the forking thread, ticket 0.
        unsafe { lock.reset_to_held_by(0) };
        unlock_to_a_parked_waiter(lock.clone(), "the unlock passed over the waiter's ticket");
        assert!(!lock.is_locked());
        assert_eq!(lock.serving.load(Ordering::Relaxed) & PARKED_MASK, 0, "parked count off");
    }

    /// A child of `fork`: the lock the forking thread held, with a ticket
    /// given up behind it, is free once that thread unlocks it there (the
    /// given-up ticket passed over; with every entry freed in the child,
    /// the unlock served it to nobody and the lock stayed taken), and an
    /// entry a vanished thread had reserved is free again.
    #[test]
    fn a_child_of_fork_passes_over_given_up_tickets_and_frees_reservations() {
        let (lock, timed) = held_and_timed(Duration::from_millis(10));
        assert!(!timed.join().unwrap());
        let table = given_up_tickets();
        let other_lock = 0x1000 as *mut ();
        let reserved = table.reserve(other_lock).expect("room for a reservation");
        let entry = reserved.entry as *const GivenUp as usize;
        let in_child = crate::sync::in_forked_child(|| {
            // SAFETY: this thread holds the lock.
            unsafe { lock.unlock() };
            // SAFETY: the entry lives in a static.
            let reservation_freed = unsafe { &*(entry as *const GivenUp) }.state.load(Ordering::Relaxed) & ENTRY_KIND == ENTRY_FREE;
            lock.try_lock() && reservation_freed
        });
        table.release(reserved);
        unsafe { lock.unlock() };
        assert!(!lock.is_locked());
        assert!(in_child, "the child's lock stayed taken, or the reservation held");
    }

    /// A lock dropped with a ticket given up behind its holder (its guard
    /// leaked), and a new lock in its place: the new one's unlock must not
    /// take over the old line's ticket, which in the new line is a live
    /// waiter's (it was, and the waiter slept for ever while others took
    /// the lock).
    #[test]
    fn a_new_lock_in_a_dropped_ones_place_keeps_its_line() {
        // Leaked, so that threads not joined at a scope's end may hold it
        // (a failing test must not hang on the waiter).
        let place: *mut RawTicket<NoStats> = Box::into_raw(Box::new(RawTicket::new()));
        // SAFETY: the allocation is never freed; it is written through
        // `place` only while no thread holds a reference to it.
        let lock: &'static RawTicket<NoStats> = unsafe { &*place };
        lock.lock();
        assert!(!std::thread::spawn(move || lock.lock_until(Instant::now() + Duration::from_millis(10))).join().unwrap());
        // The new lock at the same address (the timed waiter is gone).
        unsafe { *place = RawTicket::new() };
        let lock: &'static RawTicket<NoStats> = unsafe { &*place };
        lock.lock();
        unlock_to_a_parked_waiter(lock, "the new lock's unlock passed over its waiter");
        assert!(!lock.is_locked());
    }

    /// With every entry its lock may use taken, a timed lock polls: it
    /// still times out at its deadline (it waited, untimed, for its turn
    /// or for room).
    #[test]
    fn a_timed_lock_without_room_to_give_up_still_times_out() {
        let lock = Arc::new(RawTicket::<NoStats>::new());
        lock.lock();
        let table = given_up_tickets();
        let taken: Vec<_> = std::iter::from_fn(|| table.reserve(lock.address())).collect();
        let timed = {
            let lock = lock.clone();
            std::thread::spawn(move || lock.lock_until(Instant::now() + Duration::from_millis(20)))
        };
        let start = Instant::now();
        assert!(!timed.join().unwrap());
        assert!(start.elapsed() < Duration::from_secs(1), "timed out after {:?}", start.elapsed());
        for reservation in taken {
            table.release(reservation);
        }
        unsafe { lock.unlock() };
        assert!(!lock.is_locked());
    }

    /// A timed waiter at the gate gives up when its deadline passes, and
    /// leaves nothing of itself there.
    #[test]
    fn a_timed_waiter_leaves_the_gate_at_its_deadline() {
        let lock = RawTicket::<NoStats>::new();
        fill_the_line(&lock);
        let start = Instant::now();
        assert!(!lock.lock_until(start + Duration::from_millis(20)));
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert_eq!(lock.gate.load(Ordering::Relaxed), LINE_FULL, "nobody left at the gate");
    }

    /// A thread retrying 100 ms timed locks on a lock held for a second:
    /// each ticket it gives up stays in the line until the holder's unlock,
    /// so its next tries close the gate and nap there. The naps grow while
    /// the holder keeps the lock: with 200 µs naps throughout it used
    /// about 80 ms of CPU a second held, now about a tenth of that.
    #[test]
    fn retried_timed_locks_on_a_lock_held_long_nap_longer_and_longer() {
        let lock = Arc::new(RawTicket::<NoStats>::new());
        lock.lock();
        let retrier = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                while !lock.lock_until(Instant::now() + Duration::from_millis(100)) {}
                // SAFETY: taken just now.
                unsafe { lock.unlock() };
                let mut used = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                // SAFETY: a valid clock and out-pointer.
                unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut used) };
                Duration::new(used.tv_sec as u64, used.tv_nsec as u32)
            })
        };
        std::thread::sleep(Duration::from_secs(1));
        // SAFETY: held since the start.
        unsafe { lock.unlock() };
        let used = retrier.join().unwrap();
        assert!(used < Duration::from_millis(40), "the retrying thread used {used:?} of CPU");
    }

    /// A child of `fork` has none of the parent's threads asleep at the
    /// gate, and its waiting array says so.
    #[test]
    fn a_child_of_fork_forgets_the_parents_sleepers() {
        let lock = Arc::new(RawTicket::<NoStats>::new());
        let out = fill_the_line(&lock);
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                lock.lock();
                unsafe { lock.unlock() };
            })
        };
        let slot = slot_for(&*lock as *const _ as usize, GATE_KEY);
        until_a_thread_is_at_the_gate(&lock);
        assert_ne!(slot.sleepers.load(Ordering::Relaxed), 0, "the waiter counts itself on the slot");
        let forgotten = crate::sync::in_forked_child(|| slot.sleepers.load(Ordering::Relaxed) == 0);
        // Serve the tickets nobody held: the waiter is admitted within its
        // bound.
        lock.serving.store(out << 16, Ordering::Relaxed);
        waiter.join().unwrap();
        assert!(!lock.is_locked());
        assert!(forgotten, "the child still counts the parent's sleeper");
    }

    /// Newcomers that find nobody at the gate take a ticket without looking
    /// at the line; one that finds itself beyond the window marks the line
    /// full, which sends the next ones through the check, and the unlock
    /// that empties the line clears the mark.
    #[test]
    fn a_thread_beyond_the_window_marks_the_line_full_until_it_empties() {
        let lock = Arc::new(RawTicket::<NoStats>::new());
        // This thread holds ticket 0; the others up to the window are out
        // too, held by nobody.
        let out = spin_window() + 1;
        lock.next_ticket.store(out, Ordering::Relaxed);
        let joiner = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                lock.lock();
                unsafe { lock.unlock() };
            })
        };
        let start = Instant::now();
        while lock.gate.load(Ordering::Relaxed) & LINE_FULL == 0 {
            assert!(start.elapsed() < Duration::from_secs(5), "the thread beyond the window did not mark the line");
            std::thread::yield_now();
        }
        assert!(!lock.admitted(), "a newcomer now looks at the line, and waits");
        for _ in 0..out {
            unsafe { lock.unlock() };
        }
        joiner.join().unwrap();
        assert_eq!(lock.gate.load(Ordering::Relaxed), 0, "the unlock that emptied the line cleared the mark");
        assert!(!lock.is_locked());
    }

    /// A thread may take a ticket while the line holds at most the CPUs'
    /// worth minus one, and nobody has closed the gate.
    #[test]
    fn a_full_line_or_a_closed_gate_keeps_newcomers_out() {
        let lock = RawTicket::<NoStats>::new();
        assert!(lock.admitted(), "an idle lock");
        lock.next_ticket.store(spin_window(), Ordering::Relaxed);
        assert!(lock.admitted(), "a line with room");
        lock.next_ticket.store(spin_window() + 1, Ordering::Relaxed);
        assert!(!lock.admitted(), "a full line");
        lock.next_ticket.store(0, Ordering::Relaxed);
        lock.gate.store(GATE_WAITER + GATE_CLOSER, Ordering::Relaxed);
        assert!(!lock.admitted(), "a closed gate");
    }

    /// A thread at the gate sleeps while the line is full, and the unlock
    /// that empties the line wakes it.
    #[test]
    fn the_unlock_that_empties_the_line_admits_a_gate_waiter() {
        let lock = Arc::new(RawTicket::<NoStats>::new());
        // A full line of tickets held by nobody: this thread serves them.
        let full = spin_window() + 1;
        lock.next_ticket.store(full, Ordering::Relaxed);
        // A bound the test cannot outlast: only the wake admits it.
        let newcomer = {
            let lock = lock.clone();
            std::thread::spawn(move || lock.wait_at_gate_within(60_000_000_000, None))
        };
        until_a_thread_is_at_the_gate(&lock);
        for _ in 0..full {
            unsafe { lock.unlock() };
        }
        let woken = Instant::now();
        newcomer.join().unwrap();
        assert!(woken.elapsed() < Duration::from_secs(5), "the last unlock did not wake the gate");
        assert_eq!(lock.gate.load(Ordering::Relaxed), 0, "nobody left at the gate");
    }

    /// Remembers how the last acquisition was recorded.
    struct LastKind(std::sync::atomic::AtomicU32);

    impl Recorder for LastKind {
        const INIT: Self = LastKind(std::sync::atomic::AtomicU32::new(0));
        const ENABLED: bool = false;
        fn acquired(&self, kind: AcquireKind, _: u64) {
            self.0.store(kind as u32 + 1, Ordering::Relaxed);
        }
        fn rejected(&self) {}
        fn timed_out(&self, _: u64) {}
        fn releasing(&self) {}
    }

    /// A full line, a newcomer locking it asleep at the gate, then `admit`
    /// (given the lock and the tickets out) serving the line; returns how
    /// the newcomer's acquisition was recorded.
    fn newcomer_from_the_gate(admit: impl FnOnce(&RawTicket<LastKind>, u32)) -> u32 {
        let lock = Arc::new(RawTicket::<LastKind>::new());
        let full = fill_the_line(&lock);
        let newcomer = {
            let lock = lock.clone();
            std::thread::spawn(move || lock.lock())
        };
        until_a_thread_is_at_the_gate(&lock);
        admit(&lock, full);
        newcomer.join().unwrap();
        lock.recorder().0.load(Ordering::Relaxed)
    }

    /// A thread that slept at the gate has waited, asleep, however its turn
    /// then comes: served at once (it was recorded as an acquisition that
    /// never waited, which the profile of a served program counted as
    /// neither spin nor sleep), or after a wait in line (which started a
    /// new wait, recorded as a spin).
    #[test]
    fn a_turn_after_the_gate_is_recorded_as_a_sleep() {
        let served_at_once = newcomer_from_the_gate(|lock, full| {
            for _ in 0..full {
                unsafe { lock.unlock() };
            }
        });
        assert_eq!(served_at_once, AcquireKind::Sleep as u32 + 1);
        let waited_in_line = newcomer_from_the_gate(|lock, full| {
            // Room in the line, but tickets still ahead of the newcomer's.
            for _ in 0..full - spin_window() {
                unsafe { lock.unlock() };
            }
            let start = Instant::now();
            while lock.next_ticket.load(Ordering::Relaxed) == full {
                assert!(start.elapsed() < Duration::from_secs(5), "the newcomer took no ticket");
                std::thread::yield_now();
            }
            for _ in 0..spin_window() {
                unsafe { lock.unlock() };
            }
        });
        assert_eq!(waited_in_line, AcquireKind::Sleep as u32 + 1);
    }

    /// A closer that finds the closer count full closes the gate uncounted:
    /// counting it would carry into the line-full mark, and it takes back
    /// only what it added when it leaves.
    #[test]
    fn a_full_closer_count_does_not_carry_into_the_mark() {
        let lock = Arc::new(RawTicket::<NoStats>::new());
        // A full line of tickets held by nobody, and as many closers as
        // the count holds.
        let full = spin_window() + 1;
        lock.next_ticket.store(full, Ordering::Relaxed);
        lock.gate.store(GATE_CLOSERS_MASK, Ordering::Relaxed);
        // Bound 0: it closes the gate at once, then waits for the line.
        let closer = {
            let lock = lock.clone();
            std::thread::spawn(move || lock.wait_at_gate_within(0, None))
        };
        until_a_thread_is_at_the_gate(&lock);
        // Long enough for it to have closed the gate and begun to wait.
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            lock.gate.load(Ordering::Relaxed) & !GATE_WAITERS_MASK,
            GATE_CLOSERS_MASK,
            "the closer count carried into the line-full mark"
        );
        for _ in 0..full {
            unsafe { lock.unlock() };
        }
        closer.join().unwrap();
        assert_eq!(lock.gate.load(Ordering::Relaxed), GATE_CLOSERS_MASK, "it took back only its own count");
    }

    /// A lock held long (across I/O, say): the threads kept at the gate
    /// past the bound close it and then nap, not spin, until the line
    /// drains.
    #[test]
    fn closers_nap_while_a_lock_is_held_long() {
        fn thread_cpu() -> Duration {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: a valid out-pointer.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
        }
        let lock = Arc::new(RawTicket::<NoStats>::new());
        // The holder, and a full line behind it: newcomers go to the gate.
        lock.next_ticket.store(spin_window() + 1, Ordering::Relaxed);
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    let (cpu, wall) = (thread_cpu(), Instant::now());
                    lock.wait_at_gate_within(ADMISSION_BOUND_NS, None);
                    (thread_cpu() - cpu, wall.elapsed())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        for _ in 0..=spin_window() {
            unsafe { lock.unlock() };
        }
        for waiter in waiters {
            let (cpu, waited) = waiter.join().unwrap();
            assert!(waited >= Duration::from_millis(250), "admitted after {waited:?}");
            assert!(cpu < Duration::from_millis(60), "{cpu:?} of CPU in {waited:?} at the gate");
        }
    }

    /// Threads that keep the line full never let it go idle, so only the
    /// bound admits the others: every thread gets the lock, and none waits
    /// much longer than the bound for it.
    #[test]
    fn no_thread_is_kept_at_the_gate_much_past_the_bound() {
        let lock = Arc::new(RawTicket::<NoStats>::new());
        let stop = Arc::new(AtomicBool::new(false));
        let threads = spin_window() as usize + 4;
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (lock, stop) = (lock.clone(), stop.clone());
                std::thread::spawn(move || {
                    let (mut ops, mut longest) = (0u64, Duration::ZERO);
                    while !stop.load(Ordering::Relaxed) {
                        let asked = Instant::now();
                        lock.lock();
                        longest = longest.max(asked.elapsed());
                        ops += 1;
                        unsafe { lock.unlock() };
                    }
                    (ops, longest)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            let (ops, longest) = h.join().unwrap();
            assert!(ops > 0, "a thread never got the lock");
            // The bound, the drained line and the scheduler's delays: a
            // starving gate waiter would wait the whole 500 ms run.
            assert!(longest < Duration::from_millis(400), "a thread waited {longest:?} for the lock");
        }
    }
}
