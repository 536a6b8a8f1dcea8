//! A one-line progress indicator on stderr, only when stderr is a terminal
//! (scripts and CI logs get no carriage-return noise).

use std::io::{IsTerminal, Write};

/// Counts steps of a long run.
pub struct Progress {
    total: usize,
    done: usize,
    visible: bool,
}

impl Progress {
    /// A run of `total` steps.
    pub fn new(total: usize) -> Self {
        Progress { total, done: 0, visible: std::io::stderr().is_terminal() }
    }

    /// Announces the step about to run.
    pub fn step(&mut self, what: &str) {
        self.done += 1;
        if self.visible {
            let width = 30;
            let filled = width * self.done / self.total.max(1);
            eprint!(
                "\r\x1b[2K[{}{}] {}/{} {what}",
                "#".repeat(filled),
                " ".repeat(width - filled),
                self.done,
                self.total
            );
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
