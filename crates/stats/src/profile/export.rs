//! A profile in other tools' formats: CSV for spreadsheets, folded stacks
//! weighted by wait time (flamegraph.pl, speedscope), a flame graph SVG,
//! and pprof (`contentions/count`, `delay/nanoseconds`, as Go's mutex
//! profile) for `go tool pprof`, Pyroscope and Parca.

use super::{Counters, LockProfile, Profile, Role};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;

const CSV_HEADER: &str = "pid,program,reason,duration_ns,lock,kind,address,generation,row,site,file,line,acquisitions,nowait,contended,spin,sleep,reject,timeout,cond_reacquire,\
wait_total_ns,wait_mean_ns,wait_max_ns,hold_total_ns,hold_mean_ns,hold_max_ns,delay_ns,util_pct,locks,\
now_holders,now_held_ns,now_readers,now_waiters,now_waited_ns";

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// One CSV row per lock, per rwlock side, and per call site and role.
pub fn to_csv(profile: &Profile) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for lock in profile.used_locks() {
        // The holds and waits in progress, on the lock's row (empty on the
        // others, and when none was).
        let now = lock.now.as_ref().map_or_else(
            || ",,,,".to_string(),
            |n| format!("{},{},{},{},{}", n.holders, n.held_ns, n.readers, n.waiters, n.waited_ns),
        );
        // Empty where a column does not apply, as the table's '-': UTIL
        // but on a lock held (a site's, a read side's, a semaphore's read
        // 0.000 as if measured), acquisitions inside a condvar wait but on
        // the lock's row.
        let mut row = |kind: &str, site: &str, file: &str, line: String, c: &Counters, util: Option<f64>| {
            let known = |v: Option<u64>| v.map_or_else(String::new, |v| v.to_string());
            let now = if kind == "lock" { now.as_str() } else { ",,,," };
            let util = util.map_or_else(String::new, |u| format!("{u:.3}"));
            let cond_reacquire = if kind == "lock" { lock.cond_reacquire.to_string() } else { String::new() };
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{kind},{},{},{line},{},{},{},{},{},{},{},{cond_reacquire},{},{:.1},{},{},{:.1},{},{},{util},{},{now}",
                profile.pid,
                csv_field(&profile.program),
                csv_field(&profile.reason),
                profile.duration_ns,
                csv_field(&lock.name),
                lock.kind.name(),
                lock.address,
                lock.generation,
                csv_field(site),
                csv_field(file),
                c.acquisitions,
                c.nowait,
                c.contended,
                known(c.spin),
                known(c.sleep),
                c.reject,
                c.timeout,
                c.wait_ns.total,
                c.wait_ns.mean,
                c.wait_ns.max,
                c.hold_ns.total,
                c.hold_ns.mean,
                c.hold_ns.max,
                c.delay_ns,
                lock.locks,
            );
        };
        let held = matches!(lock.kind, super::Kind::Mutex | super::Kind::Spin | super::Kind::Rwlock);
        row("lock", "", "", String::new(), &lock.counters, held.then_some(lock.util_pct));
        if let Some(read) = &lock.read {
            row("read", "", "", String::new(), read, None);
        }
        if let Some(write) = &lock.write {
            // An rwlock's UTIL is its write side's (read holds overlap).
            row("write", "", "", String::new(), write, Some(lock.util_pct));
        }
        for site in &lock.sites {
            let role = match site.role {
                Role::Waiter => "waiter",
                Role::Holder => "holder",
            };
            let line = site.line.map_or_else(String::new, |l| l.to_string());
            row(role, &site.site, site.file.as_deref().unwrap_or(""), line, &site.counters, None);
        }
    }
    out
}

/// A frame of a folded line: `;` separates frames and a newline ends the
/// line, so neither may appear inside one.
fn frame_text(text: &str) -> String {
    text.replace(';', ":").replace(['\n', '\r'], " ")
}

/// The folded frame of a process, `PROGRAM (pid N)`: the root of its
/// stacks beside other processes'.
pub fn process_frame(profile: &Profile) -> String {
    frame_text(&format!("{} (pid {})", profile.program, profile.pid))
}

fn lock_frame(lock: &LockProfile) -> String {
    frame_text(&format!("{} ({})", lock.name, lock.kind.name()))
}

/// Folded stacks, root first, weighted by nanoseconds waited: the lock,
/// then the waiting call site (or the captured stack, outermost first).
pub fn to_folded(profile: &Profile) -> String {
    let mut out = String::new();
    for (frames, _contended, wait_ns) in weighted_stacks(profile) {
        if wait_ns > 0 {
            let names: Vec<&str> = frames.iter().map(|f| f.name.as_str()).collect();
            let _ = writeln!(out, "{} {wait_ns}", names.join(";"));
        }
    }
    out
}

/// Every waited-for stack: frames root first, contentions, nanoseconds.
/// Not a condvar's: its waits are for a signal (work to do), not for a
/// lock, and a program's idle consumers drowned its contention (160 ms of
/// condvar waits beside 0.1 ms for the mutex); the table and JSON keep
/// them.
fn weighted_stacks(profile: &Profile) -> Vec<(Vec<Frame>, u64, u64)> {
    let mut stacks = Vec::new();
    for lock in profile.used_locks().filter(|l| l.kind != super::Kind::Cond) {
        let root = Frame::named(lock_frame(lock));
        if !lock.stacks.is_empty() {
            for stack in &lock.stacks {
                let mut frames = vec![root.clone()];
                // Each frame where debug information placed it (in a
                // profile from before frames had sources, a frame that is
                // one of the lock's call sites has its site's); the callers
                // by function, so that a function's calls are one node of
                // a flame graph (`worker`, not `worker+0x1c` and
                // `worker+0x31`), the waiting call (innermost) as its site
                // reads in the table.
                frames.extend(stack.frames.iter().enumerate().rev().map(|(i, f)| {
                    let source = stack.sources.get(i).cloned().flatten().or_else(|| {
                        let site = lock.sites.iter().find(|s| s.site == *f && s.file.is_some())?;
                        site.file.clone().zip(site.line)
                    });
                    let name = if i == 0 { frame_text(f) } else { frame_text(function_name(f)) };
                    let (file, line) = source.map_or((None, None), |(file, line)| (Some(file), Some(line)));
                    Frame { name, file, line }
                }));
                stacks.push((frames, stack.contended, stack.wait_ns));
            }
            continue;
        }
        for site in lock.sites.iter().filter(|s| s.role == Role::Waiter) {
            let place = Frame { name: frame_text(&site.site), file: site.file.clone(), line: site.line };
            // Every wait, timed-out ones too, as the stacks count them.
            stacks.push((vec![root.clone(), place], site.counters.contended + site.counters.timeout, site.counters.wait_ns.total));
        }
    }
    stacks
}

/// A frame of a waited-for stack: a name, and where the source is when
/// debug information said.
#[derive(Clone)]
struct Frame {
    name: String,
    file: Option<String>,
    line: Option<u32>,
}

impl Frame {
    fn named(name: String) -> Frame {
        Frame { name, file: None, line: None }
    }
}

/// The function of a call site `function+0xoff`.
fn function_name(site: &str) -> &str {
    match site.rsplit_once("+0x") {
        Some((function, offset)) if !function.is_empty() && offset.chars().all(|c| c.is_ascii_hexdigit()) => function,
        _ => site,
    }
}

/// A flame graph (SVG) of the folded stacks.
pub fn to_flamegraph(profile: &Profile) -> Result<Vec<u8>, String> {
    let folded = to_folded(profile);
    let mut svg = Vec::new();
    let mut options = inferno::flamegraph::Options::default();
    options.title = format!("lock wait time: {} (pid {})", profile.program, profile.pid);
    options.count_name = "ns waited".to_string();
    if folded.is_empty() {
        // Still a picture, so that a script's `-o wait.svg` gets one.
        return Ok(format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"600\" height=\"60\">\
             <text x=\"10\" y=\"25\" font-family=\"monospace\" font-size=\"14\">{}</text>\
             <text x=\"10\" y=\"45\" font-family=\"monospace\" font-size=\"14\">no lock was waited for</text></svg>\n",
            xml_text(&options.title)
        )
        .into_bytes());
    }
    inferno::flamegraph::from_lines(&mut options, folded.lines(), &mut svg).map_err(|e| format!("flame graph: {e}"))?;
    Ok(svg)
}

/// `text` with XML's special characters escaped.
fn xml_text(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The protobuf wire format, just the parts pprof's profile.proto needs.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.0.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
    }

    fn uint(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.varint(u64::from(field) << 3);
            self.varint(value);
        }
    }

    fn bytes(&mut self, field: u32, data: &[u8]) {
        self.varint((u64::from(field) << 3) | 2);
        self.varint(data.len() as u64);
        self.0.extend_from_slice(data);
    }

    fn packed(&mut self, field: u32, values: &[u64]) {
        let mut inner = Message::default();
        for &v in values {
            inner.varint(v);
        }
        self.bytes(field, &inner.0);
    }
}

#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, u64>,
}

impl Strings {
    fn id(&mut self, text: &str) -> u64 {
        if self.table.is_empty() {
            self.table.push(String::new());
            self.index.insert(String::new(), 0);
        }
        if let Some(&id) = self.index.get(text) {
            return id;
        }
        let id = self.table.len() as u64;
        self.table.push(text.to_string());
        self.index.insert(text.to_string(), id);
        id
    }
}

/// The id of the one mapping, the program's.
const PROGRAM_MAPPING: u64 = 1;

/// pprof's gzipped protobuf: sample types `contentions/count` and
/// `delay/nanoseconds`, one sample per waited-for stack, leaf first.
pub fn to_pprof(profile: &Profile) -> Vec<u8> {
    let mut strings = Strings::default();
    let mut body = Message::default();
    for (kind, unit) in [("contentions", "count"), ("delay", "nanoseconds")] {
        let mut value_type = Message::default();
        value_type.uint(1, strings.id(kind));
        value_type.uint(2, strings.id(unit));
        body.bytes(1, &value_type.0);
    }
    // A function per name and source file, named as the source has it
    // (`worker`, not each of its call sites `worker+0x86`, so that `pprof
    // -list worker` finds its source, and a function's calls add up in
    // -top's cum column); a location per function and line.
    let mut functions: HashMap<(String, Option<String>), u64> = HashMap::new();
    let mut locations: HashMap<(u64, Option<u32>), u64> = HashMap::new();
    let mut function_msgs = Vec::new();
    let mut location_msgs = Vec::new();
    for (frames, contended, wait_ns) in weighted_stacks(profile) {
        let mut location_ids = Vec::new();
        for frame in frames.iter().rev() {
            let name = function_name(&frame.name);
            let next = functions.len() as u64 + 1;
            let function_id = *functions.entry((name.to_string(), frame.file.clone())).or_insert_with(|| {
                let name = strings.id(name);
                let mut function = Message::default();
                function.uint(1, next);
                function.uint(2, name);
                function.uint(3, name);
                if let Some(file) = &frame.file {
                    function.uint(4, strings.id(file));
                }
                function_msgs.push(function.0);
                next
            });
            let next = locations.len() as u64 + 1;
            let location_id = *locations.entry((function_id, frame.line)).or_insert_with(|| {
                let mut line = Message::default();
                line.uint(1, function_id);
                line.uint(2, u64::from(frame.line.unwrap_or(0)));
                let mut location = Message::default();
                location.uint(1, next);
                location.uint(2, PROGRAM_MAPPING);
                location.bytes(4, &line.0);
                location_msgs.push(location.0);
                next
            });
            location_ids.push(location_id);
        }
        let mut sample = Message::default();
        sample.packed(1, &location_ids);
        sample.packed(2, &[contended, wait_ns]);
        body.bytes(2, &sample.0);
    }
    // One mapping, the program's, already symbolized: without it pprof
    // says "Main binary filename not available" and looks for a binary
    // to symbolize with.
    let mut mapping = Message::default();
    mapping.uint(1, PROGRAM_MAPPING);
    mapping.uint(5, strings.id(profile.program.split_whitespace().next().unwrap_or_default()));
    for has in [7, 8, 9] {
        // has_functions, has_filenames, has_line_numbers
        mapping.uint(has, 1);
    }
    body.bytes(3, &mapping.0);
    for location in &location_msgs {
        body.bytes(4, location);
    }
    for function in &function_msgs {
        body.bytes(5, function);
    }
    let mut period_type = Message::default();
    period_type.uint(1, strings.id("contentions"));
    period_type.uint(2, strings.id("count"));
    body.uint(10, profile.duration_ns);
    body.bytes(11, &period_type.0);
    body.uint(12, 1);
    // `pprof -comments`: whose profile it is.
    let comment = strings.id(&format!("{} (pid {}), {}", profile.program, profile.pid, profile.reason));
    body.uint(13, comment);
    for text in &strings.table {
        body.bytes(6, text.as_bytes());
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&body.0).expect("writing to memory");
    gz.finish().expect("writing to memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_match_the_protobuf_encoding() {
        let mut m = Message::default();
        m.varint(1);
        m.varint(300);
        assert_eq!(m.0, vec![0x01, 0xac, 0x02]);
        let mut m = Message::default();
        m.uint(1, 150);
        assert_eq!(m.0, vec![0x08, 0x96, 0x01], "the example of the protobuf encoding guide");
    }

    /// A site's timed-out waits are contentions, as a captured stack's are
    /// (pprof read 0 contentions with 30 ms of delay without --frames, 1
    /// with).
    #[test]
    fn a_timed_out_wait_is_a_contention_with_or_without_stacks() {
        use super::super::{Counters, Durations, Kind, LockProfile, SiteProfile};
        let site = SiteProfile {
            site: "give_up+0x4a".into(),
            role: Role::Waiter,
            counters: Counters { timeout: 1, wait_ns: Durations::new(30_000_000, 1, 30_000_000), ..Counters::default() },
            ..SiteProfile::default()
        };
        let counters = site.counters.clone();
        let lock = LockProfile { name: "m".into(), kind: Kind::Mutex, locks: 1, counters, sites: vec![site], ..LockProfile::default() };
        let profile = Profile { locks: vec![lock], ..Profile::default() };
        let stacks = weighted_stacks(&profile);
        assert_eq!(stacks.iter().map(|(_, contentions, ns)| (*contentions, *ns)).collect::<Vec<_>>(), [(1, 30_000_000)]);
    }

    /// A CSV cell that does not apply is empty, as the table's '-' (a
    /// site's and a semaphore's UTIL read 0.000, as if measured; the
    /// acquisitions inside a condvar wait had no column).
    #[test]
    fn csv_cells_that_do_not_apply_are_empty() {
        use super::super::{Counters, Kind, LockProfile, SiteProfile};
        let site = SiteProfile { site: "worker+0x4a".into(), role: Role::Holder, counters: Counters { acquisitions: 7, ..Counters::default() }, ..SiteProfile::default() };
        let lock = |kind: Kind| LockProfile {
            name: "m".into(),
            kind,
            locks: 1,
            util_pct: 12.5,
            cond_reacquire: 3,
            counters: Counters { acquisitions: 7, ..Counters::default() },
            sites: vec![site.clone()],
            ..LockProfile::default()
        };
        let profile = Profile { locks: vec![lock(Kind::Mutex), lock(Kind::Sem)], ..Profile::default() };
        let csv = to_csv(&profile);
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert!(rows.iter().all(|r| r.len() == header.len()), "{csv}");
        let cells: Vec<_> = rows.iter().map(|row| (row[column("kind")], row[column("row")], row[column("util_pct")], row[column("cond_reacquire")])).collect();
        assert_eq!(
            cells,
            [("mutex", "lock", "12.500", "3"), ("mutex", "holder", "", ""), ("sem", "lock", "", "3"), ("sem", "holder", "", "")]
        );
    }

    #[test]
    fn csv_quotes_what_needs_quoting() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
    }
}
