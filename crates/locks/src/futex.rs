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
    /// Woken, interrupted, or the word no longer held the expected value.
    Woken,
    /// The deadline passed.
    TimedOut,
}

#[cfg(not(loom))]
mod os {
    use super::*;
    use std::sync::atomic::AtomicU32 as StdAtomicU32;

    /// Sleeps while `*word == expected`, until woken or `deadline`.
    /// Process-private futex (FUTEX_PRIVATE_FLAG): cheaper hashing, and our
    /// locks are never shared between processes.
    pub fn wait(word: &StdAtomicU32, expected: u32, deadline: Option<Instant>) -> WaitOutcome {
        let timeout = match deadline {
            None => None,
            Some(d) => {
                let now = Instant::now();
                if d <= now {
                    return WaitOutcome::TimedOut;
                }
                let left = d - now;
                Some(libc::timespec {
                    tv_sec: left.as_secs() as libc::time_t,
                    tv_nsec: left.subsec_nanos() as libc::c_long,
                })
            }
        };
        let ts_ptr = timeout
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `word` is a live, aligned u32; the timeout (if any) lives
        // until the call returns.
        let r = unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                expected,
                ts_ptr,
            )
        };
        if r == -1 && errno() == libc::ETIMEDOUT {
            WaitOutcome::TimedOut
        } else {
            WaitOutcome::Woken
        }
    }

    /// Wakes up to `count` threads sleeping on `word`; returns how many woke.
    ///
    /// Takes a raw pointer: the memory may already be reused or freed by the
    /// time the call is made (a queue node whose owner went on), which the
    /// kernel tolerates and which must never be dereferenced here.
    pub fn wake(word: *const StdAtomicU32, count: u32) -> u32 {
        // SAFETY: the kernel only uses the address as a key; an address with
        // no waiters, or no mapping, wakes nobody.
        let r = unsafe {
            libc::syscall(
                libc::SYS_futex,
                word as *const u32,
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                count.min(i32::MAX as u32),
            )
        };
        r.max(0) as u32
    }

    pub(crate) fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }
}

#[cfg(not(loom))]
pub(crate) use os::errno;
#[cfg(not(loom))]
pub use os::{wait, wake};

/// The futex modelled for loom: a table of sleepers keyed by address, with
/// the value check and the enqueue done under one model mutex, as the kernel
/// does under its hash-bucket lock. A lost wake-up therefore shows up as a
/// loom deadlock. Deadlines are not modelled (a timed wait waits for a wake).
#[cfg(loom)]
mod model {
    use super::*;
    use loom::sync::{Condvar, Mutex};

    struct Sleeper {
        address: usize,
        id: usize,
        woken: bool,
    }

    #[derive(Default)]
    struct Table {
        sleepers: Vec<Sleeper>,
        next_id: usize,
    }

    loom::lazy_static! {
        static ref TABLE: (Mutex<Table>, Condvar) = (Mutex::new(Table::default()), Condvar::new());
    }

    pub fn wait(word: &AtomicU32, expected: u32, _deadline: Option<Instant>) -> WaitOutcome {
        let (lock, cv) = &*TABLE;
        let mut table = lock.lock().unwrap();
        if word.load(crate::sync::Ordering::SeqCst) != expected {
            return WaitOutcome::Woken;
        }
        let id = table.next_id;
        table.next_id += 1;
        table.sleepers.push(Sleeper { address: word as *const _ as usize, id, woken: false });
        loop {
            table = cv.wait(table).unwrap();
            if let Some(i) = table.sleepers.iter().position(|s| s.id == id && s.woken) {
                table.sleepers.remove(i);
                return WaitOutcome::Woken;
            }
        }
    }

    pub fn wake(word: *const AtomicU32, count: u32) -> u32 {
        let (lock, cv) = &*TABLE;
        let mut table = lock.lock().unwrap();
        let mut woken = 0;
        for s in table.sleepers.iter_mut() {
            if woken == count {
                break;
            }
            if s.address == word as usize && !s.woken {
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
pub use model::{wait, wake};
