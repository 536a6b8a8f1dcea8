//! The on-CPU table: which thread runs on which CPU, published by a BPF
//! program on every context switch and read by userspace spinners with one
//! plain load.
//!
//! Seed 002's mutex spins while `rq->curr == owner`; seed 001 ends by asking
//! the kernel to tell userspace which threads run ("a simple array indexed
//! by tid and a vdso style API"). Mainline never grew that interface, so this
//! crate builds it from a `tp_btf/sched_switch` program (`src/bpf`) writing
//! an mmapable BPF array. This half of the crate is the *reader*: it maps a
//! table and installs it as the lock library's exact owner-state source
//! ([`lockmeter_locks::oracle`]), which `adaptive` asks before its
//! CPU-clock fallback. The `loader` feature adds the program and its loader.
//!
//! # What a slot says, and its limits
//! Slot `tid % SLOTS` holds `tid << 32 | (cpu + 1)` after `tid` switched in
//! and `tid << 32` after it switched out. A slot tagged with another tid (a
//! collision, or a thread never switched since the program was attached)
//! reads [`OwnerState::Unknown`], never a wrong `Running`. The answer is a
//! hint: it may be stale by the time it is acted on (the owner can be
//! preempted right after the load, exactly as in the kernel's own spin
//! loop), and a vCPU preempted by the hypervisor still looks running (the
//! kernel also checks `vcpu_is_preempted`; the table cannot).
//!
//! # How a process gets a table
//! - `lockmeter run --oncpu -- CMD` loads a private table recording only
//!   CMD's threads and hands CMD a read-write descriptor of it, named by
//!   [`FD_ENV`] (a BPF map can only be mapped shared through a writable
//!   descriptor).
//! - `lockmeter oncpu enable [--group NAME]` pins a system-wide table at
//!   [`PINNED_TABLE`] (in a BPF filesystem mounted at [`PIN_DIR`]),
//!   readable and writable by root and the group only.
//!
//! [`install_from_environment`] tries the two in that order; the preload
//! library calls it at start-up, a Rust program calls it once in `main`.

// A slot is read with one 64-bit load from read-only memory; a 32-bit
// target would need a locked cmpxchg8b, which writes.
#[cfg(not(target_pointer_width = "64"))]
compile_error!("the on-CPU table needs a 64-bit target");

#[cfg(feature = "loader")]
pub mod loader;
mod syscall;

use lockmeter_locks::oracle::{self, OnCpuSource, OwnerState};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Number of slots (must match `ONCPU_SLOTS` in `src/bpf/oncpu.bpf.c`): a
/// power of two; 64 Ki slots (512 KiB) make collisions rare for any
/// realistic number of live threads.
pub const SLOTS: usize = 1 << 16;
/// The BPF map's name (the kernel keeps 15 characters of it).
pub const MAP_NAME: &str = "oncpu_slots";
/// Environment variable naming the descriptor of a table handed to a
/// process by `lockmeter run --oncpu`, and the pid of that lockmeter:
/// `FD:PARENT`. The table records lockmeter's child (under every program
/// it executes: the pid stays); a process whose parent is another (a child
/// CMD forked) is not recorded, so it does not install the table.
pub const FD_ENV: &str = "LOCKMETER_ONCPU_FD";
/// Environment variable that switches the table off (`LOCKMETER_ONCPU=off`).
pub const SWITCH_ENV: &str = "LOCKMETER_ONCPU";
/// Where the system-wide table lives: a BPF filesystem of its own, mounted
/// here by `lockmeter oncpu enable`. Not under /sys/fs/bpf, which systemd
/// mounts mode 0700: the table's group could not reach a pin there.
pub const PIN_DIR: &str = "/run/lockmeter";
/// The system-wide table's pinned map.
pub const PINNED_TABLE: &str = "/run/lockmeter/oncpu_slots";
/// The system-wide table's pinned link (keeps the program attached).
pub const PINNED_LINK: &str = "/run/lockmeter/oncpu_link";

/// What a slot value says about thread `tid`.
#[inline]
pub fn decode(slot: u64, tid: u32) -> OwnerState {
    if (slot >> 32) as u32 != tid || tid == 0 {
        OwnerState::Unknown
    } else if slot as u32 != 0 {
        OwnerState::Running
    } else {
        OwnerState::NotRunning
    }
}

/// The CPU a slot says `tid` runs on, if it says it runs.
pub fn cpu_of(slot: u64, tid: u32) -> Option<u32> {
    (decode(slot, tid) == OwnerState::Running).then(|| slot as u32 - 1)
}

/// A mapped on-CPU table.
pub struct Table {
    slots: *const AtomicU64,
    /// The map's descriptor, kept open so the table's users can be found
    /// (`lockmeter oncpu status` looks for it in /proc/PID/fdinfo).
    fd: OwnedFd,
}

// SAFETY: the mapping is shared read-only memory that lives as long as the
// Table, and it is only read through atomics.
unsafe impl Send for Table {}
// SAFETY: as above.
unsafe impl Sync for Table {}

impl Table {
    /// Maps the table behind `fd`, after checking that it is one (type,
    /// sizes and name), so a stray descriptor is refused, not misread.
    pub fn from_fd(fd: OwnedFd) -> Result<Table, OpenError> {
        let info = syscall::map_info(fd.as_fd()).map_err(OpenError::NotATable)?;
        if !info.is_oncpu_table() {
            return Err(OpenError::NotATable(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("descriptor {} is BPF map '{}', not an on-CPU table", fd.as_raw_fd(), info.name()),
            )));
        }
        let length = SLOTS * std::mem::size_of::<u64>();
        // SAFETY: a fresh shared read-only mapping of the map's pages; the
        // kernel checks the length against the map's size.
        let address = unsafe {
            libc::mmap(std::ptr::null_mut(), length, libc::PROT_READ, libc::MAP_SHARED, fd.as_raw_fd(), 0)
        };
        if address == libc::MAP_FAILED {
            return Err(OpenError::Map(io::Error::last_os_error()));
        }
        Ok(Table { slots: address.cast(), fd })
    }

    /// Opens and maps the table pinned at `path`.
    pub fn open_pinned(path: &Path) -> Result<Table, OpenError> {
        let fd = syscall::obj_get(path).map_err(|e| OpenError::Pinned(path.display().to_string(), e))?;
        Table::from_fd(fd)
    }

    /// Adopts the descriptor a parent handed over (not closed on failure:
    /// it is not ours to close). The original stays open across exec: a
    /// wrapper (`env`, `taskset`, `sh -c`) that executes the real program
    /// keeps its pid, and the table records that pid.
    pub fn from_inherited(raw: RawFd) -> Result<Table, OpenError> {
        // SAFETY: fcntl on any number is harmless; failure means no such fd.
        if unsafe { libc::fcntl(raw, libc::F_GETFD) } < 0 {
            return Err(OpenError::NotATable(io::Error::last_os_error()));
        }
        // SAFETY: dup gives us a descriptor of our own to own.
        let own = unsafe { libc::fcntl(raw, libc::F_DUPFD_CLOEXEC, 3) };
        if own < 0 {
            return Err(OpenError::NotATable(io::Error::last_os_error()));
        }
        // SAFETY: `own` was just created and is owned by nobody else.
        Table::from_fd(unsafe { OwnedFd::from_raw_fd(own) })
    }

    /// The raw slot of `tid`: one plain load.
    #[inline]
    pub fn slot(&self, tid: u32) -> u64 {
        // SAFETY: the index is masked into the mapping's SLOTS entries.
        unsafe { (*self.slots.add(tid as usize & (SLOTS - 1))).load(Ordering::Relaxed) }
    }

    /// What the table says about `tid`.
    #[inline]
    pub fn state(&self, tid: u32) -> OwnerState {
        decode(self.slot(tid), tid)
    }

    /// The map's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in from_fd with this length and is
        // only reachable through self.
        unsafe { libc::munmap(self.slots as *mut libc::c_void, SLOTS * std::mem::size_of::<u64>()) };
    }
}

impl OnCpuSource for Table {
    #[inline]
    fn state_of(&self, tid: u32) -> OwnerState {
        self.state(tid)
    }
}

/// Why a table could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The pinned table could not be opened (absent, or no permission).
    Pinned(String, io::Error),
    /// The descriptor is not an on-CPU table.
    NotATable(io::Error),
    /// mmap failed (a read-only descriptor cannot be mapped shared).
    Map(io::Error),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Pinned(path, e) if e.kind() == io::ErrorKind::NotFound => {
                write!(f, "no system-wide table at {path} (`lockmeter oncpu enable` loads one)")
            }
            OpenError::Pinned(_, e) if e.raw_os_error() == Some(libc::EPERM) => write!(
                f,
                "the bpf() system call is refused here (a seccomp filter, or unprivileged BPF disabled on kernels before 5.19)"
            ),
            // Refused to root, the file is no pinned BPF object (one left
            // in the directory by hand): it read as a permission problem.
            OpenError::Pinned(path, e) if e.kind() == io::ErrorKind::PermissionDenied && running_as_root() => {
                write!(f, "{path} is not a pinned BPF table (a file left there?): `lockmeter oncpu disable`, then `enable`")
            }
            OpenError::Pinned(path, e) if e.kind() == io::ErrorKind::PermissionDenied => {
                write!(f, "{path}: permission denied (only root and the group given to `lockmeter oncpu enable --group` may map it)")
            }
            OpenError::Pinned(path, e) => write!(f, "cannot open {path}: {e}"),
            OpenError::NotATable(e) => write!(f, "not an on-CPU table: {e}"),
            OpenError::Map(e) => write!(f, "cannot map the table: {e} (mapping needs a read-write descriptor)"),
        }
    }
}

impl std::error::Error for OpenError {}

/// Where the installed table came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A descriptor handed over in [`FD_ENV`].
    Handed(RawFd),
    /// The system-wide pinned table.
    Pinned,
}

/// Why no table was installed.
#[derive(Debug)]
pub enum NotInstalled {
    /// `LOCKMETER_ONCPU=off`.
    SwitchedOff,
    /// [`FD_ENV`] is not a descriptor number.
    BadVariable(String),
    /// The table could not be opened.
    Open(OpenError),
    /// The handed table records another process (this one was forked by
    /// the process it records).
    OtherProcess,
    /// This process is in a pid namespace other than the one the table's
    /// tids are numbered in.
    PidNamespace,
    /// The pinned table's program is detached (its link is gone): nothing
    /// writes it.
    Detached,
}

impl fmt::Display for NotInstalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotInstalled::SwitchedOff => write!(f, "{SWITCH_ENV}=off"),
            NotInstalled::BadVariable(v) => write!(f, "{FD_ENV}='{v}' is not FD:PARENT"),
            NotInstalled::Open(e) => e.fmt(f),
            NotInstalled::OtherProcess => write!(f, "the handed table records the process lockmeter started, not this one, and no system-wide table is pinned"),
            NotInstalled::PidNamespace => write!(
                f,
                "this process is in a pid namespace of its own (or /proc, which tells, is not mounted); the table numbers threads as the host does"
            ),
            NotInstalled::Detached => write!(
                f,
                "{PINNED_TABLE} is pinned, but its program's link is gone, so nothing writes it (`lockmeter oncpu disable`, then `enable`)"
            ),
        }
    }
}

/// Whether this process runs as root (to which no pinned object's
/// permissions refuse anything).
fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Who keeps a table written: the lockmeter that handed it (this
/// process's parent, which holds the program's link), or the pinned link.
#[derive(Clone, Copy)]
enum Writer {
    Parent(u32),
    PinnedLink,
}

impl Writer {
    /// Whether the program writing the table is still attached.
    fn attached(self) -> bool {
        match self {
            // SAFETY: getppid has no preconditions.
            Writer::Parent(parent) => (unsafe { libc::getppid() }) as u32 == parent,
            Writer::PinnedLink => std::fs::symlink_metadata(PINNED_LINK).is_ok(),
        }
    }
}

/// How often an installed table looks whether its writer is still there.
const WRITER_CHECK_NS: u64 = 50_000_000;

/// An installed table that stops answering once nothing writes it: a
/// `lockmeter run --oncpu` killed (its link went with it), a pinned link
/// removed by hand. Read on, such a table is frozen: a thread asleep for
/// good read running, and spinners trusted it. Looked at every 50 ms, by
/// the spinner that finds the time passed (one cycle-counter read per
/// question otherwise).
struct Watched<S> {
    table: S,
    writer: Writer,
    next_check: AtomicU64,
    gone: std::sync::atomic::AtomicBool,
}

impl<S: OnCpuSource> Watched<S> {
    fn new(table: S, writer: Writer) -> Watched<S> {
        let next = lockmeter_locks::clock::cycles() + lockmeter_locks::clock::ns_to_cycles(WRITER_CHECK_NS);
        Watched { table, writer, next_check: AtomicU64::new(next), gone: std::sync::atomic::AtomicBool::new(false) }
    }

    #[cold]
    fn check_writer(&self, now: u64) {
        self.next_check.store(now + lockmeter_locks::clock::ns_to_cycles(WRITER_CHECK_NS), Ordering::Relaxed);
        if !self.writer.attached() {
            self.gone.store(true, Ordering::Relaxed);
            // Locks stop asking: the CPU-clock fallback decides.
            oracle::remove_source();
        }
    }
}

impl<S: OnCpuSource> OnCpuSource for Watched<S> {
    #[inline]
    fn state_of(&self, tid: u32) -> OwnerState {
        let now = lockmeter_locks::clock::cycles();
        if now >= self.next_check.load(Ordering::Relaxed) {
            self.check_writer(now);
        }
        if self.gone.load(Ordering::Relaxed) {
            return OwnerState::Unknown;
        }
        self.table.state_of(tid)
    }
}

/// Finds a table (a handed descriptor first, then the pinned one), maps
/// it and makes it the lock library's exact oracle for this process. On
/// failure locks keep their fallback, exactly as without a table.
pub fn install_from_environment() -> Result<Origin, NotInstalled> {
    usable_here()?;
    let Ok(value) = std::env::var(FD_ENV) else {
        let (table, writer, origin) = pinned()?;
        return install(table, writer, origin);
    };
    let (raw, parent) = parse_handed(&value).ok_or_else(|| NotInstalled::BadVariable(value.clone()))?;
    // SAFETY: getppid has no preconditions.
    if parent != unsafe { libc::getppid() } as u32 {
        return install_recorded_elsewhere();
    }
    let table = Table::from_inherited(raw).map_err(NotInstalled::Open)?;
    wait_until_recorded(&table, HANDED_RECORDING_WAIT);
    install(table, Writer::Parent(parent), Origin::Handed(raw))
}

/// For a process that inherited a handed table's variable without being
/// the process the table records (one CMD forked): the system-wide table
/// if one is pinned (it records every process), else
/// [`NotInstalled::OtherProcess`].
pub fn install_recorded_elsewhere() -> Result<Origin, NotInstalled> {
    usable_here()?;
    let (table, writer, origin) = pinned().map_err(|why| match why {
        NotInstalled::Open(_) => NotInstalled::OtherProcess,
        other => other,
    })?;
    install(table, writer, origin)
}

/// A table may be used by this process: not switched off, and numbering
/// threads as the table does.
fn usable_here() -> Result<(), NotInstalled> {
    if std::env::var(SWITCH_ENV).is_ok_and(|v| v == "off" || v == "0") {
        return Err(NotInstalled::SwitchedOff);
    }
    if !in_initial_pid_namespace() {
        return Err(NotInstalled::PidNamespace);
    }
    Ok(())
}

/// The system-wide table, opened and mapped.
fn pinned() -> Result<(Table, Writer, Origin), NotInstalled> {
    // Look before calling bpf(): most processes have no table, and a bpf()
    // call may be refused (or fatal) under a seccomp filter.
    if let Err(e) = std::fs::metadata(PINNED_TABLE) {
        return Err(NotInstalled::Open(OpenError::Pinned(PINNED_TABLE.to_string(), e)));
    }
    // A table whose link is gone is written by nothing: its slots are as
    // the last switch left them.
    if !Writer::PinnedLink.attached() {
        return Err(NotInstalled::Detached);
    }
    Ok((Table::open_pinned(Path::new(PINNED_TABLE)).map_err(NotInstalled::Open)?, Writer::PinnedLink, Origin::Pinned))
}

/// Makes `table` the lock library's oracle, watched for its writer.
fn install(table: Table, writer: Writer, origin: Origin) -> Result<Origin, NotInstalled> {
    oracle::install_source(Box::leak(Box::new(Watched::new(table, writer))));
    if matches!(origin, Origin::Handed(_)) {
        // A child this process forks is not recorded: it forgets the table.
        extern "C" fn forget() {
            oracle::remove_source();
        }
        // SAFETY: registers a plain extern "C" function.
        unsafe { libc::pthread_atfork(None, None, Some(forget)) };
    }
    Ok(origin)
}

/// How long a process handed a table waits at start-up for the table to
/// record its thread: lockmeter starts recording just after the program
/// executed, typically within a millisecond.
const HANDED_RECORDING_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Sleeps in short naps until `table` has a slot for the calling thread, at
/// most `limit`. A slot is written only when its thread switches in, and
/// `lockmeter run --oncpu` starts recording once the program has executed
/// (it needs the pid): a thread that kept its CPU since then would read
/// "unknown" (the fallback decides) until the scheduler next moved it,
/// and on an idle core that may be never. Each nap is a switch out and in;
/// threads created later are recorded at their first switch-in.
fn wait_until_recorded(table: &Table, limit: std::time::Duration) {
    let tid = lockmeter_locks::current_tid();
    let started = std::time::Instant::now();
    while table.state(tid) == OwnerState::Unknown && started.elapsed() < limit {
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
}

/// `FD:PARENT` as [`FD_ENV`] carries it.
pub fn parse_handed(value: &str) -> Option<(RawFd, u32)> {
    let (fd, pid) = value.trim().split_once(':')?;
    Some((fd.parse().ok()?, pid.parse().ok()?))
}

/// Whether this process sees the initial pid namespace's numbers, the
/// ones the BPF program records (`task->pid`); inside a container a tid is
/// another number, and a tag check would compare unrelated threads.
pub fn in_initial_pid_namespace() -> bool {
    use std::os::unix::fs::MetadataExt;
    /// The inode of the initial pid namespace (PROC_PID_INIT_INO).
    const INITIAL_PID_NAMESPACE: u64 = 0xEFFF_FFFC;
    std::fs::metadata("/proc/self/ns/pid").is_ok_and(|m| m.ino() == INITIAL_PID_NAMESPACE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_reads_running_only_for_its_own_tid() {
        let running = (1234u64 << 32) | 2;
        assert_eq!(decode(running, 1234), OwnerState::Running);
        assert_eq!(cpu_of(running, 1234), Some(1));
        assert_eq!(decode(1234u64 << 32, 1234), OwnerState::NotRunning);
        // The same slot for a colliding tid: unknown, never running.
        assert_eq!(decode(running, 1234 + SLOTS as u32), OwnerState::Unknown);
        assert_eq!(cpu_of(running, 1234 + SLOTS as u32), None);
        // A slot never written.
        assert_eq!(decode(0, 1234), OwnerState::Unknown);
        assert_eq!(decode(0, 0), OwnerState::Unknown);
    }

    #[test]
    fn a_descriptor_that_is_not_a_table_is_refused() {
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        let err = Table::from_fd(OwnedFd::from(file)).err().expect("a file is not a table");
        assert!(matches!(err, OpenError::NotATable(_)), "{err}");
        assert!(Table::from_inherited(987_654).is_err());
    }

    #[test]
    fn a_handed_table_names_its_descriptor_and_process() {
        assert_eq!(parse_handed("7:1234"), Some((7, 1234)));
        assert_eq!(parse_handed(" 7:1234\n"), Some((7, 1234)));
        assert_eq!(parse_handed("7"), None);
        assert_eq!(parse_handed("x:1"), None);
        assert!(in_initial_pid_namespace(), "the tests run in the host's pid namespace");
    }

    /// A table whose writer went stops answering at its next look, and
    /// is removed as the locks' source; one whose writer is there answers
    /// on.
    #[test]
    fn a_table_nothing_writes_stops_answering() {
        struct AlwaysRunning;
        impl OnCpuSource for AlwaysRunning {
            fn state_of(&self, _: u32) -> OwnerState {
                OwnerState::Running
            }
        }
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        let live = Watched::new(AlwaysRunning, Writer::Parent(parent));
        let gone: &'static Watched<AlwaysRunning> = Box::leak(Box::new(Watched::new(AlwaysRunning, Writer::Parent(parent + 1))));
        oracle::install_source(gone);
        // Before the first look, both answer.
        assert_eq!(gone.state_of(7), OwnerState::Running);
        for watched in [&live, gone] {
            watched.next_check.store(0, Ordering::Relaxed);
        }
        assert_eq!(live.state_of(7), OwnerState::Running, "its writer is there");
        assert_eq!(gone.state_of(7), OwnerState::Unknown, "its writer is not this process's parent");
        assert_eq!(oracle::OwnerWatch::new(7).state().1, None, "no longer the locks' source");
    }

    #[test]
    fn a_missing_pinned_table_says_how_to_get_one() {
        let err = Table::open_pinned(Path::new("/run/lockmeter-no-such-table")).err().unwrap();
        let message = err.to_string();
        assert!(message.contains("no system-wide table") || message.contains("cannot open"), "{message}");
    }
}
