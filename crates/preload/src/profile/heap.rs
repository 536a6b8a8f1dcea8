//! The library's allocator: the C library's `malloc`, except for the
//! profile written from a signal handler, which allocates from pages of
//! its own.
//!
//! A program killed by a signal writes its profile from the handler, in
//! whatever thread the signal landed in, and building the profile
//! allocates. When that thread was inside `malloc` the allocator is
//! mid-operation there: holding its arena's lock, the handler's first
//! allocation waited for the lock for ever (the dying write's watchdog
//! then ended the program without its profile: 135 of 300 runs of a
//! program sent SIGTERM while it allocates in a loop); halfway through
//! its thread cache's update, it handed out a block that was not free,
//! or faulted. So the thread that claims the final write from a signal
//! handler allocates from anonymous mappings of its own: small blocks
//! bumped through shared ones (the process is dying: a block is reused
//! only if it was the last one given out), each large one in its own,
//! given back when freed. It frees nothing the C library gave out. A
//! second thread dying meanwhile waits for that write, allocating nothing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};

/// `malloc` for every thread, but the one writing from a signal handler.
pub struct LibraryHeap;

/// The thread writing the profile from a signal handler, 0 when none.
static SIGNAL_WRITER: AtomicU32 = AtomicU32::new(0);

/// From now on this thread's allocations come from the signal heap: it
/// claimed the final profile's write, from a signal handler. For good:
/// the process dies after the write.
pub fn serve_this_thread_from_signal_heap() {
    SIGNAL_WRITER.store(lockmeter_locks::current_tid(), Relaxed);
}

/// Whether the calling thread is the one writing from a signal handler:
/// one load of a global outside a signal's write, and the thread's id
/// while one runs (from glibc's descriptor: asking the kernel at each
/// allocation, a 150,000-lock profile took 4.2-4.6 s to write, not 3.1).
#[inline]
pub fn serving_signal_writer() -> bool {
    let writer = SIGNAL_WRITER.load(Relaxed);
    writer != 0 && writer == lockmeter_locks::current_tid()
}

/// Blocks this large or larger get a mapping of their own, unmapped when
/// freed and moved by `mremap` when they grow: a profile's text or lock
/// list, grown by doubling to hundreds of MB, costs its final size, not
/// the sum of its doublings (bumped, a 300,000-lock profile ran out of
/// mappings and aborted).
const OWN_MAPPING: usize = 1 << 20;
/// Smaller blocks are bumped through shared mappings of this size, never
/// reused. Reserved, not committed (MAP_NORESERVE): only the pages
/// written cost memory.
const SHARED_MAPPING: usize = 64 << 20;
/// x86_64's page.
const PAGE: usize = 4096;

/// The heap's mappings, as [start, end) pairs (0, 0: a free slot), so that
/// no block of theirs is handed to `free`, by any thread. Only the writer
/// changes them.
const SLOTS: usize = 256;
static STARTS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static ENDS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
/// Whether a slot's mapping is one block's own.
static OWN: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];
/// Slots at or past this one were never used.
static SLOTS_USED: AtomicUsize = AtomicUsize::new(0);
/// The next free byte of the last shared mapping, and its end.
static TOP: AtomicUsize = AtomicUsize::new(0);
static END: AtomicUsize = AtomicUsize::new(0);

/// The slot of the mapping `ptr` lies in.
#[inline]
fn slot_of(ptr: *mut u8) -> Option<usize> {
    let address = ptr as usize;
    (0..SLOTS_USED.load(Relaxed)).find(|&i| STARTS[i].load(Relaxed) <= address && address < ENDS[i].load(Relaxed))
}

/// A fresh private anonymous mapping of `length` bytes, noted in a free
/// slot.
fn map(length: usize, own: bool) -> Option<usize> {
    let slot = (0..SLOTS).find(|&i| ENDS[i].load(Relaxed) == 0)?;
    let mapped = super::table::anonymous_mapping(length)? as usize;
    note(slot, mapped, length, own);
    Some(mapped)
}

fn note(slot: usize, start: usize, length: usize, own: bool) {
    OWN[slot].store(own, Relaxed);
    STARTS[slot].store(start, Relaxed);
    ENDS[slot].store(start + length, Relaxed);
    SLOTS_USED.fetch_max(slot + 1, Relaxed);
}

/// A block from the signal heap (only its writer's thread calls this; a
/// handler nested in that thread allocates nothing). Null when no
/// mapping can be had, as an allocator out of memory.
fn signal_heap_alloc(layout: Layout) -> *mut u8 {
    if layout.size() >= OWN_MAPPING {
        // Aligned past a page, the block starts inside its mapping.
        let padding = if layout.align() > PAGE { layout.align() } else { 0 };
        let Some(length) = layout.size().checked_add(padding).and_then(|l| l.checked_next_multiple_of(PAGE)) else {
            return std::ptr::null_mut();
        };
        return map(length, true).map_or(std::ptr::null_mut(), |base| base.next_multiple_of(layout.align()) as *mut u8);
    }
    let top = TOP.load(Relaxed);
    let start = top.next_multiple_of(layout.align());
    if top != 0 && start + layout.size() <= END.load(Relaxed) {
        TOP.store(start + layout.size(), Relaxed);
        return start as *mut u8;
    }
    let Some(base) = map(SHARED_MAPPING, false) else { return std::ptr::null_mut() };
    let start = base.next_multiple_of(layout.align());
    END.store(base + SHARED_MAPPING, Relaxed);
    TOP.store(start + layout.size(), Relaxed);
    start as *mut u8
}

/// Gives a block's own mapping back (the writer's thread only).
fn unmap(slot: usize) {
    let start = STARTS[slot].load(Relaxed);
    let end = ENDS[slot].load(Relaxed);
    ENDS[slot].store(0, Relaxed);
    STARTS[slot].store(0, Relaxed);
    // SAFETY: the mapping `map` made for one block, which its owner frees.
    unsafe { libc::munmap(start as *mut libc::c_void, end - start) };
}

// SAFETY: the C library's allocator serves every block but the signal
// writer's; those are fresh mappings or bumped parts of them, aligned as
// asked, and never handed out twice while in use.
unsafe impl GlobalAlloc for LibraryHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if serving_signal_writer() {
            return signal_heap_alloc(layout);
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if serving_signal_writer() {
            let block = signal_heap_alloc(layout);
            if !block.is_null() {
                // SAFETY: `block` holds `layout.size()` bytes. (A block
                // given back at the top is bumped over again: not zero.)
                unsafe { block.write_bytes(0, layout.size()) };
            }
            return block;
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let writer = serving_signal_writer();
        match slot_of(ptr) {
            // A block's own mapping goes back; a shared one's blocks stay,
            // and so does any block freed by another thread.
            Some(slot) if writer && OWN[slot].load(Relaxed) => unmap(slot),
            // The shared mapping's last block is bumped over again (a
            // temporary freed at once, as most are).
            Some(_) if writer && ptr as usize + layout.size() == TOP.load(Relaxed) => TOP.store(ptr as usize, Relaxed),
            Some(_) => {}
            // The writer frees none of the C library's blocks: its
            // allocator may be mid-operation in this very thread.
            None if writer => {}
            // SAFETY: a block `System` gave out with this layout.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let writer = serving_signal_writer();
        let slot = slot_of(ptr);
        if slot.is_none() && !writer {
            // SAFETY: a block `System` gave out with this layout.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        match slot {
            Some(slot) if writer && OWN[slot].load(Relaxed) && new_size >= OWN_MAPPING && layout.align() <= PAGE => {
                // The block is its mapping: the kernel moves its pages.
                let (start, end) = (STARTS[slot].load(Relaxed), ENDS[slot].load(Relaxed));
                let length = new_size.next_multiple_of(PAGE);
                // SAFETY: the block's own mapping, resized or moved whole;
                // its old address is not used again.
                let moved = unsafe { libc::mremap(start as *mut libc::c_void, end - start, length, libc::MREMAP_MAYMOVE) };
                if moved == libc::MAP_FAILED {
                    return std::ptr::null_mut();
                }
                note(slot, moved as usize, length, true);
                return moved.cast();
            }
            Some(_) if writer && ptr as usize + layout.size() == TOP.load(Relaxed) && ptr as usize + new_size <= END.load(Relaxed) && new_size < OWN_MAPPING => {
                // The shared mapping's last block grows or shrinks where
                // it is.
                TOP.store(ptr as usize + new_size, Relaxed);
                return ptr;
            }
            _ => {}
        }
        // SAFETY: Layout's invariants hold for the caller's alignment and
        // a size it asks for.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a valid layout; `alloc` picks the heap for this thread.
        let moved = unsafe { self.alloc(new_layout) };
        if !moved.is_null() {
            // SAFETY: both blocks hold the bytes copied, and do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size)) };
            // SAFETY: `ptr` with its layout; freed only where that is safe.
            unsafe { self.dealloc(ptr, layout) };
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_apart_grow_in_place_and_large_ones_are_given_back() {
        // (The one test in this binary that becomes a signal writer.)
        serve_this_thread_from_signal_heap();
        let heap = LibraryHeap;
        let small = Layout::from_size_align(24, 8).unwrap();
        let aligned = Layout::from_size_align(100, 256).unwrap();
        // SAFETY: valid layouts; each block is used within its size.
        unsafe {
            let a = heap.alloc(small);
            let b = heap.alloc_zeroed(aligned);
            assert!(slot_of(a).is_some() && slot_of(b).is_some());
            assert_eq!(b as usize % 256, 0);
            assert!(b as usize >= a as usize + 24, "no overlap");
            assert!((0..100).all(|i| *b.add(i) == 0));
            b.write_bytes(7, 100);
            let grown = heap.realloc(b, aligned, 5000);
            assert_eq!(grown, b, "the top block grows where it is");
            assert_eq!(*grown.add(99), 7);
            let shrunk = heap.realloc(grown, Layout::from_size_align(5000, 256).unwrap(), 10);
            let zeroed = heap.alloc_zeroed(Layout::from_size_align(64, 1).unwrap());
            assert!((0..64).all(|i| *zeroed.add(i) == 0), "bumped over a shrunk block's bytes: zeroed");
            assert_eq!(*shrunk, 7);
            let moved = heap.realloc(a, small, 48);
            assert_ne!(moved, a, "a block under another moves");

            // A large block has its mapping, which grows with it and goes
            // back when it is freed.
            let large = Layout::from_size_align(2 << 20, 8).unwrap();
            let l = heap.alloc(large);
            l.write_bytes(5, 2 << 20);
            let bigger = heap.realloc(l, large, 300 << 20);
            assert!(!bigger.is_null() && slot_of(bigger).is_some());
            assert_eq!((*bigger, *bigger.add((2 << 20) - 1)), (5, 5));
            bigger.add((300 << 20) - 1).write(1);
            heap.dealloc(bigger, Layout::from_size_align(300 << 20, 8).unwrap());
            assert!(slot_of(bigger).is_none(), "unmapped");
            // Mappings given back are reused: many more large blocks than
            // slots, one at a time.
            for _ in 0..4 * SLOTS {
                let block = heap.alloc(large);
                assert!(!block.is_null());
                heap.dealloc(block, large);
            }
            let page_aligned = Layout::from_size_align(3 << 20, 1 << 16).unwrap();
            let p = heap.alloc(page_aligned);
            assert_eq!(p as usize % (1 << 16), 0);
            heap.dealloc(p, page_aligned);
        }
        // Another thread still gets the C library's blocks, and frees them.
        std::thread::spawn(|| {
            let block = Box::new([1u8; 64]);
            assert!(slot_of((&*block as *const [u8; 64]).cast_mut().cast()).is_none());
        })
        .join()
        .unwrap();
        // (A later test's thread may get this one's id.)
        SIGNAL_WRITER.store(0, Relaxed);
    }
}
