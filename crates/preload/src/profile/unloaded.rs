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
    /// (Lock number, return address) -> the call site: by lock, as the
    /// profile counts sites (a library loaded where an unloaded one had
    /// been has code at the same addresses, and its sites read as the
    /// first's).
    pub sites: HashMap<(u32, usize), CodeSite>,
    /// Lock record slot -> the call site that first used or initialised
    /// the lock (naming a lock in no object).
    pub firsts: HashMap<u32, CodeSite>,
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
    let firsts: Vec<(u32, usize)> = tables
        .all_locks()
        .map(|(_, record)| (tables.slot_of(record), record.first_site.load(Relaxed)))
        .filter(|&(_, pc)| symbols.in_object_at(bias, pc))
        .collect();
    let sites: Vec<(u32, usize)> = tables.all_sites().map(|(lock, pc, _)| (lock, pc)).filter(|&(_, pc)| symbols.in_object_at(bias, pc)).collect();
    {
        let mut names = NAMES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let names = names.get_or_insert_with(Names::default);
        if names.epoch != profiler.epoch {
            *names = Names { epoch: profiler.epoch, ..Names::default() };
        }
        for &(slot, key) in &locks {
            if let Some(name) = symbols.data(key) {
                names.locks.entry(slot).or_insert(name);
            }
        }
        for (slot, pc) in firsts {
            names.firsts.entry(slot).or_insert_with(|| symbols.code(pc));
        }
        for site in sites {
            names.sites.entry(site).or_insert_with(|| symbols.code(site.1));
        }
    }
    let closed = close();
    if closed == 0 && !Symbolizer::new().has_object_at(bias) {
        for (_, key) in locks {
            tables.retire_unloaded(key);
        }
    }
    closed
}

/// The names kept (see [`closing`]) of what `profiler` numbered: locks,
/// first uses and call sites.
pub fn names(profiler: &Profiler) -> Names {
    let names = NAMES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match names.as_ref() {
        Some(names) if names.epoch == profiler.epoch => {
            Names { epoch: names.epoch, locks: names.locks.clone(), sites: names.sites.clone(), firsts: names.firsts.clone() }
        }
        _ => Names::default(),
    }
}
