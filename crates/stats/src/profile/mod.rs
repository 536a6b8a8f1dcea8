//! The profile of one process, as `lockmeter run` and the preload library
//! write it: the JSON contract other tools read (documented field by field
//! in the README; fields are added, never renamed), and its renderers.

use serde::{Deserialize, Serialize};
use std::path::Path;

mod export;
mod table;

pub use export::{process_frame, to_csv, to_flamegraph, to_folded, to_pprof};
pub use table::{render_table, TableOptions};

/// What a profile is tagged with, so a reader can refuse anything else.
pub const FORMAT: &str = "lockmeter-profile";
/// The version of the contract this crate writes.
pub const VERSION: u32 = 1;

/// The lock profile of one process.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Profile {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`] of the writer.
    pub version: u32,
    /// The program's command line, as the process saw it.
    pub program: String,
    /// Process id.
    pub pid: u32,
    /// Parent's process id.
    pub ppid: u32,
    /// Time from the library's start in this process to the dump.
    pub duration_ns: u64,
    /// Cycles per nanosecond of the counter the histograms are in.
    pub cycles_per_ns: f64,
    /// `profile` (glibc's locks, observed) or `replace:ALG`.
    pub mode: String,
    /// Why this profile was written: `exit`, `_exit`, `signal SIGSEGV`,
    /// `interval`, `request` (a live dump). Anything but `exit` and `_exit`
    /// may be a partial picture.
    pub reason: String,
    /// One entry per lock seen (per generation of an address).
    pub locks: Vec<LockProfile>,
    /// The profiler's own health.
    pub health: Health,
    /// The on-CPU table and the spins it decided (present when a table was
    /// installed or `adaptive` served the program).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oncpu: Option<OnCpuUse>,
}

/// How `adaptive` knew whether lock owners ran.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct OnCpuUse {
    /// `handed` (by `lockmeter run --oncpu`), `pinned` (system-wide), or
    /// `none`.
    pub table: String,
    /// Why there was no table, when there was none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absent_because: Option<String>,
    /// Spins on a running owner whose verdict came from the table.
    pub spins_by_table: u64,
    /// Spins whose verdict came from the owner's CPU clock (the fallback).
    pub spins_by_cpu_clock: u64,
    /// Spins that ended before either source answered.
    pub spins_undecided: u64,
}

/// Which kind of object a lock entry is.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `pthread_mutex_t`.
    #[default]
    Mutex,
    /// `pthread_rwlock_t`.
    Rwlock,
    /// `pthread_spinlock_t`.
    Spin,
    /// `sem_t`.
    Sem,
    /// `pthread_cond_t`: its waits, reported on their own.
    Cond,
}

impl Kind {
    /// The lowercase name used in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Rwlock => "rwlock",
            Kind::Spin => "spin",
            Kind::Sem => "sem",
            Kind::Cond => "cond",
        }
    }
}

/// Total, mean and maximum of a duration, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Durations {
    /// Sum over all events.
    pub total: u64,
    /// `total` over the number of events it is the sum of.
    pub mean: f64,
    /// The longest single event.
    pub max: u64,
}

impl Durations {
    /// From a total over `events` and a maximum.
    pub fn new(total: u64, events: u64, max: u64) -> Durations {
        Durations { total, mean: if events == 0 { 0.0 } else { total as f64 / events as f64 }, max }
    }
}

/// The counters every lock, side (read/write) and call site has.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Counters {
    /// Successful acquisitions (TOTAL).
    pub acquisitions: u64,
    /// Acquired without waiting (NOWAIT).
    pub nowait: u64,
    /// Acquired after waiting (CON's numerator).
    pub contended: u64,
    /// Of `contended`, waits that only spun; null where the lock cannot tell.
    pub spin: Option<u64>,
    /// Of `contended`, waits that slept in the kernel; null where unknown.
    pub sleep: Option<u64>,
    /// Trylocks that found the lock taken (REJECT).
    pub reject: u64,
    /// Timed acquisitions that gave up.
    pub timeout: u64,
    /// Time waited by contended acquisitions (and timeouts).
    pub wait_ns: Durations,
    /// Time held, per acquisition.
    pub hold_ns: Durations,
    /// Waiter-weighted delay (Go 1.22's definition): for each hold, the
    /// number of threads waiting integrated over the hold's time. On a
    /// holder it is the delay it caused; it is 0 on waiter rows.
    pub delay_ns: u64,
}

impl Counters {
    /// CON: share of acquisitions that had to wait, percent.
    pub fn contention_pct(&self) -> f64 {
        if self.acquisitions == 0 {
            0.0
        } else {
            100.0 * self.contended as f64 / self.acquisitions as f64
        }
    }

    /// Adds `other` into `self` (means recomputed, maxima kept).
    pub fn merge(&mut self, other: &Counters) {
        let wait_events = self.contended + self.timeout + other.contended + other.timeout;
        // A hold's mean is over holds, which a recursive mutex's nested
        // re-locks are not: the holds are recovered from each mean (over
        // the acquisitions, two recursive mutexes each held 10 ms in 4
        // nested acquisitions merged to a mean of 2.5 ms).
        let holds = |c: &Counters| if c.hold_ns.mean > 0.0 { c.hold_ns.total as f64 / c.hold_ns.mean } else { c.acquisitions as f64 };
        let merged_holds = (holds(self) + holds(other)).round() as u64;
        self.acquisitions += other.acquisitions;
        self.nowait += other.nowait;
        self.contended += other.contended;
        self.spin = add_known(self.spin, other.spin);
        self.sleep = add_known(self.sleep, other.sleep);
        self.reject += other.reject;
        self.timeout += other.timeout;
        self.wait_ns = Durations::new(self.wait_ns.total + other.wait_ns.total, wait_events, self.wait_ns.max.max(other.wait_ns.max));
        self.hold_ns = Durations::new(self.hold_ns.total + other.hold_ns.total, merged_holds, self.hold_ns.max.max(other.hold_ns.max));
        self.delay_ns += other.delay_ns;
    }
}

fn add_known(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, None) => a,
        (None, b) => b,
    }
}

/// One lock (one generation of one address).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LockProfile {
    /// The symbol of a global or static lock (`cache_lock`), else
    /// `heap@SITE`: the call site that initialised it (or first used it).
    pub name: String,
    /// What it is.
    pub kind: Kind,
    /// Its address in the process, `0x...`.
    pub address: String,
    /// How many earlier locks lived at this address (destroyed, then a new
    /// one initialised there): their rows are separate.
    pub generation: u32,
    /// How many locks the row stands for: a lock destroyed and initialised
    /// again at its address by the same call site continues the row of the
    /// one before (objects allocated and freed over and over), and
    /// `--merge` sums them; 1 for a single lock.
    #[serde(default = "one_lock")]
    pub locks: u64,
    /// The whole lock (for an rwlock, read and write together).
    #[serde(flatten)]
    pub counters: Counters,
    /// Of `acquisitions`, re-acquisitions inside `pthread_cond_*wait`:
    /// counted as acquisitions but neither as NOWAIT nor as contended,
    /// since the condvar wait hides how long the mutex took.
    pub cond_reacquire: u64,
    /// UTIL: share of the run the lock was held (write side), percent.
    pub util_pct: f64,
    /// Waits (contended acquisitions and timed-out waits, as in WAIT) by
    /// log2 of their cycles (seed 000): index b counts
    /// waits of 2^b..2^(b+1)-1 cycles.
    pub hist_wait_log2_cycles: Vec<u64>,
    /// rwlock only: the shared (read) side.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub read: Option<Counters>,
    /// rwlock only: the exclusive (write) side.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub write: Option<Counters>,
    /// Call sites: where threads waited, and where holders held.
    pub sites: Vec<SiteProfile>,
    /// Stacks of contended acquisitions (only with `--frames N`).
    #[serde(default)]
    pub stacks: Vec<StackProfile>,
    /// What was in progress as the profile was written, if anything: a
    /// profile written while threads still run (at a signal, an interval,
    /// an exit with threads left) shows which locks were held and waited
    /// for, as a hung program's does. Its counters above count only what
    /// had ended.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub now: Option<InProgress>,
}

/// A lock's holds and waits in progress when its profile was written.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InProgress {
    /// Threads holding it (an rwlock's writers).
    pub holders: u64,
    /// The longest of those holds so far, ns, if one was timed (holds
    /// are timed in a sample, and always after a wait): 0 if none was.
    pub held_ns: u64,
    /// An rwlock's read holds open.
    pub readers: u64,
    /// Threads waiting for it (in a condvar's case, for a signal).
    pub waiters: u64,
    /// Their waits so far, ns, in all.
    pub waited_ns: u64,
}

impl InProgress {
    fn merge(&mut self, other: &InProgress) {
        self.holders += other.holders;
        self.held_ns = self.held_ns.max(other.held_ns);
        self.readers += other.readers;
        self.waiters += other.waiters;
        self.waited_ns += other.waited_ns;
    }
}

/// The name a lock is merged under: a global's locks (`stripes+0x28`)
/// under its symbol, whether an array's elements or a struct's fields
/// (the symbol table cannot tell them apart). A heap lock's `+0x` is its
/// call site's, and a stripped object's static's (`static@git+0x38c840`)
/// its address: part of their names (folded, every static of a stripped
/// object read as one lock).
fn merge_name(name: &str) -> &str {
    if name.starts_with("heap@") || name.starts_with("static@") {
        return name;
    }
    match name.rfind("+0x") {
        Some(at) if name[at + 3..].chars().all(|c| c.is_ascii_hexdigit()) => &name[..at],
        _ => name,
    }
}

fn one_lock() -> u64 {
    1
}

/// Whether a call-site row counts waiting there or holding from there.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The site's contended acquisitions and the time they waited.
    #[default]
    Waiter,
    /// The site's acquisitions, how long they held, and the delay that
    /// caused the threads waiting meanwhile.
    Holder,
}

/// One call site of one lock, in one role.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SiteProfile {
    /// `function+0xoff` (or the raw address where nothing is known).
    pub site: String,
    /// Return address in the process, `0x...`.
    pub address: String,
    /// The object file the site is in.
    pub object: Option<String>,
    /// Source file, where debug information exists.
    pub file: Option<String>,
    /// Source line, where debug information exists.
    pub line: Option<u32>,
    /// Waiter or holder.
    pub role: Role,
    /// Counters of this site in this role.
    #[serde(flatten)]
    pub counters: Counters,
}

/// One stack of contended acquisitions, innermost frame first.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct StackProfile {
    /// `function+0xoff` per frame, innermost first.
    pub frames: Vec<String>,
    /// Per frame, where debug information places it: `[file, line]`, or
    /// null (empty in profiles written before frames had sources).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<Option<(String, u32)>>,
    /// Contended acquisitions with this stack.
    pub contended: u64,
    /// Their total wait.
    pub wait_ns: u64,
}

/// The profiler's view of itself.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Health {
    /// Lock operations observed: acquisitions, refused and timed-out ones.
    pub events: u64,
    /// Such operations not recorded at all (a full lock table, a crowded
    /// address, a thread without counters; `warnings` says which). Those
    /// recorded without their call site or stack are in `warnings` only.
    pub dropped: u64,
    /// Lock table: slots used, of capacity, and inserts that probed past
    /// their home slot.
    pub lock_slots_used: u64,
    /// Capacity of the lock table.
    pub lock_slots: u64,
    /// Inserts into the lock table that found their home slot taken.
    pub lock_collisions: u64,
    /// Call-site table: slots used.
    pub site_slots_used: u64,
    /// Capacity of the call-site table.
    pub site_slots: u64,
    /// Inserts into the call-site table that found their home slot taken.
    pub site_collisions: u64,
    /// Measured cost the profiler adds to one uncontended lock+unlock.
    pub overhead_ns_per_pair: f64,
    /// `overhead_ns_per_pair` times the pairs observed, as a share of the
    /// run's CPU-thread time (an estimate).
    pub overhead_estimate_ns: u64,
    /// Things the reader should know (e.g. nothing was seen).
    pub warnings: Vec<String>,
}

/// Why a profile could not be read, in one line.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadError(pub String);

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Profile {
    /// Parses a profile from JSON text; `origin` names it in errors.
    pub fn from_json(text: &str, origin: &str) -> Result<Profile, ReadError> {
        // (An empty file read as "truncated", as if a profile had begun.)
        if text.trim().is_empty() {
            return Err(ReadError(format!("{origin} is empty: no profile was written to it")));
        }
        let profile: Profile = serde_json::from_str(text).map_err(|e| {
            let what = if e.is_eof() { "is truncated" } else { "is not a valid lockmeter profile" };
            ReadError(format!("{origin} {what} (line {}, column {}: {})", e.line(), e.column(), first_clause(&e.to_string())))
        })?;
        if profile.format != FORMAT {
            return Err(ReadError(format!("{origin} is not a lockmeter profile (format {:?})", profile.format)));
        }
        if profile.version > VERSION {
            return Err(ReadError(format!(
                "{origin} is profile version {}, newer than this lockmeter reads ({VERSION})",
                profile.version
            )));
        }
        Ok(profile)
    }

    /// Reads a profile file.
    pub fn load(path: &Path) -> Result<Profile, ReadError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ReadError(format!("cannot read profile {}: {}", path.display(), io_reason(&e))))?;
        Profile::from_json(&text, &path.display().to_string())
    }

    /// The profile as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile always serialises")
    }

    /// The locks with any waiting, timeouts or refusals, or holding: every
    /// lock that was used at all.
    pub fn used_locks(&self) -> impl Iterator<Item = &LockProfile> {
        self.locks.iter().filter(|l| {
            l.counters.acquisitions + l.counters.reject + l.counters.timeout > 0
                || l.now.as_ref().is_some_and(|now| now.holders + now.readers + now.waiters > 0)
        })
    }
}

impl Profile {
    /// The profile with locks of the same name and kind folded into one
    /// row each (a lock array, or one lock per object made at one place):
    /// counters, histograms and call sites summed, `locks` saying how many
    /// locks the row stands for, UTIL its busiest lock's (a sum would read
    /// 1000% for a busy array).
    pub fn merged_by_name(&self) -> Profile {
        let mut merged: Vec<LockProfile> = Vec::new();
        for lock in &self.locks {
            let name = merge_name(&lock.name);
            match merged.iter_mut().find(|m| m.name == name && m.kind == lock.kind) {
                None => merged.push(LockProfile { name: name.to_string(), ..lock.clone() }),
                Some(into) => {
                    into.locks += lock.locks;
                    into.counters.merge(&lock.counters);
                    into.cond_reacquire += lock.cond_reacquire;
                    into.util_pct = into.util_pct.max(lock.util_pct);
                    if into.hist_wait_log2_cycles.len() < lock.hist_wait_log2_cycles.len() {
                        into.hist_wait_log2_cycles.resize(lock.hist_wait_log2_cycles.len(), 0);
                    }
                    for (bin, count) in into.hist_wait_log2_cycles.iter_mut().zip(&lock.hist_wait_log2_cycles) {
                        *bin += count;
                    }
                    for (side, other) in [(&mut into.read, &lock.read), (&mut into.write, &lock.write)] {
                        if let (Some(side), Some(other)) = (side.as_mut(), other) {
                            side.merge(other);
                        }
                    }
                    for site in &lock.sites {
                        match into.sites.iter_mut().find(|s| s.site == site.site && s.role == site.role) {
                            Some(same) => same.counters.merge(&site.counters),
                            None => into.sites.push(site.clone()),
                        }
                    }
                    into.stacks.extend(lock.stacks.iter().cloned());
                    match (&mut into.now, &lock.now) {
                        (Some(into), Some(now)) => into.merge(now),
                        (into @ None, Some(now)) => *into = Some(now.clone()),
                        (_, None) => {}
                    }
                }
            }
        }
        Profile { locks: merged, ..self.clone() }
    }
}

/// Which of the descriptors `fds` (stdout, stderr) is open on the file
/// `meta` describes, however the path to it was spelled (`/dev/stderr`,
/// a link to it, /proc/thread-self/fd/2, the redirected file's own name).
pub fn descriptor_open_on(meta: &std::fs::Metadata, fds: &[i32]) -> Option<i32> {
    use std::os::unix::fs::MetadataExt as _;
    fds.iter().copied().find(|&fd| {
        // SAFETY: fstat writes into a zeroed stat of the right type; a
        // closed descriptor only returns an error.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        (unsafe { libc::fstat(fd, &mut stat) } == 0) && stat.st_dev == meta.dev() && stat.st_ino == meta.ino()
    })
}

/// Where the chain of symbolic links starting at `path` leads (`path`
/// itself if it is none): a file written through a temporary file and a
/// rename goes there, so that a link to it stays a link.
pub fn link_target(path: &std::path::Path) -> std::path::PathBuf {
    let mut current = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::read_link(&current) {
            Ok(next) => current = current.parent().map_or(next.clone(), |dir| dir.join(&next)),
            Err(_) => break,
        }
    }
    current
}

/// `std::io::Error` without its "(os error N)" tail.
pub fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

fn first_clause(text: &str) -> &str {
    text.split(" at line ").next().unwrap_or(text)
}

/// The order of locks in a rendering.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortKey {
    /// Total wait, longest first (default).
    #[default]
    Wait,
    /// Total hold time.
    Hold,
    /// Contended acquisitions.
    Contended,
    /// Acquisitions.
    Acquisitions,
}

impl SortKey {
    /// Parses `wait`, `hold`, `contended`, `acquisitions`.
    pub fn parse(text: &str) -> Option<SortKey> {
        Some(match text {
            "wait" => SortKey::Wait,
            "hold" => SortKey::Hold,
            "contended" => SortKey::Contended,
            "acquisitions" => SortKey::Acquisitions,
            _ => return None,
        })
    }

    /// A lock's key: by wait, `waited` (its waits ended and in progress:
    /// a hung program's stuck locks first).
    fn key_of(self, lock: &LockProfile, waited: u64) -> u64 {
        match self {
            SortKey::Wait => waited,
            _ => self.key(&lock.counters),
        }
    }

    fn key(self, c: &Counters) -> u64 {
        match self {
            SortKey::Wait => c.wait_ns.total,
            SortKey::Hold => c.hold_ns.total,
            SortKey::Contended => c.contended,
            SortKey::Acquisitions => c.acquisitions,
        }
    }
}

/// Locks to show: used ones whose total wait is at least `min_wait_ns`,
/// in `sort` order (ties by name, so output is stable). Condition
/// variables come after the locks: their waits are for events, not for
/// other threads to get out of the way.
pub fn selected_locks(profile: &Profile, sort: SortKey, min_wait_ns: u64) -> Vec<&LockProfile> {
    // A wait in progress counts as waited (a hung program's locks).
    let waited = |l: &LockProfile| l.counters.wait_ns.total + l.now.as_ref().map_or(0, |now| now.waited_ns);
    let mut locks: Vec<&LockProfile> = profile.used_locks().filter(|l| waited(l) >= min_wait_ns).collect();
    locks.sort_by(|a, b| {
        (a.kind == Kind::Cond)
            .cmp(&(b.kind == Kind::Cond))
            .then_with(|| sort.key_of(b, waited(b)).cmp(&sort.key_of(a, waited(a))))
            .then_with(|| a.name.cmp(&b.name))
    });
    locks
}

impl Profile {
    /// The profile with only the locks [`selected_locks`] picks, in its
    /// order.
    pub fn selected(&self, sort: SortKey, min_wait_ns: u64) -> Profile {
        Profile { locks: selected_locks(self, sort, min_wait_ns).into_iter().cloned().collect(), ..self.clone() }
    }
}

/// A lock's sites in one role, in `sort` order.
pub fn sites_in_role(lock: &LockProfile, role: Role, sort: SortKey) -> Vec<&SiteProfile> {
    let mut sites: Vec<&SiteProfile> = lock.sites.iter().filter(|s| s.role == role).collect();
    // A holder's part in the waiting is the delay it caused; a waiter's in
    // the holding, its wait. (Taking the larger of a count and a duration
    // put a site of 1 acquisition and 18 ms of delay above one of 100,000
    // acquisitions under --sort acquisitions.)
    let key = |s: &SiteProfile| match (sort, role) {
        (SortKey::Wait, Role::Holder) => s.counters.delay_ns,
        (SortKey::Hold, Role::Waiter) => s.counters.wait_ns.total,
        _ => sort.key(&s.counters),
    };
    sites.sort_by(|a, b| key(b).cmp(&key(a)).then_with(|| a.site.cmp(&b.site)));
    sites
}
