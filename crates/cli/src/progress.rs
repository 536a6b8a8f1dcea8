//! A one-line progress indicator on stderr, only when stderr is a terminal
//! (scripts and CI logs get no carriage-return noise).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Counts steps of a long run.
pub struct Progress {
    total: usize,
    done: usize,
    visible: bool,
    started: Instant,
}

impl Progress {
    /// A run of `total` steps.
    pub fn new(total: usize) -> Self {
        Progress { total, done: 0, visible: std::io::stderr().is_terminal(), started: Instant::now() }
    }

    /// Announces the step about to run.
    pub fn step(&mut self, what: &str) {
        self.done += 1;
        if self.visible {
            let line = line(self.done, self.total, self.started.elapsed(), what, terminal_columns());
            eprint!("\r\x1b[2K{line}");
            let _ = std::io::stderr().flush();
        }
    }

    /// Clears the line.
    pub fn finish(&self) {
        if self.visible {
            eprint!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
        }
    }
}

/// The progress line of step `done` of `total`, `elapsed` into the run,
/// cut to `columns`: a line longer than the terminal wrapped, and the
/// next step's clearing left the wrapped part on screen, a stale line
/// per step. The time left is the mean step's so far (shown from the
/// third step, when there is a mean to go by).
fn line(done: usize, total: usize, elapsed: Duration, what: &str, columns: usize) -> String {
    let width = 30;
    let filled = width * done / total.max(1);
    let left = match done {
        0..=2 => String::new(),
        _ => format!(" ~{} left", short_duration(elapsed.mul_f64((total - done + 1) as f64 / (done - 1) as f64))),
    };
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
        let early = line(2, 20, Duration::from_secs(10), step, 80);
        assert!(early.chars().count() <= 79, "{early}");
        assert!(early.starts_with("[###                           ] 2/20 scorecard"), "no estimate from one step: {early}");
        // 4 steps begun, 3 done in 30 s: 10 s a step, 17 to go.
        let later = line(4, 20, Duration::from_secs(30), step, 200);
        assert!(later.contains(" 4/20 ~2m50s left scorecard:"), "{later}");
        assert!(later.ends_with("than fit"), "the whole step when it fits: {later}");
        assert_eq!(short_duration(Duration::from_secs(3725)), "1h02m");
        assert_eq!(short_duration(Duration::from_millis(300)), "1s");
    }
}
