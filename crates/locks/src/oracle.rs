//! The owner-state oracle: "is the lock owner running on a CPU right now?"
//!
//! Seed 002 spins while `rq->curr == owner`, a fact only the kernel has.
//! Userspace gets it from two sources, asked in this order:
//!
//! 1. An exact on-CPU table ([`OnCpuSource`]), e.g. a BPF program that
//!    records every context switch (seed 001's "kernel assisted userspace
//!    spinning"). Installed at run time with [`install_source`]; it may
//!    answer [`OwnerState::Unknown`] for a thread it has not seen.
//! 2. The fallback that works everywhere without privilege: the owner's
//!    per-thread CPU clock (`clock_gettime` on the clock id of its tid). The
//!    kernel brings a running thread's clock up to date on every read, so a
//!    clock that did not advance across a probe interval means the owner was
//!    not on a CPU for that interval. Measured: a probe costs 300 ns on one
//!    2-core guest and 860 ns on another; a busy thread's clock advanced
//!    between 81% of back-to-back probes and between all probes 2 µs
//!    apart, a sleeping one almost never. Probes are spaced by at least
//!    four of their own measured costs. The first verdict needs two
//!    probes, so the fallback is slower to notice a preempted owner (a few
//!    µs) than the exact table.
//!
//! The spin *budget* (how long to spin on a running owner at most) is the
//! lock's business, not the oracle's: see `adaptive.rs`.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// What the oracle believes about a thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerState {
    /// On a CPU now.
    Running,
    /// Not on a CPU (preempted or sleeping).
    NotRunning,
    /// No information; the caller falls back to its own heuristic.
    Unknown,
}

/// An exact source of on-CPU information. Reading must be cheap (a plain
/// load) and must never answer `Running` for a thread it is not sure about.
pub trait OnCpuSource: Sync {
    /// The state of kernel thread `tid`.
    fn state_of(&self, tid: u32) -> OwnerState;
}

struct Installed {
    source: &'static dyn OnCpuSource,
}

static SOURCE: AtomicPtr<Installed> = AtomicPtr::new(std::ptr::null_mut());

/// Makes `source` the exact oracle for every lock in the process, replacing
/// any previous one (the previous registration is leaked: it may still be
/// read by a spinner).
pub fn install_source(source: &'static dyn OnCpuSource) {
    let slot = Box::into_raw(Box::new(Installed { source }));
    SOURCE.store(slot, Ordering::Release);
}

/// Removes the exact oracle; locks fall back to the CPU-clock probe.
pub fn remove_source() {
    SOURCE.store(std::ptr::null_mut(), Ordering::Release);
}

#[inline]
fn exact_source() -> Option<&'static dyn OnCpuSource> {
    let slot = SOURCE.load(Ordering::Acquire);
    // SAFETY: slots are leaked boxes, never freed, so a non-null pointer is
    // always valid.
    (!slot.is_null()).then(|| unsafe { (*slot).source })
}

/// Which source produced a verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decider {
    /// The installed on-CPU table.
    Table,
    /// The owner's CPU clock.
    CpuClock,
}

/// Watches one owner for the duration of one spin.
pub struct OwnerWatch {
    tid: u32,
    clock: CpuClockProbe,
    last_decider: Option<Decider>,
}

impl OwnerWatch {
    /// Starts watching thread `tid`.
    #[inline]
    pub fn new(tid: u32) -> Self {
        OwnerWatch { tid, clock: CpuClockProbe::new(tid), last_decider: None }
    }

    /// The source of the last verdict [`Self::state`] returned, if any.
    pub fn last_decider(&self) -> Option<Decider> {
        self.last_decider
    }

    /// The current belief and who decided it; `None` when nobody knows yet.
    #[inline]
    pub fn state(&mut self) -> (OwnerState, Option<Decider>) {
        if let Some(source) = exact_source() {
            match source.state_of(self.tid) {
                OwnerState::Unknown => {}
                known => {
                    self.last_decider = Some(Decider::Table);
                    return (known, self.last_decider);
                }
            }
        }
        match self.clock.poll() {
            OwnerState::Unknown => (OwnerState::Unknown, None),
            known => {
                self.last_decider = Some(Decider::CpuClock);
                (known, self.last_decider)
            }
        }
    }
}

/// The fallback source: samples the owner's thread CPU clock.
struct CpuClockProbe {
    clock: libc::clockid_t,
    /// Cycle stamp of the next probe.
    next_probe_at: u64,
    /// Owner CPU time at the previous probe, if any.
    last_cpu_ns: Option<u64>,
    /// The last verdict, valid until the next probe.
    verdict: OwnerState,
    interval_cycles: u64,
}

/// Spin at least this long before the first probe: most critical sections
/// end sooner, and a probe is a system call.
const FIRST_PROBE_AFTER_NS: u64 = 1_000;
/// Probe interval at least: long enough that a running owner's clock always
/// moves (measured: it does at 2 µs), short enough to notice preemption
/// quickly.
const PROBE_INTERVAL_NS: u64 = 2_000;
/// Probes are spaced by at least this many times their own cost. A probe
/// reads a clock the kernel must bring up to date on the owner's CPU: 300
/// ns on one machine, 860 on another under a hypervisor. While it runs the
/// spinner cannot see a release, so on a slow probe the fixed spacing
/// above made a 2 µs critical section pay a probe in every other
/// acquisition; this way probes take at most a fifth of a spin.
const PROBE_SPACING_IN_COSTS: u64 = 4;
/// The most a probe is taken to cost (so probes are at most 20 µs apart).
const MAX_PROBE_COST_NS: u64 = 5_000;

/// What a probe costs in this process, in cycles (a moving average; 0
/// before the first). Shared by every lock: it is a property of the
/// machine.
static PROBE_CYCLES: AtomicU64 = AtomicU64::new(0);

/// `at_least_ns` in cycles, or more if probes are slow.
#[inline]
fn probe_spacing(at_least_ns: u64) -> u64 {
    spacing(at_least_ns, PROBE_CYCLES.load(Ordering::Relaxed))
}

/// `at_least_ns` in cycles, or `PROBE_SPACING_IN_COSTS` probes of
/// `probe_cycles` each if longer. The cost is capped: a run of probes
/// preempted midway must not space the next ones so far apart that a
/// preempted owner goes unnoticed.
#[inline]
fn spacing(at_least_ns: u64, probe_cycles: u64) -> u64 {
    let cost = probe_cycles.min(crate::clock::ns_to_cycles(MAX_PROBE_COST_NS));
    crate::clock::ns_to_cycles(at_least_ns).max(PROBE_SPACING_IN_COSTS * cost)
}

impl CpuClockProbe {
    #[inline]
    fn new(tid: u32) -> Self {
        let now = crate::clock::cycles();
        CpuClockProbe {
            // The kernel's encoding of a per-thread scheduler clock
            // (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)).
            clock: ((!(tid as libc::clockid_t)) << 3) | 6,
            next_probe_at: now + probe_spacing(FIRST_PROBE_AFTER_NS),
            last_cpu_ns: None,
            verdict: OwnerState::Unknown,
            interval_cycles: probe_spacing(PROBE_INTERVAL_NS),
        }
    }

    #[inline]
    fn poll(&mut self) -> OwnerState {
        if cfg!(loom) {
            return OwnerState::Unknown;
        }
        let now = crate::clock::cycles();
        if now < self.next_probe_at {
            return self.verdict;
        }
        self.probe(now)
    }

    #[cold]
    fn probe(&mut self, now: u64) -> OwnerState {
        self.next_probe_at = now + self.interval_cycles;
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid out-pointer; an invalid clock id (the
        // owner exited, or lives in another process) only returns an error.
        let ok = unsafe { libc::clock_gettime(self.clock, &mut ts) } == 0;
        let cost = crate::clock::cycles().saturating_sub(now);
        // A racing update may be lost: the average only moves slower.
        let average = match PROBE_CYCLES.load(Ordering::Relaxed) {
            0 => cost,
            old => (old.saturating_mul(7).saturating_add(cost)) / 8,
        };
        PROBE_CYCLES.store(average, Ordering::Relaxed);
        if !ok {
            self.verdict = OwnerState::Unknown;
            return self.verdict;
        }
        let cpu_ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        self.verdict = match self.last_cpu_ns {
            None => OwnerState::Unknown,
            Some(before) if cpu_ns > before => OwnerState::Running,
            Some(_) => OwnerState::NotRunning,
        };
        self.last_cpu_ns = Some(cpu_ns);
        self.verdict
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::clock::ns_to_cycles;

    /// Cheap probes keep the fixed spacing; slow ones space probes out to
    /// four of their costs; a cost inflated by preemption is capped.
    #[test]
    fn probes_are_spaced_by_their_cost_within_bounds() {
        let at_least = ns_to_cycles(PROBE_INTERVAL_NS);
        assert_eq!(spacing(PROBE_INTERVAL_NS, ns_to_cycles(100)), at_least);
        assert_eq!(spacing(PROBE_INTERVAL_NS, ns_to_cycles(1_000)), 4 * ns_to_cycles(1_000));
        assert_eq!(spacing(PROBE_INTERVAL_NS, ns_to_cycles(1_000_000)), 4 * ns_to_cycles(MAX_PROBE_COST_NS));
    }

    /// A probe of a running thread records what it cost.
    #[test]
    fn a_probe_measures_its_cost() {
        let mut probe = CpuClockProbe::new(crate::sync::current_tid());
        probe.probe(crate::clock::cycles());
        assert!(PROBE_CYCLES.load(Ordering::Relaxed) > 0);
    }
}
