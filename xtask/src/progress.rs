//! Progress bars for long steps (hidden when stdout is not a terminal: logs stay clean).

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps named `what`.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!("{what} {{bar:30}} {{pos}}/{{len}} {{msg}}"))
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}
