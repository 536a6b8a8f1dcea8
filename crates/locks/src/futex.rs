//! How a thread sleeps and is woken: the futex system call, and its model
//! under loom. The algorithms decide *when* to sleep; this module only knows
//! *how* (the split parking_lot makes between its mutex and parking_lot_core).

#[cfg(loom)]
use crate::sync::AtomicU32;
use std::time::Instant;

/// Why a futex wait returned. Every caller re-checks its own condition, so
/// a spurious return is always harmless.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitOutcome {
    /// Woken, or spuriously.
    Woken,
    /// A signal handler ran (EINTR): nothing woke the sleeper, and a wait
    /// that must not report a wake that did not come waits again (a timed
    /// wait is interrupted so even under SA_RESTART).
    Interrupted,
    /// The word no longer held the expected value: the caller never slept,
    /// so it took no wake (a lock whose woken sleeper owes the others a
    /// mark can tell it owes nothing).
    ValueChanged,
    /// The deadline passed.
    TimedOut,
}

/// The bits a plain wait or wake uses: every sleeper matches every waker.
pub const ANY_BITS: u32 = u32::MAX;

/// An absolute futex timeout: a time on CLOCK_MONOTONIC, or on
/// CLOCK_REALTIME, which the kernel then follows as it is set (a wait
/// whose deadline a jump of the wall clock passes ends at the jump, as
/// glibc's timed waits do).
#[derive(Clone, Copy, Debug)]
pub enum AbsoluteTimeout {
    /// A time on CLOCK_MONOTONIC.
    Monotonic(libc::timespec),
    /// A time on CLOCK_REALTIME.
    Realtime(libc::timespec),
}

#[cfg(not(loom))]
mod os {
    use super::*;
    use std::sync::atomic::AtomicU32 as StdAtomicU32;

    /// Sleeps while `*word == expected`, until woken or `deadline`.
    /// Process-private futex (FUTEX_PRIVATE_FLAG): cheaper hashing, and our
    /// locks are never shared between processes.
    pub fn wait(word: &StdAtomicU32, expected: u32, deadline: Option<Instant>) -> WaitOutcome {
        wait_bits(word, expected, deadline, ANY_BITS)
    }

    /// Wakes up to `count` threads sleeping on `word`; returns how many woke.
    ///
    /// Takes a raw pointer: the memory may already be reused or freed by the
    /// time the call is made (a queue node whose owner went on), which the
    /// kernel tolerates and which must never be dereferenced here.
    pub fn wake(word: *const StdAtomicU32, count: u32) -> u32 {
        wake_bits(word, count, ANY_BITS)
    }

    /// Like [`wait`], but only a [`wake_bits`] whose `bits` intersect
    /// these wakes the sleeper (FUTEX_WAIT_BITSET): two kinds of sleeper
    /// can share one word and be woken apart.
    pub fn wait_bits(word: &StdAtomicU32, expected: u32, deadline: Option<Instant>, bits: u32) -> WaitOutcome {
        let timeout = match deadline.map(absolute) {
            None => None,
            Some(None) => return WaitOutcome::TimedOut,
            Some(at) => at,
        };
        wait_until(word, expected, timeout.map(AbsoluteTimeout::Monotonic), bits)
    }

    /// `deadline` as the absolute CLOCK_MONOTONIC time FUTEX_WAIT_BITSET
    /// takes (the clock `Instant` reads); `None` once it has passed.
    pub fn absolute(deadline: Instant) -> Option<libc::timespec> {
        let now = Instant::now();
        if deadline <= now {
            return None;
        }
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid out-pointer for the call.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let at = std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32) + (deadline - now);
        Some(libc::timespec { tv_sec: at.as_secs() as libc::time_t, tv_nsec: at.subsec_nanos() as libc::c_long })
    }

    /// One FUTEX_WAIT_BITSET system call until `at`, and nothing else: no
    /// clock read, no retry. For a caller that must block in exactly one
    /// call (a wait that is a pthread cancellation point, cancelled
    /// asynchronously while it blocks): nor may anything here call code
    /// that has a landing pad (see `errno`).
    pub fn wait_until(word: &StdAtomicU32, expected: u32, at: Option<AbsoluteTimeout>, bits: u32) -> WaitOutcome {
        let (ts, clock_flag) = match at {
            None => (None, 0),
            Some(AbsoluteTimeout::Monotonic(ts)) => (Some(ts), 0),
            Some(AbsoluteTimeout::Realtime(ts)) => (Some(ts), libc::FUTEX_CLOCK_REALTIME),
        };
        let ts_ptr = ts.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
        // SAFETY: `word` is a live, aligned u32; the timeout (if any) lives
        // until the call returns; the sixth argument is the bitset.
        let r = unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG | clock_flag,
                expected,
                ts_ptr,
                std::ptr::null::<u32>(),
                bits,
            )
        };
        if r != -1 {
            return WaitOutcome::Woken;
        }
        match errno() {
            libc::ETIMEDOUT => WaitOutcome::TimedOut,
            libc::EAGAIN => WaitOutcome::ValueChanged,
            libc::EINTR => WaitOutcome::Interrupted,
            _ => WaitOutcome::Woken,
        }
    }

    /// Whether the kernel takes FUTEX_CLOCK_REALTIME timeouts here (a
    /// seccomp filter may refuse the flag, ENOSYS; every wait with it would
    /// then fail at once, and a caller that took that for a wake would spin
    /// past its deadline). Asked once, with a wait whose value differs,
    /// which returns at once: EAGAIN, or ETIMEDOUT, when the flag is taken.
    pub fn realtime_timeouts_work() -> bool {
        use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
        const UNKNOWN: u8 = 0;
        const WORK: u8 = 1;
        const REFUSED: u8 = 2;
        static ANSWER: AtomicU8 = AtomicU8::new(UNKNOWN);
        match ANSWER.load(Relaxed) {
            WORK => true,
            REFUSED => false,
            _ => {
                let word = StdAtomicU32::new(0);
                let passed = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                // SAFETY: a live, aligned word and a timeout that outlive
                // the call; the sixth argument is the bitset.
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_futex,
                        word.as_ptr(),
                        libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG | libc::FUTEX_CLOCK_REALTIME,
                        1u32,
                        &passed,
                        std::ptr::null::<u32>(),
                        ANY_BITS,
                    )
                };
                let works = r == -1 && matches!(errno(), libc::EAGAIN | libc::ETIMEDOUT);
                ANSWER.store(if works { WORK } else { REFUSED }, Relaxed);
                works
            }
        }
    }

    /// Wakes up to `count` threads sleeping on `word` whose bits intersect
    /// `bits`; returns how many woke. (The pointer contract of [`wake`].)
    pub fn wake_bits(word: *const StdAtomicU32, count: u32, bits: u32) -> u32 {
        // SAFETY: the kernel only uses the address as a key; an address with
        // no waiters, or no mapping, wakes nobody.
        let r = unsafe {
            libc::syscall(
                libc::SYS_futex,
                word as *const u32,
                libc::FUTEX_WAKE_BITSET | libc::FUTEX_PRIVATE_FLAG,
                count.min(i32::MAX as u32),
                std::ptr::null::<libc::timespec>(),
                std::ptr::null::<u32>(),
                bits,
            )
        };
        r.max(0) as u32
    }

    /// The calling thread's `errno`, read in place. Not through
    /// `std::io::Error::last_os_error()`: that makes an `io::Error` and
    /// drops it, and the drop glue is a function with a landing pad. A
    /// served condvar wait runs [`wait_until`] with asynchronous
    /// cancellation enabled (see the preload library's `cond::wait_on`);
    /// a cancellation delivered while the thread was inside that drop
    /// glue landed on an instruction its exception table does not list,
    /// which Rust's personality routine takes for "cannot unwind": the
    /// forced unwind failed, and glibc aborted the program without a word
    /// (SIGABRT: 8 of 400 runs of 5,000 cancellations of a thread looping
    /// in timed waits whose deadline had passed, on one CPU).
    pub(crate) fn errno() -> i32 {
        // SAFETY: the calling thread's errno location is always valid.
        unsafe { *libc::__errno_location() }
    }

    /// Runs `operation`, then puts `errno` back as it found it: for paths
    /// that promise a pthread replacement no system call that changes it.
    pub(crate) fn keeping_errno<T>(operation: impl FnOnce() -> T) -> T {
        let saved = errno();
        let result = operation();
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = saved };
        result
    }
}

#[cfg(not(loom))]
pub(crate) use os::{errno, keeping_errno};

/// Under loom there is no `errno` to keep.
#[cfg(loom)]
pub(crate) fn keeping_errno<T>(operation: impl FnOnce() -> T) -> T {
    operation()
}
#[cfg(not(loom))]
pub use os::{absolute, realtime_timeouts_work, wait, wait_bits, wait_until, wake, wake_bits};

/// The futex modelled for loom: a table of sleepers keyed by address, with
/// the value check and the enqueue done under one model mutex, as the kernel
/// does under its hash-bucket lock. A lost wake-up therefore shows up as a
/// loom deadlock. Time is one event: until a model's timer ends it
/// (`model_time_up`) a timed wait waits for a wake, and after, it times out.
#[cfg(loom)]
mod model {
    use super::*;
    use loom::sync::{Condvar, Mutex};

    struct Sleeper {
        address: usize,
        id: usize,
        bits: u32,
        woken: bool,
        timed: bool,
    }

    #[derive(Default)]
    struct Table {
        sleepers: Vec<Sleeper>,
        next_id: usize,
    }

    loom::lazy_static! {
        static ref TABLE: (Mutex<Table>, Condvar) = (Mutex::new(Table::default()), Condvar::new());
    }

    /// The model of the real `wait`'s contract.
    pub fn wait(word: &AtomicU32, expected: u32, deadline: Option<Instant>) -> WaitOutcome {
        wait_bits(word, expected, deadline, ANY_BITS)
    }

    /// The model of the real `wake`'s contract.
    pub fn wake(word: *const AtomicU32, count: u32) -> u32 {
        wake_bits(word, count, ANY_BITS)
    }

    /// The model of the real `wait_bits`'s contract: sleeps unless
    /// `word` differs from `expected`, until a wake whose bits meet `bits`.
    pub fn wait_bits(word: &AtomicU32, expected: u32, deadline: Option<Instant>, bits: u32) -> WaitOutcome {
        let (lock, cv) = &*TABLE;
        let timed = deadline.is_some();
        if crate::sync::deadline_passed(deadline) {
            return WaitOutcome::TimedOut;
        }
        let mut table = lock.lock().unwrap();
        // Again under the table's lock, which the timer takes after ending
        // model time: a sleeper that looked just before would sleep
        // through it.
        if crate::sync::deadline_passed(deadline) {
            return WaitOutcome::TimedOut;
        }
        if word.load(crate::sync::Ordering::SeqCst) != expected {
            return WaitOutcome::ValueChanged;
        }
        let id = table.next_id;
        table.next_id += 1;
        table.sleepers.push(Sleeper { address: word as *const _ as usize, id, bits, woken: false, timed });
        loop {
            table = cv.wait(table).unwrap();
            if let Some(i) = table.sleepers.iter().position(|s| s.id == id && s.woken) {
                table.sleepers.remove(i);
                return WaitOutcome::Woken;
            }
            if timed && crate::sync::deadline_passed(deadline) {
                let i = table.sleepers.iter().position(|s| s.id == id).unwrap();
                table.sleepers.remove(i);
                return WaitOutcome::TimedOut;
            }
        }
    }

    /// Model timer: wakes timed sleepers so they see the deadline passed.
    pub fn fire_timeouts() {
        let (lock, cv) = &*TABLE;
        let table = lock.lock().unwrap();
        if table.sleepers.iter().any(|s| s.timed) {
            cv.notify_all();
        }
        drop(table);
    }

    /// The model of the real `wake_bits`'s contract: wakes up to
    /// `count` sleepers on `word` whose bits meet `bits`, oldest first.
    pub fn wake_bits(word: *const AtomicU32, count: u32, bits: u32) -> u32 {
        let (lock, cv) = &*TABLE;
        let mut table = lock.lock().unwrap();
        let mut woken = 0;
        for s in table.sleepers.iter_mut() {
            if woken == count {
                break;
            }
            if s.address == word as usize && s.bits & bits != 0 && !s.woken {
                s.woken = true;
                woken += 1;
            }
        }
        if woken > 0 {
            cv.notify_all();
        }
        woken
    }
}

#[cfg(loom)]
pub use model::{fire_timeouts, wait, wait_bits, wake, wake_bits};

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::sync::Arc;
    use std::time::Duration;

    /// The three outcomes are told apart: a word that changed before the
    /// wait (the caller never slept), a real wake, and a deadline.
    #[test]
    fn a_wait_tells_a_changed_word_from_a_wake_and_a_timeout() {
        let word = Arc::new(AtomicU32::new(1));
        assert_eq!(wait(&word, 0, None), WaitOutcome::ValueChanged);
        let soon = Instant::now() + Duration::from_millis(5);
        assert_eq!(wait(&word, 1, Some(soon)), WaitOutcome::TimedOut);
        let waker = {
            let word = word.clone();
            std::thread::spawn(move || {
                // Wake until the sleeper is gone (it may not be asleep yet).
                while word.load(std::sync::atomic::Ordering::Acquire) == 1 {
                    wake(&*word, 1);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        let outcome = wait(&word, 1, None);
        word.store(2, std::sync::atomic::Ordering::Release);
        waker.join().unwrap();
        assert_eq!(outcome, WaitOutcome::Woken);
    }
}
