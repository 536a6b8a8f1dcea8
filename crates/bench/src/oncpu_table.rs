//! The on-CPU table for `adaptive-oncpu`: loaded once per process (on first
//! use), switched on only while that lock runs, so `adaptive` in the same
//! run keeps its fallback.

use lockmeter_locks::oracle::{self, OnCpuSource, OwnerState};
use lockmeter_oncpu::loader::Private;
use lockmeter_oncpu::Table;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

struct Switchable {
    table: Table,
    on: AtomicBool,
    /// Keeps the program attached for the life of the process.
    _program: Private,
}

impl OnCpuSource for Switchable {
    #[inline]
    fn state_of(&self, tid: u32) -> OwnerState {
        if self.on.load(Ordering::Relaxed) {
            self.table.state(tid)
        } else {
            OwnerState::Unknown
        }
    }
}

static LOADED: OnceLock<Result<&'static Switchable, String>> = OnceLock::new();

fn load() -> Result<&'static Switchable, String> {
    let program = Private::load(std::process::id()).map_err(|e| format!("adaptive-oncpu: {e}"))?;
    let table = program.table().map_err(|e| format!("adaptive-oncpu: {e}"))?;
    let source: &'static Switchable = Box::leak(Box::new(Switchable { table, on: AtomicBool::new(false), _program: program }));
    oracle::install_source(source);
    Ok(source)
}

/// Switches the table on (loading it the first time) or off.
pub fn use_table(on: bool) -> Result<(), String> {
    if !on {
        if let Some(Ok(source)) = LOADED.get() {
            source.on.store(false, Ordering::Relaxed);
        }
        return Ok(());
    }
    let source = LOADED.get_or_init(load).clone()?;
    source.on.store(true, Ordering::Relaxed);
    Ok(())
}
