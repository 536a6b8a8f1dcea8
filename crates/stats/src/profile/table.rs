//! The lockmeter table of a profile: seed 004's layout, one row per lock
//! and, indented under it, the call sites that waited for it and the call
//! sites that held it; then seed 000's wait histogram of the most waited-for
//! locks, and the profiler's health.

use super::{selected_locks, sites_in_role, Counters, Kind, LockProfile, Profile, Role, SiteProfile, SortKey};
use crate::histogram::{render_side_by_side, Histogram, BINS};
use crate::report::{header, micros, render_cells, render_line, render_line_without, Columns, HOLDER_CELLS, WAITER_CELLS};

/// A condvar's and a semaphore's UTIL and HOLD: they are waited on,
/// never held.
const UNHELD_CELLS: [bool; 9] = [true, false, true, false, false, false, false, false, false];
/// An rwlock's read side: held, but its holds overlap, so no UTIL.
const UTIL_CELL: [bool; 9] = [true, false, false, false, false, false, false, false, false];
/// A semaphore's taking site: [`HOLDER_CELLS`] but the HOLD.
const TAKER_CELLS: [bool; 9] = [false, true, false, false, true, true, false, false, false];
use std::fmt::Write as _;

/// What to show.
#[derive(Clone, Debug)]
pub struct TableOptions {
    /// Lock order.
    pub sort: SortKey,
    /// Hide locks that waited less than this in total.
    pub min_wait_ns: u64,
    /// Call sites shown per lock and role.
    pub sites_per_role: usize,
    /// Locks whose histograms are drawn.
    pub histograms: usize,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions { sort: SortKey::Wait, min_wait_ns: 0, sites_per_role: 4, histograms: 3 }
    }
}

fn columns(c: &Counters, duration_ns: u64, util: bool) -> Columns {
    let waited = c.contended + c.timeout > 0;
    Columns {
        util_pct: if util && duration_ns > 0 { 100.0 * c.hold_ns.total as f64 / duration_ns as f64 } else { 0.0 },
        con_pct: c.contention_pct(),
        hold_ns: (c.hold_ns.mean, c.hold_ns.max as f64),
        wait_ns: waited.then_some((c.wait_ns.mean, c.wait_ns.max as f64)),
        total: c.acquisitions,
        nowait: c.nowait,
        spin: c.spin,
        sleep: c.sleep,
        reject: c.reject,
    }
}

fn site_label(site: &SiteProfile) -> String {
    let name = without_template_arguments(&site.site);
    match (&site.file, site.line) {
        (Some(file), Some(line)) => {
            let short = file.rsplit('/').next().unwrap_or(file);
            format!("{name} ({short}:{line})")
        }
        _ => name,
    }
}

/// A C++ name with its template arguments cut to `<…>`, for the table
/// (JSON and the other formats keep the whole name): a lambda run by
/// std::thread read `std::thread::_State_impl<std::thread::_Invoker<
/// std::tuple<main::{lambda()#2}> > >::_M_run()+0x20` on every row.
/// `operator<`, `operator<<`, `operator->` and the like are names, not
/// brackets.
fn without_template_arguments(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut depth = 0usize;
    for c in name.chars() {
        match c {
            '<' if depth == 0 && (out.ends_with("operator") || out.ends_with("operator<")) => out.push(c),
            '<' => {
                if depth == 0 {
                    out.push_str("<\u{2026}");
                }
                depth += 1;
            }
            '>' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    out.push('>');
                }
            }
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// Renders the table (the default output of `lockmeter run`).
pub fn render_table(profile: &Profile, options: &TableOptions) -> String {
    let mut out = String::new();
    let seconds = profile.duration_ns as f64 / 1e9;
    let _ = writeln!(
        out,
        "lockmeter: {} (pid {}), {seconds:.2} s, {}{}",
        profile.program,
        profile.pid,
        if profile.mode == "profile" { "glibc's locks".to_string() } else { profile.mode.replace("replace:", "served by ") },
        if profile.reason == "exit" { String::new() } else { format!(", written at {}", profile.reason) }
    );
    let locks = selected_locks(profile, options.sort, options.min_wait_ns);
    let used = profile.used_locks().count();
    if locks.is_empty() {
        let _ = writeln!(
            out,
            "no lock {}",
            if used == 0 { "was used".to_string() } else { format!("waited {} or more, --min-wait ({used} used)", span(options.min_wait_ns)) }
        );
    } else {
        out.push_str(&header());
        out.push('\n');
        for lock in &locks {
            render_lock(&mut out, lock, profile.duration_ns, options);
        }
        if locks.len() < used {
            let more = used - locks.len();
            let _ = writeln!(out, "({} waited less than {}, --min-wait)", counted(more as u64, "more lock"), span(options.min_wait_ns));
        }
        render_histograms(&mut out, &locks, options.histograms);
    }
    render_health(&mut out, profile);
    out
}

fn render_lock(out: &mut String, lock: &LockProfile, duration_ns: u64, options: &TableOptions) {
    let generation = if lock.generation > 0 { format!(" #{}", lock.generation + 1) } else { String::new() };
    let many = if lock.locks > 1 { format!(" [{} locks]", lock.locks) } else { String::new() };
    let name = format!("{}{generation}{many} ({})", lock.name, lock.kind.name());
    // UTIL is the profile's own (for an rwlock, the write side's: read
    // holds overlap, and their sum can exceed the run).
    let lock_columns = Columns { util_pct: lock.util_pct, ..columns(&lock.counters, duration_ns, false) };
    if matches!(lock.kind, Kind::Cond | Kind::Sem) {
        // Waited on, never held (a semaphore's count is taken, not
        // held): no UTIL, no HOLD.
        out.push_str(&render_line_without(&lock_columns, &name, 0, &UNHELD_CELLS));
    } else {
        out.push_str(&render_line(&lock_columns, &name, 0));
    }
    out.push('\n');
    for (label, side) in [("read", &lock.read), ("write", &lock.write)] {
        if let Some(side) = side {
            let side_columns = columns(side, duration_ns, label == "write");
            if label == "read" {
                // Read holds overlap: their sum is no share of the run
                // (as the CSV leaves it empty). It read 0.00% of a lock
                // read-held 40% of the run.
                out.push_str(&render_line_without(&side_columns, label, 1, &UTIL_CELL));
            } else {
                out.push_str(&render_line(&side_columns, label, 1));
            }
            out.push('\n');
        }
    }
    if lock.counters.timeout > 0 {
        let _ = writeln!(out, "{:>96}  {}", "", timed_out(&lock.counters, lock.kind));
    }
    if lock.cond_reacquire > 0 {
        let _ = writeln!(out, "{:>96}  {}", "", reacquired(lock.cond_reacquire));
    }
    if let Some(now) = &lock.now {
        let _ = writeln!(out, "{:>96}  {}", "", in_progress(now, lock.kind));
    }
    let acquired = if lock.kind == Kind::Sem { "acquired at" } else { "held at" };
    for (role, verb) in [(Role::Waiter, "waited at"), (Role::Holder, acquired)] {
        let sites = sites_in_role(lock, role, options.sort);
        for site in sites.iter().take(options.sites_per_role) {
            // A site whose every try was refused waited for nothing.
            let refused_only = role == Role::Waiter && site.counters.contended + site.counters.timeout == 0 && site.counters.reject > 0;
            let mut label = format!("{} {}", if refused_only { "refused at" } else { verb }, site_label(site));
            if role == Role::Waiter && site.counters.timeout > 0 {
                let _ = write!(label, ", {} timed out", site.counters.timeout);
            }
            if role == Role::Holder && site.counters.delay_ns > 0 {
                let _ = write!(label, ", delayed waiters {}", micros(site.counters.delay_ns as f64));
            }
            let cells = match role {
                Role::Waiter => &WAITER_CELLS,
                // Where a semaphore was taken: how often it waited, no hold.
                _ if lock.kind == Kind::Sem => &TAKER_CELLS,
                _ => &HOLDER_CELLS,
            };
            out.push_str(&render_cells(&columns(&site.counters, duration_ns, false), &label, 1, cells));
            out.push('\n');
        }
        if sites.len() > options.sites_per_role {
            let more = sites.len() - options.sites_per_role;
            let _ = writeln!(out, "{:>96}  ({} {verb})", "", counted(more as u64, "more site"));
        }
    }
}

/// A lock's timed acquisitions that gave up, as a row's label (WAIT's
/// mean and max are over every wait, these included; TOTAL and CON count
/// acquisitions only): "timed out: 43 of 50 waits (WAIT is over all
/// 50, 40.3ms in all)".
fn timed_out(c: &Counters, kind: Kind) -> String {
    let waits = c.contended + c.timeout;
    let what = if kind == Kind::Cond { "waits for a signal" } else { "waits" };
    format!("timed out: {} of {waits} {what} (WAIT is over all {waits}, {} in all)", c.timeout, span(c.wait_ns.total))
}

/// A mutex's acquisitions made inside condvar waits, as a row's label:
/// TOTAL counts them, NOWAIT and CON do not (TOTAL 3, NOWAIT 2 beside CON
/// 0% said nothing of why).
fn reacquired(count: u64) -> String {
    format!("taken back inside condvar waits: {} of TOTAL, in neither NOWAIT nor CON (any wait for it there is in the condvar's WAIT)", counted(count, "acquisition"))
}

/// A lock's holds and waits in progress, as a row's label: "now: held
/// by 1 thread (2.50 s so far); 1 thread waiting (2.40 s so far)".
fn in_progress(now: &super::InProgress, kind: Kind) -> String {
    let mut parts = Vec::new();
    if now.holders > 0 {
        let since = if now.held_ns > 0 { format!(" ({} so far)", span(now.held_ns)) } else { String::new() };
        parts.push(format!("held by {}{since}", counted(now.holders, "thread")));
    }
    if now.readers > 0 {
        parts.push(format!("{} open", counted(now.readers, "read hold")));
    }
    if now.waiters > 0 {
        let what = if kind == Kind::Cond { "waiting for a signal" } else { "waiting" };
        let each = if now.waiters == 1 { "so far" } else { "so far in all" };
        parts.push(format!("{} {what} ({} {each})", counted(now.waiters, "thread"), span(now.waited_ns)));
    }
    format!("now: {}", parts.join("; "))
}

/// "1 thread", "2 threads": `n` of `noun`, in the plural but for one.
fn counted(n: u64, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

/// A duration for people: µs under a millisecond, then ms, then s.
fn span(ns: u64) -> String {
    // The bounds as the figure rounds: 999,990 us read "1000.0ms".
    match ns {
        0..999_950 => format!("{:.1}us", ns as f64 / 1e3),
        999_950..999_950_000 => format!("{:.1}ms", ns as f64 / 1e6),
        _ => format!("{:.2}s", ns as f64 / 1e9),
    }
}

/// The histograms of the `how_many` most waited-for locks, whatever order
/// the table's rows are in (sorted by acquisitions, the locks taken most
/// were drawn, and the most waited-for left out).
fn render_histograms(out: &mut String, locks: &[&LockProfile], how_many: usize) {
    let mut waited: Vec<&&LockProfile> = locks.iter().filter(|l| l.hist_wait_log2_cycles.iter().any(|&c| c > 0)).collect();
    // Stable: equal waits keep the table's order.
    waited.sort_by_key(|l| std::cmp::Reverse(l.counters.wait_ns.total));
    waited.truncate(how_many);
    if waited.is_empty() {
        return;
    }
    let histograms: Vec<Histogram> = waited
        .iter()
        .map(|l| {
            let mut h = Histogram::default();
            for (bin, &count) in l.hist_wait_log2_cycles.iter().enumerate().take(BINS) {
                h.counts[bin] = count;
            }
            h
        })
        .collect();
    let titles = histogram_titles(&waited);
    let title_refs: Vec<&str> = titles.iter().map(String::as_str).collect();
    let refs: Vec<&Histogram> = histograms.iter().collect();
    let _ = writeln!(out, "\nwait time, log2 cycles (seed 000's histogram):");
    out.push_str(&render_side_by_side(&title_refs, &refs));
}

/// A histogram's column title: its lock's name, whole up to 40 characters,
/// past that its start and its end (where a site's file and line, or an
/// array element's offset, tell locks apart). Locks whose shortened names
/// are alike (a program's locks made at one call site, as Python's are)
/// are told apart by their mean wait, as their rows' WAIT column prints it.
fn histogram_titles(locks: &[&&LockProfile]) -> Vec<String> {
    const WIDTH: usize = 40;
    let plain: Vec<String> = locks.iter().map(|l| shorten(&l.name, WIDTH)).collect();
    locks
        .iter()
        .zip(&plain)
        .map(|(lock, title)| {
            if plain.iter().filter(|t| *t == title).count() == 1 {
                return title.clone();
            }
            let wait = micros(lock.counters.wait_ns.mean);
            format!("{} {wait}", shorten(&lock.name, WIDTH.saturating_sub(wait.len() + 1)))
        })
        .collect()
}

/// `name` in at most `width` characters: whole if it fits, else its first
/// two thirds and its last third around an ellipsis.
fn shorten(name: &str, width: usize) -> String {
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= width {
        return name.to_string();
    }
    let tail = width.saturating_sub(1) / 3;
    let head = width.saturating_sub(1 + tail);
    let mut short: String = chars[..head].iter().collect();
    short.push('\u{2026}');
    short.extend(&chars[chars.len() - tail..]);
    short
}

fn render_health(out: &mut String, profile: &Profile) {
    if let Some(oncpu) = &profile.oncpu {
        let table = match &oncpu.absent_because {
            Some(why) => format!("none ({why})"),
            None => oncpu.table.clone(),
        };
        let _ = writeln!(
            out,
            "\non-CPU table: {table}; spins on a running owner decided by the table {}, by the owner's CPU clock {}, undecided {}",
            oncpu.spins_by_table, oncpu.spins_by_cpu_clock, oncpu.spins_undecided
        );
    }
    let h = &profile.health;
    let share = if profile.duration_ns > 0 { 100.0 * h.overhead_estimate_ns as f64 / profile.duration_ns as f64 } else { 0.0 };
    let _ = writeln!(
        out,
        "\nprofiler: {} lock operations, {} dropped; locks {}/{} slots ({} collisions), sites {}/{} ({} collisions); \
         overhead {:.1} ns per uncontended lock+unlock, about {} in all ({share:.2}% of one thread's run time); \
         counts are exact, HOLD, UTIL and delays estimated (holds after a wait or a long hold timed, 1 in 16 of the others)",
        h.events,
        h.dropped,
        h.lock_slots_used,
        h.lock_slots,
        h.lock_collisions,
        h.site_slots_used,
        h.site_slots,
        h.site_collisions,
        h.overhead_ns_per_pair,
        micros(h.overhead_estimate_ns as f64),
    );
    for warning in &h.warnings {
        let _ = writeln!(out, "lockmeter: warning: {warning}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_arguments_are_cut_and_operators_kept() {
        let run = "std::thread::_State_impl<std::thread::_Invoker<std::tuple<main::{lambda()#2}> > >::_M_run()+0x20";
        assert_eq!(without_template_arguments(run), "std::thread::_State_impl<\u{2026}>::_M_run()+0x20");
        assert_eq!(without_template_arguments("worker+0x86"), "worker+0x86");
        assert_eq!(without_template_arguments("Cache<int>::operator<(Cache<int> const&)+0x4"), "Cache<\u{2026}>::operator<(Cache<\u{2026}> const&)+0x4");
        assert_eq!(without_template_arguments("Log::operator<<(char const*)+0x9"), "Log::operator<<(char const*)+0x9");
        assert_eq!(without_template_arguments("Ptr<T>::operator->()+0x1"), "Ptr<\u{2026}>::operator->()+0x1");
    }

    #[test]
    fn histogram_titles_keep_names_whole_and_tell_alike_ones_apart() {
        let lock = |name: &str, mean_ns: f64| {
            let mut lock = LockProfile { name: name.to_string(), ..LockProfile::default() };
            lock.counters.wait_ns.mean = mean_ns;
            lock
        };
        let site = "heap@PyThread_allocate_lock+0x2c (thread_pthread.h:388)";
        let long = "connection_pool_statistics_mutex";
        let locks = [lock("table_lock", 5e6), lock(site, 17_745_000.0), lock(site, 9_910_000.0), lock(long, 1e3)];
        let refs: Vec<&LockProfile> = locks.iter().collect();
        let titles = histogram_titles(&refs.iter().collect::<Vec<_>>());
        assert_eq!(
            titles,
            [
                "table_lock",
                "heap@PyThread_allocat\u{2026}ead.h:388) 17745us",
                "heap@PyThread_allocate\u{2026}ead.h:388) 9910us",
                "connection_pool_statistics_mutex",
            ]
        );
        assert!(titles.iter().all(|t| t.chars().count() <= 40));
        assert_eq!(shorten(site, 40), "heap@PyThread_allocate_loc\u{2026}thread.h:388)");
    }

    /// One lock's rows, in a run of 1 ms.
    fn rendered(lock: &LockProfile, options: &TableOptions) -> String {
        let mut out = String::new();
        render_lock(&mut out, lock, 1_000_000, options);
        out
    }

    /// Locks left out by --min-wait are counted, one in the singular.
    #[test]
    fn locks_left_out_by_min_wait_are_counted() {
        let lock = |name: &str, wait_ns: u64| {
            let mut lock = LockProfile { name: name.into(), kind: Kind::Mutex, ..LockProfile::default() };
            lock.counters.acquisitions = 1;
            lock.counters.wait_ns.total = wait_ns;
            lock
        };
        let table = |locks: Vec<LockProfile>| {
            let profile = Profile { locks, duration_ns: 1_000_000_000, ..Profile::default() };
            render_table(&profile, &TableOptions { min_wait_ns: 1_000_000, ..TableOptions::default() })
        };
        let one = table(vec![lock("a", 5_000_000), lock("b", 0)]);
        assert!(one.contains("(1 more lock waited less than 1.0ms, --min-wait)"), "{one}");
        let two = table(vec![lock("a", 5_000_000), lock("b", 0), lock("c", 10)]);
        assert!(two.contains("(2 more locks waited less than 1.0ms, --min-wait)"), "{two}");
    }

    /// An rwlock's read row has no UTIL (its holds overlap), said as `-`:
    /// it read 0.00% of a lock read-held 40% of the run. The write row has
    /// its share.
    #[test]
    fn an_rwlock_read_row_has_no_util() {
        let held = |hold_ns: u64| Counters { acquisitions: 2, hold_ns: crate::profile::Durations { total: hold_ns, ..Default::default() }, ..Counters::default() };
        let lock = LockProfile { name: "l".into(), kind: Kind::Rwlock, read: Some(held(400_000)), write: Some(held(100_000)), ..LockProfile::default() };
        let text = rendered(&lock, &TableOptions::default());
        let row = |label: &str| text.lines().find(|l| l.ends_with(&format!("  {label}"))).unwrap_or_else(|| panic!("{label}: {text}")).to_string();
        assert!(row("read").trim_start().starts_with("- "), "{text}");
        assert!(row("write").trim_start().starts_with("10.00%"), "{text}");
        assert_eq!(row("read").len() - "read".len(), row("write").len() - "write".len(), "{text}");
    }

    /// A span in its unit as it rounds: never "1000.0ms".
    #[test]
    fn spans_round_into_the_next_unit() {
        assert_eq!(span(999_990_000), "1.00s");
        assert_eq!(span(999_940_000), "999.9ms");
        assert_eq!(span(999_990), "1.0ms");
        assert_eq!(span(999_940), "999.9us");
        assert_eq!(span(1_000_000), "1.0ms");
    }

    /// A mutex taken back inside condvar waits says so under its row.
    #[test]
    fn reacquisitions_in_condvar_waits_are_explained() {
        let rendered = |reacquired: u64| {
            rendered(&LockProfile { name: "m".into(), kind: Kind::Mutex, cond_reacquire: reacquired, ..LockProfile::default() }, &TableOptions::default())
        };
        assert!(rendered(1).contains("taken back inside condvar waits: 1 acquisition of TOTAL"), "{}", rendered(1));
        assert!(rendered(8).contains("8 acquisitions of TOTAL"), "{}", rendered(8));
        assert!(!rendered(0).contains("condvar"), "{}", rendered(0));
    }

    /// Sites past `sites_per_role` are counted in one line, in the
    /// singular for one ("1 more sites waited at" before).
    #[test]
    fn sites_left_out_are_counted() {
        let rendered = |waiters: usize| {
            let site = |i: usize| SiteProfile { site: format!("worker+0x{i:x}"), role: Role::Waiter, ..SiteProfile::default() };
            let lock = LockProfile { name: "l".into(), kind: Kind::Mutex, sites: (0..waiters).map(site).collect(), ..LockProfile::default() };
            rendered(&lock, &TableOptions { sites_per_role: 2, ..TableOptions::default() })
        };
        assert!(rendered(3).contains("(1 more site waited at)"), "{}", rendered(3));
        assert!(rendered(4).contains("(2 more sites waited at)"), "{}", rendered(4));
        assert!(!rendered(2).contains("more site"), "{}", rendered(2));
    }

    /// A condvar and a semaphore are never held: their UTIL and HOLD read
    /// `-`, where they read 0.00% and 0.0us(0.0us), as if measured; a
    /// mutex's stay figures.
    #[test]
    fn what_is_never_held_shows_no_hold() {
        let row = |kind: Kind| {
            let mut lock = LockProfile { name: "l".into(), kind, ..LockProfile::default() };
            lock.counters.acquisitions = 3;
            rendered(&lock, &TableOptions::default()).lines().next().unwrap().split_whitespace().take(3).map(str::to_string).collect::<Vec<_>>()
        };
        assert_eq!(row(Kind::Cond), ["-", "0.00%", "-"]);
        assert_eq!(row(Kind::Sem), ["-", "0.00%", "-"]);
        assert_eq!(row(Kind::Mutex), ["0.00%", "0.00%", "0.0us("]);
    }

    /// The table says which of its figures are counted and which are
    /// estimated (a long hold among many short ones untimed moved HOLD
    /// and UTIL from run to run, 32% to 81%, with nothing said).
    #[test]
    fn the_table_says_what_is_estimated() {
        let lock = LockProfile { name: "l".into(), kind: Kind::Mutex, counters: Counters { acquisitions: 1, ..Counters::default() }, ..LockProfile::default() };
        let profile = Profile { locks: vec![lock], duration_ns: 1_000_000, ..Profile::default() };
        let table = render_table(&profile, &TableOptions::default());
        assert!(table.contains("counts are exact, HOLD, UTIL and delays estimated"), "{table}");
    }

    /// A site whose trylocks were all refused is where they were refused,
    /// not where threads waited (its row read 'waited at' with no wait).
    #[test]
    fn a_site_of_refused_trylocks_says_so() {
        let site = |reject: u64, contended: u64| SiteProfile {
            site: "tryer+0x10".into(),
            role: Role::Waiter,
            counters: Counters { reject, contended, ..Counters::default() },
            ..SiteProfile::default()
        };
        let lines = |site: SiteProfile| {
            let lock = LockProfile { name: "l".into(), kind: Kind::Mutex, counters: Counters { acquisitions: 1, ..Counters::default() }, sites: vec![site], ..LockProfile::default() };
            rendered(&lock, &TableOptions::default())
        };
        assert!(lines(site(50, 0)).contains("refused at tryer+0x10"), "{}", lines(site(50, 0)));
        assert!(lines(site(50, 2)).contains("waited at tryer+0x10"), "{}", lines(site(50, 2)));
    }
}
