//! The one error type of the crate.

use std::path::PathBuf;

/// Everything that can go wrong in `attn-stats`: bad observations, bad options, unreadable files.
///
/// Every variant carries enough context (index, line, file, option name) to be shown to a user as
/// is, on one line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StatsError {
    /// A sample had fewer than two observations.
    #[error("a sample needs at least 2 observations, got {len}")]
    TooFewObservations {
        /// How many observations there were.
        len: usize,
    },
    /// An observation was NaN or infinite.
    #[error("observation {index} is {value}, not a finite number")]
    NonFinite {
        /// Zero-based position of the observation in the input.
        index: usize,
        /// The offending value.
        value: f64,
    },
    /// A speedup (a ratio of medians) was asked for timings that are not all positive.
    #[error("{role} observation {index} is {value}; a speedup needs positive timings")]
    NotPositive {
        /// Which sample: `"baseline"` or `"candidate"`.
        role: &'static str,
        /// Zero-based position of the observation in the sample.
        index: usize,
        /// The offending value.
        value: f64,
    },
    /// The bootstrap draws indices as 32-bit integers.
    #[error("a sample of {len} observations is too large to bootstrap (at most {max})")]
    TooLarge {
        /// How many observations there were.
        len: usize,
        /// The largest supported sample.
        max: usize,
    },
    /// An option was out of its range.
    #[error("option {name} = {value} is invalid: {expected}")]
    InvalidOption {
        /// The option's name, as in the command line (`resamples`, `confidence`, ...).
        name: &'static str,
        /// The value given, formatted.
        value: String,
        /// What a valid value looks like.
        expected: &'static str,
    },
    /// A line of a text or CSV file was not a finite number.
    #[error("line {line}: {text:?} is not a finite number{hint}")]
    NotANumber {
        /// One-based line number.
        line: u64,
        /// The text found there.
        text: String,
        /// Extra advice (may be empty), e.g. to name a CSV column.
        hint: &'static str,
    },
    /// A line of a file of timings held a number that is not a positive timing.
    #[error("line {line}: {value} is not a positive timing")]
    NotATiming {
        /// One-based line number.
        line: u64,
        /// The number found there.
        value: f64,
    },
    /// A CSV file had no column of the requested name.
    #[error("no column named {column:?} (columns: {available})")]
    MissingColumn {
        /// The requested column.
        column: String,
        /// The header's names, comma-separated.
        available: String,
    },
    /// A CSV file could not be parsed at all.
    #[error("line {line}: malformed CSV: {message}")]
    Csv {
        /// One-based line number (0 if unknown).
        line: u64,
        /// The CSV reader's message.
        message: String,
    },
    /// Paired data whose two sides differ in length.
    #[error("paired data needs as many values on each side, got {x} and {y}")]
    Unpaired {
        /// Values of the first side.
        x: usize,
        /// Values of the second side.
        y: usize,
    },
    /// Too few pairs for a correlation.
    #[error("a rank correlation needs at least {min} pairs, got {n}")]
    TooFewPairs {
        /// Pairs given.
        n: usize,
        /// Pairs needed.
        min: usize,
    },
    /// One side of paired data is constant: no ranking, no correlation.
    #[error("the {which} values are all equal: a correlation with a constant is undefined")]
    Constant {
        /// `"first"` or `"second"`.
        which: &'static str,
    },
    /// A file held no numbers at all.
    #[error("no numbers found")]
    Empty,
    /// A file held exactly one number.
    #[error("only one number found (line {line}); a sample needs at least 2")]
    SingleValue {
        /// One-based line number of the one number.
        line: u64,
    },
    /// A file could not be read.
    #[error("cannot read: {message}")]
    Io {
        /// The operating system's message.
        message: String,
    },
    /// Any of the above, in a named file.
    // The inner error is part of the message rather than a `source`, so that `to_string()` alone
    // reads "a.txt: line 3: ..." and error chains do not repeat it.
    #[error("{}: {error}", path.display())]
    InFile {
        /// The file.
        path: PathBuf,
        /// What went wrong in it.
        error: Box<StatsError>,
    },
}
