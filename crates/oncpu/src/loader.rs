//! Loading the on-CPU program: a private table for one process
//! ([`Private`]), or the system-wide pinned table ([`enable`], [`disable`],
//! [`status`]). Needs CAP_BPF and CAP_PERFMON (or root).

use crate::{Table, MAP_NAME, PINNED_LINK, PINNED_TABLE, PIN_DIR, SLOTS};
use libbpf_rs::{Link, MapCore, MapFlags, Object, ObjectBuilder, PrintLevel};
use std::fmt;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// The compiled BPF object (built from `src/bpf/oncpu.bpf.c` by build.rs).
const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/oncpu.bpf.o"));
const PROGRAM_NAME: &str = "oncpu_switch";
const FILTER_MAP: &str = "oncpu_filter";

/// A failure to load, attach, pin or inspect the program.
#[derive(Debug)]
pub struct LoadError {
    doing: &'static str,
    cause: String,
    permission: bool,
    /// What the step refused needs.
    needs: &'static str,
}

/// What loading, attaching and mapping the program need.
const BPF_PRIVILEGE: &str = "the on-CPU table needs CAP_BPF and CAP_PERFMON, or root";
/// What the pin directory's steps need (creating it under /run, mounting
/// a BPF filesystem, removing pins).
const ROOT_PRIVILEGE: &str = "enable and disable need root: they mount a BPF filesystem at /run/lockmeter";

impl LoadError {
    fn new(doing: &'static str, cause: impl fmt::Display, errno: Option<i32>) -> Self {
        let permission = matches!(errno, Some(libc::EPERM) | Some(libc::EACCES));
        LoadError { doing, cause: cause.to_string(), permission, needs: BPF_PRIVILEGE }
    }

    fn bpf(doing: &'static str, e: libbpf_rs::Error) -> Self {
        let errno = match e.kind() {
            libbpf_rs::ErrorKind::PermissionDenied => Some(libc::EPERM),
            _ => None,
        };
        let said = libbpf_said();
        if errno.is_some() || said.is_empty() {
            LoadError::new(doing, e, errno)
        } else {
            LoadError::new(doing, format!("{e} ({said})"), errno)
        }
    }

    fn io(doing: &'static str, e: io::Error) -> Self {
        let errno = e.raw_os_error();
        LoadError { needs: ROOT_PRIVILEGE, ..LoadError::new(doing, e, errno) }
    }

    /// Whether the failure is a missing privilege.
    pub fn is_permission(&self) -> bool {
        self.permission
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.doing, self.cause)?;
        if self.permission {
            write!(f, " ({})", self.needs)?;
        }
        Ok(())
    }
}

impl std::error::Error for LoadError {}

/// libbpf's warnings since the last load: kept, not printed, and added to
/// an error that is not a missing privilege (a verifier rejection says why
/// there; without privilege they only repeat the error).
static LIBBPF_SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn quiet_libbpf() {
    fn keep(_: PrintLevel, message: String) {
        let mut said = LIBBPF_SAID.lock().unwrap_or_else(|e| e.into_inner());
        if said.len() < 16 {
            said.push(message.trim_end().replace('\n', "; "));
        }
    }
    libbpf_rs::set_print(Some((PrintLevel::Warn, keep)));
}

fn libbpf_said() -> String {
    let mut said = std::mem::take(&mut *LIBBPF_SAID.lock().unwrap_or_else(|e| e.into_inner())).join("; ");
    if said.len() > 400 {
        let mut cut = 400;
        while !said.is_char_boundary(cut) {
            cut -= 1;
        }
        said.truncate(cut);
        said.push_str(" ...");
    }
    said
}

/// The program, loaded and verified but not attached.
struct Loaded {
    object: Object,
}

impl Loaded {
    fn load() -> Result<Loaded, LoadError> {
        quiet_libbpf();
        libbpf_said();
        let open = ObjectBuilder::default()
            .open_memory(OBJECT)
            .map_err(|e| LoadError::bpf("opening the on-CPU program", e))?;
        let object = open.load().map_err(|e| LoadError::bpf("loading the on-CPU program", e))?;
        Ok(Loaded { object })
    }

    /// Records only the threads of process `tgid` (0: every thread).
    fn record_only(&self, tgid: u32) -> Result<(), LoadError> {
        let filter = self
            .object
            .maps()
            .find(|m| m.name() == FILTER_MAP)
            .ok_or_else(|| LoadError::new("setting the filter", "no filter map in the object", None))?;
        filter
            .update(&0u32.to_ne_bytes(), &tgid.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| LoadError::bpf("setting the filter", e))
    }

    fn attach(&self) -> Result<Link, LoadError> {
        let program = self
            .object
            .progs_mut()
            .find(|p| p.name() == PROGRAM_NAME)
            .ok_or_else(|| LoadError::new("attaching", "no program in the object", None))?;
        program.attach().map_err(|e| LoadError::bpf("attaching to sched_switch", e))
    }

    /// A new read-write descriptor of the table.
    fn table_fd(&self) -> Result<OwnedFd, LoadError> {
        let map = self
            .object
            .maps()
            .find(|m| m.name() == MAP_NAME)
            .ok_or_else(|| LoadError::new("finding the table", "no table map in the object", None))?;
        map.as_fd().try_clone_to_owned().map_err(|e| LoadError::io("duplicating the table's descriptor", e))
    }
}

/// A private table recording one process's threads, attached while this
/// value lives (dropping it detaches the program; nothing is pinned).
pub struct Private {
    loaded: Loaded,
    _link: Link,
}

impl Private {
    /// Loads the program recording only process `tgid`'s threads (`0`: all
    /// threads of the system) and attaches it.
    pub fn load(tgid: u32) -> Result<Private, LoadError> {
        check_pid_namespace()?;
        let loaded = Loaded::load()?;
        loaded.record_only(tgid)?;
        let link = loaded.attach()?;
        Ok(Private { loaded, _link: link })
    }

    /// Loads the program without recording anybody yet; call
    /// [`Private::record_only`] once the process to record exists.
    pub fn load_idle() -> Result<Private, LoadError> {
        Private::load(u32::MAX) // no process has this tgid
    }

    /// Records process `tgid` from now on.
    pub fn record_only(&self, tgid: u32) -> Result<(), LoadError> {
        self.loaded.record_only(tgid)
    }

    /// A read-write descriptor of the table, to hand to another process.
    pub fn table_fd(&self) -> Result<OwnedFd, LoadError> {
        self.loaded.table_fd()
    }

    /// The table, mapped in this process.
    pub fn table(&self) -> Result<Table, LoadError> {
        Table::from_fd(self.table_fd()?).map_err(|e| LoadError::new("mapping the table", e, None))
    }
}

/// The program records host tids; a loader inside a pid namespace would
/// filter on, and readers compare, numbers of another numbering.
fn check_pid_namespace() -> Result<(), LoadError> {
    if crate::in_initial_pid_namespace() {
        Ok(())
    } else {
        Err(LoadError::new("loading the on-CPU program", "this process is in a pid namespace of its own; run lockmeter in the host's", None))
    }
}

/// What [`enable`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Enabled {
    /// Loaded, attached and pinned now.
    Loaded,
    /// It was already loaded; permissions were brought up to date.
    AlreadyLoaded,
}

/// Loads the program for every thread of the system and pins its table
/// and link in a BPF filesystem mounted at [`PIN_DIR`]: the directory 0750
/// and the table 0660, owned by root and `group` (mapping needs a writable
/// descriptor; nothing is ever world-accessible), the link 0600. Idempotent.
pub fn enable(group: Option<u32>) -> Result<Enabled, LoadError> {
    let _serialised = PinDirLock::take()?;
    quiet_libbpf();
    check_pid_namespace()?;
    // (Said as "removing a pin: Not a directory" before.)
    if fs::symlink_metadata(PIN_DIR).is_ok_and(|m| !m.is_dir()) {
        return Err(LoadError::new("mounting the pin directory", format!("{PIN_DIR} exists and is not a directory: remove it"), None));
    }
    if open_pinned_link().is_some() && Path::new(PINNED_TABLE).exists() {
        // Without --group, keep the group it has.
        let kept = {
            use std::os::unix::fs::MetadataExt;
            fs::metadata(PINNED_TABLE).map(|m| m.gid()).ok()
        };
        set_permissions(group.or(kept))?;
        return Ok(Enabled::AlreadyLoaded);
    }
    // Load first: without privilege this is the error to report.
    let mut loaded = Loaded::load()?;
    loaded.record_only(0)?;
    // A half-made state (a crash between pins): clear it first.
    disable_locked()?;
    mount_pin_dir()?;
    let pinned = (|| {
        let mut link = loaded.attach()?;
        let mut map = loaded
            .object
            .maps_mut()
            .find(|m| m.name() == MAP_NAME)
            .ok_or_else(|| LoadError::new("pinning the table", "no table map in the object", None))?;
        map.pin(PINNED_TABLE).map_err(|e| LoadError::bpf("pinning the table", e))?;
        link.pin(PINNED_LINK).map_err(|e| LoadError::bpf("pinning the link", e))?;
        set_permissions(group)
    })();
    if let Err(e) = pinned {
        let _ = disable_locked();
        return Err(e);
    }
    Ok(Enabled::Loaded)
}

/// The file whose lock serialises enable and disable: root's alone (mode
/// 0600), so no other user can open it and hold the lock (any user could
/// lock /run itself, and hang a boot script's enable). Empty, and left in
/// place: removing a lock file others may be waiting on breaks the lock.
const LOCK_FILE: &str = "/run/lockmeter.lock";

/// An exclusive lock held by enable and disable: two at once (a boot
/// script and an admin) each cleared the other's half-made pins, and one
/// could exit 0 with nothing loaded.
struct PinDirLock {
    /// Held, not read: closing it releases the lock.
    _file: fs::File,
}

impl PinDirLock {
    fn take() -> Result<PinDirLock, LoadError> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(LOCK_FILE)
            .map_err(|e| LoadError::io("opening /run/lockmeter.lock", e))?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        // A file left there with looser rights (an admin's touch) is made
        // root's alone before it is relied on.
        // SAFETY: fchown and fchmod on a descriptor we own.
        if unsafe { libc::fchown(fd, 0, 0) } != 0 || unsafe { libc::fchmod(fd, 0o600) } != 0 {
            return Err(LoadError::io("securing /run/lockmeter.lock", io::Error::last_os_error()));
        }
        // Bounded: a holder that opened it before it was secured could
        // otherwise hang a boot script's enable for ever.
        let give_up_at = std::time::Instant::now() + Duration::from_secs(30);
        // SAFETY: flock on a descriptor we own; released when it closes.
        while unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(LoadError::io("locking /run/lockmeter.lock", e));
            }
            if std::time::Instant::now() >= give_up_at {
                return Err(LoadError::new("locking /run/lockmeter.lock", "another enable or disable held it for 30 s", None));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(PinDirLock { _file: file })
    }
}

const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

fn is_bpffs(path: &str) -> bool {
    let Ok(path) = std::ffi::CString::new(path) else { return false };
    // SAFETY: statfs fills the zeroed struct; the path is NUL-terminated.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statfs(path.as_ptr(), &mut fs) } == 0) && fs.f_type as i64 == BPF_FS_MAGIC
}

/// Mounts a BPF filesystem of lockmeter's own at PIN_DIR (mode 0700 until
/// the permissions are set).
fn mount_pin_dir() -> Result<(), LoadError> {
    match fs::create_dir(PIN_DIR) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(LoadError::io("creating /run/lockmeter", e)),
    }
    if is_bpffs(PIN_DIR) {
        return Ok(());
    }
    let (source, target, kind, options) = (c"bpf", c"/run/lockmeter", c"bpf", c"mode=0700");
    // SAFETY: NUL-terminated strings; mounting has no memory effects here.
    let mounted = unsafe {
        libc::mount(source.as_ptr(), target.as_ptr(), kind.as_ptr(), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, options.as_ptr().cast())
    };
    if mounted != 0 {
        let e = io::Error::last_os_error();
        let _ = fs::remove_dir(PIN_DIR);
        return Err(LoadError::io("mounting a BPF filesystem at /run/lockmeter", e));
    }
    Ok(())
}

fn set_permissions(group: Option<u32>) -> Result<(), LoadError> {
    let gid = group.unwrap_or(0);
    for (path, gid, mode) in [(PIN_DIR, gid, 0o750), (PINNED_TABLE, gid, 0o660), (PINNED_LINK, 0, 0o600)] {
        chown(path, Some(0), Some(gid)).map_err(|e| LoadError::io("setting the table's owner", e))?;
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
            .map_err(|e| LoadError::io("setting the table's mode", e))?;
    }
    Ok(())
}

/// Detaches the system-wide program, clears the table (a process that
/// still maps it then reads "unknown" and falls back, rather than a frozen
/// "running"), removes the pins and unmounts PIN_DIR. Returns whether
/// anything was loaded; nothing loaded is not an error.
pub fn disable() -> Result<bool, LoadError> {
    let _serialised = match PinDirLock::take() {
        Ok(lock) => lock,
        // Not root, and nothing there: nothing loaded is not an error.
        Err(e) if e.is_permission() && !Path::new(PIN_DIR).exists() => return Ok(false),
        Err(e) => return Err(e),
    };
    disable_locked()
}

/// [`disable`], the lock on /run held.
fn disable_locked() -> Result<bool, LoadError> {
    quiet_libbpf();
    // A tracing link cannot be detached on request (EOPNOTSUPP): it goes
    // when its last reference, the pin, does. Note the program first, to
    // wait for it to be gone before clearing the table it writes.
    let program = open_pinned_link()
        .and_then(|link| libbpf_rs::query::LinkInfo::from_fd(link.as_fd()).ok())
        .map(|info| info.prog_id);
    let mut found = program.is_some();
    found |= remove_pin(PINNED_LINK)?;
    if let Some(id) = program {
        if !wait_until_unloaded(id, Duration::from_secs(5)) {
            return Err(LoadError::new(
                "detaching the program",
                format!("program {id} still loaded 5 s after its link was unpinned (another process holds it?)"),
                None,
            ));
        }
    }
    if let Ok(table) = crate::syscall::obj_get(Path::new(PINNED_TABLE)) {
        clear(&table);
    }
    found |= remove_pin(PINNED_TABLE)?;
    if is_bpffs(PIN_DIR) {
        let target = c"/run/lockmeter";
        // SAFETY: a NUL-terminated path.
        if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 {
            return Err(LoadError::io("unmounting /run/lockmeter", io::Error::last_os_error()));
        }
        found = true;
    }
    // The directory goes too; it is not a sign that anything was loaded
    // (an empty one is left by a failed mount), and one holding files
    // that are not the table's is left as it is: they are not ours.
    // A file of that name is not ours either.
    match fs::remove_dir(PIN_DIR) {
        Ok(()) => {}
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::DirectoryNotEmpty | io::ErrorKind::NotADirectory) => {}
        Err(e) => return Err(LoadError::io("removing /run/lockmeter", e)),
    }
    Ok(found)
}

/// The pinned link, if there is one this user may open (checked first:
/// libbpf complains about a missing one).
fn open_pinned_link() -> Option<Link> {
    Path::new(PINNED_LINK).exists().then(|| Link::open(PINNED_LINK).ok()).flatten()
}

fn remove_pin(path: &str) -> Result<bool, LoadError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        // (ENOTDIR: PIN_DIR is a file, with nothing pinned under it.)
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::NotADirectory => Ok(false),
        Err(e) => Err(LoadError::io("removing a pin", e)),
    }
}

/// Whether the kernel still has program `id` loaded.
pub fn program_loaded(id: u32) -> bool {
    // SAFETY: plain syscall wrapper; a non-negative result is a descriptor
    // that we close at once.
    let fd = unsafe { libbpf_rs::libbpf_sys::bpf_prog_get_fd_by_id(id) };
    if fd >= 0 {
        // SAFETY: the descriptor was just returned to us.
        unsafe { libc::close(fd) };
    }
    fd >= 0
}

/// The kernel frees a link and its program shortly after the last
/// reference goes (from a work queue); wait for it. Returns whether it went.
fn wait_until_unloaded(id: u32, at_most: Duration) -> bool {
    let end = Instant::now() + at_most;
    while program_loaded(id) {
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Zeroes every slot of a table (best effort).
fn clear(table: &OwnedFd) {
    let length = SLOTS * std::mem::size_of::<u64>();
    // SAFETY: a fresh shared writable mapping of the table, zeroed and
    // unmapped before return.
    unsafe {
        let address = libc::mmap(
            std::ptr::null_mut(),
            length,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            table.as_raw_fd(),
            0,
        );
        if address != libc::MAP_FAILED {
            std::ptr::write_bytes(address.cast::<u8>(), 0, length);
            libc::munmap(address, length);
        }
    }
}

/// The system-wide table's state, as `lockmeter oncpu status` shows it.
#[derive(Debug)]
pub struct Status {
    /// Whether the program is attached and pinned.
    pub loaded: bool,
    /// Why it is not loaded or not readable, when that is known.
    pub reason: Option<String>,
    /// The program's kernel id.
    pub program_id: Option<u32>,
    /// The table's kernel id.
    pub table_id: Option<u32>,
    /// Runs per second and nanoseconds per run, sampled.
    pub sample: Option<RunSample>,
    /// Processes holding a descriptor of the table (pid, command).
    pub users: Vec<(u32, String)>,
    /// The pinned table's owner group and mode.
    pub access: Option<(u32, u32)>,
    /// The table is pinned but its program's link is known to be gone
    /// (seen by a user who can read the pin directory): nothing writes it.
    pub detached: bool,
}

/// The program's run rate and cost over a sampling interval.
#[derive(Debug, Clone, Copy)]
pub struct RunSample {
    /// Sampling interval.
    pub interval: Duration,
    /// Runs (context switches recorded) in the interval.
    pub runs: u64,
    /// Mean cost of one run.
    pub ns_per_run: f64,
}

/// Inspects the system-wide table; samples the program's cost for
/// `sample_for` (kernel run-time statistics are switched on only while
/// sampling).
pub fn status(sample_for: Duration) -> Status {
    let mut status =
        Status { loaded: false, reason: None, program_id: None, table_id: None, sample: None, users: Vec::new(), access: None, detached: false };
    quiet_libbpf();
    match open_pinned_link().ok_or(()) {
        Ok(link) => match libbpf_rs::query::LinkInfo::from_fd(link.as_fd()) {
            Ok(info) => {
                status.loaded = true;
                status.program_id = Some(info.prog_id);
            }
            Err(e) => status.reason = Some(format!("cannot inspect the pinned link: {e}")),
        },
        Err(_) => {
            status.reason = Some(match fs::metadata(PIN_DIR) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => "not loaded (`lockmeter oncpu enable` loads it)".to_string(),
                // (Said to root as "not readable by this user" before.)
                Ok(meta) if !meta.is_dir() => format!("not loaded: {PIN_DIR} is not a directory (a file left there?)"),
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    format!("{PIN_DIR} is not readable by this user (root and the table's group may read it)")
                }
                Ok(_) if fs::read_dir(PIN_DIR).is_err() => {
                    format!("{PIN_DIR} is not readable by this user (root and the table's group may read it)")
                }
                // Root opens any pinned link: one it cannot is no link.
                _ if Path::new(PINNED_LINK).exists() && crate::running_as_root() => {
                    format!("not loaded: {PINNED_LINK} is not a pinned BPF link (a file left there?): `lockmeter oncpu disable`, then `enable`")
                }
                _ if Path::new(PINNED_LINK).exists() => {
                    format!("pinned at {PINNED_TABLE} (whether its program is attached takes CAP_BPF or root to tell)")
                }
                _ if Path::new(PINNED_TABLE).exists() => {
                    status.detached = true;
                    format!("not loaded: {PINNED_TABLE} is pinned, but its program's link is gone")
                }
                _ => "not loaded (`lockmeter oncpu enable` loads it)".to_string(),
            });
        }
    }
    if let Ok(meta) = fs::metadata(PINNED_TABLE) {
        use std::os::unix::fs::MetadataExt;
        status.access = Some((meta.gid(), meta.mode() & 0o7777));
    }
    if let Ok(table) = crate::syscall::obj_get(Path::new(PINNED_TABLE)) {
        if let Ok(info) = crate::syscall::map_info(table.as_fd()) {
            status.table_id = Some(info.id);
            drop(table);
            status.users = users_of_map(info.id);
        }
    }
    if let (true, Some(id)) = (status.loaded, status.program_id) {
        status.sample = sample_program(id, sample_for);
    }
    status
}

fn program_counters(id: u32) -> Option<(u64, u64)> {
    libbpf_rs::query::ProgInfoIter::default().find(|p| p.id == id).map(|p| (p.run_cnt, p.run_time_ns))
}

/// Switches on the kernel's BPF run-time statistics for `interval` (they
/// stay on only while the returned descriptor is open) and measures the
/// program's runs and time.
pub fn sample_program(id: u32, interval: Duration) -> Option<RunSample> {
    // SAFETY: plain syscall wrapper; a negative result is an error.
    let raw = unsafe { libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME) };
    if raw < 0 {
        return None;
    }
    // SAFETY: a new descriptor nobody else owns; closing it switches the
    // statistics off again.
    let _stats = unsafe { OwnedFd::from_raw_fd(raw) };
    let (runs_before, ns_before) = program_counters(id)?;
    let started = Instant::now();
    std::thread::sleep(interval);
    let (runs_after, ns_after) = program_counters(id)?;
    let runs = runs_after.saturating_sub(runs_before);
    let ns = ns_after.saturating_sub(ns_before);
    Some(RunSample { interval: started.elapsed(), runs, ns_per_run: if runs == 0 { 0.0 } else { ns as f64 / runs as f64 } })
}

/// Processes with a descriptor of map `id` open (from /proc/*/fdinfo; only
/// the processes this user may inspect).
fn users_of_map(id: u32) -> Vec<(u32, String)> {
    let needle = format!("map_id:\t{id}\n");
    let mut users = Vec::new();
    let Ok(processes) = fs::read_dir("/proc") else { return users };
    for process in processes.flatten() {
        let Some(pid) = process.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(fds) = fs::read_dir(process.path().join("fdinfo")) else { continue };
        let holds = fds.flatten().any(|fd| fs::read_to_string(fd.path()).is_ok_and(|text| text.contains(&needle)));
        if holds {
            let command = fs::read_to_string(process.path().join("comm")).unwrap_or_default().trim().to_string();
            users.push((pid, command));
        }
    }
    users
}
