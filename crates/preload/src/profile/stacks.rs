//! Stacks of contended acquisitions (`--frames N`): captured only when a
//! thread is about to wait, so the uncontended path never pays for an
//! unwind, and charged with the wait once it is over.

use super::table::Counter;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::*};

/// Deepest stack kept.
pub const MAX_FRAMES: usize = 32;
const STACK_SLOTS: usize = 1 << 12;

/// One distinct (lock, stack).
#[derive(Default)]
pub struct StackRecord {
    pub key: AtomicU64,
    pub lock: AtomicU64,
    pub depth: AtomicU64,
    pub frames: [AtomicU64; MAX_FRAMES],
    pub contended: Counter,
    pub wait: Counter,
}

struct StackTable {
    slots: Box<[StackRecord]>,
}

static TABLE: std::sync::OnceLock<StackTable> = std::sync::OnceLock::new();
/// Stacks not kept because the table was full.
pub static DROPPED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The stack record the current wait will be charged to (index + 1).
    static PENDING: Cell<usize> = const { Cell::new(0) };
    /// Set while unwinding: the unwinder may lock a mutex itself.
    static UNWINDING: Cell<bool> = const { Cell::new(false) };
}

/// Loads the unwinder now (glibc's `backtrace` loads libgcc_s on first
/// use), so a lock's hook never does it.
pub fn prepare() {
    let _ = TABLE.get_or_init(|| StackTable { slots: (0..STACK_SLOTS).map(|_| StackRecord::default()).collect() });
    let mut frames = [std::ptr::null_mut(); 4];
    // SAFETY: the buffer holds 4 entries.
    unsafe { libc::backtrace(frames.as_mut_ptr(), 4) };
}

/// Captures the stack of a thread about to wait for lock `lock`, from the
/// caller at return address `pc` outwards, keeping at most `depth` frames.
pub fn capture(depth: usize, lock: u32, pc: usize) {
    let Some(table) = TABLE.get() else { return };
    if UNWINDING.with(Cell::get) {
        return;
    }
    UNWINDING.with(|u| u.set(true));
    let mut raw = [std::ptr::null_mut(); MAX_FRAMES + 8];
    // SAFETY: the buffer holds raw.len() entries.
    let count = unsafe { libc::backtrace(raw.as_mut_ptr(), raw.len() as i32) }.max(0) as usize;
    UNWINDING.with(|u| u.set(false));
    let frames: Vec<u64> = raw[..count].iter().map(|&f| f as u64).collect();
    let start = frames.iter().position(|&f| f == pc as u64).unwrap_or(0);
    let frames = &frames[start..frames.len().min(start + depth.min(MAX_FRAMES))];
    let mut key = u64::from(lock).wrapping_add(1);
    for &f in frames {
        key = (key ^ f).wrapping_mul(0x100_0000_01B3);
    }
    let key = key.max(1);
    let mut slot = (key as usize) & (STACK_SLOTS - 1);
    for _ in 0..64 {
        let record = &table.slots[slot];
        let current = record.key.load(Acquire);
        let mine = current == key;
        let claimed = current == 0 && record.key.compare_exchange(0, key, AcqRel, Acquire).is_ok();
        if claimed {
            record.lock.store(u64::from(lock), Relaxed);
            for (cell, &f) in record.frames.iter().zip(frames) {
                cell.store(f, Relaxed);
            }
            record.depth.store(frames.len() as u64, Release);
        }
        if mine || claimed {
            PENDING.with(|p| p.set(slot + 1));
            return;
        }
        slot = (slot + 1) & (STACK_SLOTS - 1);
    }
    DROPPED.fetch_add(1, Relaxed);
}

/// Charges `waited` cycles to the stack captured for this wait.
pub fn charge(waited: u64) {
    let pending = PENDING.with(|p| p.replace(0));
    if let (Some(table), Some(slot)) = (TABLE.get(), pending.checked_sub(1)) {
        table.slots[slot].contended.add(1, true);
        table.slots[slot].wait.add(waited, true);
    }
}

/// Every stack: (lock index, frames innermost first, contended, cycles waited).
pub fn all() -> Vec<(u32, Vec<u64>, u64, u64)> {
    let Some(table) = TABLE.get() else { return Vec::new() };
    table
        .slots
        .iter()
        .filter(|r| r.key.load(Acquire) != 0 && r.contended.get() > 0)
        .map(|r| {
            let depth = r.depth.load(Acquire) as usize;
            let frames = r.frames[..depth.min(MAX_FRAMES)].iter().map(|f| f.load(Relaxed)).collect();
            (r.lock.load(Relaxed) as u32, frames, r.contended.get(), r.wait.get())
        })
        .collect()
}

/// Forgets every stack (in a forked child, whose profile starts empty).
pub fn clear() {
    if let Some(table) = TABLE.get() {
        for record in table.slots.iter() {
            record.key.store(0, Relaxed);
            record.contended.reset();
            record.wait.reset();
        }
    }
    PENDING.with(|p| p.set(0));
}
