//! lockmeter's statistics: the per-lock counters a lock records into, and
//! the renderers of seed 004's lockmeter report and seed 000's log2-cycle
//! wait histogram.
//!
//! The shape is stable and documented field by field in [`Snapshot`]:
//! later tools (the profiler, `bench`, JSON output) build on it.
//!
//! A lock of lockmeter-locks records into [`LockStats`] when it is its
//! recorder; its report and wait histogram are then a few lines away:
//!
//! ```
//! use lockmeter_locks::{lock_api, recorder_of, RawAdaptive};
//! use lockmeter_stats::{report, LockStats};
//!
//! let queue = lock_api::Mutex::<RawAdaptive<LockStats>, Vec<u32>>::new(Vec::new());
//! let started = std::time::Instant::now();
//! std::thread::scope(|s| {
//!     for _ in 0..2 {
//!         s.spawn(|| (0..1000).for_each(|i| queue.lock().push(i)));
//!     }
//! });
//! let stats = recorder_of(&queue).snapshot();
//! assert_eq!(stats.acquisitions, 2000);
//! let rows = [report::Row { name: "queue", stats: &stats, call_site: false }];
//! let table = report::render(&rows, started.elapsed().as_nanos() as f64);
//! assert!(table.contains("queue"));
//! print!("{table}{}", lockmeter_stats::histogram::render_side_by_side(&["queue"], &[&stats.wait_histogram]));
//! ```

#![warn(missing_docs)]

mod counts;
pub mod histogram;
mod lock_stats;
pub mod profile;
pub mod report;

pub use counts::{Counts, CountsSnapshot, SpinsSnapshot};
pub use histogram::{Histogram, BINS};
pub use lock_stats::{LockStats, Snapshot};
