//! Userspace locktorture: threads beat on one lock (lock, trylock and timed
//! lock in a random mix, random hold times) while checking exclusion on
//! shadow data, producers and consumers pass numbered tokens through a
//! queue under a second lock of the same kind and two condvars, and a
//! watchdog fails the run when any thread stops making progress. Like the
//! kernel's locktorture, it ships a deliberately broken lock (`busted`) it
//! must catch.

use lockmeter_locks::{Algorithm, Condvar, RawAdaptive, RawBusted, RawFutex, RawFutexTid, RawMcs, RawPi, RawSpin, RawTicket};
use lockmeter_stats::Counts;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What is tortured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    /// One of our algorithms (with a counting recorder: spin/sleep).
    Ours(Algorithm),
    /// The deliberately broken lock.
    Busted,
}

impl Subject {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Subject::Ours(a) => a.name(),
            Subject::Busted => "busted",
        }
    }
}

/// A lock under torture.
trait Tortured: Send + Sync + 'static {
    fn create() -> Self;
    fn acquire(&self);
    fn try_acquire(&self) -> bool;
    fn acquire_until(&self, deadline: Instant) -> bool;
    fn release(&self);
    /// (spin, sleep) waits, where the lock can tell.
    fn waits(&self) -> Option<(u64, u64)>;
}

fn poll_until(lock: &impl Tortured, deadline: Instant) -> bool {
    loop {
        if lock.try_acquire() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(20));
    }
}

macro_rules! tortured {
    ($($ty:ty => timed: $timed:tt),*) => {$(
        impl Tortured for $ty {
            fn create() -> Self {
                <$ty>::new()
            }
            fn acquire(&self) {
                self.lock()
            }
            fn try_acquire(&self) -> bool {
                self.try_lock()
            }
            fn acquire_until(&self, deadline: Instant) -> bool {
                tortured!(@timed $timed, self, deadline)
            }
            fn release(&self) {
                // SAFETY: the torture releases only locks it acquired.
                unsafe { self.unlock() }
            }
            fn waits(&self) -> Option<(u64, u64)> {
                let counts = self.recorder().snapshot();
                Some((counts.spin, counts.sleep))
            }
        }
    )*};
    (@timed true, $lock:ident, $deadline:ident) => { $lock.lock_until($deadline) };
    (@timed false, $lock:ident, $deadline:ident) => { poll_until($lock, $deadline) };
}

tortured!(
    RawAdaptive<Counts> => timed: true,
    RawFutex<Counts> => timed: true,
    RawFutexTid<Counts> => timed: true,
    RawPi<Counts> => timed: true,
    RawSpin<Counts> => timed: true,
    RawTicket<Counts> => timed: true,
    RawMcs<Counts> => timed: true
);

impl Tortured for RawBusted {
    fn create() -> Self {
        RawBusted::new()
    }
    fn acquire(&self) {
        self.lock()
    }
    fn try_acquire(&self) -> bool {
        self.try_lock()
    }
    fn acquire_until(&self, deadline: Instant) -> bool {
        poll_until(self, deadline)
    }
    fn release(&self) {
        self.unlock()
    }
    fn waits(&self) -> Option<(u64, u64)> {
        None
    }
}

/// How to torture.
#[derive(Clone, Debug)]
pub struct Config {
    /// The lock.
    pub subject: Subject,
    /// Writer threads on the main lock (plus a producer and a consumer per
    /// 8 writers, at least one of each).
    pub threads: usize,
    /// How long.
    pub duration: Duration,
    /// Seeds every random choice.
    pub seed: u64,
    /// A thread without progress for this long fails the run.
    pub stall: Duration,
}

/// What a run found.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Outcome {
    /// Lock name.
    pub lock: String,
    /// Writer threads.
    pub threads: usize,
    /// Seconds run.
    pub seconds: f64,
    /// The seed (a failing run can be repeated with it).
    pub seed: u64,
    /// Acquisitions by the writers.
    pub acquisitions: u64,
    /// Writer acquisitions per second.
    pub per_second: f64,
    /// Fewest acquisitions of any writer.
    pub per_thread_min: u64,
    /// Most acquisitions of any writer.
    pub per_thread_max: u64,
    /// max / min (fairness, as locktorture reports it); null if a writer
    /// never acquired.
    pub spread: Option<f64>,
    /// Longest single wait for the lock, nanoseconds.
    pub longest_wait_ns: u64,
    /// Contended acquisitions that only spun (our locks).
    pub spin: Option<u64>,
    /// Contended acquisitions that slept (our locks).
    pub sleep: Option<u64>,
    /// Tokens passed through the condvar queue.
    pub tokens: u64,
    /// The first violation seen, or null for a clean run.
    pub violation: Option<String>,
}

struct XorShift(u64);

impl XorShift {
    fn new(seed: u64, stream: u64) -> Self {
        XorShift((seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15)).max(1))
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Shared state of one run.
struct Arena<L> {
    lock: L,
    /// Shadow data a second holder would corrupt: the holder's id, and a
    /// counter updated with a plain load and store (a lost update shows).
    owner: AtomicU64,
    counter: AtomicU64,
    queue_lock: L,
    not_empty: Condvar,
    not_full: Condvar,
    slots: [AtomicU64; QUEUE],
    head: AtomicU64,
    tail: AtomicU64,
    produced: AtomicU64,
    consumed: AtomicU64,
    consumed_checksum: AtomicU64,
    produced_checksum: AtomicU64,
    stop: AtomicBool,
    violation: OnceLock<String>,
    progress: Vec<AtomicU64>,
    longest_wait: AtomicU64,
}

const QUEUE: usize = 8;

impl<L: Tortured> Arena<L> {
    fn fail(&self, message: String) {
        let _ = self.violation.set(message);
        self.stop.store(true, SeqCst);
    }
}

fn token_hash(token: u64) -> u64 {
    let mut x = token.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn writer<L: Tortured>(arena: &Arena<L>, index: usize, seed: u64) -> u64 {
    let me = index as u64 + 1;
    let mut rng = XorShift::new(seed, me);
    let mut acquired_total = 0;
    while !arena.stop.load(Relaxed) {
        let choice = rng.below(100);
        let start = Instant::now();
        let acquired = if choice < 70 {
            arena.lock.acquire();
            true
        } else if choice < 85 {
            arena.lock.try_acquire()
        } else {
            arena.lock.acquire_until(start + Duration::from_micros(rng.below(200)))
        };
        if acquired {
            let waited = start.elapsed().as_nanos() as u64;
            arena.longest_wait.fetch_max(waited, Relaxed);
            let other = arena.owner.load(Relaxed);
            if other != 0 {
                arena.fail(format!("exclusion: thread {index} acquired the lock while thread {} held it", other - 1));
            }
            arena.owner.store(me, Relaxed);
            let value = arena.counter.load(Relaxed);
            for _ in 0..rng.below(64) {
                std::hint::spin_loop();
            }
            if rng.below(512) == 0 {
                std::thread::yield_now();
            }
            arena.counter.store(value + 1, Relaxed);
            let still = arena.owner.load(Relaxed);
            if still != me {
                arena.fail(format!(
                    "exclusion: thread {} entered while thread {index} held the lock",
                    still.saturating_sub(1)
                ));
            }
            arena.owner.store(0, Relaxed);
            arena.lock.release();
            acquired_total += 1;
        }
        arena.progress[index].fetch_add(1, Relaxed);
        for _ in 0..rng.below(64) {
            std::hint::spin_loop();
        }
    }
    acquired_total
}

fn producer<L: Tortured>(arena: &Arena<L>, index: usize, id: u64) {
    let mut sequence = 0u64;
    while !arena.stop.load(Relaxed) {
        arena.queue_lock.acquire();
        while arena.tail.load(Relaxed) - arena.head.load(Relaxed) == QUEUE as u64 && !arena.stop.load(Relaxed) {
            arena.not_full.wait_with(|| arena.queue_lock.release(), || arena.queue_lock.acquire(), Some(Instant::now() + Duration::from_millis(50)));
        }
        if arena.stop.load(Relaxed) {
            arena.queue_lock.release();
            break;
        }
        let token = (id << 40) | sequence;
        sequence += 1;
        let tail = arena.tail.load(Relaxed);
        arena.slots[(tail % QUEUE as u64) as usize].store(token, Relaxed);
        arena.tail.store(tail + 1, Relaxed);
        arena.produced.fetch_add(1, Relaxed);
        arena.produced_checksum.fetch_add(token_hash(token), Relaxed);
        arena.not_empty.notify_one();
        arena.queue_lock.release();
        arena.progress[index].fetch_add(1, Relaxed);
    }
}

fn consumer<L: Tortured>(arena: &Arena<L>, index: usize) {
    loop {
        arena.queue_lock.acquire();
        while arena.tail.load(Relaxed) == arena.head.load(Relaxed) {
            if arena.stop.load(Relaxed) {
                arena.queue_lock.release();
                return;
            }
            arena.not_empty.wait_with(|| arena.queue_lock.release(), || arena.queue_lock.acquire(), Some(Instant::now() + Duration::from_millis(50)));
        }
        let head = arena.head.load(Relaxed);
        let token = arena.slots[(head % QUEUE as u64) as usize].load(Relaxed);
        arena.head.store(head + 1, Relaxed);
        arena.consumed.fetch_add(1, Relaxed);
        arena.consumed_checksum.fetch_add(token_hash(token), Relaxed);
        arena.not_full.notify_one();
        arena.queue_lock.release();
        arena.progress[index].fetch_add(1, Relaxed);
    }
}

/// Runs one torture.
pub fn run(config: &Config) -> Outcome {
    match config.subject {
        Subject::Ours(Algorithm::Adaptive) => torture::<RawAdaptive<Counts>>(config),
        Subject::Ours(Algorithm::Futex) => torture::<RawFutex<Counts>>(config),
        Subject::Ours(Algorithm::FutexTid) => torture::<RawFutexTid<Counts>>(config),
        Subject::Ours(Algorithm::Pi) => torture::<RawPi<Counts>>(config),
        Subject::Ours(Algorithm::Ticket) => torture::<RawTicket<Counts>>(config),
        Subject::Ours(Algorithm::Mcs) => torture::<RawMcs<Counts>>(config),
        Subject::Ours(Algorithm::Spin) => torture::<RawSpin<Counts>>(config),
        Subject::Busted => torture::<RawBusted>(config),
    }
}

fn torture<L: Tortured>(config: &Config) -> Outcome {
    let writers = config.threads.max(1);
    let pairs = (writers / 8).max(1);
    let total = writers + 2 * pairs;
    // Leaked: a thread stuck on a broken lock must not hold a dangling
    // reference when the run gives up on it.
    let arena: &'static Arena<L> = Box::leak(Box::new(Arena {
        lock: L::create(),
        owner: AtomicU64::new(0),
        counter: AtomicU64::new(0),
        queue_lock: L::create(),
        not_empty: Condvar::new(),
        not_full: Condvar::new(),
        slots: Default::default(),
        head: AtomicU64::new(0),
        tail: AtomicU64::new(0),
        produced: AtomicU64::new(0),
        consumed: AtomicU64::new(0),
        consumed_checksum: AtomicU64::new(0),
        produced_checksum: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        violation: OnceLock::new(),
        progress: (0..total).map(|_| AtomicU64::new(0)).collect(),
        longest_wait: AtomicU64::new(0),
    }));
    let per_thread: &'static Vec<AtomicU64> = Box::leak(Box::new((0..writers).map(|_| AtomicU64::new(0)).collect()));
    let finished: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    let seed = config.seed;
    let mut handles = Vec::new();
    // The run starts with its first thread: started after the spawns, a
    // run that failed before the watchdog's first look lasted microseconds
    // and read 241,830,065 acquisitions a second.
    let start = Instant::now();
    // A stop asked while threads start ends the starting: thousands of
    // spinning threads left the starter so little CPU that spawning them
    // all took a minute, and ^C waited for it.
    let stopped = || {
        let asked = crate::interrupt::requested().is_some();
        if asked {
            arena.stop.store(true, SeqCst);
        }
        asked
    };
    for (i, count) in per_thread.iter().enumerate() {
        if stopped() {
            break;
        }
        handles.push(std::thread::spawn(move || {
            count.store(writer(arena, i, seed), Relaxed);
            finished.fetch_add(1, Relaxed);
        }));
    }
    for p in 0..pairs {
        if stopped() {
            break;
        }
        handles.push(std::thread::spawn(move || {
            producer(arena, writers + p, p as u64 + 1);
            finished.fetch_add(1, Relaxed);
        }));
        handles.push(std::thread::spawn(move || {
            consumer(arena, writers + pairs + p);
            finished.fetch_add(1, Relaxed);
        }));
    }
    // (Fewer than `total` where a stop cut the starting short.)
    let total = handles.len();
    // The watchdog.
    let mut last: Vec<(u64, Instant)> = arena.progress.iter().map(|p| (p.load(Relaxed), start)).collect();
    // (A stop asked of the process, ^C in the demo, ends it early too.)
    while start.elapsed() < config.duration && !arena.stop.load(Relaxed) && crate::interrupt::requested().is_none() {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        for (i, progress) in arena.progress.iter().enumerate() {
            let seen = progress.load(Relaxed);
            if seen != last[i].0 {
                last[i] = (seen, now);
            } else if now - last[i].1 > config.stall {
                arena.fail(format!(
                    "no progress: thread {i} made none for {} (a lost wake-up, a deadlock, or a machine too oversubscribed for a bound of {})",
                    span(now - last[i].1),
                    span(config.stall)
                ));
            }
        }
    }
    arena.stop.store(true, SeqCst);
    arena.not_empty.notify_all();
    arena.not_full.notify_all();
    let seconds = start.elapsed().as_secs_f64();
    // (A stall too long for the clock never gives up: a panic lost the
    // run that had ended.)
    let give_up = Instant::now().checked_add(config.stall);
    while finished.load(Relaxed) < total as u64 && give_up.is_none_or(|give_up| Instant::now() < give_up) && crate::interrupt::requested().is_none() {
        std::thread::sleep(Duration::from_millis(5));
    }
    if finished.load(Relaxed) == total as u64 {
        for handle in handles {
            let _ = handle.join();
        }
        let acquisitions: u64 = per_thread.iter().map(|a| a.load(Relaxed)).sum();
        let counter = arena.counter.load(Relaxed);
        if counter != acquisitions {
            arena.fail(format!("exclusion: lost updates: the shadow counter is {counter} after {acquisitions} acquisitions"));
        }
        let (produced, consumed) = (arena.produced.load(Relaxed), arena.consumed.load(Relaxed));
        if produced != consumed || arena.produced_checksum.load(Relaxed) != arena.consumed_checksum.load(Relaxed) {
            arena.fail(format!("condvar queue: {produced} tokens produced, {consumed} consumed, or a token lost or duplicated"));
        }
    } else {
        arena.fail(format!(
            "no progress: {} of {total} threads did not finish within {} of the end (a lost wake-up or a deadlock)",
            total as u64 - finished.load(Relaxed),
            span(config.stall)
        ));
    }
    // A wait for the lock longer than the stall is no progress too, even
    // one that ended: the in-run check above cannot fire before the run
    // has lasted the stall, and with --stall equal to --seconds (the
    // defaults) it never did (4,096 threads on futex waited 5.7 s, and the
    // run read ok).
    if let Some(stalled) = waited_past_the_stall(Duration::from_nanos(arena.longest_wait.load(Relaxed)), config.stall) {
        arena.fail(stalled);
    }
    let counts: Vec<u64> = per_thread.iter().map(|a| a.load(Relaxed)).collect();
    let acquisitions: u64 = counts.iter().sum();
    let (min, max) = (counts.iter().copied().min().unwrap_or(0), counts.iter().copied().max().unwrap_or(0));
    let waits = arena.lock.waits();
    Outcome {
        lock: config.subject.name().to_string(),
        threads: writers,
        seconds,
        seed,
        acquisitions,
        per_second: acquisitions as f64 / seconds.max(1e-9),
        per_thread_min: min,
        per_thread_max: max,
        spread: (min > 0).then(|| max as f64 / min as f64),
        longest_wait_ns: arena.longest_wait.load(Relaxed),
        spin: waits.map(|w| w.0),
        sleep: waits.map(|w| w.1),
        tokens: arena.consumed.load(Relaxed),
        violation: arena.violation.get().cloned(),
    }
}

/// The violation of a wait for the lock longer than the stall bound.
/// A time as a failure message gives it: milliseconds under a second (a
/// bound of a few ms read "0.0 s").
fn span(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.3} s", d.as_secs_f64())
    }
}

fn waited_past_the_stall(longest_wait: Duration, stall: Duration) -> Option<String> {
    (longest_wait > stall).then(|| {
        format!(
            "no progress: a thread waited {} for the lock, longer than the stall bound {} (starvation, a lost wake-up or a deadlock)",
            span(longest_wait),
            span(stall)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stall bound too long for the clock never gives up (it panicked
    /// once the run had ended, losing it).
    #[test]
    fn a_stall_bound_past_the_clocks_range_is_no_bound() {
        let outcome =
            run(&Config { subject: Subject::Ours(Algorithm::Futex), threads: 2, duration: Duration::from_millis(20), seed: 1, stall: Duration::MAX });
        assert!(outcome.violation.is_none() && outcome.acquisitions > 0, "{outcome:?}");
    }

    #[test]
    fn a_wait_longer_than_the_stall_bound_fails_the_run() {
        assert_eq!(waited_past_the_stall(Duration::from_secs(5), Duration::from_secs(5)), None);
        let violation = waited_past_the_stall(Duration::from_millis(5_717), Duration::from_secs(5)).unwrap();
        assert!(violation.starts_with("no progress: a thread waited 5.717 s"), "{violation}");
        let short = waited_past_the_stall(Duration::from_micros(2_500), Duration::from_millis(2)).unwrap();
        assert!(short.contains("waited 2.5 ms for the lock, longer than the stall bound 2.0 ms"), "{short}");
        // Through a run: with a bound of a microsecond, some wait exceeds it.
        let outcome = run(&Config {
            subject: Subject::Ours(Algorithm::Futex),
            threads: 4,
            duration: Duration::from_millis(100),
            seed: 7,
            stall: Duration::from_micros(1),
        });
        assert!(outcome.violation.as_deref().is_some_and(|v| v.starts_with("no progress")), "{outcome:?}");
    }

    fn quick(subject: Subject, seed: u64) -> Outcome {
        run(&Config { subject, threads: 4, duration: Duration::from_millis(300), seed, stall: Duration::from_secs(5) })
    }

    #[test]
    fn a_real_lock_passes_and_counts() {
        let outcome = quick(Subject::Ours(Algorithm::Adaptive), 7);
        assert_eq!(outcome.violation, None);
        assert!(outcome.acquisitions > 100 && outcome.tokens > 10, "{outcome:?}");
        assert!(outcome.per_thread_min > 0 && outcome.spin.is_some());
    }

    /// Caught within a few short runs: a machine busy with other work
    /// (a build beside the tests) can keep the threads from overlapping
    /// for all of one 300 ms run.
    #[test]
    fn the_busted_lock_is_caught() {
        let violation = (7..12).find_map(|seed| quick(Subject::Busted, seed).violation).expect("busted must be caught");
        assert!(violation.starts_with("exclusion"), "{violation}");
    }
}
