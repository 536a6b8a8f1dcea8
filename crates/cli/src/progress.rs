//! A one-line progress indicator on stderr when stderr is a terminal;
//! elsewhere (scripts, CI logs, `nohup`) a plain line every half minute of
//! a long run, and none for a short one.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How often a log (stderr not a terminal) gets a line.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// Counts steps of a long run.
pub struct Progress {
    /// Each step's expected length, relative to the others.
    weights: Vec<f64>,
    done: usize,
    visible: bool,
    started: Instant,
    logged: Instant,
}

impl Progress {
    /// A run of `total` steps of about one length.
    pub fn new(total: usize) -> Self {
        Self::weighted(vec![1.0; total])
    }

    /// A run of steps of the `planned` lengths, in order: the time left is
    /// the time so far scaled by the planned time left (counted in steps,
    /// a scorecard read '~3s left' with 36 s of 3-second runs to go).
    pub fn planned(planned: Vec<Duration>) -> Self {
        Self::weighted(planned.iter().map(Duration::as_secs_f64).collect())
    }

    fn weighted(weights: Vec<f64>) -> Self {
        let now = Instant::now();
        Progress { weights, done: 0, visible: std::io::stderr().is_terminal(), started: now, logged: now }
    }

    /// Announces the step about to run.
    pub fn step(&mut self, what: &str) {
        self.done += 1;
        let elapsed = self.started.elapsed();
        let left = time_left(&self.weights, self.done, elapsed);
        if self.visible {
            let line = line(self.done, self.weights.len(), left, what, terminal_columns());
            eprint!("\r\x1b[2K{line}");
            let _ = std::io::stderr().flush();
        } else if self.logged.elapsed() >= LOG_EVERY {
            self.logged = Instant::now();
            let left = left.map_or(String::new(), |left| format!(", ~{} left", short_duration(left)));
            // (A closed stderr loses the line, not the run.)
            let _ = writeln!(std::io::stderr(), "lockmeter: {}/{} after {}{left}: {what}", self.done, self.weights.len(), short_duration(elapsed));
        }
    }

    /// Counts a step that will not run (a variant stopped for good): the
    /// count ends at its total.
    pub fn skip(&mut self) {
        self.done += 1;
    }

    /// Clears the line.
    pub fn finish(&self) {
        if self.visible {
            eprint!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
        }
    }
}

/// The time left when step `begun` (from 1) of steps of `weights` begins,
/// `elapsed` into the run: the time so far scaled by the planned time
/// left, shown from the third step, when there is a pace to go by.
fn time_left(weights: &[f64], begun: usize, elapsed: Duration) -> Option<Duration> {
    let finished: f64 = weights.iter().take(begun.saturating_sub(1)).sum();
    let total: f64 = weights.iter().sum();
    (begun > 2 && finished > 0.0).then(|| elapsed.mul_f64(((total - finished) / finished).max(0.0)))
}

/// The progress line of step `done` of `total`, with the time `left` if
/// known (from the third step, when there is a pace to go by), cut to
/// `columns`: a line longer than the terminal wrapped, and the next
/// step's clearing left the wrapped part on screen, a stale line per
/// step.
fn line(done: usize, total: usize, left: Option<Duration>, what: &str, columns: usize) -> String {
    let width = 30;
    let filled = width * done / total.max(1);
    let left = left.map_or(String::new(), |left| format!(" ~{} left", short_duration(left)));
    let line = format!("[{}{}] {done}/{total}{left} {what}", "#".repeat(filled), " ".repeat(width - filled));
    // One column spare: a line that fills the last one wraps on some
    // terminals.
    line.chars().take(columns.saturating_sub(1).max(width + 2)).collect()
}

/// "45s", "3m05s", "1h02m" (rounded up: "0s left" read as done).
fn short_duration(d: Duration) -> String {
    let s = d.as_secs_f64().ceil() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

/// stderr's terminal's width, 80 if it cannot say.
fn terminal_columns() -> usize {
    // SAFETY: a zeroed winsize is valid storage for TIOCGWINSZ to fill.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes a winsize to the pointer given.
    let known = unsafe { libc::ioctl(2, libc::TIOCGWINSZ, &mut size) } == 0 && size.ws_col > 0;
    if known { usize::from(size.ws_col) } else { 80 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_fits_the_terminal_and_says_the_time_left() {
        let step = "scorecard: duty adaptive P=40000ns D=90% 256 threads, run 3/5, and more words than fit";
        let early = line(2, 20, None, step, 80);
        assert!(early.chars().count() <= 79, "{early}");
        assert!(early.starts_with("[###                           ] 2/20 scorecard"), "no estimate: {early}");
        let later = line(4, 20, Some(Duration::from_secs(170)), step, 200);
        assert!(later.contains(" 4/20 ~2m50s left scorecard:"), "{later}");
        assert!(later.ends_with("than fit"), "the whole step when it fits: {later}");
        assert_eq!(short_duration(Duration::from_secs(3725)), "1h02m");
    }

    /// The time left is the planned time left at the pace so far: four
    /// 1-second runs took 8 s, so the two 3-second runs to go take 12 s
    /// (counted in runs, 4 s).
    #[test]
    fn the_time_left_follows_the_planned_lengths() {
        let weights = [1.0, 1.0, 1.0, 1.0, 3.0, 3.0];
        assert_eq!(time_left(&weights, 5, Duration::from_secs(8)), Some(Duration::from_secs(12)));
        assert_eq!(time_left(&[1.0; 6], 5, Duration::from_secs(8)), Some(Duration::from_secs(4)));
        assert_eq!(time_left(&weights, 2, Duration::from_secs(2)), None, "one step is no pace");
        assert_eq!(short_duration(Duration::from_millis(300)), "1s");
    }
}
