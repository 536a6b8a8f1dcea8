//! Property tests of the profile format (seeded random cases, no external
//! crate): any profile survives JSON, CSV, folded and pprof rendering; a
//! corrupt or truncated file is a one-line error, never a panic.

use lockmeter_stats::profile::{self, Counters, Durations, Health, InProgress, Kind, OnCpuUse, LockProfile, Profile, Role, SiteProfile, StackProfile};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn text(&mut self) -> String {
        const PIECES: [&str; 10] = ["cache_lock", "heap@f+0x1c", "a,b", "quote\"d", "semi;colon", "ünïcode", "sp ace", "tab\t", "new\nline", "x"];
        (0..1 + self.below(3)).map(|_| PIECES[self.below(PIECES.len() as u64) as usize]).collect()
    }
    fn counters(&mut self, known: bool) -> Counters {
        let acquisitions = self.below(1_000_000);
        let contended = self.below(acquisitions + 1);
        Counters {
            acquisitions,
            nowait: acquisitions - contended,
            contended,
            spin: known.then_some(contended / 2),
            sleep: known.then_some(contended - contended / 2),
            reject: self.below(100),
            timeout: self.below(10),
            wait_ns: Durations::new(self.below(1 << 40), contended, self.below(1 << 30)),
            hold_ns: Durations::new(self.below(1 << 40), acquisitions, self.below(1 << 30)),
            delay_ns: self.below(1 << 40),
        }
    }
}

fn random_profile(rng: &mut Rng) -> Profile {
    let kinds = [Kind::Mutex, Kind::Rwlock, Kind::Spin, Kind::Sem, Kind::Cond];
    let locks = (0..rng.below(6))
        .map(|_| {
            let kind = kinds[rng.below(5) as usize];
            let known = rng.below(2) == 0;
            LockProfile {
                name: rng.text(),
                kind,
                address: format!("{:#x}", rng.next()),
                generation: rng.below(3) as u32,
                locks: 1 + rng.below(3),
                counters: rng.counters(known),
                cond_reacquire: rng.below(5),
                util_pct: rng.below(10_000) as f64 / 100.0,
                hist_wait_log2_cycles: (0..rng.below(40)).map(|_| rng.below(1000)).collect(),
                read: (kind == Kind::Rwlock).then(|| rng.counters(false)),
                write: (kind == Kind::Rwlock).then(|| rng.counters(false)),
                sites: (0..rng.below(4))
                    .map(|_| SiteProfile {
                        site: rng.text(),
                        address: format!("{:#x}", rng.next()),
                        object: (rng.below(2) == 0).then(|| rng.text()),
                        file: (rng.below(2) == 0).then(|| rng.text()),
                        line: (rng.below(2) == 0).then(|| rng.below(10_000) as u32),
                        role: if rng.below(2) == 0 { Role::Waiter } else { Role::Holder },
                        counters: rng.counters(known),
                    })
                    .collect(),
                stacks: (0..rng.below(3))
                    .map(|_| StackProfile { frames: (0..1 + rng.below(4)).map(|_| rng.text()).collect(), sources: Vec::new(), contended: rng.below(99), wait_ns: rng.below(1 << 30) })
                    .collect(),
                now: (rng.below(3) == 0).then(|| InProgress {
                    holders: rng.below(3),
                    held_ns: rng.below(1 << 40),
                    readers: rng.below(3),
                    waiters: rng.below(5),
                    waited_ns: rng.below(1 << 40),
                }),
            }
        })
        .collect();
    Profile {
        format: profile::FORMAT.into(),
        version: profile::VERSION,
        program: rng.text(),
        pid: rng.below(1 << 22) as u32,
        ppid: rng.below(1 << 22) as u32,
        duration_ns: rng.below(1 << 40),
        cycles_per_ns: 2.5,
        mode: "profile".into(),
        reason: "exit".into(),
        locks,
        health: Health { events: rng.below(1 << 30), warnings: vec![rng.text()], ..Health::default() },
        oncpu: (rng.below(2) == 0).then(|| OnCpuUse {
            table: "none".into(),
            absent_because: Some(rng.text()),
            spins_by_table: rng.below(1 << 30),
            spins_by_cpu_clock: rng.below(1 << 30),
            spins_undecided: rng.below(1 << 30),
        }),
    }
}

#[test]
fn every_profile_round_trips_through_json_and_renders_everywhere() {
    let mut rng = Rng(0x1234_5678);
    for case in 0..300 {
        let original = random_profile(&mut rng);
        let json = original.to_json();
        let again = Profile::from_json(&json, "case").unwrap_or_else(|e| panic!("case {case}: {e}"));
        assert_eq!(again, original, "case {case}");
        let csv = profile::to_csv(&original);
        let used_rows: usize = original
            .used_locks()
            .map(|l| 1 + usize::from(l.read.is_some()) + usize::from(l.write.is_some()) + l.sites.len())
            .sum();
        // Every record is one row, however its names are quoted.
        let records = csv.matches(&format!("{},", original.pid)).count();
        assert!(records >= used_rows, "case {case}: {records} rows for {used_rows} records");
        for line in profile::to_folded(&original).lines() {
            let weight = line.rsplit(' ').next().unwrap();
            assert!(weight.parse::<u64>().is_ok(), "case {case}: folded line without a weight: {line:?}");
        }
        let pprof = profile::to_pprof(&original);
        assert_eq!(&pprof[..2], &[0x1f, 0x8b]);
        let table = profile::render_table(&original, &profile::TableOptions::default());
        assert!(table.starts_with("lockmeter: "), "case {case}");
    }
}

#[test]
fn corrupt_and_truncated_profiles_are_one_line_errors() {
    let mut rng = Rng(0x9876_5431);
    for case in 0..100 {
        let json = random_profile(&mut rng).to_json();
        let bytes = json.as_bytes();
        // Every truncation.
        for cut in (0..bytes.len()).step_by(1 + bytes.len() / 40) {
            let text = String::from_utf8_lossy(&bytes[..cut]);
            match Profile::from_json(&text, "f.json") {
                Ok(_) => panic!("case {case}: a profile truncated to {cut} bytes parsed"),
                Err(e) => assert!(!e.0.contains('\n') && e.0.starts_with("f.json "), "case {case}: {e}"),
            }
        }
        // Random byte damage: an error or (rarely) still a valid profile,
        // never a panic.
        for _ in 0..20 {
            let mut damaged = bytes.to_vec();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(damaged.len() as u64) as usize;
                damaged[at] = rng.below(256) as u8;
            }
            if let Err(e) = Profile::from_json(&String::from_utf8_lossy(&damaged), "f.json") {
                assert!(!e.0.contains('\n'), "case {case}: {e}");
            }
        }
    }
}

#[test]
fn merging_by_name_keeps_every_lock_and_acquisition() {
    let mut rng = Rng(0x9abc_def0);
    for case in 0..300 {
        let mut original = random_profile(&mut rng);
        // Few names, so that rows meet.
        for lock in &mut original.locks {
            lock.name = ["a", "b"][rng.below(2) as usize].to_string();
        }
        let merged = original.merged_by_name();
        let mut groups: Vec<(String, Kind)> = original.locks.iter().map(|l| (l.name.clone(), l.kind)).collect();
        groups.sort_by(|a, b| (a.0.as_str(), a.1 as u8).cmp(&(b.0.as_str(), b.1 as u8)));
        groups.dedup();
        assert_eq!(merged.locks.len(), groups.len(), "case {case}: one row per name and kind");
        for row in &merged.locks {
            let of = original.locks.iter().filter(|l| l.name == row.name && l.kind == row.kind);
            assert_eq!(row.locks, of.clone().map(|l| l.locks).sum::<u64>(), "case {case}: locks");
            assert_eq!(row.counters.acquisitions, of.map(|l| l.counters.acquisitions).sum::<u64>(), "case {case}");
        }
    }
}

#[test]
fn a_profile_written_before_rows_counted_locks_reads_one_lock_per_row() {
    let mut rng = Rng(7);
    let mut original = random_profile(&mut rng);
    while original.locks.is_empty() {
        original = random_profile(&mut rng);
    }
    let mut json: serde_json::Value = serde_json::from_str(&original.to_json()).unwrap();
    for lock in json["locks"].as_array_mut().unwrap() {
        lock.as_object_mut().unwrap().remove("locks");
    }
    let old = Profile::from_json(&json.to_string(), "old").unwrap();
    assert!(old.locks.iter().all(|l| l.locks == 1));
}

#[test]
fn merging_folds_a_global_array_and_keeps_the_busiest_util() {
    let mut rng = Rng(11);
    let mut lock = |name: &str, util_pct: f64| {
        let mut profile = random_profile(&mut rng);
        while profile.locks.is_empty() {
            profile = random_profile(&mut rng);
        }
        LockProfile { name: name.to_string(), kind: Kind::Mutex, util_pct, locks: 1, ..profile.locks[0].clone() }
    };
    let locks = vec![
        lock("stripes", 60.0),
        lock("stripes+0x28", 70.0),
        lock("stripes+0x50", 65.0),
        lock("heap@conn_new+0x2b (conn.c:12)", 10.0),
        lock("heap@conn_new+0x3c (conn.c:14)", 20.0),
        lock("table+0xzz", 5.0),
        lock("static@git+0x38c840", 30.0),
        lock("static@git+0x38c868", 40.0),
    ];
    let mut rng = Rng(12);
    let profile = Profile { locks, ..random_profile(&mut rng) };
    let merged = profile.merged_by_name();
    let names: Vec<(&str, u64)> = merged.locks.iter().map(|l| (l.name.as_str(), l.locks)).collect();
    assert_eq!(
        names,
        [
            ("stripes", 3),
            ("heap@conn_new+0x2b (conn.c:12)", 1),
            ("heap@conn_new+0x3c (conn.c:14)", 1),
            ("table+0xzz", 1),
            ("static@git+0x38c840", 1),
            ("static@git+0x38c868", 1)
        ],
        "an array's elements fold; a heap lock's call-site offset is its own, a stripped object's static's address too"
    );
    assert_eq!(merged.locks[0].util_pct, 70.0, "UTIL is the busiest element's, not a sum over 100%");
}

/// A hold's mean stays over holds when locks merge: two recursive mutexes,
/// each held once for 10 ms in 4 nested acquisitions, merge to a mean of
/// 10 ms (it read 2.5 ms, over the 8 acquisitions).
#[test]
fn merging_keeps_the_mean_hold_over_holds() {
    let recursive = |name: &str| LockProfile {
        name: name.into(),
        kind: Kind::Mutex,
        locks: 1,
        counters: Counters {
            acquisitions: 4,
            nowait: 4,
            hold_ns: Durations::new(10_000_000, 1, 10_000_000),
            ..Counters::default()
        },
        ..LockProfile::default()
    };
    let profile = Profile { locks: vec![recursive("r"), recursive("r+0x28")], ..Profile::default() };
    let merged = profile.merged_by_name();
    assert_eq!(merged.locks.len(), 1);
    let hold = &merged.locks[0].counters.hold_ns;
    assert_eq!((hold.total, hold.mean), (20_000_000, 10_000_000.0));
}

/// Sorted by wait, a lock waited for now (a hung program's) counts its
/// waits in progress: it came below locks with short finished waits.
#[test]
fn a_wait_in_progress_sorts_and_filters_as_a_wait() {
    let finished = |name: &str, wait_ns: u64| LockProfile {
        name: name.into(),
        counters: Counters { acquisitions: 10, wait_ns: Durations { total: wait_ns, ..Durations::default() }, ..Counters::default() },
        ..LockProfile::default()
    };
    let stuck = LockProfile {
        name: "stuck".into(),
        counters: Counters { acquisitions: 1, ..Counters::default() },
        now: Some(InProgress { holders: 1, waiters: 1, waited_ns: 1_400_000_000, ..InProgress::default() }),
        ..LockProfile::default()
    };
    let profile = Profile { locks: vec![finished("busy", 36_000_000), stuck, finished("idle", 5)], ..Profile::default() };
    let order: Vec<&str> = profile::selected_locks(&profile, profile::SortKey::Wait, 0).iter().map(|l| l.name.as_str()).collect();
    assert_eq!(order, ["stuck", "busy", "idle"]);
    let kept: Vec<&str> = profile::selected_locks(&profile, profile::SortKey::Wait, 1_000_000).iter().map(|l| l.name.as_str()).collect();
    assert_eq!(kept, ["stuck", "busy"]);
}

/// The histograms are the most waited-for locks' whatever the rows' order:
/// sorted by acquisitions, the three locks taken most were drawn and the
/// most waited-for, taken least, left out.
#[test]
fn the_histograms_are_the_most_waited_fors_in_any_order() {
    let lock = |name: &str, acquisitions: u64, wait_ms: u64| LockProfile {
        name: name.into(),
        kind: Kind::Mutex,
        locks: 1,
        counters: Counters {
            acquisitions,
            contended: 1,
            wait_ns: Durations::new(wait_ms * 1_000_000, 1, wait_ms * 1_000_000),
            ..Counters::default()
        },
        hist_wait_log2_cycles: vec![0, 0, 1],
        ..LockProfile::default()
    };
    let profile = Profile {
        locks: vec![lock("taken_most", 1000, 20), lock("waited_most", 10, 50), lock("third", 500, 30), lock("second", 400, 40)],
        duration_ns: 1_000_000_000,
        ..Profile::default()
    };
    let options = profile::TableOptions { sort: profile::SortKey::Acquisitions, ..profile::TableOptions::default() };
    let table = profile::render_table(&profile, &options);
    let histograms = &table[table.find("wait time, log2 cycles").expect("a histogram section")..];
    let titles = histograms.lines().nth(1).unwrap_or("");
    for drawn in ["waited_most", "second", "third"] {
        assert!(titles.contains(drawn), "{drawn} drawn: {histograms}");
    }
    assert!(!titles.contains("taken_most"), "the least waited-for left out: {histograms}");
}
