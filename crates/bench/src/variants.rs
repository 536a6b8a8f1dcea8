//! Switching a variant's decision on while it runs, and back off after:
//! the on-CPU table for `adaptive-oncpu` (loaded once per process, on first
//! use), seed 000's bail-out for `adaptive-nobail`, seed 003's backoff for
//! `ticket-nobackoff`. Runs never overlap, so the plain locks of the same
//! run keep their defaults.

use crate::locks::{LockKind, Variant};
use lockmeter_locks::config;
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

fn use_table(on: bool) -> Result<(), String> {
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

/// Loads what the variants among `locks` need, so a missing privilege
/// fails before any run.
pub fn prepare(locks: impl IntoIterator<Item = LockKind>) -> Result<(), String> {
    if locks.into_iter().any(|l| l.variant() == Some(Variant::AdaptiveOnCpu)) {
        use_table(true)?;
        use_table(false)?;
    }
    Ok(())
}

/// Sets every switch as `lock` needs it (defaults for a plain lock).
pub fn switch_for(lock: LockKind) -> Result<(), String> {
    let variant = lock.variant();
    config::set_bail_on_owner_change(variant != Some(Variant::AdaptiveNoBail));
    config::set_proportional_backoff(variant != Some(Variant::TicketNoBackoff));
    config::set_spinner_backoff(variant != Some(Variant::AdaptiveNoBackoff));
    config::set_owner_return_grace(variant != Some(Variant::AdaptiveEager));
    config::set_spin_while_a_cpu_would_idle(variant != Some(Variant::AdaptiveIdleSleep));
    use_table(variant == Some(Variant::AdaptiveOnCpu))
}
