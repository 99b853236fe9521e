//! Progress for long steps: a bar on a terminal; where stderr is not one (a log, CI), the bar is
//! hidden and a [`Progress::logged`] one writes a timestamped line per step instead, so a run cut
//! off by a timeout still says what it was doing.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps named `what`, drawn only on a terminal.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!("{what} {{bar:30}} {{pos}}/{{len}} {{msg}}"))
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// A bar whose steps and lines also reach a log when it is hidden.
pub struct Progress {
    bar: ProgressBar,
    what: String,
    started: Instant,
}

impl Progress {
    /// A bar of `len` steps named `what`.
    pub fn logged(len: u64, what: &str) -> Progress {
        Progress {
            bar: bar(len, what),
            what: what.to_string(),
            started: Instant::now(),
        }
    }

    /// The step now under way.
    pub fn step(&self, message: String) {
        if self.bar.is_hidden() {
            eprintln!("{}", self.log_line(&message));
        }
        self.bar.set_message(message);
    }

    /// A line above the bar (in the log where the bar is hidden).
    pub fn println(&self, line: String) {
        if self.bar.is_hidden() {
            eprintln!("{}", self.log_line(line.trim_start()));
        } else {
            self.bar.println(line);
        }
    }

    /// `n` steps done.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    /// Removes the bar.
    pub fn finish_and_clear(&self) {
        self.bar.finish_and_clear();
    }

    fn log_line(&self, message: &str) -> String {
        format!(
            "{} {}/{} [{:.0} s] {message}",
            self.what,
            self.bar.position(),
            self.bar.length().unwrap_or(0),
            self.started.elapsed().as_secs_f64()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Progress;

    #[test]
    fn a_hidden_bar_logs_its_position_and_the_time_taken() {
        let progress = Progress::logged(3, "gate");
        progress.inc(1);
        let line = progress.log_line("2,16,8192,128: passed");
        assert!(
            line.starts_with("gate 1/3 [") && line.ends_with(" s] 2,16,8192,128: passed"),
            "{line}"
        );
    }
}
