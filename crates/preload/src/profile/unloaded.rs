//! Names of what an object unloaded by `dlclose` held: its global locks
//! and its call sites, resolved as it goes. The profile names addresses
//! when it is written, from the objects loaded then: a plugin's lock read
//! `heap@0x7feb80fa4153 (first use)` once its library was gone, or took
//! the name of whatever library was loaded at its address since
//! (`other_padding_a+0x20`), its call sites raw addresses.

use super::symbols::{CodeSite, Symbolizer};
use super::Profiler;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Mutex;

/// The names kept, once an object was unloaded.
#[derive(Default)]
pub struct Names {
    /// The profiler whose lock numbers `locks` holds (a child of `fork`
    /// numbers its locks afresh: its first lock read as the parent's
    /// unloaded plugin's).
    epoch: u64,
    /// Lock record slot -> the variable's name (by slot, not number: a
    /// lock initialised and never taken has no number, and is named too).
    pub locks: HashMap<u32, String>,
    /// Return address -> the call site.
    pub code: HashMap<usize, CodeSite>,
}

static NAMES: Mutex<Option<Names>> = Mutex::new(None);

/// The loader's `struct link_map`, its first fields.
#[repr(C)]
struct LinkMap {
    l_addr: usize,
}

/// `RTLD_DI_LINKMAP`.
const RTLD_DI_LINKMAP: libc::c_int = 2;

/// The object `handle` names is about to be closed: names what of it the
/// profile holds, then closes it with `close`, and if it is gone, retires
/// its locks (their memory is gone; a lock of another object loaded
/// there since is another lock).
pub fn closing(profiler: &Profiler, handle: *mut libc::c_void, close: impl FnOnce() -> libc::c_int) -> libc::c_int {
    let mut map: *mut LinkMap = std::ptr::null_mut();
    // SAFETY: dlinfo writes the object's link_map pointer; `handle` is the
    // program's own, as it passes it to dlclose.
    if handle.is_null() || unsafe { libc::dlinfo(handle, RTLD_DI_LINKMAP, (&raw mut map).cast()) } != 0 || map.is_null() {
        return close();
    }
    // SAFETY: the loader's link_map of an open object.
    let bias = unsafe { (*map).l_addr } as u64;
    let symbols = Symbolizer::new();
    let tables = &profiler.tables;
    // Live records only: a retired one at the same address is a lock of
    // an object unloaded before, named then (renamed here, a plugin's lock
    // read as the lock of the library loaded at its address after it).
    let locks: Vec<(u32, usize)> = tables
        .all_locks()
        .filter(|(_, record)| record.flags.load(Relaxed) & super::table::RETIRED == 0)
        .map(|(_, record)| (tables.slot_of(record), record.key.load(Relaxed)))
        .filter(|&(_, key)| symbols.in_object_at(bias, key))
        .collect();
    let firsts = tables.all_locks().map(|(_, record)| record.first_site.load(Relaxed));
    let pcs: Vec<usize> = tables.all_sites().map(|(_, pc, _)| pc).chain(firsts).filter(|&pc| symbols.in_object_at(bias, pc)).collect();
    {
        let mut names = NAMES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let names = names.get_or_insert_with(Names::default);
        if names.epoch != profiler.epoch {
            names.locks.clear();
            names.epoch = profiler.epoch;
        }
        for &(slot, key) in &locks {
            if let Some(name) = symbols.data(key) {
                names.locks.entry(slot).or_insert(name);
            }
        }
        for pc in pcs {
            names.code.entry(pc).or_insert_with(|| symbols.code(pc));
        }
    }
    let closed = close();
    if closed == 0 && !Symbolizer::new().has_object_at(bias) {
        for (_, key) in locks {
            tables.retire(key);
        }
    }
    closed
}

/// The names kept (see [`closing`]): the locks' that `profiler` numbered,
/// and the call sites'.
pub fn names(profiler: &Profiler) -> (HashMap<u32, String>, HashMap<usize, CodeSite>) {
    let names = NAMES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match names.as_ref() {
        Some(names) if names.epoch == profiler.epoch => (names.locks.clone(), names.code.clone()),
        Some(names) => (HashMap::new(), names.code.clone()),
        None => Default::default(),
    }
}
