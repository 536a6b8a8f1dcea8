//! glibc's cleanup buffers: what a thread cancelled inside a hook must
//! still do (leave a condvar, end a wait the profiler counts) as glibc's
//! cancellation unwinds past the hook's frame. The frames between the
//! cancellation point and the hook hold nothing that drops: a cleanup
//! runs from a buffer, never from a Rust destructor.

/// glibc's `struct _pthread_cleanup_buffer`.
#[repr(C)]
pub struct CleanupBuffer {
    routine: Option<unsafe extern "C" fn(*mut libc::c_void)>,
    argument: *mut libc::c_void,
    cancel_type: libc::c_int,
    previous: *mut CleanupBuffer,
}

extern "C" {
    fn _pthread_cleanup_push(buffer: *mut CleanupBuffer, routine: unsafe extern "C" fn(*mut libc::c_void), argument: *mut libc::c_void);
    fn _pthread_cleanup_pop(buffer: *mut CleanupBuffer, execute: libc::c_int);
}

impl CleanupBuffer {
    pub fn new() -> CleanupBuffer {
        CleanupBuffer { routine: None, argument: std::ptr::null_mut(), cancel_type: 0, previous: std::ptr::null_mut() }
    }
}

/// Runs `body` with `routine(argument)` registered to run if a
/// cancellation unwinds out of it; not run otherwise.
///
/// # Safety
/// `argument` stays valid for `routine` until `body` returns; `body`'s
/// frames hold nothing that drops while it can be cancelled.
pub unsafe fn on_cancel<T>(routine: unsafe extern "C" fn(*mut libc::c_void), argument: *mut libc::c_void, body: impl FnOnce() -> T) -> T {
    let mut buffer = CleanupBuffer::new();
    // SAFETY: the buffer lives in this frame until the pop below.
    unsafe { _pthread_cleanup_push(&mut buffer, routine, argument) };
    let result = body();
    // SAFETY: the buffer pushed above, not run.
    unsafe { _pthread_cleanup_pop(&mut buffer, 0) };
    result
}
