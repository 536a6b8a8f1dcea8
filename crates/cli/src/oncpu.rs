//! `lockmeter oncpu enable|disable|status`: the system-wide on-CPU table.

use lockmeter_oncpu::loader::{self, Enabled};
use lockmeter_oncpu::{Table, PINNED_TABLE};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Subcommand)]
pub enum Action {
    /// Load the program for every thread of the system and pin its table
    /// (idempotent: a second enable only sets the group given, and keeps
    /// the table's group without --group; --group root takes it back).
    Enable {
        /// Group allowed to map the table besides root (default: root only,
        /// or the group it has when already loaded).
        #[arg(long, value_name = "NAME")]
        group: Option<String>,
    },
    /// Detach the program, clear the table and remove the pins (nothing
    /// loaded is not an error).
    Disable,
    /// Whether the table is loaded, what the program costs per context
    /// switch, which processes use it, and whether this user can.
    /// Exit status: 0 when loaded (or pinned and mappable by this user), 1
    /// when not.
    Status {
        /// How long to sample the program's run count and cost (1ms or
        /// more: the sample is reported in milliseconds, and 1ns read a
        /// rate over "0 ms").
        #[arg(long, value_name = "DUR", default_value = "500ms", value_parser = crate::args::millisecond_or_more)]
        sample: Duration,
    },
}

fn group_id(name: &str) -> Result<u32, String> {
    if let Ok(gid) = name.parse::<u32>() {
        // (gid_t)-1 is chown's "leave the group as it is": accepted, the
        // request did nothing.
        if gid == u32::MAX {
            return Err(format!("--group {name}: not a group id"));
        }
        return Ok(gid);
    }
    let c_name = std::ffi::CString::new(name).map_err(|_| format!("--group {name:?}: not a group name"))?;
    // SAFETY: getgrnam reads a NUL-terminated name; the entry is read at once.
    let entry = unsafe { libc::getgrnam(c_name.as_ptr()) };
    if entry.is_null() {
        return Err(format!("--group {name}: no such group"));
    }
    // SAFETY: a non-null entry from getgrnam.
    Ok(unsafe { (*entry).gr_gid })
}

fn group_name(gid: u32) -> String {
    // SAFETY: getgrgid returns a static entry or null; the name is copied at once.
    let entry = unsafe { libc::getgrgid(gid) };
    if entry.is_null() {
        return gid.to_string();
    }
    // SAFETY: a non-null entry's name is a NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr((*entry).gr_name) }.to_string_lossy().into_owned()
}

pub fn main(action: Action) -> ExitCode {
    let fail = |message: String, code: u8| {
        say!("lockmeter: error: {message}");
        ExitCode::from(code)
    };
    match action {
        Action::Enable { group } => {
            let gid = match group.as_deref().map(group_id).transpose() {
                Ok(gid) => gid,
                Err(message) => return fail(message, 2),
            };
            match loader::enable(gid) {
                Ok(Enabled::Loaded) => outln!("on-CPU table loaded and pinned at {PINNED_TABLE}"),
                Ok(Enabled::AlreadyLoaded) => outln!("on-CPU table already loaded at {PINNED_TABLE}"),
                Err(e) => return fail(e.to_string(), 1),
            }
            // The group it has now (kept from before without --group).
            let gid = {
                use std::os::unix::fs::MetadataExt;
                std::fs::metadata(PINNED_TABLE).map_or(gid.unwrap_or(0), |m| m.gid())
            };
            outln!("readable and writable by root and group {}", group_name(gid));
            ExitCode::SUCCESS
        }
        Action::Disable => match loader::disable() {
            Ok(true) => {
                outln!("on-CPU table detached, cleared and unpinned");
                ExitCode::SUCCESS
            }
            Ok(false) => {
                outln!("on-CPU table was not loaded");
                ExitCode::SUCCESS
            }
            Err(e) => fail(e.to_string(), 1),
        },
        Action::Status { sample } => status(sample),
    }
}

fn status(sample: Duration) -> ExitCode {
    let s = loader::status(sample);
    if s.loaded {
        outln!(
            "on-CPU table: loaded (program {}, table {}), pinned at {PINNED_TABLE}",
            s.program_id.map_or("?".into(), |id| id.to_string()),
            s.table_id.map_or("?".into(), |id| id.to_string())
        );
    } else {
        outln!("on-CPU table: {}", s.reason.as_deref().unwrap_or("not loaded"));
    }
    if let Some((gid, mode)) = s.access {
        outln!("access: root and group {}, mode {mode:04o}", group_name(gid));
    }
    match s.sample {
        Some(run) => outln!(
            "cost: {:.0} context switches/s recorded, {:.0} ns per run (sampled over {} ms)",
            run.runs as f64 / run.interval.as_secs_f64(),
            run.ns_per_run,
            run.interval.as_millis()
        ),
        None if s.loaded => outln!("cost: not measured (switching on the kernel's BPF statistics needs CAP_SYS_ADMIN)"),
        None => {}
    }
    if s.loaded || !s.users.is_empty() {
        let users: Vec<String> = s.users.iter().map(|(pid, command)| format!("{pid} ({command})")).collect();
        outln!(
            "users: {}",
            if users.is_empty() { "no process holds it (only processes this user may inspect are seen)".to_string() } else { users.join(", ") }
        );
    }
    let usable = match Table::open_pinned(Path::new(PINNED_TABLE)) {
        Ok(_) if s.detached => {
            // Root sees the link gone: nothing writes the table.
            outln!("this user: can map it, but no program writes it (its link is gone): `lockmeter oncpu disable`, then enable");
            false
        }
        Ok(_) if !lockmeter_oncpu::in_initial_pid_namespace() => {
            // As the library decides: it numbers threads as the host does.
            outln!("this user: can map it, but programs here do not use it: {}", lockmeter_oncpu::NotInstalled::PidNamespace);
            false
        }
        Ok(_) => {
            outln!("this user: can map it; adaptive locks here use it");
            true
        }
        Err(e) => {
            outln!("this user: not in use: {e}; locks use the CPU-clock fallback");
            false
        }
    };
    if s.loaded || usable {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (gid_t)-1 left the table's group as it was, and `enable` said done.
    #[test]
    fn a_group_id_that_changes_nothing_is_refused() {
        assert_eq!(group_id("0"), Ok(0));
        assert!(group_id("4294967295").unwrap_err().contains("not a group id"));
        assert!(group_id("no-such-group-here").unwrap_err().contains("no such group"));
    }
}
