//! Single-thread measurements: the cost of an uncontended pair.

use crate::locks::{BenchLock, LockKind, LockVisitor};
use std::hint::black_box;
use std::time::Instant;

/// Nanoseconds per uncontended lock+unlock pair: `pairs` pairs on one
/// thread, timed as a whole, while a second thread exists.
///
/// glibc's mutexes skip their atomic instructions while a process has
/// only ever had one thread (`__libc_single_threaded`): a pair timed in a
/// single-threaded process read 2.7 ns for glibc's mutex against 9.6 for
/// std's. No program that needs a mutex runs that way, so the pair is
/// timed beside a thread that waits for it to finish.
pub fn uncontended_pair_ns(kind: LockKind, pairs: u64) -> f64 {
    std::thread::scope(|scope| {
        // The helper waits for the channel to close, which dropping the
        // sender does however the timing ends (a panic included: the
        // scope would otherwise wait for the helper for ever).
        let (still_timing, closed) = std::sync::mpsc::channel::<()>();
        scope.spawn(move || while closed.recv().is_ok() {});
        let ns = timed_pairs(kind, pairs);
        drop(still_timing);
        ns
    })
}

fn timed_pairs(kind: LockKind, pairs: u64) -> f64 {
    struct Pairs(u64);
    impl LockVisitor for Pairs {
        type Output = f64;
        fn visit<L: BenchLock>(self, make: impl Fn() -> L + Send + Sync + Clone + 'static) -> f64 {
            let lock = make();
            // Warm the lock and the code path.
            for _ in 0..self.0 / 10 {
                lock.critical(|| black_box(()));
            }
            // In blocks, a stop asked (^C) looked for between them: a
            // `--seconds 20s` run went on to its end, 30 s after a ^C.
            const BLOCK: u64 = 1 << 16;
            let t = Instant::now();
            let mut left = self.0;
            while left > 0 {
                let block = left.min(BLOCK);
                for _ in 0..block {
                    lock.critical(|| black_box(()));
                }
                left -= block;
                if crate::interrupt::requested().is_some() {
                    break;
                }
            }
            t.elapsed().as_nanos() as f64 / (self.0 - left) as f64
        }
    }
    kind.visit(Pairs(pairs))
}

/// The median of `values` (which must not be empty).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_costs_are_positive_and_names_parse() {
        for kind in LockKind::ours().chain(LockKind::PEERS).chain(LockKind::FLOORS) {
            assert!(uncontended_pair_ns(kind, 10_000) > 0.0);
            assert_eq!(kind.name().parse::<LockKind>(), Ok(kind));
        }
        assert!("nope".parse::<LockKind>().is_err());
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
