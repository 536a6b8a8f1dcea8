//! `lockmeter run -- CMD` and `lockmeter report FILE`: profile an
//! unmodified program through the preloaded library, and render profiles.

use crate::args::{check_writable, write_atomically};
use lockmeter_stats::profile::{self, Profile, SortKey, TableOptions};
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

/// Output formats of a profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The lockmeter table (seed 004's layout), histograms and health.
    Table,
    /// The JSON contract (see the README).
    Json,
    /// One row per lock, rwlock side and call site.
    Csv,
    /// Folded stacks weighted by nanoseconds waited (flamegraph.pl, speedscope).
    Folded,
    /// Gzipped protobuf for go tool pprof, Pyroscope, Parca (needs -o).
    Pprof,
    /// A flame graph SVG of the wait time (needs -o).
    Flamegraph,
}

impl Format {
    /// The format a file's name asks for: .json, .csv, .folded, .pb.gz or
    /// .pprof, .svg (a flame graph); `None` for any other name.
    pub fn of_file_name(path: &Path) -> Option<Format> {
        let name = path.file_name()?.to_str()?.to_ascii_lowercase();
        let formats = [
            (".json", Format::Json),
            (".csv", Format::Csv),
            (".folded", Format::Folded),
            (".pb.gz", Format::Pprof),
            (".pprof", Format::Pprof),
            (".svg", Format::Flamegraph),
        ];
        formats.into_iter().find(|(suffix, _)| name.ends_with(suffix)).map(|(_, format)| format)
    }

    /// Formats written to a file only: pprof's gzip, and a flame graph
    /// (an SVG, which a terminal cannot show).
    fn needs_file(self) -> bool {
        matches!(self, Format::Pprof | Format::Flamegraph)
    }
}

/// How to show profiles.
pub struct Rendering {
    pub format: Format,
    /// Fold locks of the same name into one row.
    pub merge: bool,
    pub sort: SortKey,
    pub min_wait: Duration,
}

/// The profile in the chosen format.
pub fn render(profile: &Profile, rendering: &Rendering) -> Result<Vec<u8>, String> {
    let merged;
    let profile = if rendering.merge {
        merged = profile.merged_by_name();
        &merged
    } else {
        profile
    };
    // --sort and --min-wait choose the rows of every text format; JSON
    // stays the whole profile unless --min-wait leaves locks out. (A
    // threshold past u64 nanoseconds, 584 years, hides every lock: cut to
    // the bits, it wrapped to nearly nothing and hid none.)
    let min_wait_ns = u64::try_from(rendering.min_wait.as_nanos()).unwrap_or(u64::MAX);
    let chosen;
    let profile = match rendering.format {
        Format::Table => profile,
        Format::Json if rendering.min_wait.is_zero() => profile,
        _ => {
            chosen = profile.selected(rendering.sort, min_wait_ns);
            &chosen
        }
    };
    Ok(match rendering.format {
        Format::Table => {
            let options = TableOptions { sort: rendering.sort, min_wait_ns, ..TableOptions::default() };
            profile::render_table(profile, &options).into_bytes()
        }
        Format::Json => {
            let mut text = profile.to_json();
            text.push('\n');
            text.into_bytes()
        }
        Format::Csv => profile::to_csv(profile).into_bytes(),
        Format::Folded => profile::to_folded(profile).into_bytes(),
        Format::Pprof => profile::to_pprof(profile),
        Format::Flamegraph => profile::to_flamegraph(profile)?,
    })
}

fn needs_file_error(format: Format) -> Failure {
    let name = format!("{format:?}").to_lowercase();
    let what = if format == Format::Pprof { "a gzip-compressed file" } else { "an SVG picture" };
    Failure::usage(format!("--format {name} writes {what}: give -o FILE"))
}

/// Whether a format's output is one document, which another cannot
/// follow in the same stream.
fn one_document(format: Format) -> bool {
    matches!(format, Format::Json | Format::Pprof | Format::Flamegraph)
}

/// Where `run`'s reports go, when that is a stream (stderr, a device, a
/// descriptor) and the format one document, which another cannot follow
/// there: its name. `None` for a file, or a format whose reports follow
/// each other (the table, CSV, folded stacks).
fn one_document_stream(options: &RunOptions) -> Option<String> {
    one_document(options.rendering.format).then(|| stream(options)).flatten()
}

/// Where `run`'s live reports go, when that is a stream that cannot take
/// one after another: one document, or folded stacks, whose readers add
/// up every line of a stream (each snapshot counts every wait since the
/// start: a flame graph of three snapshots and the final report read 2.6
/// times the waits).
fn live_reports_stream(options: &RunOptions) -> Option<String> {
    (one_document(options.rendering.format) || options.rendering.format == Format::Folded).then(|| stream(options)).flatten()
}

/// The name of the stream `run`'s reports go to (stderr, a device, a
/// descriptor); `None` for a file.
fn stream(options: &RunOptions) -> Option<String> {
    match options.output.as_deref() {
        None => Some("stderr".to_string()),
        Some(o) if !matches!(crate::args::destination(o), Ok(crate::args::Destination::File(_))) => Some(o.display().to_string()),
        Some(_) => None,
    }
}

/// Whether `run`'s reports go to its own stderr, where its notes go.
fn goes_to_stderr(options: &RunOptions) -> bool {
    match options.output.as_deref() {
        None => true,
        Some(o) => matches!(crate::args::destination(o), Ok(crate::args::Destination::Descriptor(2))),
    }
}

/// Folded stacks of one of several processes, under a frame of their
/// process: a lock of one name in two processes was one box of their
/// flame graph.
fn under_process(folded: &[u8], profile: &Profile) -> Vec<u8> {
    let process = profile::process_frame(profile);
    String::from_utf8_lossy(folded).lines().map(|line| format!("{process};{line}\n")).collect::<String>().into_bytes()
}

/// `lockmeter report`: every file loaded before anything is written.
pub fn report(files: &[PathBuf], rendering: &Rendering, output: Option<&Path>) -> Result<(), Failure> {
    if rendering.format.needs_file() && output.is_none() {
        return Err(needs_file_error(rendering.format));
    }
    if one_document(rendering.format) && files.len() > 1 {
        let name = format!("{:?}", rendering.format).to_lowercase();
        return Err(Failure::usage(format!("--format {name} renders one profile: give one file")));
    }
    if let Some(path) = output {
        check_writable(path).map_err(Failure::usage)?;
    }
    let profiles = files.iter().map(|file| Profile::load(file).map_err(|e| Failure::usage(e.0))).collect::<Result<Vec<_>, _>>()?;
    // As `run` shows a tree: in a table, the processes that used no lock
    // are one line, when another used some (the root `sh` of a tree's
    // profiles ended them with 'no pthread lock or semaphore was used').
    let some_used_locks = profiles.iter().any(|p| !p.locks.is_empty());
    let (lockless, profiles): (Vec<&Profile>, Vec<&Profile>) = profiles
        .iter()
        .partition(|p| rendering.format == Format::Table && some_used_locks && used_no_lock(p));
    let mut bytes = Vec::new();
    for (i, profile) in profiles.iter().enumerate() {
        let mut rendered = render(profile, rendering).map_err(Failure::usage)?;
        if rendering.format == Format::Folded && profiles.len() > 1 {
            rendered = under_process(&rendered, profile);
        }
        match (i, rendering.format) {
            (0, _) => bytes.extend(rendered),
            // One header for the rows of every process.
            (_, Format::Csv) => bytes.extend(csv_rows(&rendered)),
            (_, Format::Table) => {
                bytes.push(b'\n');
                bytes.extend(rendered);
            }
            _ => bytes.extend(rendered),
        }
    }
    if !lockless.is_empty() {
        let names: Vec<String> = lockless.iter().map(|p| process_name(p)).collect();
        bytes.extend(format!("\n{} more process(es) used no pthread lock: {}\n", names.len(), names.join(", ")).into_bytes());
    }
    match output {
        Some(path) => write_atomically(path, &bytes).map_err(Failure::runtime),
        None if crate::args::stdout_was_closed() => Err(Failure::runtime("writing the report: stdout is closed (give -o FILE)")),
        None => {
            use std::io::Write as _;
            std::io::stdout().write_all(&bytes).map_err(|e| Failure::runtime(format!("writing the report: {e}")))
        }
    }
}

/// Whether `profile` is of a process that ran to its end without a
/// pthread lock (a build's compiler, a script's shell).
fn used_no_lock(profile: &Profile) -> bool {
    profile.locks.is_empty() && matches!(profile.reason.as_str(), "exit" | "_exit")
}

/// "sh (pid 123)": a process by its program's name.
fn process_name(profile: &Profile) -> String {
    let command = profile.program.split(' ').next().unwrap_or("?");
    format!("{} (pid {})", command.rsplit('/').next().unwrap_or(command), profile.pid)
}

/// A CSV rendering without its header line.
fn csv_rows(rendered: &[u8]) -> &[u8] {
    rendered.splitn(2, |&b| b == b'\n').nth(1).unwrap_or_default()
}

/// An error and the exit code it deserves.
pub struct Failure {
    pub message: String,
    pub code: u8,
}

impl Failure {
    /// Bad input: exit 2.
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), code: 2 }
    }

    /// Something failed while working: exit 1.
    pub fn runtime(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), code: 1 }
    }
}

/// What `lockmeter run` was asked.
pub struct RunOptions {
    pub command: Vec<OsString>,
    /// Serve the program's mutexes and condvars with this algorithm.
    pub lock: Option<lockmeter_locks::Algorithm>,
    /// Serve with `lock` only: no profile recorded, none reported.
    pub no_profile: bool,
    /// Hand CMD a private on-CPU table.
    pub oncpu: bool,
    pub output: Option<PathBuf>,
    pub rendering: Rendering,
    pub frames: usize,
    pub interval: Option<Duration>,
    /// Locks the profiler tracks at once (its default when `None`).
    pub max_locks: Option<usize>,
}

/// Finds the preload library: `LOCKMETER_LIBRARY`, else next to this
/// executable (where cargo puts both), else `../lib` from it (an install).
pub fn library() -> Result<PathBuf, Failure> {
    if let Some(path) = std::env::var_os("LOCKMETER_LIBRARY") {
        // Not a bad option (2): the library is the installation's.
        let path = PathBuf::from(path);
        return if !path.is_file() {
            Err(Failure::runtime(format!("LOCKMETER_LIBRARY={} is not a file", path.display())))
        } else if !is_shared_object(&path) {
            // (Else the loader skips it, and CMD's missing profile was put
            // down to a static binary.)
            Err(Failure::runtime(format!("LOCKMETER_LIBRARY={} is not a shared library (liblockmeter.so)", path.display())))
        } else {
            Ok(path)
        };
    }
    let exe = std::env::current_exe().map_err(|e| Failure::runtime(format!("cannot locate lockmeter itself: {e}")))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for candidate in [dir.join("liblockmeter.so"), dir.join("../lib/liblockmeter.so"), dir.join("../liblockmeter.so")] {
        if candidate.is_file() {
            return Ok(candidate.canonicalize().unwrap_or(candidate));
        }
    }
    Err(Failure::runtime(format!(
        "liblockmeter.so is not next to {} (build it with `cargo build --release`, or set LOCKMETER_LIBRARY)",
        exe.display()
    )))
}

/// Whether `path` is an ELF shared object (e_type ET_DYN).
fn is_shared_object(path: &Path) -> bool {
    use std::os::unix::fs::FileExt as _;
    let mut header = [0u8; 18];
    std::fs::File::open(path).and_then(|f| f.read_exact_at(&mut header, 0)).is_ok()
        && &header[..4] == b"\x7fELF"
        && u16::from_le_bytes([header[16], header[17]]) == 3
}

/// The program `name` would run as, searched in PATH as a shell does.
pub fn find_program(name: &OsString) -> Result<PathBuf, Failure> {
    if name.is_empty() {
        // (Joined to each PATH directory, it found the first directory.)
        return Err(Failure { message: "command not found: the command name is empty".into(), code: 127 });
    }
    let as_path = PathBuf::from(name);
    let text = name.to_string_lossy();
    let candidates: Vec<PathBuf> = if text.contains('/') {
        vec![as_path]
    } else {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).map(|d| d.join(name)).collect())
            .unwrap_or_default()
    };
    let mut found_not_executable = None;
    for candidate in candidates {
        if let Ok(meta) = std::fs::metadata(&candidate) {
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                return Ok(candidate);
            }
            found_not_executable = Some(candidate);
        }
    }
    match found_not_executable {
        Some(path) if path.is_dir() => Err(Failure { message: format!("{}: is a directory", path.display()), code: 126 }),
        Some(path) => Err(Failure { message: format!("{}: permission denied (not executable)", path.display()), code: 126 }),
        None => Err(Failure { message: format!("{text}: command not found"), code: 127 }),
    }
}

/// CMD, found, failed to start with `error`: 127 or 126, as a shell says.
pub fn cannot_run(program: &std::ffi::OsStr, error: &std::io::Error) -> Failure {
    // The file was found: not found now is a script's interpreter
    // (`#!/missing/sh`), which a shell reports as 127 too.
    let (why, code) = match error.kind() {
        std::io::ErrorKind::NotFound => ("its interpreter was not found".to_string(), 127),
        _ => (profile::io_reason(error), 126),
    };
    Failure { message: format!("cannot run {}: {why}", program.to_string_lossy()), code }
}

/// Whether `path` is an ELF executable without a program interpreter (a
/// static binary: LD_PRELOAD cannot reach it). Reads the header and the
/// program headers only (reading the whole file took 7 s and 1.5 GB for a
/// 1.5 GB binary).
pub fn statically_linked(path: &Path) -> bool {
    use std::os::unix::fs::FileExt as _;
    let Ok(file) = std::fs::File::open(path) else { return false };
    let mut header = [0u8; 64];
    if file.read_exact_at(&mut header, 0).is_err() || &header[..4] != b"\x7fELF" || header[4] != 2 {
        return false;
    }
    let u16_at = |at: usize| u16::from_le_bytes([header[at], header[at + 1]]) as usize;
    let (phoff, phentsize, phnum) = (u64::from_le_bytes(header[32..40].try_into().unwrap()), u16_at(54), u16_at(56));
    let mut headers = vec![0u8; phentsize * phnum];
    if phentsize < 4 || file.read_exact_at(&mut headers, phoff).is_err() {
        return false;
    }
    let mut has_interp = false;
    let mut has_dynamic = false;
    for entry in headers.chunks_exact(phentsize) {
        match u32::from_le_bytes(entry[..4].try_into().unwrap()) {
            3 => has_interp = true,
            2 => has_dynamic = true,
            _ => {}
        }
    }
    !has_interp && !has_dynamic
}

/// Why the loader would drop LD_PRELOAD for `path`, if it would: a
/// set-user-ID or set-group-ID program run by another user or group, or
/// one with file capabilities, runs in secure-execution mode, where the
/// preload is ignored (a setuid program's locks were reported 'statically
/// linked, or it cleared LD_PRELOAD', and advise said it took no lock).
pub fn preload_dropped(path: &Path) -> Option<&'static str> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path).ok()?;
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    if meta.mode() & libc::S_ISUID != 0 && meta.uid() != uid {
        return Some("set-user-ID");
    }
    if meta.mode() & libc::S_ISGID != 0 && meta.gid() != gid {
        return Some("set-group-ID");
    }
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a NUL-terminated path and attribute name; a null buffer of
    // size 0 asks only whether the attribute is there.
    let capabilities = unsafe { libc::getxattr(name.as_ptr(), c"security.capability".as_ptr(), std::ptr::null_mut(), 0) };
    (capabilities > 0).then_some("given file capabilities")
}

/// How a program ended that did not succeed: "exit status N", or the
/// signal that killed it.
pub fn ending(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => signal_name(signal),
        _ => "an unknown status".into(),
    }
}

pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGSYS => "SIGSYS",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSTKFLT => "SIGSTKFLT",
        libc::SIGPWR => "SIGPWR",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

/// Whether `path` names a file of its own (not a device, nor a descriptor
/// such as `/dev/stdout` or a file standard output is redirected to) last
/// written before `started`.
fn from_before(path: &Path, started: std::time::SystemTime) -> bool {
    matches!(crate::args::destination(path), Ok(crate::args::Destination::File(_)))
        && std::fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.modified().is_ok_and(|at| at < started))
}

/// `out.json` for the root process, `out.PID.json` for the others.
fn output_for(output: &Path, pid: u32, root: bool) -> PathBuf {
    // A device or descriptor takes every process's report, one after the
    // other (`/dev/null.PID` was once made as a file in /dev); a link's
    // processes go beside the file it leads to.
    let output = match crate::args::destination(output) {
        Ok(crate::args::Destination::File(target)) => target,
        _ => return output.to_path_buf(),
    };
    if root {
        return output;
    }
    let file_name = output.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    // pprof's two-part extension stays whole: x.pb.gz -> x.PID.pb.gz.
    let name = match file_name.strip_suffix(".pb.gz") {
        Some(stem) => format!("{stem}.{pid}.pb.gz"),
        None => {
            let stem = output.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            match output.extension() {
                Some(ext) => format!("{stem}.{pid}.{}", ext.to_string_lossy()),
                None => format!("{stem}.{pid}"),
            }
        }
    };
    output.with_file_name(name)
}

/// The processes of the tree other than `root` that noted themselves in
/// `dir` as they started (see `note_member` in the library) and left no
/// profile there: a child killed by SIGKILL was missing from the report
/// without a word.
fn silent_members(dir: &Path, root: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut silent: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("member.")?.parse().ok())
        .filter(|&pid| pid != root && !dir.join(format!("profile.{pid}.json")).exists())
        .collect();
    silent.sort_unstable();
    silent
}

/// Profiles in `dir`, the root's first, then by pid.
fn collect(dir: &Path, root: u32) -> Vec<Result<Profile, String>> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter_map(|p| {
                    let name = p.file_name()?.to_string_lossy().into_owned();
                    let pid = name.strip_prefix("profile.")?.strip_suffix(".json")?.parse().ok()?;
                    Some((pid, p))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort_by_key(|&(pid, _)| (pid != root, pid));
    found.into_iter().map(|(_, path)| Profile::load(&path).map_err(|e| e.0)).collect()
}

/// The library's variables that `lockmeter run` sets from its options
/// (`--frames`, `--max-locks`, `--interval`).
const RUN_OPTION_VARIABLES: [&str; 3] = ["LOCKMETER_FRAMES", "LOCKMETER_MAX_LOCKS", "LOCKMETER_INTERVAL"];

/// Runs `command` under the profiler with its stdout captured (stderr and
/// stdin inherited) and returns its exit status, its output, and the
/// profile of its root process.
pub fn profile_captured(
    command: &[OsString],
    lock: Option<lockmeter_locks::Algorithm>,
) -> Result<(std::process::ExitStatus, Vec<u8>, Option<Profile>), Failure> {
    let (status, stdout, root, profiles) = profile_tree(command, lock, std::process::Stdio::inherit(), std::process::Stdio::inherit())?;
    Ok((status, stdout, profiles.into_iter().next().filter(|p| p.pid == root)))
}

/// Runs `command` under the profiler, its stderr discarded, and counts the
/// pthread lock operations of its whole tree: acquisitions and contended
/// ones. None if it could not run or failed (the caller's own runs say
/// how).
pub fn lock_operations(command: &[OsString], stdin: std::process::Stdio) -> Result<(u64, u64), String> {
    let (status, _, _, profiles) = profile_tree(command, None, stdin, std::process::Stdio::null()).map_err(|failure| failure.message)?;
    if !status.success() {
        return Err(format!("it ended with {}", ending(status)));
    }
    let counters = profiles.iter().flat_map(|p| p.locks.iter()).map(|l| &l.counters);
    Ok(counters.fold((0, 0), |(a, c), k| (a + k.acquisitions, c + k.contended)))
}

/// Runs `command` under the profiler with its stdout captured; returns its
/// status, its output, its pid and its tree's profiles (the root's first).
fn profile_tree(
    command: &[OsString],
    lock: Option<lockmeter_locks::Algorithm>,
    stdin: std::process::Stdio,
    stderr: std::process::Stdio,
) -> Result<(std::process::ExitStatus, Vec<u8>, u32, Vec<Profile>), Failure> {
    use std::os::unix::process::CommandExt as _;
    let library = library()?;
    let program = command.first().ok_or_else(|| Failure::usage("no command given"))?;
    let scratch = scratch_dir("lockmeter-run")?;
    let mut child = Command::new(program);
    // With a pre-exec hook the standard library forks and calls execvp,
    // which runs a script without `#!` with /bin/sh, as `run` does.
    // SAFETY: the hook does nothing, which is async-signal-safe.
    unsafe { child.pre_exec(|| Ok(())) };
    child.args(&command[1..]).env_remove("LOCKMETER_LOCK");
    for variable in RUN_OPTION_VARIABLES {
        child.env_remove(variable);
    }
    if let Some(lock) = lock {
        child.env("LOCKMETER_LOCK", lock.name());
    }
    let child = crate::stop::in_own_group(&mut child)
        // The user's own preloads stay (an allocator's locks are the
        // program's too), as under `run`.
        .env("LD_PRELOAD", preload_with(&library))
        .env("LOCKMETER_OUTPUT", scratch.0.join("profile.%p.json"))
        .env_remove("LOCKMETER_ROOT_PID")
        .env_remove("LOCKMETER_TREE")
        .env_remove(lockmeter_oncpu::FD_ENV)
        .stdin(stdin)
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .map_err(|e| Failure::runtime(format!("cannot run {}: {}", program.to_string_lossy(), profile::io_reason(&e))))?;
    let mut child = child;
    let root = child.id();
    let stdout = Captured::start(child.stdout.take());
    let (status, _) = crate::stop::wait(&mut child).map_err(|e| Failure::runtime(format!("waiting for {}: {e}", program.to_string_lossy())))?;
    let profiles = collect(&scratch.0, root).into_iter().filter_map(Result::ok).collect();
    Ok((status, stdout.finish(), root, profiles))
}

/// The most of a pipe's output [`Captured`] keeps: its last 8-16 MiB.
const CAPTURED_AT_MOST: usize = 16 << 20;

/// One of CMD's output pipes, read by a thread of its own as CMD runs.
pub struct Captured {
    /// What was read; `None` once taken, when the reader stops.
    read: std::sync::Arc<std::sync::Mutex<Option<Vec<u8>>>>,
    eof: std::sync::mpsc::Receiver<()>,
}

impl Captured {
    pub fn start(pipe: Option<impl std::io::Read + Send + 'static>) -> Captured {
        let read = std::sync::Arc::new(std::sync::Mutex::new(Some(Vec::new())));
        let (reached_eof, eof) = std::sync::mpsc::channel();
        if let Some(mut pipe) = pipe {
            let read = read.clone();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 65536];
                while let Ok(n @ 1..) = pipe.read(&mut chunk) {
                    match &mut *read.lock().unwrap_or_else(|e| e.into_inner()) {
                        Some(kept) => {
                            kept.extend_from_slice(&chunk[..n]);
                            // The tail is what is read of it (the last
                            // match, the last line): a program writing
                            // without end took a gigabyte a second.
                            if kept.len() > CAPTURED_AT_MOST {
                                kept.drain(..kept.len() - CAPTURED_AT_MOST / 2);
                            }
                        }
                        // Taken: the pipe is closed, as a shell's reader
                        // that is done closes it (kept on, a background
                        // `yes` grew lockmeter by 200 MB a second).
                        None => return,
                    }
                }
                let _ = reached_eof.send(());
            });
        }
        Captured { read, eof }
    }

    /// What CMD wrote, once it has ended: the pipe's end follows at once,
    /// unless a process it left running holds the pipe open, whose later
    /// output is not CMD's: the reader stops at its next write.
    pub fn finish(self) -> Vec<u8> {
        let _ = self.eof.recv_timeout(std::time::Duration::from_millis(200));
        self.read.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_default()
    }
}

/// Removes the scratch directory when dropped.
/// A private directory (0700, a name nobody can guess), removed with
/// what it holds when dropped.
pub struct Scratch(pub PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh [`Scratch`] directory in the temporary directory, named
/// `prefix.PID.RANDOM`.
pub fn scratch_dir(prefix: &str) -> Result<Scratch, Failure> {
    let base = std::env::temp_dir();
    for _ in 0..100 {
        // A name nobody can guess: a process of the tree may write here
        // after lockmeter has gone (what it left running), and a name
        // another user could make in the meantime would take its profile.
        let mut random = [0u8; 8];
        // SAFETY: getrandom writes at most the buffer's length into it.
        let got = unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) };
        if got != random.len() as isize {
            // (No getrandom: the kernel's pool through its device.)
            use std::io::Read as _;
            std::fs::File::open("/dev/urandom")
                .and_then(|mut f| f.read_exact(&mut random))
                .map_err(|e| Failure::runtime(format!("cannot name a directory in {}: no random bytes: {e}", base.display())))?;
        }
        let dir = base.join(format!("{prefix}.{}.{:016x}", std::process::id(), u64::from_ne_bytes(random)));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(Scratch(dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Failure::runtime(format!("cannot create a directory in {}: {e}", base.display()))),
        }
    }
    Err(Failure::runtime(format!("cannot create a directory in {}", base.display())))
}

use std::os::unix::fs::DirBuilderExt;

/// `LD_PRELOAD` with `library` first and whatever the user preloads
/// (an allocator, say) kept after it.
pub fn preload_with(library: &Path) -> OsString {
    let mut value = library.as_os_str().to_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|e| !e.is_empty()) {
        value.push(":");
        value.push(existing);
    }
    value
}

/// Renders `profile` to --output (the file it went to, if one) or stderr.
/// `continues_stream`: another process's report went to the same stream
/// (stderr, a device) before this one; CSV rows then follow its header.
fn emit(profile: &Profile, options: &RunOptions, root: bool, continues_stream: bool) -> Result<Option<PathBuf>, Failure> {
    let mut bytes = render(profile, &options.rendering).map_err(Failure::runtime)?;
    if continues_stream && options.rendering.format == Format::Csv {
        bytes = csv_rows(&bytes).to_vec();
    }
    match &options.output {
        // A device or descriptor takes every process's report in turn,
        // but a JSON, pprof or flame-graph document cannot follow another
        // in one stream (`report` would refuse what it made).
        _ if !root && let Some(stream) = one_document_stream(options) => {
            say!(
                "lockmeter: warning: the report of process {} is not written: {stream} takes one --format {} document, the first process's{}",
                profile.pid,
                format!("{:?}", options.rendering.format).to_lowercase(),
                if options.output.is_none() { " (-o FILE takes one per process)" } else { "" }
            );
            Ok(None)
        }
        Some(output) => {
            let file = output_for(output, profile.pid, root);
            write_atomically(&file, &bytes).map_err(Failure::runtime)?;
            // A device or descriptor is not a file to list.
            Ok(matches!(crate::args::destination(output), Ok(crate::args::Destination::File(_))).then_some(file))
        }
        None => {
            use std::io::Write as _;
            let mut err = std::io::stderr().lock();
            // A report that cannot be written fails the run as one to -o
            // does (a closed stderr lost it with exit 0).
            err.write_all(&bytes).and_then(|()| err.flush()).map_err(|e| Failure::runtime(format!("writing the report to stderr: {}", profile::io_reason(&e))))?;
            Ok(None)
        }
    }
}

/// `lockmeter run`: returns the program's exit code.
pub fn run(options: &RunOptions) -> Result<ExitCode, Failure> {
    if options.rendering.format.needs_file() && options.output.is_none() {
        return Err(needs_file_error(options.rendering.format));
    }
    let Some(program) = options.command.first() else {
        return Err(Failure::usage("no command given: lockmeter run [OPTIONS] -- CMD [ARGS...]"));
    };
    let path = find_program(program)?;
    if let Some(output) = &options.output {
        check_writable(output).map_err(Failure::usage)?;
    }
    let library = library()?;
    if statically_linked(&path) {
        say!("lockmeter: warning: {} is statically linked: LD_PRELOAD cannot see its locks", path.display());
    }
    if let Some(why) = preload_dropped(&path) {
        say!("lockmeter: warning: {} is {why}: the loader drops LD_PRELOAD for it, so its own locks are neither seen nor served", path.display());
    }
    let run_started = std::time::SystemTime::now();
    let scratch = scratch_dir("lockmeter-run")?;
    let mut command = Command::new(program);
    command
        .args(&options.command[1..])
        .env("LD_PRELOAD", preload_with(&library))
        .env_remove("LOCKMETER_OUTPUT")
        .env_remove("LOCKMETER_TREE")
        .env_remove("LOCKMETER_ROOT_PID")
        .env_remove("LOCKMETER_LOCK")
        .env_remove(lockmeter_oncpu::FD_ENV);
    // Without LOCKMETER_OUTPUT the library serves and records nothing.
    if !options.no_profile {
        command.env("LOCKMETER_OUTPUT", scratch.0.join("profile.%p.json")).env("LOCKMETER_TREE", &scratch.0);
    }
    // The options say what the run records, their defaults included: a
    // variable left in the environment overrode `--frames 0`, and an
    // invalid one stopped CMD before it ran.
    for variable in RUN_OPTION_VARIABLES {
        command.env_remove(variable);
    }
    if let Some(lock) = options.lock {
        command.env("LOCKMETER_LOCK", lock.name());
    }
    if options.frames > 0 {
        command.env("LOCKMETER_FRAMES", options.frames.to_string());
    }
    if let Some(max_locks) = options.max_locks {
        command.env("LOCKMETER_MAX_LOCKS", max_locks.to_string());
    }
    if let Some(interval) = options.interval {
        command.env("LOCKMETER_INTERVAL", format!("{}ms", interval.as_millis().max(1)));
    }
    if options.oncpu && options.lock != Some(lockmeter_locks::Algorithm::Adaptive) {
        say!("lockmeter: note: --oncpu helps `adaptive` only: add --lock adaptive to serve CMD's pthread mutexes with it (without, only locks of ours CMD links itself ask the table)");
    }
    let table = if options.oncpu { Some(private_table(&mut command)?) } else { None };
    // Like time(1): ^C and ^\ go to the program (the terminal sends them
    // to both); lockmeter stays to report. ^\ is ignored meanwhile; ^C is
    // noted (see `signals`), not passed on: CMD has the terminal's own.
    // SAFETY: setting a disposition of this process to "ignore".
    let previous_quit = unsafe { libc::signal(libc::SIGQUIT, libc::SIG_IGN) };
    // With SIGCHLD ignored (inherited across exec) the kernel reaps the
    // children itself and waitid finds none: lockmeter must see them end.
    // SAFETY: setting this process's disposition to the default.
    let previous_chld = unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    // SIGTERM and SIGHUP, sent to lockmeter alone (`kill`, a service
    // manager, a closed terminal), are passed on to CMD, which ends as
    // they end it, and lockmeter still reports: killed at once, it left
    // CMD running and its profile unread.
    let caught = signals::install();
    // Orphans are waited for their profiles: unrecorded, none is adopted
    // (adopted, one that then ran a program took itself for the root and
    // napped for an on-CPU table that was not its own).
    if !options.no_profile {
        orphans::adopt();
    }
    // An ignored signal stays ignored across exec: give CMD the
    // dispositions lockmeter was started with, or ^C would not stop it.
    // (A caught signal is reset to the default by exec.)
    // And a stdout closed as lockmeter started stays closed for CMD (the
    // runtime's /dev/null would take its output without a word).
    let stdout_closed = crate::args::stdout_was_closed();
    // SAFETY: signal(2) and close(2) are async-signal-safe, as a pre-exec
    // hook requires.
    unsafe {
        command.pre_exec(move || {
            libc::signal(libc::SIGQUIT, previous_quit);
            libc::signal(libc::SIGCHLD, previous_chld);
            signals::restore_in_child(&caught);
            if stdout_closed {
                libc::close(1);
            }
            Ok(())
        });
    }
    let child = command.spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            signals::uninstall(&caught);
            // SAFETY: restoring the disposition saved above.
            unsafe { libc::signal(libc::SIGQUIT, previous_quit) };
            return Err(cannot_run(program, &e));
        }
    };
    let root = child.id();
    signals::to(root);
    let table = table.map(|(program, handed)| {
        drop(handed); // CMD has its copy
        // From now on the program records CMD's threads. spawn() returns
        // once CMD has executed, so CMD's first thread may have been
        // switched in before this line: CMD's copy of the preload library
        // naps at start-up until the table has its slot.
        if let Err(e) = program.record_only(root) {
            say!("lockmeter: warning: --oncpu: {e}");
        }
        program
    });
    // Wait for CMD to end without reaping it (its pid stays its own, so a
    // signal forwarded meanwhile cannot reach a process that took the pid
    // over), dumping a live report every --interval, then reap it.
    // The live reports are the snapshots CMD's library writes every
    // --interval (each replacing the last), each shown once: polled at a
    // quarter of the interval (at most 50 ms, so the final report follows
    // CMD's end soon), and told apart by the time they cover. The profile
    // CMD writes as it ends is not one of them: it is the final report.
    let mut poll = options.interval.map(|interval| (interval / 4).clamp(Duration::from_millis(1), Duration::from_millis(50)));
    // The final report only, where the reports go to a stream that cannot
    // take one after another.
    if let Some(stream) = live_reports_stream(options).filter(|_| poll.is_some()) {
        let format = options.rendering.format;
        let why = if format == Format::Folded {
            "stacks that a flame graph adds up (each report counts every wait since the start)".to_string()
        } else {
            format!("one --format {} document", format!("{format:?}").to_lowercase())
        };
        // Not in front of the document itself: a script reading stderr for
        // it found this line first.
        if !goes_to_stderr(options) {
            say!("lockmeter: note: no live reports: {stream} takes {why}, the final report");
        }
        poll = None;
    }
    let mut shown_ns = None;
    // Whether a report went to a stream (stderr, a device) already: a
    // CSV's rows then follow the first one's header (each snapshot's rows
    // carry its reason and duration_ns).
    let mut streamed = false;
    let ended = loop {
        match (poll, ended_unreaped(root, poll.is_none())) {
            (_, Ok(true)) => break Ok(()),
            (_, Err(e)) => break Err(e),
            (None, Ok(false)) => continue,
            (Some(poll), Ok(false)) => {
                std::thread::sleep(poll);
                let live = Profile::load(&scratch.0.join(format!("profile.{root}.json"))).ok();
                if let Some(live) = live.filter(|p| p.reason == "interval" && shown_ns != Some(p.duration_ns)) {
                    shown_ns = Some(live.duration_ns);
                    streamed |= matches!(emit(&live, options, true, streamed), Ok(None));
                }
            }
        }
    };
    signals::child_ended();
    // CMD stays unreaped while its orphans are waited for: its pid is not
    // free for a process of the tree to take (and write its profile as
    // the root's). A stop lockmeter received already (a ^C, a SIGTERM it
    // passed on) stops the wait too.
    let orphans = match ended {
        // Unrecorded, the tree leaves no profile to wait for (as under
        // time(1), CMD's end is the run's).
        Ok(()) if options.no_profile => orphans::Outcome::default(),
        Ok(()) => {
            let stop = [(libc::SIGINT, "^C"), (libc::SIGTERM, "SIGTERM"), (libc::SIGHUP, "SIGHUP")]
                .into_iter()
                .find_map(|(signal, name)| signals::catches(&caught, signal).then_some(name))
                .unwrap_or("only SIGKILL");
            orphans::wait_for(&program.to_string_lossy(), root, &scratch.0, stop)
        }
        Err(_) => orphans::Outcome::default(),
    };
    let status = ended.and_then(|()| child.wait());
    // SAFETY: restoring the disposition saved above.
    unsafe { libc::signal(libc::SIGQUIT, previous_quit) };
    let status = status.map_err(|e| Failure::runtime(format!("waiting for {}: {e}", program.to_string_lossy())))?;
    let profiles = if options.no_profile { Vec::new() } else { collect(&scratch.0, root) };
    if profiles.is_empty() && !options.no_profile {
        let why = match status.signal() {
            // No handler runs on SIGKILL, and the library writes from one.
            Some(libc::SIGKILL) => "SIGKILL leaves no time to write one".to_string(),
            Some(signal) => format!("{} came before it could write one, or it handles the signal itself", signal_name(signal)),
            None => match preload_dropped(&path) {
                Some(why) => format!("{why}: the loader dropped LD_PRELOAD"),
                None => "statically linked, or it cleared LD_PRELOAD".to_string(),
            },
        };
        say!("lockmeter: warning: {} wrote no profile ({why})", program.to_string_lossy());
    }
    if !orphans.left_running && !options.no_profile {
        let silent = silent_members(&scratch.0, root);
        if !silent.is_empty() {
            let pids: Vec<String> = silent.iter().map(|pid| format!("pid {pid}")).collect();
            say!(
                "lockmeter: warning: {} more process(es) of the tree wrote no profile (killed by SIGKILL, or became a program the library cannot reach: static, or clearing LD_PRELOAD): {}",
                silent.len(),
                pids.join(", ")
            );
        }
    }
    if !profiles.iter().any(|p| p.as_ref().is_ok_and(|p| p.pid == root)) {
        if let Some(stale) = options.output.as_deref().filter(|o| from_before(o, run_started)) {
            // An earlier run's report left at -o reads as this run's: said.
            // (Not removed: a path can lead to a file that is not a report,
            // such as the one standard output is redirected to.)
            say!("lockmeter: warning: {} is not this run's report: it was written before this run, which wrote none there", stale.display());
        }
    }
    // The program has run: a report that cannot be written is an error,
    // but the other processes' reports and the program's status still
    // come out.
    let mut unwritten = false;
    let mut written = Vec::new();
    // On stderr, the processes of a tree that used no lock (a build's
    // compilers, a script's commands) are one line, not four each.
    let mut lockless = Vec::new();
    // The root's report too, when another process of the tree used locks
    // (`make` printed 'no lock was used' above its compilers' reports);
    // alone in using none, its report says so.
    let some_used_locks = profiles.iter().flatten().any(|p| !p.locks.is_empty());
    for profile in &profiles {
        match profile {
            Ok(profile)
                if options.output.is_none()
                    && options.rendering.format == Format::Table
                    && (profile.pid != root || some_used_locks)
                    && used_no_lock(profile) =>
            {
                lockless.push(process_name(profile));
            }
            Ok(profile) => match emit(profile, options, profile.pid == root, streamed) {
                Ok(Some(file)) => written.push(file),
                Ok(None) => streamed = true,
                Err(failure) => {
                    say!("lockmeter: error: {}", failure.message);
                    unwritten = true;
                }
            },
            Err(e) => say!("lockmeter: warning: {e}"),
        }
    }
    if !lockless.is_empty() {
        say!("lockmeter: {} more process(es) of the tree used no pthread lock: {}", lockless.len(), lockless.join(", "));
    }
    if written.len() > 1 {
        // Say where the other processes' reports went.
        let files: Vec<String> = written.iter().map(|f| f.display().to_string()).collect();
        say!("lockmeter: {} reports written: {}", files.len(), files.join(", "));
    }
    if orphans.left_running {
        // Their profiles come later, to the scratch directory: kept.
        std::mem::forget(scratch);
    } else {
        drop(scratch);
    }
    drop(table); // detaches the program
    if let Some(signal) = status.signal() {
        say!("lockmeter: {} was killed by {}", program.to_string_lossy(), signal_name(signal));
    }
    // Held until the reports are out: a stop that comes while they are
    // written waits for them.
    let stop = signals::stop_received();
    signals::uninstall(&caught);
    if let Some((signal, after_end)) = stop {
        // A stop lockmeter received ends it, once it has reported, when
        // CMD died of it too (passed on, or the terminal's ^C to both: as
        // `timeout` does, so a service manager sees its stop obeyed, as
        // systemd counts death by SIGTERM, and a shell's loop stops at
        // ^C), or when it came after CMD ended (it interrupted
        // lockmeter's own wait). One CMD survived before it ended leaves
        // CMD's status to say how the run went, as do the user signals.
        if status.signal() == Some(signal) || after_end {
            signals::die_of(signal);
        }
    }
    if let Some(signal) = status.signal() {
        return Ok(ExitCode::from(128u8.wrapping_add(signal as u8)));
    }
    match status.code() {
        // Exit 1 rather than report success without the report.
        Some(0) if unwritten => Ok(ExitCode::from(1)),
        code => Ok(ExitCode::from(code.unwrap_or(1) as u8)),
    }
}

/// The signals lockmeter takes for CMD, caught for the whole run: SIGTERM
/// and SIGHUP, the user signals (a log reopened, a status dumped) and the
/// others whose default would end lockmeter (an alarm, a timer, a
/// limit) are passed on to the program `run` waits for (each killed
/// lockmeter and left CMD running); ^C is noted only (the terminal sends
/// it to CMD too). ^C, SIGTERM and SIGHUP are stops, which end the wait
/// for CMD's orphans whenever they came, and the last stop decides how
/// lockmeter ends (with whether it came after CMD's end). One handler
/// from CMD's start to the last report, so that none is lost between two
/// (a stop that came between CMD's end and the wait's own handlers used
/// to be dropped).
mod signals {
    use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

    /// ^C, the stops, and the other signals whose default would end
    /// lockmeter and leave CMD running (an alarm, a timer, a CPU limit
    /// sent to lockmeter: each killed it and orphaned CMD).
    const SIGNALS: [libc::c_int; 10] = [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGALRM,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGXCPU,
        libc::SIGXFSZ,
    ];

    /// The program's pid once it runs; `NOT_YET` before, `ENDED` once
    /// lockmeter has seen it end.
    static CHILD: AtomicI32 = AtomicI32::new(NOT_YET);
    const NOT_YET: i32 = 0;
    const ENDED: i32 = -1;
    /// A signal to pass on that came before the program ran, 0 if none.
    static PENDING: AtomicI32 = AtomicI32::new(0);
    /// The last stop (^C, SIGTERM, SIGHUP) lockmeter received, 0 if none.
    static STOP: AtomicI32 = AtomicI32::new(0);
    /// Whether it came after the program had ended.
    static STOP_AFTER_END: AtomicBool = AtomicBool::new(false);

    /// The dispositions the handlers replaced, one per signal.
    #[derive(Clone, Copy)]
    pub struct Previous([libc::sigaction; 10]);

    extern "C" fn on_signal(signal: libc::c_int) {
        let child = CHILD.load(Ordering::SeqCst);
        // Asked of the kernel, not of lockmeter's loop, which may see
        // the end a poll later (a stop in between read as passed on).
        let ended = child == ENDED || (child > 0 && has_ended(child));
        if matches!(signal, libc::SIGINT | libc::SIGTERM | libc::SIGHUP) {
            STOP_AFTER_END.store(ended, Ordering::SeqCst);
            STOP.store(signal, Ordering::SeqCst);
        }
        if signal == libc::SIGINT || ended {
            return;
        }
        if child == NOT_YET {
            PENDING.store(signal, Ordering::SeqCst);
        } else {
            pass_on(child, signal);
        }
    }

    /// Sends `signal` to CMD; a stop is followed by SIGCONT, since a
    /// stopped CMD acts on it only once continued (as `timeout` does). A
    /// user signal is not: it would wake a CMD stopped on purpose.
    fn pass_on(child: i32, signal: libc::c_int) {
        // SAFETY: kill(2) is async-signal-safe.
        unsafe {
            libc::kill(child, signal);
            if matches!(signal, libc::SIGTERM | libc::SIGHUP) {
                libc::kill(child, libc::SIGCONT);
            }
        }
    }

    /// Whether child `pid` has ended, leaving it unreaped (waitid is
    /// async-signal-safe).
    fn has_ended(pid: i32) -> bool {
        // SAFETY: a zeroed siginfo_t is a valid buffer for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own child, leaving it unreaped.
        let asked = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) };
        // SAFETY: waitid filled `info` (si_pid stays 0 while it runs).
        asked == 0 && unsafe { info.si_pid() } != 0
    }

    /// Catches the signals; a signal lockmeter was started ignoring stays
    /// ignored (as `nohup` asks), and is no stop.
    pub fn install() -> Previous {
        // `on_signal` only calls async-signal-safe functions and touches atomics.
        Previous(super::catch_signals(SIGNALS, on_signal, libc::SA_RESTART, |_, previous| {
            previous.sa_sigaction == libc::SIG_IGN
        }))
    }

    /// Whether `signal` is caught (lockmeter was not started ignoring it).
    pub fn catches(previous: &Previous, signal: libc::c_int) -> bool {
        SIGNALS.iter().zip(previous.0.iter()).any(|(&s, p)| s == signal && p.sa_sigaction != libc::SIG_IGN)
    }

    /// In the forked child, before exec: the dispositions lockmeter was
    /// started with (async-signal-safe).
    pub fn restore_in_child(previous: &Previous) {
        super::restore_signals(SIGNALS, &previous.0);
    }

    /// From now on signals go to `pid`; one that came meanwhile goes now.
    pub fn to(pid: u32) {
        CHILD.store(pid as i32, Ordering::SeqCst);
        let pending = PENDING.swap(0, Ordering::SeqCst);
        if pending != 0 {
            pass_on(pid as i32, pending);
        }
    }

    /// The program has ended (not yet reaped): signals from now on are
    /// not passed on.
    pub fn child_ended() {
        CHILD.store(ENDED, Ordering::SeqCst);
    }

    /// Whether a stop (^C, SIGTERM, SIGHUP) came.
    pub fn stopped() -> bool {
        STOP.load(Ordering::SeqCst) != 0
    }

    /// The last stop lockmeter received, and whether it came after CMD
    /// had ended.
    pub fn stop_received() -> Option<(libc::c_int, bool)> {
        let after_end = STOP_AFTER_END.load(Ordering::SeqCst);
        Some(STOP.load(Ordering::SeqCst)).filter(|&signal| signal != 0).map(|signal| (signal, after_end))
    }

    /// Ends lockmeter by `signal`'s default action.
    pub fn die_of(signal: libc::c_int) {
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        // SAFETY: resetting a disposition and raising a signal; the
        // caller has nothing left to write.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }

    /// Back to the dispositions before `install`.
    pub fn uninstall(previous: &Previous) {
        restore_in_child(previous);
        CHILD.store(0, Ordering::SeqCst);
    }
}

/// Whether process `root` (a child) has ended, leaving it unreaped;
/// waits for it to end if `block`. Other children that end meanwhile
/// (processes of CMD's tree whose parent ended first, which come to
/// lockmeter, see `orphans`) are reaped as they end.
fn ended_unreaped(root: u32, block: bool) -> std::io::Result<bool> {
    loop {
        // SAFETY: a zeroed siginfo_t is a valid buffer for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags = libc::WEXITED | libc::WNOWAIT | if block { 0 } else { libc::WNOHANG };
        // SAFETY: waitid on our own children, writing into `info`.
        if unsafe { libc::waitid(libc::P_ALL, 0, &mut info, flags) } == 0 {
            // SAFETY: waitid filled `info` (si_pid stays 0 under WNOHANG
            // when no child has ended).
            match unsafe { info.si_pid() } {
                0 => return Ok(false),
                pid if pid as u32 == root => return Ok(true),
                // SAFETY: reaping a child that has ended.
                orphan => unsafe {
                    libc::waitpid(orphan, std::ptr::null_mut(), libc::WNOHANG);
                },
            }
            continue;
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// The processes CMD left running. lockmeter is the subreaper of CMD's
/// tree: a process whose parent ends without waiting for it (a
/// background job, a daemon's double fork) becomes lockmeter's child
/// instead of init's, and lockmeter waits for it after CMD, so that its
/// profile, written when it ends, is read with the others (without the
/// wait it was written after lockmeter had reported and gone, and lost).
///
/// Which of lockmeter's children are CMD's is told by their environment:
/// a process of CMD's tree started with this run's `LOCKMETER_OUTPUT`
/// (the scratch directory is the run's own). Parenthood alone took in the
/// orphans of children lockmeter had before CMD, and a process that took
/// over the pid of one of those.
mod orphans {
    use std::path::Path;
    use std::time::{Duration, Instant};

    /// After a stop, how long the processes the same signal reached (^C
    /// goes to the whole foreground group) have to write their profiles
    /// and end.
    pub const GRACE: Duration = Duration::from_secs(1);
    /// How long the grace stretches while a profile is being written (a
    /// large one takes seconds; the library's own bound on a dying
    /// program's write, `LOCKMETER_DYING_WRITE`, defaults to this).
    const WRITING_GRACE: Duration = Duration::from_secs(10);

    /// Makes lockmeter the reaper of the processes its children leave.
    pub fn adopt() {
        // SAFETY: prctl with integer arguments, changing only this process.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    }

    /// How the wait ended.
    #[derive(Default)]
    pub struct Outcome {
        /// Processes still ran when a stop ended the wait: their profiles
        /// will come to the scratch directory after lockmeter has gone.
        pub left_running: bool,
    }

    /// Waits until every process of CMD's tree left running has ended, or
    /// a stop signal lockmeter received (now, or before the wait) and the
    /// grace after it have passed; says what it waits for, and what it
    /// left. `root`, CMD, is left unreaped; `scratch` is the directory the
    /// tree writes its profiles to. `stop` says which signal stops it.
    pub fn wait_for(program: &str, root: u32, scratch: &Path, stop: &str) -> Outcome {
        let marker = [b"LOCKMETER_OUTPUT=".as_slice(), scratch.join("profile.%p.json").as_os_str().as_encoded_bytes(), b"\0"].concat();
        // Reaps what has ended and returns the rest. Ended is what waitid
        // says, not the /proc state: a process whose main thread exited
        // reads as a zombie while its other threads run.
        let left_running = || -> Vec<(u32, String)> {
            children().into_iter().filter(|(pid, _)| *pid != root && !reaped(*pid) && of_this_run(*pid, &marker, scratch)).collect()
        };
        // (Twice empty, as below.)
        let waiting = match left_running() {
            none if none.is_empty() => left_running(),
            some => some,
        };
        if waiting.is_empty() {
            return Outcome::default();
        }
        say!(
            "lockmeter: {program} has ended; waiting for {} it left running, to read their profiles too ({stop} stops the wait)",
            described(&waiting)
        );
        let mut stop_seen: Option<Instant> = None;
        loop {
            let left = left_running();
            // Twice empty: a process whose parent exits while one scan
            // of /proc reads them both may be missed by that scan (it
            // was read with the old parent), never by the next.
            if left.is_empty() && left_running().is_empty() {
                return Outcome::default();
            }
            if super::signals::stopped() {
                let waited = stop_seen.get_or_insert_with(Instant::now).elapsed();
                if waited >= GRACE && (waited >= WRITING_GRACE || !a_profile_is_being_written(scratch)) {
                    say!(
                        "lockmeter: warning: {} still running: not in this report; their profiles will be written to {} (lockmeter report {}/*.json)",
                        described(&left),
                        scratch.display(),
                        scratch.display()
                    );
                    return Outcome { left_running: true };
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether a profile is being written to `scratch` now (the library
    /// writes to a temporary file and renames it into place).
    fn a_profile_is_being_written(scratch: &Path) -> bool {
        std::fs::read_dir(scratch).is_ok_and(|entries| entries.filter_map(Result::ok).any(|e| e.file_name().to_string_lossy().contains(".tmp")))
    }

    /// Whether process `pid` was started with `marker` (this run's
    /// `LOCKMETER_OUTPUT=...\0`) in its environment. A process whose main
    /// thread has exited shows an empty environment: its threads' are read.
    fn of_this_run(pid: u32, marker: &[u8], scratch: &Path) -> bool {
        // Noted by the library as it started (see `note_member`).
        if scratch.join(format!("member.{pid}")).exists() {
            return true;
        }
        // Or started with this run's output in its environment (one that
        // cannot be read, a process made non-dumpable, is the tree's only
        // if the library noted it: a child lockmeter had before CMD may
        // be such a process).
        let holds = |path: &str| std::fs::read(path).is_ok_and(|environ| environ.windows(marker.len()).any(|w| w == marker));
        if holds(&format!("/proc/{pid}/environ")) {
            return true;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
        tasks.filter_map(Result::ok).any(|task| holds(&format!("/proc/{pid}/task/{}/environ", task.file_name().to_string_lossy())))
    }

    /// Whether child `pid` has ended: if so it is reaped.
    fn reaped(pid: u32) -> bool {
        // SAFETY: a zeroed siginfo_t is a valid buffer for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own child; si_pid stays 0 while it runs.
        let waited = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOHANG) } == 0;
        // SAFETY: waitid filled `info`.
        !waited || unsafe { info.si_pid() } != 0
    }

    /// lockmeter's children: pid and command name (from /proc).
    fn children() -> Vec<(u32, String)> {
        let me = std::process::id();
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        let mut found: Vec<(u32, String)> = entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                // "pid (comm) state ppid ...": comm may hold spaces and ')'.
                let (name, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
                let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
                (ppid == me).then(|| (pid, name.to_string()))
            })
            .collect();
        found.sort_unstable();
        found
    }

    fn described(processes: &[(u32, String)]) -> String {
        let list: Vec<String> = processes.iter().map(|(pid, name)| format!("{name} (pid {pid})")).collect();
        match list.len() {
            1 => format!("1 process, {}", list[0]),
            n => format!("{n} processes, {}", list.join(", ")),
        }
    }
}

/// Installs `handler` (with `flags`) for each of `signals` but those
/// `left_alone(signal, its disposition)` names; returns the dispositions
/// read, one per signal. `handler` must be async-signal-safe.
fn catch_signals<const N: usize>(
    signals: [libc::c_int; N],
    handler: extern "C" fn(libc::c_int),
    flags: libc::c_int,
    left_alone: impl Fn(libc::c_int, &libc::sigaction) -> bool,
) -> [libc::sigaction; N] {
    // SAFETY: zeroed sigaction structs are valid to pass; sigaction(2)
    // reads the disposition into `previous` and installs `action`.
    unsafe {
        let mut previous: [libc::sigaction; N] = std::mem::zeroed();
        for (signal, previous) in signals.iter().zip(previous.iter_mut()) {
            libc::sigaction(*signal, std::ptr::null(), previous);
            if left_alone(*signal, previous) {
                continue;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as usize;
            action.sa_flags = flags;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(*signal, &action, std::ptr::null_mut());
        }
        previous
    }
}

/// Puts back dispositions `catch_signals` read (async-signal-safe: also
/// in a forked child before exec).
fn restore_signals<const N: usize>(signals: [libc::c_int; N], previous: &[libc::sigaction; N]) {
    for (signal, previous) in signals.iter().zip(previous.iter()) {
        // SAFETY: restoring a disposition read by sigaction(2).
        unsafe { libc::sigaction(*signal, previous, std::ptr::null_mut()) };
    }
}

/// Loads a private on-CPU table and arranges for `command` to inherit a
/// read-write descriptor of it, named in the environment. Returns the
/// loaded program (recording nobody yet) and the inheritable descriptor.
fn private_table(command: &mut Command) -> Result<(lockmeter_oncpu::loader::Private, std::os::fd::OwnedFd), Failure> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let program = lockmeter_oncpu::loader::Private::load_idle().map_err(|e| Failure::runtime(format!("--oncpu: {e}")))?;
    let fd = program.table_fd().map_err(|e| Failure::runtime(format!("--oncpu: {e}")))?;
    // SAFETY: dup gives a new descriptor without close-on-exec, owned here.
    let raw = unsafe { libc::dup(fd.as_raw_fd()) };
    if raw < 0 {
        return Err(Failure::runtime(format!("--oncpu: {}", std::io::Error::last_os_error())));
    }
    // SAFETY: `raw` was just created and nobody else owns it.
    let inheritable = unsafe { OwnedFd::from_raw_fd(raw) };
    // CMD installs the table only if lockmeter is its parent: not in
    // processes CMD forks, which the program does not record.
    command.env(lockmeter_oncpu::FD_ENV, format!("{raw}:{}", std::process::id()));
    Ok((program, inheritable))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_get_their_pid_before_the_extension() {
        assert_eq!(output_for(Path::new("out/p.json"), 42, true), PathBuf::from("out/p.json"));
        assert_eq!(output_for(Path::new("out/p.json"), 42, false), PathBuf::from("out/p.42.json"));
        assert_eq!(output_for(Path::new("prof"), 42, false), PathBuf::from("prof.42"));
        assert_eq!(output_for(Path::new("out/w.pb.gz"), 42, false), PathBuf::from("out/w.42.pb.gz"));
    }

    #[test]
    fn static_binaries_are_recognised() {
        assert!(!statically_linked(Path::new("/bin/sh")), "sh is dynamic");
        assert!(!statically_linked(Path::new("/nonexistent")));
    }

    /// A set-user-ID program of another user runs without the preload; a
    /// plain one, or one of this user's, with it.
    #[test]
    fn programs_the_loader_runs_without_the_preload_are_recognised() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("lockmeter-suid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let program = dir.join("prog");
        std::fs::copy("/bin/true", &program).unwrap();
        assert_eq!(preload_dropped(&program), None, "a plain program");
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o4755)).unwrap();
        assert_eq!(preload_dropped(&program), None, "set-user-ID to its own runner");
        // Another user's: made as root; otherwise a system one (su is
        // root's, set-user-ID, on every Debian).
        let name = std::ffi::CString::new(program.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; 65534 is nobody.
        let theirs = if unsafe { libc::chown(name.as_ptr(), 65534, 65534) } == 0 {
            std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o4755)).unwrap();
            program.clone()
        } else {
            PathBuf::from("/bin/su")
        };
        assert_eq!(preload_dropped(&theirs), Some("set-user-ID"), "{}", theirs.display());
        assert_eq!(preload_dropped(Path::new("/nonexistent")), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
