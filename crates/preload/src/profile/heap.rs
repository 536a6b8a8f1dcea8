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
//! or faulted. So while a thread writes from a signal handler, the
//! library's allocations in that thread come from anonymous mappings,
//! bumped and never reused (the process is dying), and it frees nothing
//! the C library gave out.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};

/// `malloc` for every thread, but the one writing from a signal handler.
pub struct LibraryHeap;

/// The thread writing the profile from a signal handler, 0 when none.
static SIGNAL_WRITER: AtomicU32 = AtomicU32::new(0);

/// From now on this thread's allocations come from the signal heap: it is
/// about to write the profile from a signal handler. For good: the process
/// dies after the write.
pub fn serve_this_thread_from_signal_heap() {
    SIGNAL_WRITER.store(lockmeter_locks::kernel_tid(), Relaxed);
}

/// Whether the calling thread is the one writing from a signal handler.
/// One load of a global outside a signal's write (gettid is asked only
/// while one runs).
#[inline]
fn serving_signal_writer() -> bool {
    let writer = SIGNAL_WRITER.load(Relaxed);
    writer != 0 && writer == lockmeter_locks::kernel_tid()
}

/// The mappings the signal heap took, as [start, end) pairs, so that a
/// block of theirs is never handed to `free`. A writer needs one unless
/// its profile runs past `CHUNK` bytes.
const CHUNKS: usize = 16;
static CHUNK_STARTS: [AtomicUsize; CHUNKS] = [const { AtomicUsize::new(0) }; CHUNKS];
static CHUNK_ENDS: [AtomicUsize; CHUNKS] = [const { AtomicUsize::new(0) }; CHUNKS];
static CHUNKS_TAKEN: AtomicUsize = AtomicUsize::new(0);
/// Each mapping's size, or a block's if larger. Reserved, not committed
/// (MAP_NORESERVE): only the pages written cost memory.
const CHUNK: usize = 64 << 20;
/// The next free byte of the last mapping, and its end.
static TOP: AtomicUsize = AtomicUsize::new(0);
static END: AtomicUsize = AtomicUsize::new(0);

/// Whether `ptr` came from the signal heap.
#[inline]
fn from_signal_heap(ptr: *mut u8) -> bool {
    let taken = CHUNKS_TAKEN.load(Relaxed).min(CHUNKS);
    let address = ptr as usize;
    (0..taken).any(|i| CHUNK_STARTS[i].load(Relaxed) <= address && address < CHUNK_ENDS[i].load(Relaxed))
}

/// A block from the signal heap (only its writer's thread bumps it; a
/// nested handler in that thread allocates nothing). Null when the
/// mappings run out, as an allocator out of memory.
fn signal_heap_alloc(layout: Layout) -> *mut u8 {
    let top = TOP.load(Relaxed);
    let start = top.next_multiple_of(layout.align());
    if top != 0 && start.checked_add(layout.size()).is_some_and(|end| end <= END.load(Relaxed)) {
        TOP.store(start + layout.size(), Relaxed);
        return start as *mut u8;
    }
    let taken = CHUNKS_TAKEN.load(Relaxed);
    if taken >= CHUNKS {
        return std::ptr::null_mut();
    }
    let Some(length) = layout.size().checked_add(layout.align()).map(|l| l.max(CHUNK).next_multiple_of(4096)) else {
        return std::ptr::null_mut();
    };
    // SAFETY: a fresh private anonymous mapping (mmap is a system call,
    // safe in a signal handler); nothing else is at the address it returns.
    let mapped = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            length,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if mapped == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    let base = mapped as usize;
    CHUNK_STARTS[taken].store(base, Relaxed);
    CHUNK_ENDS[taken].store(base + length, Relaxed);
    CHUNKS_TAKEN.store(taken + 1, Relaxed);
    let start = base.next_multiple_of(layout.align());
    END.store(base + length, Relaxed);
    TOP.store(start + layout.size(), Relaxed);
    start as *mut u8
}

// SAFETY: the C library's allocator serves every block but the signal
// writer's; those are fresh, aligned as asked, and never handed out twice.
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
        // The signal heap's blocks stay; the writer frees none of the C
        // library's either: its allocator may be mid-operation in this
        // very thread.
        if from_signal_heap(ptr) || serving_signal_writer() {
            return;
        }
        // SAFETY: a block `System` gave out with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let ours = from_signal_heap(ptr);
        if !ours && !serving_signal_writer() {
            // SAFETY: a block `System` gave out with this layout.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        let old_end = ptr as usize + layout.size();
        if ours && serving_signal_writer() && old_end == TOP.load(Relaxed) && ptr as usize + new_size <= END.load(Relaxed) {
            // The heap's last block grows or shrinks where it is: a
            // profile's text, built by appending, takes its final size
            // once instead of the sum of its doublings.
            TOP.store(ptr as usize + new_size, Relaxed);
            return ptr;
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
    fn blocks_are_aligned_apart_and_grow_in_place_at_the_top() {
        // (The one test in this binary that becomes a signal writer.)
        serve_this_thread_from_signal_heap();
        let heap = LibraryHeap;
        let small = Layout::from_size_align(24, 8).unwrap();
        let aligned = Layout::from_size_align(100, 256).unwrap();
        // SAFETY: valid layouts; each block is used within its size.
        unsafe {
            let a = heap.alloc(small);
            let b = heap.alloc_zeroed(aligned);
            assert!(from_signal_heap(a) && from_signal_heap(b));
            assert_eq!(b as usize % 256, 0);
            assert!(b as usize >= a as usize + 24, "no overlap");
            assert!((0..100).all(|i| *b.add(i) == 0));
            b.write_bytes(7, 100);
            let grown = heap.realloc(b, aligned, 5000);
            assert_eq!(grown, b, "the top block grows where it is");
            assert_eq!(*grown.add(99), 7);
            let moved = heap.realloc(a, small, 48);
            assert_ne!(moved, a, "a block under another moves");
            // A block larger than a mapping gets one of its own.
            let huge = Layout::from_size_align(CHUNK + 1, 8).unwrap();
            let h = heap.alloc(huge);
            assert!(!h.is_null() && from_signal_heap(h));
            h.add(CHUNK).write(1);
            heap.dealloc(h, huge);
        }
        // Another thread still gets the C library's blocks, and frees them.
        std::thread::spawn(|| {
            let block = Box::new([1u8; 64]);
            assert!(!from_signal_heap((&*block as *const [u8; 64]).cast_mut().cast()));
        })
        .join()
        .unwrap();
        // (A later test's thread may get this one's id.)
        SIGNAL_WRITER.store(0, Relaxed);
    }
}
