//! Parsers for command-line values, and atomic file output.

use lockmeter_bench::{LockKind, Variant};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Parses "300ms", "2s", "1.5s", "500us" or plain seconds ("2").
pub fn duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    // The unit begins at the first letter that is not an exponent's e
    // ("1e30s" is 1e30 seconds: its 'e30' read as the unit).
    let exponent_at = |i: usize| {
        matches!(text.as_bytes()[i], b'e' | b'E')
            && i > 0
            && text.as_bytes()[i - 1].is_ascii_digit()
            && text[i + 1..].trim_start_matches(['+', '-']).starts_with(|c: char| c.is_ascii_digit())
    };
    let split = text
        .char_indices()
        .find(|&(i, c)| (c.is_ascii_alphabetic() || c == 'µ') && !exponent_at(i))
        .map_or(text.len(), |(i, _)| i);
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a duration (try 300ms, 2s, 500us)"))?;
    let scale = match unit {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "ns" => 1e-9,
        "m" | "min" => 60.0,
        _ => return Err(format!("'{text}': unknown unit '{unit}' (use ns, us, ms, s, or m or min for minutes)")),
    };
    if !value.is_finite() || value < 0.0 {
        return Err(format!("'{text}' is not a duration (it must be zero or positive)"));
    }
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("'{text}' is too long a duration"))
}

/// A duration that must be longer than zero.
pub fn positive_duration(text: &str) -> Result<Duration, String> {
    let d = duration(text)?;
    if d.is_zero() {
        return Err(format!("'{text}': must be longer than zero"));
    }
    Ok(d)
}

/// A duration of a millisecond or more, for what is reported in
/// milliseconds: the torture's stall bound (1us read "stalled 0 ms" and
/// failed a thread for waiting "0.000 s"), the on-CPU table's sample.
pub fn millisecond_or_more(text: &str) -> Result<Duration, String> {
    let d = duration(text)?;
    if d < Duration::from_millis(1) {
        return Err(format!("'{text}': must be 1ms or more"));
    }
    Ok(d)
}

/// The items of a comma-separated list, trimmed; an empty item between
/// commas (`2,,4`, `adaptive,`) is refused as a likely slip, an empty
/// list is left to its parser to name.
pub fn list_items(text: &str) -> Result<Vec<&str>, String> {
    let items: Vec<&str> = text.split(',').map(str::trim).collect();
    if items.len() > 1 && items.iter().any(|s| s.is_empty()) {
        return Err(format!("'{text}' has an empty item"));
    }
    Ok(items.into_iter().filter(|s| !s.is_empty()).collect())
}

/// A comma-separated list of whole numbers within `min..=max`.
fn numbers(text: &str, what: &str, min: u64, max: u64) -> Result<Vec<u64>, String> {
    let mut out = Vec::new();
    for item in list_items(text)? {
        let n: u64 = item.parse().map_err(|_| format!("'{item}' is not a whole number of {what}"))?;
        if n < min || n > max {
            return Err(format!("{what} must be between {min} and {max}, not {n}"));
        }
        if !out.contains(&n) {
            out.push(n);
        }
    }
    if out.is_empty() {
        return Err(format!("no {what} given"));
    }
    // In order: tables' columns and plots' lines go from the least to the
    // most (4,1,2 drew lines that doubled back).
    out.sort_unstable();
    Ok(out)
}

/// A comma-separated list given as one argument (clap would otherwise take
/// a `Vec` field as a repeated argument).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct List<T>(pub Vec<T>);

/// Thread counts: "1,2,4".
pub fn thread_list(text: &str) -> Result<List<usize>, String> {
    Ok(List(numbers(text, "threads", 1, 4096)?.into_iter().map(|n| n as usize).collect()))
}

/// Periods in nanoseconds: "1000,10000". At least 100 ns: a period
/// shorter than a lock and unlock cost (`--period 10` ran, its limit of
/// 200 M ops/s a figure no lock could approach) measures only the lock.
pub fn period_list(text: &str) -> Result<List<u64>, String> {
    numbers(text, "nanoseconds of period", 100, 1_000_000_000).map(List)
}

/// Duty shares in percent: "1,8,32".
pub fn duty_list(text: &str) -> Result<List<u64>, String> {
    numbers(text, "percent of duty", 0, 100).map(List)
}

/// Locks: names and the groups `ours`, `peers`, `all`.
pub fn lock_list(text: &str) -> Result<List<LockKind>, String> {
    let mut out: Vec<LockKind> = Vec::new();
    for item in list_items(text)? {
        let group: Vec<LockKind> = match item {
            "ours" => LockKind::ours().collect(),
            "peers" => LockKind::PEERS.to_vec(),
            "all" => LockKind::ours().chain(LockKind::PEERS).collect(),
            name => vec![name.parse::<LockKind>().map_err(|_| {
                let variants: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
                format!(
                    "unknown lock '{name}' (use ours, peers, all, or names from `lockmeter algorithms`, {}, tas-floor, cas-floor, or the variants {})",
                    LockKind::PEERS.map(|p| p.name()).join(", "),
                    variants.join(", ")
                )
            })?],
        };
        for kind in group {
            if !out.contains(&kind) {
                out.push(kind);
            }
        }
    }
    if out.is_empty() {
        return Err("no locks given".into());
    }
    Ok(List(out))
}

/// Whether lockmeter was started with its stdout closed (`>&-`). The
/// Rust runtime opens /dev/null on a standard descriptor found closed at
/// start, and every write then succeeds into nothing (a report run with
/// `>&-` exited 0, its table lost). So it is looked at before the
/// runtime starts, from the program's constructors (a /dev/null opened by
/// the caller, as Python's DEVNULL opens it, read-write, is a stdout).
pub fn stdout_was_closed() -> bool {
    STDOUT_CLOSED_AT_START.load(std::sync::atomic::Ordering::Relaxed)
}

static STDOUT_CLOSED_AT_START: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn note_closed_stdout() {
    // SAFETY: fcntl asks for a descriptor's flags; -1 (EBADF) if closed.
    if unsafe { libc::fcntl(1, libc::F_GETFD) } == -1 {
        STDOUT_CLOSED_AT_START.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Run by the loader before `main`, so before the runtime's reopening.
#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_CLOSED_STDOUT: extern "C" fn() = note_closed_stdout;

/// Where an output named by the user goes.
pub enum Destination {
    /// A regular file (to be), written through a temporary file and a
    /// rename. A symbolic link is followed, so the link stays a link.
    File(PathBuf),
    /// A device, pipe or socket (`/dev/null`, a FIFO), written in place:
    /// renaming over it would replace it with a file.
    InPlace(PathBuf),
    /// A descriptor this process already has open (`/dev/stdout`,
    /// `/dev/fd/N`), written through it: reopening a redirected file would
    /// truncate it (`>> log` lost its earlier lines), and resolving it to
    /// the file and renaming over that too.
    Descriptor(i32),
}

/// The descriptor a path names through the process's own descriptor
/// table, if it does, by name (other spellings of /dev/stdout and
/// /dev/stderr are found as what they lead to, by
/// `standard_descriptor_on`; by name, /dev/stdout is stdout even when it
/// was closed at start and leads to the runtime's /dev/null).
fn open_descriptor(path: &Path) -> Option<i32> {
    let text = path.to_str()?;
    match text {
        "/dev/stdout" => Some(1),
        "/dev/stderr" => Some(2),
        _ => text.strip_prefix("/dev/fd/").or_else(|| text.strip_prefix("/proc/self/fd/"))?.parse().ok(),
    }
}

/// Which of stdout and stderr, if either, is open on the file `meta`
/// describes (a stdout closed at start is only the runtime's /dev/null:
/// `-o /dev/null` is then the device, not it).
fn standard_descriptor_on(meta: &std::fs::Metadata) -> Option<i32> {
    let fds: &[i32] = if stdout_was_closed() { &[2] } else { &[1, 2] };
    lockmeter_stats::profile::descriptor_open_on(meta, fds)
}

/// Where `path` leads; the error says why it cannot be an output.
pub fn destination(path: &Path) -> Result<Destination, String> {
    if let Some(fd) = open_descriptor(path) {
        return Ok(Destination::Descriptor(fd));
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err("it is a directory".into()),
        Ok(meta) if let Some(fd) = standard_descriptor_on(&meta) => Ok(Destination::Descriptor(fd)),
        Ok(meta) if meta.is_file() => Ok(Destination::File(std::fs::canonicalize(path).unwrap_or_else(|_| path.into()))),
        Ok(_) => Ok(Destination::InPlace(path.into())),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(lockmeter_stats::profile::io_reason(&e)),
        Err(_) if path.as_os_str().to_string_lossy().ends_with('/') => Err("it names a directory".into()),
        // Not there yet; a link to a file not yet written leads to its name.
        Err(_) => Ok(Destination::File(lockmeter_stats::profile::link_target(path))),
    }
}


/// Whether two paths name one file, made or to be made: each resolved
/// through its links and its directory's (`sub/../t.txt` is `t.txt`, a
/// link's name its target). A device or descriptor (`/dev/stdout`) is
/// no file to collide on.
pub fn same_file_name(a: &Path, b: &Path) -> bool {
    let file = |path: &Path| -> Option<PathBuf> {
        let Destination::File(target) = destination(path).ok()? else { return None };
        let target = lockmeter_stats::profile::link_target(&target);
        let directory = target.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        Some(std::fs::canonicalize(directory).ok()?.join(target.file_name()?))
    };
    matches!((file(a), file(b)), (Some(a), Some(b)) if a == b)
}

/// An output that names one of the inputs: written, it would replace
/// what was read (`report p.json --format csv -o p.json` left a CSV where
/// the profile was).
pub fn check_not_an_input(output: &Path, inputs: &[PathBuf]) -> Result<(), String> {
    match inputs.iter().find(|input| same_file_name(input, output)) {
        Some(input) => Err(format!("-o {} is the input {}: give the output its own file", output.display(), input.display())),
        None => Ok(()),
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a
/// reader never sees half a file (in place for a device or pipe).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let failed = |e: std::io::Error| format!("writing {}: {}", path.display(), lockmeter_stats::profile::io_reason(&e));
    let target = match destination(path).map_err(|why| format!("writing {}: {why}", path.display()))? {
        Destination::InPlace(target) => return std::fs::write(target, bytes).map_err(failed),
        Destination::Descriptor(1) if stdout_was_closed() => return Err(failed(std::io::Error::from_raw_os_error(libc::EBADF))),
        Destination::Descriptor(fd) => {
            use std::io::Write as _;
            use std::os::fd::FromRawFd as _;
            // SAFETY: a descriptor the process has open (the write fails
            // with EBADF otherwise); ManuallyDrop leaves it open.
            let mut open = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
            return open.write_all(bytes).map_err(failed);
        }
        Destination::File(target) => target,
    };
    if let Some(why) = unreplaceable(&target) {
        return Err(format!("cannot write {}: {why}", path.display()));
    }
    let temp = temp_path(&target)?;
    std::fs::write(&temp, bytes).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        failed(e)
    })?;
    std::fs::rename(&temp, &target).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        failed(e)
    })
}

/// Where [`write_atomically`] writes before renaming.
fn temp_path(path: &Path) -> Result<PathBuf, String> {
    let name = path.file_name().ok_or_else(|| format!("{}: not a file name", path.display()))?;
    Ok(path.with_file_name(format!(".{}.tmp.{}", name.to_string_lossy(), std::process::id())))
}

/// A plot's file: named .svg or .png (the name picks the drawing), where
/// a file can be written (through a link, where the link leads, as the
/// plot will be), with the font the plots need. Checked before the work
/// that feeds the plot, so a long run is never lost to a typo in its name
/// or a missing font.
pub fn check_plot_path(path: &Path) -> Result<(), String> {
    lockmeter_bench::plot::Image::for_file(path)?;
    check_directory_exists(&lockmeter_stats::profile::link_target(path))?;
    check_writable(path)?;
    lockmeter_bench::plot::ready()
}

/// Draws a plot as `path` names it (SVG or PNG) and writes it there as
/// every output is written (errors name the file) ([`write_atomically`]: a link followed, a
/// device or FIFO written in place, never replaced by a file).
pub fn write_plot(path: &Path, draw: impl FnOnce(lockmeter_bench::plot::Image) -> Result<Vec<u8>, String>) -> Result<(), String> {
    let image = lockmeter_bench::plot::Image::for_file(path)?;
    let bytes = draw(image).map_err(|e| format!("{}: {e}", path.display()))?;
    write_atomically(path, &bytes)
}

/// The directory `path` is to be written in exists.
pub fn check_directory_exists(path: &Path) -> Result<(), String> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if parent.is_dir() {
        Ok(())
    } else {
        Err(format!("{}: directory {} does not exist", path.display(), parent.display()))
    }
}

/// Whether `path` is immutable or append-only (`chattr +i`, `+a`), read
/// with statx: no need to open it (an immutable file we cannot read was
/// passed over when its flags were read through an open descriptor).
fn immutable_or_append_only(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(name) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return false };
    // SAFETY: an all-zero statx is a valid value for the kernel to fill.
    let mut status: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statx buffer of ours.
    let read = unsafe { libc::statx(libc::AT_FDCWD, name.as_ptr(), 0, 0, &mut status) };
    let flags = (libc::STATX_ATTR_IMMUTABLE | libc::STATX_ATTR_APPEND) as u64;
    read == 0 && status.stx_attributes & status.stx_attributes_mask & flags != 0
}

/// Why an existing file `target` cannot be replaced by a rename though a
/// new file can be made beside it: it or its directory immutable or
/// append-only (an append-only directory takes a new file but no rename
/// over an old one), or the file another user's in a sticky directory
/// (/tmp) that is not ours either. Found after the run, it failed as
/// "Operation not permitted" (exit 1) when the help promises exit 2 for an
/// output that cannot be written.
fn unreplaceable(target: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let parent = target.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if immutable_or_append_only(target) {
        return Some("it is immutable or append-only (chattr +i or +a), so it cannot be replaced".into());
    }
    if immutable_or_append_only(parent) {
        return Some(format!(
            "its directory {} is immutable or append-only (chattr +i or +a), and outputs are written through a rename, which it refuses",
            parent.display()
        ));
    }
    let meta = std::fs::metadata(target).ok()?;
    let directory = std::fs::metadata(parent).ok()?;
    // SAFETY: geteuid only reads the process's credentials.
    let me = unsafe { libc::geteuid() };
    let sticky = directory.mode() & libc::S_ISVTX != 0;
    (sticky && me != 0 && meta.uid() != me && directory.uid() != me)
        .then(|| "it belongs to another user, in a sticky directory that is not ours, so it cannot be replaced".into())
}

/// Fails now if [`write_atomically`] could not write `path` later: a
/// command that runs a program first must not lose its results to a
/// missing directory, or to a directory named as the file, once the
/// program has run.
pub fn check_writable(path: &Path) -> Result<(), String> {
    let target = match destination(path).map_err(|why| format!("cannot write {}: {why}", path.display()))? {
        // Opening a pipe to check it would wait for its reader.
        Destination::InPlace(_) => return Ok(()),
        Destination::Descriptor(fd) => {
            // SAFETY: F_GETFL only reads the descriptor's flags.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
            return if fd == 1 && stdout_was_closed() {
                Err(format!("cannot write {}: stdout is closed", path.display()))
            } else if flags < 0 {
                Err(format!("cannot write {}: descriptor {fd} is not open", path.display()))
            } else if flags & libc::O_ACCMODE == libc::O_RDONLY {
                Err(format!("cannot write {}: descriptor {fd} is open for reading only", path.display()))
            } else {
                Ok(())
            };
        }
        Destination::File(target) => target,
    };
    if let Some(why) = unreplaceable(&target) {
        return Err(format!("cannot write {}: {why}", path.display()));
    }
    let temp = temp_path(&target)?;
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&temp) {
        Ok(_) => {
            let _ = std::fs::remove_file(&temp);
            Ok(())
        }
        // The file is there, but nothing can be made beside it (/proc):
        // its own name would read as the reason ("No such file").
        Err(e) if target.exists() => Err(format!(
            "cannot write {}: no new file can be made in its directory, to write beside it and rename over it ({})",
            path.display(),
            lockmeter_stats::profile::io_reason(&e)
        )),
        Err(e) => Err(format!("cannot write {}: {}", path.display(), lockmeter_stats::profile::io_reason(&e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(duration("500us"), Ok(Duration::from_micros(500)));
        assert!(duration("fast").unwrap_err().contains("not a duration"));
        assert!(duration("3 weeks").unwrap_err().contains("unknown unit"));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)), "m is minutes, as the error for an unknown unit says");
        assert!(duration("3 weeks").unwrap_err().contains("m or min for minutes"));
        assert!(duration("-1s").is_err());
        assert!(duration("NaNs").is_err());
        assert!(positive_duration("0s").is_err());
        assert!(duration("100000000000000000000").unwrap_err().contains("too long"));
        // An exponent is the number's, not a unit.
        assert!(duration("1e30").unwrap_err().contains("too long"));
        assert_eq!(duration("2.5e-1s"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("1E3ms"), Ok(Duration::from_secs(1)));
        assert!(duration("3 weeks").unwrap_err().contains("unknown unit 'weeks'"));
        assert!(duration("5e").unwrap_err().contains("unknown unit 'e'"));
    }

    #[test]
    fn lists_parse_and_reject_bad_items() {
        assert_eq!(thread_list("1,2, 4,2"), Ok(List(vec![1, 2, 4])));
        // In order, whatever order given: a plot's lines doubled back.
        assert_eq!(thread_list("4,1,2"), Ok(List(vec![1, 2, 4])));
        assert_eq!(period_list("10000,1000"), Ok(List(vec![1000, 10000])));
        assert!(period_list("10").unwrap_err().contains("between 100 and"));
        assert!(thread_list("1,,2").unwrap_err().contains("empty item"));
        // Every list alike: a name lost between two commas is a slip to
        // say, not to pass over.
        assert!(lock_list("adaptive,,futex").unwrap_err().contains("empty item"));
        assert!(crate::torture::subjects("adaptive,").unwrap_err().contains("empty item"));
        assert!(crate::advise::variants(",mcs").unwrap_err().contains("empty item"));
        assert!(thread_list("0").unwrap_err().contains("between 1"));
        assert!(thread_list("two").is_err());
        assert!(thread_list("").is_err());
        assert_eq!(duty_list("1,8,32"), Ok(List(vec![1, 8, 32])));
        assert!(duty_list("101").is_err());
        let ours = lock_list("ours").unwrap();
        assert_eq!(ours.0.len(), 7);
        assert_eq!(lock_list("all").unwrap().0.len(), 12);
        assert_eq!(lock_list("adaptive,glibc,adaptive").unwrap().0.len(), 2);
        assert!(lock_list("fastest").unwrap_err().starts_with("unknown lock 'fastest'"));
    }

    #[test]
    fn a_file_with_no_room_beside_it_says_so() {
        // /proc/version exists; /proc takes no new file.
        let why = check_writable(Path::new("/proc/version")).unwrap_err();
        assert!(why.starts_with("cannot write /proc/version: no new file can be made in its directory"), "{why}");
        let why = check_writable(Path::new("/nonexistent-dir/p.json")).unwrap_err();
        assert!(why.ends_with("No such file or directory"), "{why}");
    }

    #[test]
    fn atomic_write_replaces_the_file_whole() {
        let dir = std::env::temp_dir().join(format!("lockmeter-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("out.json");
        write_atomically(&file, b"first").unwrap();
        write_atomically(&file, b"second").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"second");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left behind");
        assert!(write_atomically(&dir.join("missing/out.json"), b"x").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Seeded random inputs: no argument makes a parser panic, every error
    /// is one line, and what the parsers accept round-trips.
    #[test]
    fn parsers_never_panic_and_round_trip() {
        let mut x: u64 = 0x5eed;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        const ALPHABET: [&str; 20] = ["0", "1", "9", ".", ",", "-", "+", "e", "s", "ms", "us", "µ", "ns", "min", " ", "NaN", "inf", "x", "99999999999999999999", "adaptive"];
        for _ in 0..20_000 {
            let text: String = (0..next() % 6).map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize]).collect();
            for result in [duration(&text).map(|_| ()), positive_duration(&text).map(|_| ())] {
                if let Err(e) = result {
                    assert!(!e.contains('\n'), "{text:?}: {e}");
                }
            }
            for result in [thread_list(&text).map(|_| ()), period_list(&text).map(|_| ()), duty_list(&text).map(|_| ()), lock_list(&text).map(|_| ())] {
                if let Err(e) = result {
                    assert!(!e.contains('\n'), "{text:?}: {e}");
                }
            }
        }
        for _ in 0..2_000 {
            let ms = next() % 10_000_000;
            assert_eq!(duration(&format!("{ms}ms")), Ok(Duration::from_millis(ms)));
            let us = next() % 10_000_000;
            assert_eq!(duration(&format!("{us}us")), Ok(Duration::from_micros(us)));
            let threads: Vec<usize> = (0..1 + next() % 5).map(|_| 1 + (next() % 4096) as usize).collect();
            let mut unique = threads.clone();
            unique.dedup();
            let text = threads.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(",");
            let parsed = thread_list(&text).unwrap().0;
            assert!(threads.iter().all(|t| parsed.contains(t)) && parsed.len() <= threads.len(), "{text}");
        }
    }
}
