//! The one error type of this crate.

/// Everything that can go wrong while describing or resuming a search.
#[derive(Debug, thiserror::Error)]
pub enum EvoError {
    /// A knob was declared with no values.
    #[error("knob {knob} has an empty domain")]
    EmptyDomain {
        /// The knob.
        knob: String,
    },
    /// A knob was declared twice, or a value twice in one domain.
    #[error("knob {knob}: {what} declared twice")]
    Duplicate {
        /// The knob.
        knob: String,
        /// The knob itself or one of its values.
        what: String,
    },
    /// `--knob NAME=v1,v2,...` could not be parsed.
    #[error("`{text}` is not NAME=v1,v2,...: {reason}")]
    KnobSyntax {
        /// What was given.
        text: String,
        /// Why it is wrong.
        reason: String,
    },
    /// The search has no knob at all.
    #[error("the search space has no knobs")]
    NoKnobs,
    /// Options that cannot work (population 0, rates outside [0, 1]...).
    #[error("invalid search options: {0}")]
    Options(String),
    /// A declared knob value outside the target's domain.
    #[error("knob {knob}: {value} is outside its domain {domain:?}")]
    OutsideDomain {
        /// The knob.
        knob: String,
        /// The value declared.
        value: i64,
        /// The values the target allows.
        domain: Vec<i64>,
    },
    /// A declared knob the target does not have.
    #[error("knob {knob}: `{target}` has no such knob")]
    UnknownKnob {
        /// The knob.
        knob: String,
        /// The target searched.
        target: String,
    },
    /// A new run in a folder that already has a log.
    #[error("{} exists: continue it with --resume {}", log.display(), dir.display())]
    RunExists {
        /// The log found.
        log: std::path::PathBuf,
        /// The run's folder.
        dir: std::path::PathBuf,
    },
    /// The baseline could not be measured: a search has nothing to compare with.
    #[error("the baseline {name} failed on GPU {device}: {status}")]
    Baseline {
        /// The baseline.
        name: String,
        /// The GPU it ran on.
        device: usize,
        /// Why it failed (`invalid: ...`).
        status: String,
    },
    /// Samples the statistics refuse.
    #[error(transparent)]
    Stats(#[from] attn_stats::StatsError),
    /// A run's file could not be read or written.
    #[error(transparent)]
    Evidence(#[from] attn_evidence::EvidenceError),
    /// Micro's ranking and a search cannot be compared (too few configs in common, another head
    /// dim), said in one line with what to do.
    #[error("{0}")]
    Correlation(String),
    /// A row of a search log that does not fit the space (resume).
    #[error("log row {row}: {reason}")]
    LogRow {
        /// 1-based data row number.
        row: usize,
        /// Why it does not fit.
        reason: String,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = EvoError> = std::result::Result<T, E>;
