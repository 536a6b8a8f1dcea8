//! "Would a CPU go idle if this thread slept now?"
//!
//! A waiter that sleeps hands its CPU to whoever is runnable. When nobody
//! is, the CPU idles, and the thread the next unlock wakes is often queued
//! behind the busy owner on the other CPU until a scheduler tick moves it
//! (`perf sched timehist` showed 4-8 ms idle spells with 2 µs critical
//! sections: `adaptive` kept 1.87-1.89 of 2 CPUs busy where parking_lot,
//! whose waiters yield instead of sleeping, kept 1.99). Seed 002 spins
//! because a sleep and a wake cost more than the wait; when the sleep would
//! also leave a CPU idle, spinning costs nobody anything.
//!
//! The kernel does not tell an unprivileged thread how long its CPU's run
//! queue is, but `/proc/loadavg` tells how many threads are runnable in the
//! whole machine (`nr_running()`, the count before the slash in its fourth
//! field, the reader included). When that is at most the number of online
//! CPUs, no runnable thread waits for a CPU, and a CPU this thread leaves
//! goes idle. The answer is machine-wide, so it errs towards sleeping: a
//! busy CPU elsewhere counts against spinning here.
//!
//! A read costs about 1 µs (a `pread` of a descriptor kept open), so the
//! answer is kept process-wide for `ANSWER_LIFETIME_NS` and the sleep
//! path, which costs a system call anyway, is the only caller.
//!
//! (Asking by yielding, the only unprivileged alternative, was measured
//! and dropped: under EEVDF a thread that keeps yielding while others are
//! queued is passed over, and threads starved at 256 threads.)

#[cfg(not(loom))]
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

/// How long an answer is trusted. Threads turn runnable and back in
/// microseconds, so an older answer would be a guess; a newer one would
/// put a 1 µs read on most sleeps.
#[cfg(not(loom))]
const ANSWER_LIFETIME_NS: u64 = 20_000;

#[cfg(not(loom))]
const UNOPENED: i32 = -1;
#[cfg(not(loom))]
const UNUSABLE: i32 = -2;

/// The descriptor of `/proc/loadavg`, `UNOPENED` or `UNUSABLE`.
#[cfg(not(loom))]
static LOADAVG: AtomicI32 = AtomicI32::new(UNOPENED);
/// Online CPUs, 0 until read.
#[cfg(not(loom))]
static ONLINE_CPUS: AtomicU32 = AtomicU32::new(0);
/// When the kept answer was read (cycles), and the answer in its low bit.
#[cfg(not(loom))]
static KEPT_ANSWER: AtomicU64 = AtomicU64::new(0);

/// Whether a CPU would go idle if the calling thread slept now: no
/// runnable thread of the machine waits for a CPU. False when unknown.
///
/// Under loom it is always false: the models check the lock's protocol,
/// in which spinning instead of sleeping is only ever an optimisation.
pub fn a_cpu_would_idle() -> bool {
    #[cfg(loom)]
    {
        false
    }
    #[cfg(not(loom))]
    {
        let now = crate::clock::cycles();
        let kept = KEPT_ANSWER.load(Ordering::Relaxed);
        if kept != 0 && now.wrapping_sub(kept >> 1 << 1) < crate::clock::ns_to_cycles(ANSWER_LIFETIME_NS) {
            return kept & 1 != 0;
        }
        let idle = match (runnable_threads(), online_cpus()) {
            (Some(runnable), Some(cpus)) => runnable <= cpus,
            _ => false,
        };
        KEPT_ANSWER.store((now >> 1 << 1).max(2) | idle as u64, Ordering::Relaxed);
        idle
    }
}

/// The machine's online CPUs.
#[cfg(not(loom))]
fn online_cpus() -> Option<u32> {
    let known = ONLINE_CPUS.load(Ordering::Relaxed);
    if known != 0 {
        return Some(known);
    }
    // SAFETY: sysconf has no memory-safety preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let cpus = u32::try_from(cpus).ok().filter(|&c| c > 0)?;
    ONLINE_CPUS.store(cpus, Ordering::Relaxed);
    Some(cpus)
}

/// Runnable threads in the machine, the reader included, from
/// `/proc/loadavg`.
#[cfg(not(loom))]
fn runnable_threads() -> Option<u32> {
    // The descriptor is kept open. A program may close descriptors it did
    // not open (daemons close them all) and reuse the number: a read that
    // fails, or does not parse as the kernel's line, opens the file again
    // once, and a second failure gives up for the process.
    for _ in 0..2 {
        let fd = loadavg_fd()?;
        let mut line = [0u8; 128];
        // SAFETY: `line` is a writable buffer of the length passed; a
        // descriptor that is no longer ours only makes the read fail or
        // return bytes that do not parse.
        let read = unsafe { libc::pread(fd, line.as_mut_ptr().cast(), line.len(), 0) };
        if let Ok(len) = usize::try_from(read) {
            if let Some(runnable) = parse_runnable(&line[..len]) {
                return Some(runnable);
            }
        }
        let _ = LOADAVG.compare_exchange(fd, UNOPENED, Ordering::Relaxed, Ordering::Relaxed);
    }
    LOADAVG.store(UNUSABLE, Ordering::Relaxed);
    None
}

#[cfg(not(loom))]
fn loadavg_fd() -> Option<i32> {
    match LOADAVG.load(Ordering::Relaxed) {
        UNUSABLE => None,
        UNOPENED => {
            // SAFETY: a NUL-terminated path and plain flags.
            let fd = unsafe { libc::open(c"/proc/loadavg".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            if fd < 0 {
                LOADAVG.store(UNUSABLE, Ordering::Relaxed);
                return None;
            }
            match LOADAVG.compare_exchange(UNOPENED, fd, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => Some(fd),
                Err(other) => {
                    // Another thread opened it first: use theirs.
                    // SAFETY: `fd` was opened above and never shared.
                    unsafe { libc::close(fd) };
                    (other >= 0).then_some(other)
                }
            }
        }
        fd => Some(fd),
    }
}

/// The runnable count of a `/proc/loadavg` line, `"0.52 0.58 0.59 3/467
/// 12345\n"`: three averages, then runnable/threads, then the last pid.
#[cfg(not(loom))]
fn parse_runnable(line: &[u8]) -> Option<u32> {
    let line = std::str::from_utf8(line).ok()?;
    let mut fields = line.strip_suffix('\n')?.split(' ');
    for _ in 0..3 {
        fields.next()?.parse::<f64>().ok()?;
    }
    let (runnable, threads) = fields.next()?.split_once('/')?;
    let runnable = runnable.parse::<u32>().ok()?;
    threads.parse::<u32>().ok()?;
    fields.next()?.parse::<u32>().ok()?;
    fields.next().is_none().then_some(runnable)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn reads_the_runnable_count_of_a_kernel_line() {
        assert_eq!(parse_runnable(b"0.52 0.58 0.59 3/467 12345\n"), Some(3));
        assert_eq!(parse_runnable(b"12.00 7.10 3.25 260/1024 99\n"), Some(260));
    }

    #[test]
    fn refuses_what_is_not_a_kernel_line() {
        for bad in [
            &b""[..],
            b"0.52 0.58 0.59 3/467 12345",
            b"0.52 0.58 0.59 3 12345\n",
            b"0.52 0.58 3/467 12345\n",
            b"0.52 0.58 0.59 3/467 12345 7\n",
            b"hello world, this is a file\n",
            b"\x00\x01\x02",
        ] {
            assert_eq!(parse_runnable(bad), None, "{bad:?}");
        }
    }

    /// The real file: this thread is running, so it counts at least
    /// itself, and with more busy threads than CPUs no CPU would idle.
    #[test]
    fn counts_the_threads_that_run() {
        assert!(runnable_threads().expect("/proc/loadavg") >= 1);
        let cpus = online_cpus().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let busy: Vec<_> = (0..cpus * 2 + 2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(50));
        // Most reads see the busy threads (one may catch a moment where
        // some were between time slices); none is wrong by much.
        let seen = (0..20).filter(|_| runnable_threads().unwrap() > cpus).count();
        stop.store(true, Ordering::Relaxed);
        for thread in busy {
            thread.join().unwrap();
        }
        assert!(seen >= 15, "only {seen} of 20 reads saw more runnable threads than {cpus} CPUs");
    }
}
