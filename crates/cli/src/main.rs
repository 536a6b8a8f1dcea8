//! `lockmeter`: measure lock contention, and cure it with better locks.

mod demo;
mod progress;

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
    /// lockmeter report of each of our locks, and seed 000's wait histogram.
    Demo {
        /// Rounds of every measurement (medians are over rounds).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
        rounds: u32,
        /// Length of each contended run, e.g. 300ms or 1s.
        #[arg(long, default_value = "300ms", value_parser = parse_duration)]
        run: std::time::Duration,
        /// A fast smoke run (1 round, 50 ms runs): checks everything works,
        /// measures nothing worth quoting.
        #[arg(long)]
        quick: bool,
    },
    /// List the lock algorithms, with when to pick each.
    Algorithms,
}

fn algorithms_help() -> String {
    let mut s = String::from("Lock algorithms:\n");
    for a in Algorithm::ALL {
        s.push_str(&format!("  {:<10} {}\n", a.name(), a.summary()));
    }
    s.push_str("\nEnvironment: LOCKMETER_SPIN=0 turns spinning off; LOCKMETER_HANDOFF_US sets adaptive's starvation bound (default 1000).");
    s
}

/// Parses "300ms", "2s", "1.5s", "500us" or plain seconds ("2").
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(text.len());
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
        _ => return Err(format!("'{text}': unknown unit '{unit}' (use ns, us, ms, s or min)")),
    };
    if !value.is_finite() || value < 0.0 {
        return Err(format!("'{text}' is not a duration (it must be zero or positive)"));
    }
    Ok(std::time::Duration::from_secs_f64(value * scale))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { rounds, run, quick } => {
            let settings = if quick {
                demo::Settings { rounds: 1, run: std::time::Duration::from_millis(50), pairs: 200_000 }
            } else {
                demo::Settings { rounds, run, pairs: 2_000_000 }
            };
            demo::run(&settings)
        }
        Command::Algorithms => {
            for a in Algorithm::ALL {
                println!("{:<10} {}", a.name(), a.summary());
            }
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("lockmeter: error: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("300ms"), Ok(std::time::Duration::from_millis(300)));
        assert_eq!(parse_duration("2"), Ok(std::time::Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(std::time::Duration::from_millis(1500)));
        assert_eq!(parse_duration("500us"), Ok(std::time::Duration::from_micros(500)));
        assert!(parse_duration("fast").unwrap_err().contains("not a duration"));
        assert!(parse_duration("3 weeks").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("NaNs").is_err());
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
