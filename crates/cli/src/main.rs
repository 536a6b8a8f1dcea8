//! `lockmeter`: measure lock contention, and cure it with better locks.

/// A line on stderr that cannot panic: `eprintln!` panics when stderr is
/// closed or full, and a lost message must not turn the exit status a
/// script reads into 101 (`lockmeter run -- CMD 2>&1 | head -1` did, where
/// CMD's own status was due).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `println!` for results: a stdout that cannot be written (a full disk,
/// a device that refuses) ends the command with one line and exit 1,
/// where `println!` panicked (exit 101), after a bench's whole run.
macro_rules! outln {
    () => {
        $crate::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` as [`outln!`] does it.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::write_stdout(format_args!($($arg)*))
    };
}

/// Writes to stdout, flushed; see [`outln!`]. On an error it unwinds to
/// `main` (whose exit code is then 1), so that what the command holds is
/// dropped on the way: the demo's scratch directory was left behind by
/// an exit from here.
fn write_stdout(text: std::fmt::Arguments) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let closed = || std::io::Error::from_raw_os_error(libc::EBADF);
    let written = if args::stdout_was_closed() { Err(closed()) } else { stdout.write_fmt(text).and_then(|()| stdout.flush()) };
    if let Err(e) = written {
        say!("lockmeter: error: writing to stdout: {}", lockmeter_stats::profile::io_reason(&e));
        // (resume_unwind: no panic message.)
        std::panic::resume_unwind(Box::new(StdoutFailed));
    }
}

/// The unwinding of a failed write to stdout.
struct StdoutFailed;

fn main() -> ExitCode {
    match std::panic::catch_unwind(command_main) {
        Ok(code) => code,
        Err(payload) if payload.is::<StdoutFailed>() => ExitCode::from(1),
        Err(payload) => std::panic::resume_unwind(payload),
    }
}

mod advise;
mod args;
mod bench;
mod demo;
mod progress;
mod oncpu;
mod run;
mod stop;
mod torture;

use clap::{Parser, Subcommand};
use lockmeter_locks::Algorithm;
use std::process::ExitCode;

const ABOUT: &str = "Measure lock contention in real programs, and cure it with better locks.";

const LONG_ABOUT: &str = "\
Measure lock contention in real programs, and cure it with better locks.

lockmeter brings the Linux kernel's lock engineering to userspace: an
adaptive mutex that spins only while the lock owner runs on a CPU and
sleeps otherwise, the classic futex, ticket, MCS and PI locks to compare it
with, and lockmeter's statistics (UTIL, CON, HOLD, WAIT, NOWAIT, SPIN,
SLEEP, REJECT, log2-cycle wait histograms) for every lock.

The locks are a Rust library (lock_api types) and a C library
(include/lockmeter.h, liblockmeter.so).";

#[derive(Parser)]
#[command(name = "lockmeter", version, about = ABOUT, long_about = LONG_ABOUT, after_help = algorithms_help())]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show, in under a minute, what lockmeter does: every algorithm and
    /// the peer locks on this machine, their statistics and histograms.
    ///
    /// Runs our locks and glibc's, Rust std's and parking_lot's mutexes side
    /// by side in one process, interleaved (every lock runs once before any
    /// runs twice), and prints medians: the cost of an uncontended
    /// lock+unlock pair, throughput and fairness under contention, the
    /// lockmeter report of each of our locks, seed 000's wait histogram,
    /// seed 003's scaling test drawn as a plot (lockmeter-demo.svg); then
    /// a bundled C program profiled, cured (`advise`, its plot beside
    /// the first) and profiled hung, a torture of every algorithm and of
    /// a broken lock it must catch, and adaptive with the on-CPU table
    /// (as root).
    ///
    /// Exit status: 0; 1 when a lock failed its torture (or the broken
    /// one was not caught) or a measurement could not run; 2 for bad
    /// options. The sections on the bundled C program need a C compiler
    /// (cc, or $CC) and a writable temporary directory: without them they
    /// are skipped, each saying why, and the status stays 0. ^C or SIGTERM
    /// stops it, removes its files, and it dies of the signal.
    #[command(verbatim_doc_comment)]
    Demo {
        /// Rounds of every measurement (medians are over rounds) [default: 3; --quick: 1].
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50), allow_hyphen_values = true)]
        rounds: Option<u32>,
        /// Length of each contended run, e.g. 300ms or 1s, 1ms or more [default: 300ms; --quick: 50ms].
        #[arg(long, value_parser = args::millisecond_or_more, allow_hyphen_values = true)]
        run: Option<std::time::Duration>,
        /// A fast smoke run (1 round, 50 ms runs, unless --rounds or --run
        /// say otherwise): checks everything works, measures nothing worth
        /// quoting.
        #[arg(long)]
        quick: bool,
        /// Where to draw the scaling plot (.svg or .png), and the advise
        /// plot beside it (NAME-advise.svg or .png) [default: lockmeter-demo.svg,
        /// skipped with a warning where it cannot be written].
        #[arg(long, value_name = "FILE")]
        plot: Option<std::path::PathBuf>,
    },
    /// Reproduce the seeds' experiments: our locks against the peers, in
    /// one process, interleaved, with tables, JSON/CSV and plots.
    ///
    /// Every point (lock x threads x period x duty) runs --repeat times; every
    /// point runs once before any runs twice, so a slow moment of a noisy
    /// machine hits every lock alike. Figures are medians over repeats;
    /// beside our locks' ratios to the best peer, their lowest and highest
    /// round (each round's runs of the two against each other).
    /// Per point: ops/s, the physical limit and efficiency (duty), ops per
    /// CPU-second (spinning costs CPU), how our locks acquired (spun / slept),
    /// wait-time percentiles from 1 in 8 acquisitions with seed 000's
    /// log2-cycle histogram and the share of waits over 1 ms (a p99 can sit
    /// on the edge of a bimodal tail), and fairness: per-thread operations, the
    /// largest share of the run any thread spent blocked (a wide spread
    /// with no thread blocked is the scheduler's, not the lock's),
    /// operations per ms on a CPU, most / fewest of any thread (low for a
    /// thread the lock keeps failing), and why the least served thread
    /// did little: its time awake, CPU share and rate against the median
    /// thread's. Each workload's --help has its options and examples.
    ///
    /// Examples:
    ///   lockmeter bench duty --locks adaptive,peers --threads 2,16 --period 20000 --duty 50
    ///   lockmeter bench sem --format json --output sem.json --plot sem.svg
    ///   lockmeter bench dir --fs /tmp/scratch --threads 1,2,4
    ///   lockmeter bench pair --locks tas-floor,adaptive,peers
    ///   lockmeter bench scorecard --threads 1,2,4,16,64,256,1024 --pin
    ///
    /// Exit status: 0 when every run ran and what was asked was written,
    /// whatever the figures; 2 for bad options (an output path that cannot
    /// be written, found before the first run, included); 1 when a
    /// measurement could not run or an output could not be written after
    /// the runs. ^C, SIGTERM or SIGHUP ends the run in progress, writes
    /// no file, and it dies of the signal; duty, sem and dir first show
    /// the rounds every point finished, if one did.
    #[command(verbatim_doc_comment)]
    Bench {
        #[command(subcommand)]
        workload: bench::Workload,
    },
    /// Draw the plots of a saved `lockmeter bench --format json` report,
    /// without running it again.
    ///
    /// Exit status: 0 when drawn; 2 for bad options, a file that is not a
    /// bench report, or a plot path that cannot be written, found before
    /// drawing; 1 when a plot cannot be drawn, or its writing fails.
    ///
    /// Example: lockmeter plot duty.json --histogram hist.svg --threads 16 --locks adaptive,futex,parking_lot
    Plot {
        /// A report written by `lockmeter bench --format json`.
        report: std::path::PathBuf,
        /// Throughput against threads, to FILE.svg or FILE.png.
        #[arg(long, value_name = "FILE")]
        throughput: Option<std::path::PathBuf>,
        /// The acquisition-time histogram of every lock, to FILE.svg or FILE.png.
        #[arg(long, value_name = "FILE")]
        histogram: Option<std::path::PathBuf>,
        /// Thread count whose histogram to draw [default: the largest].
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..), allow_hyphen_values = true)]
        threads: Option<u64>,
        /// Draw only these locks (comma-separated names from the report).
        #[arg(long)]
        locks: Option<String>,
    },
    /// Profile an unmodified program's pthread locks: which locks hurt,
    /// where, and how much.
    ///
    /// Runs CMD with liblockmeter.so preloaded. glibc's mutexes, rwlocks,
    /// spinlocks, condvars and semaphores keep working exactly as before;
    /// each acquisition is counted per lock and per call site. When CMD
    /// exits, the lockmeter table goes to stderr (or -o FILE): per lock UTIL,
    /// CON, HOLD mean(max), WAIT mean(max), TOTAL, NOWAIT, SPIN and SLEEP
    /// (how waits were spent: `-` for glibc's locks, which cannot tell;
    /// known under --lock), REJECT and NAME (the variable's symbol, or
    /// heap@SITE for a lock on the heap), the call sites that waited and
    /// those that held (with the waiter-weighted delay they caused), seed
    /// 000's log2-cycle wait histogram, and the profiler's own health.
    /// Every process of the tree gets its own profile, a process CMD left
    /// running too: lockmeter waits for it after CMD ends, and says so (^C
    /// stops the wait). CMD's exit status is lockmeter's (128+N if a
    /// signal killed it). SIGTERM, SIGHUP and the user signals sent to
    /// lockmeter are passed on to CMD; lockmeter ends of a ^C, SIGTERM or
    /// SIGHUP it received when CMD died of it, or when it came after CMD
    /// ended.
    ///
    /// Examples:
    ///   lockmeter run -- ./server --threads 8
    ///   lockmeter run -o prof.json --format json -- make -j4
    ///   lockmeter run --frames 8 --format flamegraph -o waits.svg -- ./db_bench
    ///   lockmeter run --interval 5s -- ./long-running-daemon
    ///   lockmeter run --lock adaptive -- ./server     (serve its locks with ours)
    ///   lockmeter run --lock adaptive --no-profile -- ./server   (serve them, record nothing)
    ///   lockmeter run --lock adaptive --oncpu -- ./server   (adaptive asks the kernel who runs)
    #[command(verbatim_doc_comment)]
    Run {
        /// Write the profile here instead of stderr (other processes of the
        /// tree: FILE with their pid before the extension).
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<std::path::PathBuf>,
        #[command(flatten)]
        rendering: RenderArgs,
        /// Serve CMD's pthread mutexes and condvars with this algorithm
        /// (adaptive, futex, futex-tid, pi, ticket, mcs, spin): every mutex type
        /// keeps its POSIX behaviour; robust, PI, priority-protect and
        /// process-shared objects stay glibc's. The report then has real SPIN
        /// and SLEEP columns.
        #[arg(long, value_name = "ALG", value_parser = served_algorithm)]
        lock: Option<Algorithm>,
        /// With --lock: serve CMD's locks and record nothing (no report),
        /// as `advise` measures them. Recording costs about 10 ns an
        /// acquisition (more where locks are contended), which a program
        /// taking its lock tens of millions of times a second feels.
        #[arg(long, requires = "lock", conflicts_with_all = ["output", "frames", "interval", "max_locks", "format", "merge", "sort", "min_wait"])]
        no_profile: bool,
        /// Capture up to N frames of the stack of each contended acquisition.
        #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=32), allow_hyphen_values = true)]
        frames: u64,
        /// Also report every DUR while CMD runs (for long-running servers).
        #[arg(long, value_name = "DUR", value_parser = args::positive_duration, allow_hyphen_values = true)]
        interval: Option<std::time::Duration>,
        /// Track up to N locks alive at once (default 16384, at most 1048576;
        /// rounded up to a power of two, at least 64). Operations on locks beyond it are
        /// not recorded, and the report says how many. A lock destroyed and
        /// initialised again at its address by the same line continues one
        /// row, so only locks alive together count. Each thread reserves
        /// about 3 KB of address space per lock, touched where it records.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_048_576), allow_hyphen_values = true)]
        max_locks: Option<u64>,
        /// Load a private on-CPU table for CMD (a BPF program recording which
        /// of CMD's threads run; needs CAP_BPF and CAP_PERFMON, or root), so
        /// `adaptive` spins exactly while the owner runs. Unloaded when CMD
        /// ends; nothing is pinned.
        #[arg(long)]
        oncpu: bool,
        /// The program and its arguments (after --).
        #[arg(trailing_var_arg = true, value_name = "CMD")]
        command: Vec<std::ffi::OsString>,
    },
    /// The system-wide on-CPU table: which thread runs on which CPU, for
    /// programs that use lockmeter's locks directly (the C library, or the
    /// Rust crate calling lockmeter_oncpu::install_from_environment).
    ///
    /// A BPF program on the scheduler's context switch writes one slot per
    /// thread; `adaptive` reads its owner's slot with one load and spins
    /// only while the owner is on a CPU (the kernel mutex's rule). Without
    /// the table it falls back to sampling the owner's CPU clock.
    ///
    /// The table is pinned in a BPF filesystem mounted at /run/lockmeter,
    /// owned by root and the --group, mode 0660: mapping a BPF map needs a
    /// writable descriptor, so readers get write access too; it is never
    /// world-accessible. Limits:
    /// a slot is a hint that may be stale when read; a vCPU preempted by the
    /// hypervisor still looks running; a thread reads unknown until it is
    /// first switched in after enable.
    ///
    /// Examples:
    ///   sudo lockmeter oncpu enable --group lockusers
    ///   lockmeter oncpu status         (exit 0 if loaded or usable, 1 if not)
    ///   sudo lockmeter oncpu disable
    #[command(verbatim_doc_comment)]
    Oncpu {
        #[command(subcommand)]
        action: oncpu::Action,
    },
    /// Would one of our locks make CMD faster? Runs it under glibc's locks
    /// and under each algorithm, interleaved and repeated, and says.
    ///
    /// Every round runs every variant once (glibc first, then each of ours
    /// serving CMD's pthread mutexes and condvars), so a slow moment of the
    /// machine falls on all of them alike. Reports wall and CPU time, and
    /// with --metric a figure scraped from CMD's output (higher is better),
    /// each as a ratio to glibc: the median and range of the per-round
    /// ratios (the verdict's rule is below). A variant under which CMD
    /// fails is left out from that round on, its row saying why. A
    /// variant still running at 10 times
    /// glibc's wall time of its round (and at least 1 s past it) is
    /// stopped there, its process group killed, and runs no more: the
    /// table says so, and it is in no verdict and no plot.
    /// A plot of the ratios is drawn to --plot. CMD runs many times, so its
    /// standard input is empty (/dev/null), or --input FILE, read afresh
    /// each run.
    ///
    /// CMD runs once more first, under the profiler, to count its pthread
    /// lock operations; a statically linked CMD whose tree showed none,
    /// which no preload reaches, is refused. Wall time runs to CMD's end (not to that of a process
    /// it leaves running); --metric reads the last match, in stdout, else
    /// in stderr, from its first group that matched (else the whole
    /// match).
    ///
    /// It recommends one of ours when its median gains 3% or more and it
    /// beat glibc by 3% or more in enough of the rounds that the best of
    /// those tried would do so by luck at most 5% of the time (a sign
    /// test: 5 of 5 rounds, 9 of 10, 20 of 30 for one variant). A program
    /// that runs for a fixed time changes its throughput, not its wall
    /// time: give --metric.
    ///
    /// Exit status: 0 when every round ran (or stopped a variant so) and
    /// the plot, if any, was written, whatever the verdict (its first words say it:
    /// "Recommendation:", "Keep glibc's locks", "No recommendation"); 1
    /// when CMD failed under some lock, --metric found no throughput in
    /// its output, or the plot could not be written; 2 for bad options;
    /// 126 or 127 when CMD cannot be run. ^C or SIGTERM (passed on to
    /// CMD) stops it: no other run starts, the rounds complete before the
    /// stop are judged (the header says how many), no plot is written,
    /// and it dies of the signal.
    ///
    /// Examples:
    ///   lockmeter advise -- ./loader big-input.csv
    ///   lockmeter advise --metric '([0-9.]+) req/s' -- ./server --bench 5s
    ///   lockmeter advise --locks adaptive,mcs --repeat 9 --metric 'ops/s: ([0-9.]+)' -- ./bench
    ///   lockmeter advise --input lines.txt -- sort --parallel=2
    #[command(verbatim_doc_comment)]
    Advise {
        /// Our algorithms to try (comma-separated, or all).
        #[arg(long, default_value = "all", value_parser = advise::variants)]
        locks: std::vec::Vec<advise::Variant>,
        /// Rounds; medians and ranges are over these [default: the fewest in
        /// which a clean sweep by chance stays under 5%: 5 for one of our
        /// locks, 8 for all seven].
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100), allow_hyphen_values = true)]
        repeat: Option<u64>,
        /// A regular expression finding a throughput figure in CMD's output
        /// (its last match, in stdout, else in stderr; its first group that
        /// matched, else the whole match); higher is better.
        #[arg(long, value_name = "REGEX", value_parser = metric_regex)]
        metric: Option<regex::Regex>,
        /// Where to draw the ratios (.svg or .png) [default: lockmeter-advise.svg, replaced
        /// if there, skipped with a warning where it cannot be written].
        #[arg(long, value_name = "FILE")]
        plot: Option<std::path::PathBuf>,
        /// Draw no plot (the default one replaced a file of its name in the
        /// working directory, and could not be turned off).
        #[arg(long, conflicts_with = "plot")]
        no_plot: bool,
        /// A file (a regular one) for CMD's standard input, opened again
        /// for every run [default: none, /dev/null].
        #[arg(long, value_name = "FILE")]
        input: Option<std::path::PathBuf>,
        /// The program and its arguments (after --).
        #[arg(trailing_var_arg = true, value_name = "CMD")]
        command: Vec<std::ffi::OsString>,
    },
    /// Userspace locktorture: beat on each lock and check it never breaks.
    ///
    /// Writer threads take the lock (lock, trylock and timed lock in a random
    /// mix) and hold it for random short times while checking exclusion on
    /// shadow data (an owner slot and a counter a second holder would
    /// corrupt); producers and consumers pass numbered tokens through a
    /// queue under a second lock and two condvars (none may be lost or
    /// duplicated); a watchdog fails the run when a thread makes no progress
    /// for --stall. Per run: acquisitions per second, per-thread min..max and
    /// their spread (fairness), the longest wait, and for our locks how many
    /// waits spun or slept. `busted`, a deliberately broken lock, must fail.
    /// Exit status 0 when every run was clean, 1 (naming the violation and
    /// the seed) otherwise. ^C, SIGTERM or SIGHUP ends the run in progress
    /// at once (and the starting of its threads), keeps the runs that
    /// ended (table rows, or the JSON of them), and it dies of the signal.
    ///
    /// Examples:
    ///   lockmeter torture                                  (every algorithm, 4 threads, 5 s)
    ///   lockmeter torture --lock adaptive,mcs --threads 2,16,128 --seconds 60
    ///   lockmeter torture --lock busted --seconds 5        (must fail)
    #[command(verbatim_doc_comment)]
    Torture {
        /// Locks: algorithms, all, or busted.
        #[arg(long, default_value = "all", value_parser = torture::subjects)]
        lock: std::vec::Vec<lockmeter_bench::torture::Subject>,
        /// Writer thread counts, comma-separated.
        #[arg(long, default_value = "4", value_parser = args::thread_list, allow_hyphen_values = true)]
        threads: args::List<usize>,
        /// Length of each run, e.g. 5s or 500ms.
        #[arg(long, default_value = "5s", value_parser = args::positive_duration, allow_hyphen_values = true)]
        seconds: std::time::Duration,
        /// Seed of every random choice [default: from the clock]; a failing
        /// run prints it.
        #[arg(long)]
        seed: Option<u64>,
        /// A thread without progress this long, or waiting this long for a
        /// lock, fails the run.
        #[arg(long, default_value = "5s", value_parser = args::millisecond_or_more, allow_hyphen_values = true)]
        stall: std::time::Duration,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: TortureFormat,
    },
    /// Render saved profiles (from `lockmeter run -o FILE --format json`
    /// or LOCKMETER_OUTPUT) in any format. Several files (the processes of
    /// one run: FILE and FILE.PID) render one after the other in table,
    /// csv and folded; json, pprof and flamegraph take one. A saved bench
    /// report (`bench --save`) renders as its table, csv or json.
    ///
    /// Exit status: 0 when rendered; 2 for bad options, a file that
    /// cannot be read as a profile, or an output path that cannot be
    /// written, found before rendering (a directory, a missing one); 1
    /// when writing the output fails (a full disk).
    ///
    /// Examples:
    ///   lockmeter report prof.json --format pprof -o prof.pb.gz
    ///   lockmeter report prof*.json --min-wait 1ms
    ///   lockmeter report scorecard.json
    #[command(verbatim_doc_comment)]
    Report {
        /// The profiles (JSON).
        #[arg(required = true, num_args = 1..)]
        files: Vec<std::path::PathBuf>,
        #[command(flatten)]
        rendering: RenderArgs,
        /// Write here instead of stdout.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<std::path::PathBuf>,
    },
    /// List the lock algorithms, with when to pick each.
    Algorithms,
}

/// How a profile is shown (`run` and `report`).
#[derive(clap::Args)]
struct RenderArgs {
    /// Output format [default: table; with -o, the one its name ends in:
    /// .json, .csv, .folded, .pb.gz or .pprof, .svg for flamegraph].
    #[arg(long, value_enum)]
    format: Option<run::Format>,
    /// Order of locks (table, csv): wait, hold, contended or acquisitions.
    #[arg(long, default_value = "wait", value_parser = sort_key)]
    sort: lockmeter_stats::profile::SortKey,
    /// Hide locks that waited less than this in total, e.g. 1ms (every
    /// format; json is the whole profile without it).
    #[arg(long, value_name = "DUR", default_value = "0s", value_parser = args::duration, allow_hyphen_values = true)]
    min_wait: std::time::Duration,
    /// Fold locks of the same name (one lock per object made at one
    /// place; a global's locks, NAME and NAME+0x28: an array's elements,
    /// or a struct's fields, which symbols cannot tell apart) into one
    /// row, counters and sites summed; UTIL is the busiest lock's.
    #[arg(long)]
    merge: bool,
}

impl RenderArgs {
    /// The rendering asked for; without --format, the one `output`'s name
    /// asks for (a table written to x.json could not be read back).
    fn rendering(self, output: Option<&std::path::Path>) -> run::Rendering {
        let format = self.format.or_else(|| output.and_then(run::Format::of_file_name)).unwrap_or(run::Format::Table);
        run::Rendering { format, merge: self.merge, sort: self.sort, min_wait: self.min_wait }
    }
}

/// Output of `torture`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum TortureFormat {
    Table,
    Json,
}

fn metric_regex(text: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(text).map_err(|e| format!("not a regular expression: {}", e.to_string().lines().last().unwrap_or("")))
}

fn served_algorithm(text: &str) -> Result<Algorithm, String> {
    if text == "busted" {
        return Err("busted is a deliberately broken lock for `lockmeter torture`: it never serves a program".into());
    }
    text.parse::<Algorithm>().map_err(|e| e.to_string())
}

fn sort_key(text: &str) -> Result<lockmeter_stats::profile::SortKey, String> {
    lockmeter_stats::profile::SortKey::parse(text)
        .ok_or_else(|| format!("{text:?} is not a sort key (wait, hold, contended, acquisitions)"))
}

fn algorithms_help() -> String {
    let mut s = String::from("Lock algorithms:\n");
    for a in Algorithm::ALL {
        s.push_str(&format!("  {:<10} {}\n", a.name(), a.summary()));
    }
    s.push_str("\nEnvironment: LOCKMETER_SPIN=0 turns spinning off; LOCKMETER_HANDOFF_US sets adaptive's starvation bound (default 1000).");
    s
}

/// A usage error as one line: clap's first line, and when that line
/// introduces a list ("the following required arguments were not
/// provided:"), the list's items after it.
fn one_line(rendered: &str) -> String {
    let mut lines = rendered.lines().map(str::trim);
    let first = lines.next().unwrap_or("invalid arguments").trim_start_matches("error: ");
    // Rust's words for a count given a sign ('-1') or a fraction.
    let first = first.replace("invalid digit found in string", "not a count (a whole number without a sign)");
    if !first.ends_with(':') {
        return first;
    }
    let items: Vec<&str> = lines.take_while(|line| !line.is_empty()).collect();
    format!("{first} {}", items.join(", "))
}

/// What clap's full message adds below its first line, on the same line:
/// the values a closed option takes, and the value, option or subcommand
/// meant (`--format jsn`: "; possible values: table, json, ...; did you
/// mean 'json'?"), and its tips (a negative number passed after `--`).
fn hints(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let mut hints = Vec::new();
    for (kind, value) in e.context() {
        let text = match value {
            ContextValue::String(s) => s.clone(),
            ContextValue::Strings(s) => s.join(", "),
            ContextValue::StyledStr(s) => s.to_string(),
            ContextValue::StyledStrs(s) => s.iter().map(ToString::to_string).filter(|s| !s.trim().is_empty()).collect::<Vec<_>>().join("; "),
            _ => continue,
        };
        let hint = match kind {
            // `lockmeter bench report FILE`: the commands that take a saved
            // report are lockmeter's own.
            ContextKind::InvalidSubcommand if text == "report" || text == "plot" => {
                format!("a saved report is `lockmeter {text} FILE`")
            }
            // (An option that takes any value, given none, lists none:
            // "possible values: " with nothing after it.)
            ContextKind::ValidValue if text.trim().is_empty() => continue,
            ContextKind::ValidValue => format!("possible values: {text}"),
            ContextKind::SuggestedValue | ContextKind::SuggestedArg | ContextKind::SuggestedSubcommand => {
                format!("did you mean '{}'", text.trim_matches('\''))
            }
            ContextKind::Suggested => text,
            _ => continue,
        };
        if !hint.trim().is_empty() {
            hints.push(hint);
        }
    }
    hints.iter().map(|h| format!("; {}", h.trim())).collect()
}

/// The subcommand the command line names (`bench pair`, `run`), if its
/// first arguments are one.
fn subcommand_named() -> Option<String> {
    use clap::CommandFactory;
    let mut command = Cli::command();
    let mut named = Vec::new();
    for arg in std::env::args_os().skip(1) {
        let Some(sub) = arg.to_str().and_then(|arg| command.find_subcommand(arg)) else { break };
        let sub = sub.clone();
        named.push(sub.get_name().to_string());
        command = sub;
    }
    (!named.is_empty()).then(|| named.join(" "))
}

/// The plot to draw: the one asked for, which must be drawable (an error
/// said here, before any work, is `Err`), or else `default`, a bonus that
/// an unwritable working directory only loses (`None`, with a warning
/// that begins with `lost`).
fn plot_to_draw(
    asked: Option<std::path::PathBuf>,
    default: &str,
    check: impl Fn(&std::path::Path) -> Result<(), String>,
    lost: &str,
) -> Result<Option<std::path::PathBuf>, ()> {
    match asked {
        Some(plot) => match check(&plot) {
            Ok(()) => Ok(Some(plot)),
            Err(message) => {
                say!("lockmeter: error: {message}");
                Err(())
            }
        },
        None => {
            let plot = std::path::PathBuf::from(default);
            match check(&plot) {
                Ok(()) => Ok(Some(plot)),
                Err(message) => {
                    say!("lockmeter: warning: {lost}: {message}");
                    Ok(None)
                }
            }
        }
    }
}

fn command_main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version (to a closed stdout, lost: said so).
            if args::stdout_was_closed() {
                say!("lockmeter: error: writing to stdout: Bad file descriptor");
                return ExitCode::FAILURE;
            }
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // `lockmeter`, `lockmeter oncpu`: no command given; the help
            // lists them. A usage error still, for scripts.
            eprint!("{}", e.render());
            return ExitCode::from(2);
        }
        Err(e) => {
            // One line, like every other error; --help has the rest (the
            // subcommand's own, when the error is in one).
            let help = subcommand_named().map_or("lockmeter --help".to_string(), |sub| format!("lockmeter {sub} --help"));
            say!("lockmeter: error: {}{} (see {help})", one_line(&e.render().to_string()), hints(&e));
            return ExitCode::from(2);
        }
    };
    if !matches!(cli.command, Command::Run { .. }) {
        // A reader that goes away (`lockmeter bench | head`) ends the
        // command quietly, as it ends other Unix tools. `run` keeps the
        // signal ignored: it outlives a closed stderr to pass on CMD's
        // status (its children get the default back at exec).
        // SAFETY: setting a signal disposition before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let result = match cli.command {
        Command::Demo { rounds, run, quick, plot } => {
            let check = |plot: &std::path::Path| args::check_plot_path(plot).and_then(|()| args::check_plot_path(&demo::advise_plot(plot)));
            let Ok(plot) = plot_to_draw(plot, "lockmeter-demo.svg", check, "no plots") else { return ExitCode::from(2) };
            let settings = if quick {
                let run = run.unwrap_or(std::time::Duration::from_millis(50));
                demo::Settings { rounds: rounds.unwrap_or(1), run, pairs: 200_000, plot }
            } else {
                let run = run.unwrap_or(std::time::Duration::from_millis(300));
                demo::Settings { rounds: rounds.unwrap_or(3), run, pairs: 2_000_000, plot }
            };
            let result = demo::run(&settings);
            if let Some(signal) = stop::requested() {
                if let Err(message) = &result {
                    say!("lockmeter: {message}");
                }
                stop::die_of(signal);
                return ExitCode::from(128 + signal as u8);
            }
            result
        }
        Command::Bench { workload } => {
            let options = bench::Options::new(workload);
            if let Err(message) = bench::validate(&options) {
                say!("lockmeter: error: {message}");
                return ExitCode::from(2);
            }
            let result = bench::run(options);
            // A stop that came after the last run still ends the bench
            // by its signal, once what was measured is written.
            if let Some(signal) = lockmeter_bench::interrupt::requested() {
                if let Err(message) = &result {
                    say!("lockmeter: {message}");
                }
                // Dying of the signal, not exiting 128 + it: a shell loop
                // running the bench stops at ^C only for a child killed
                // by SIGINT (its other rounds ran on).
                stop::die_of(signal);
                return ExitCode::from(128 + signal as u8);
            }
            result
        }
        Command::Plot { report, throughput, histogram, threads, locks } => {
            let drawn = bench::plot_saved(&report, throughput.as_deref(), histogram.as_deref(), threads.map(|t| t as usize), locks.as_deref());
            return match drawn {
                Ok(()) => ExitCode::SUCCESS,
                Err(failure) => {
                    say!("lockmeter: error: {}", failure.message);
                    ExitCode::from(failure.code)
                }
            };
        }
        Command::Oncpu { action } => return oncpu::main(action),
        Command::Run { output, rendering, lock, no_profile, frames, interval, max_locks, oncpu, command } => {
            let options = run::RunOptions {
                command,
                lock,
                no_profile,
                oncpu,
                rendering: rendering.rendering(output.as_deref()),
                output,
                frames: frames as usize,
                interval,
                max_locks: max_locks.map(|n| n as usize),
            };
            return match run::run(&options) {
                Ok(code) => code,
                Err(failure) => {
                    say!("lockmeter: error: {}", failure.message);
                    ExitCode::from(failure.code)
                }
            };
        }
        Command::Torture { lock, threads, seconds, seed, stall, format } => {
            let seed = seed.unwrap_or_else(|| {
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64 % 1_000_000_007)
            });
            let options = torture::Options {
                subjects: lock,
                threads: threads.0,
                duration: seconds,
                seed,
                stall,
                json: format == TortureFormat::Json,
            };
            // ^C, SIGTERM and SIGHUP end the run in progress at once, as
            // the bench's do, and lockmeter dies of the signal, saying so
            // (killed outright, it left the progress line and no word).
            stop::install();
            let result = torture::torture(&options);
            if let Some(signal) = stop::requested() {
                say!("lockmeter: torture interrupted; the runs finished before it are above");
                stop::die_of(signal);
                return ExitCode::from(128 + signal as u8);
            }
            return match result {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(message) => {
                    say!("lockmeter: error: {message}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Advise { locks, repeat, metric, plot, no_plot, input, command } => {
            let plot = if no_plot { Ok(None) } else { plot_to_draw(plot, "lockmeter-advise.svg", args::check_plot_path, "no plot") };
            let Ok(plot) = plot else {
                return ExitCode::from(2);
            };
            // Ours only: the first variant is glibc.
            let repeat = repeat.map_or_else(|| advise::rounds_for_significance(locks.len() - 1), |r| r as usize);
            if let Some(input) = &input {
                // Opened again for every run: a pipe or a FIFO would give
                // its data to the first run alone (and a FIFO's open
                // blocks), so only a file will do.
                let regular = |m: std::fs::Metadata| match m.is_file() {
                    true => Ok(()),
                    false => Err(std::io::Error::other("not a regular file (every run reads it again: save a stream to a file first)")),
                };
                if let Err(e) = std::fs::metadata(input).and_then(regular).and_then(|()| std::fs::File::open(input).map(drop)) {
                    say!("lockmeter: error: --input {}: {}", input.display(), lockmeter_stats::profile::io_reason(&e));
                    return ExitCode::from(2);
                }
            }
            let options = advise::Options { shown_as: advise::shown(&command), command, variants: locks, repeat, metric, plot, input };
            stop::install();
            return match (advise::advise(&options), stop::requested()) {
                (Ok(()), None) => ExitCode::SUCCESS,
                // Stopped after its last run: what it printed stands, but
                // the stop is still its end, as a shell loop needs.
                (Ok(()), Some(signal)) => {
                    stop::die_of(signal);
                    ExitCode::from(128 + signal as u8)
                }
                (Err(failure), Some(signal)) => {
                    say!("lockmeter: {}", failure.message);
                    stop::die_of(signal);
                    ExitCode::from(128 + signal as u8)
                }
                (Err(failure), None) => {
                    say!("lockmeter: error: {}", failure.message);
                    ExitCode::from(failure.code)
                }
            };
        }
        Command::Report { files, rendering, output } => {
            let rendering = rendering.rendering(output.as_deref());
            let usage = |message: String| {
                say!("lockmeter: error: {message}");
                ExitCode::from(2)
            };
            if let Some(Err(message)) = output.as_deref().map(|o| args::check_not_an_input(o, &files)) {
                return usage(message);
            }
            let bench_report = files.iter().find(|f| bench::is_saved_report(f));
            let reported = match (files.as_slice(), bench_report) {
                ([_, _, ..], Some(bench_report)) => {
                    return usage(format!("{} is a bench report, which renders alone: give it by itself", bench_report.display()));
                }
                (_, Some(bench_report)) if rendering.merge || rendering.sort != lockmeter_stats::profile::SortKey::Wait || !rendering.min_wait.is_zero() => {
                    return usage(format!(
                        "--sort, --min-wait and --merge choose the rows of a profile; {} is a bench report, shown whole",
                        bench_report.display()
                    ));
                }
                (_, Some(bench_report)) => bench::report_saved(bench_report, rendering.format, output.as_deref()),
                (_, None) => run::report(&files, &rendering, output.as_deref()),
            };
            return match reported {
                Ok(()) => ExitCode::SUCCESS,
                Err(failure) => {
                    say!("lockmeter: error: {}", failure.message);
                    ExitCode::from(failure.code)
                }
            };
        }
        Command::Algorithms => {
            for a in Algorithm::ALL {
                outln!("{:<10} {}", a.name(), a.summary());
            }
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            say!("lockmeter: error: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usage_error_keeps_the_list_its_first_line_announces() {
        let missing = "error: the following required arguments were not provided:\n  <FILES>\n  <X>\n\nUsage: lockmeter report <FILES>...\n";
        assert_eq!(one_line(missing), "the following required arguments were not provided: <FILES>, <X>");
        let invalid = "error: invalid value 'x' for '--threads <THREADS>': not a number\n\nFor more information, try '--help'.\n";
        assert_eq!(one_line(invalid), "invalid value 'x' for '--threads <THREADS>': not a number");
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
