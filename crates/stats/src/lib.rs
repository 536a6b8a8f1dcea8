//! lockmeter's statistics: the per-lock counters a lock records into, and
//! the renderers of seed 004's lockmeter report and seed 000's log2-cycle
//! wait histogram.
//!
//! The shape is stable and documented field by field in [`Snapshot`]:
//! later tools (the profiler, `bench`, JSON output) build on it.

#![warn(missing_docs)]

mod counts;
pub mod histogram;
mod lock_stats;
pub mod profile;
pub mod report;

pub use counts::{Counts, CountsSnapshot, SpinsSnapshot};
pub use histogram::{Histogram, BINS};
pub use lock_stats::{LockStats, Snapshot};
