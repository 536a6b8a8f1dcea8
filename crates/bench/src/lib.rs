//! The lab: our locks and their peers, side by side in one process.
//!
//! Every lock is driven through [`BenchLock`], so a workload is written
//! once, generic over the lock, and monomorphised for each (no dynamic
//! dispatch inside the measured loop). Peers: glibc's default, adaptive and
//! priority-inheritance pthread mutexes, Rust std's `Mutex`, `parking_lot`,
//! and a bare test-and-set as the floor of what a lock+unlock pair can cost.

#![warn(missing_docs)]

pub mod experiment;
pub mod interrupt;
#[cfg(test)]
mod fixtures;
mod locks;
pub mod pair;
mod variants;
pub mod plot;
pub mod render;
pub mod scorecard;
pub mod torture;
mod waits;
pub mod work;
pub mod workloads;

pub use locks::{BenchLock, LockKind, LockVisitor, Recording, Variant};
