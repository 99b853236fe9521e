//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can stop a report from being built or written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// An evidence file could not be read or does not match the schema (the message names it).
    #[error(transparent)]
    Evidence(#[from] attn_evidence::EvidenceError),
    /// An Nsight Compute evidence file could not be read (the message names it).
    #[error(transparent)]
    Ncu(#[from] attn_ncu::NcuError),
    /// The evidence directory is missing or holds no evidence: a report from it would replace a
    /// real one with an empty page, so none is built.
    #[error("no evidence in {}: {reason}; nothing was written", path.display())]
    NoEvidence {
        /// The directory given.
        path: PathBuf,
        /// `the directory does not exist` or what it lacks.
        reason: &'static str,
    },
    /// A chart could not be drawn.
    #[error("drawing chart {chart}: {message}")]
    Chart {
        /// The chart's file name, e.g. `progression.svg`.
        chart: String,
        /// The plotting library's message.
        message: String,
    },
    /// A report file could not be read (for `--check`).
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}
