//! The process's environment as glibc keeps it (`environ`), read past the
//! program's own `getenv`: bash exports its own, which after a `setenv`
//! before bash's `main` (the library's constructor marks the tree's root)
//! no longer found the variables, so bash under `lockmeter run` wrote no
//! profile.

use libc::c_char;
use std::ffi::CStr;

extern "C" {
    static environ: *const *const c_char;
}

/// `name`'s value, read from `environ` without allocating or locking (the
/// first lock call may come from inside the program's allocator).
pub fn get(name: &str) -> Option<&'static CStr> {
    // SAFETY: `environ` is glibc's array of NUL-terminated "NAME=value"
    // strings, ended by a null pointer (or itself null); entries live as
    // long as the environment is not changed. The library reads it only
    // while the process starts (its constructor, the first lock call, a
    // fork's child before it returns to the program), before the program
    // can be calling `setenv` from another thread; later writes use what
    // was read then.
    unsafe {
        let mut entry = environ;
        while !entry.is_null() && !(*entry).is_null() {
            let text = CStr::from_ptr(*entry).to_bytes();
            if text.len() > name.len() && text.starts_with(name.as_bytes()) && text[name.len()] == b'=' {
                return Some(CStr::from_ptr((*entry).add(name.len() + 1)));
            }
            entry = entry.add(1);
        }
    }
    None
}
