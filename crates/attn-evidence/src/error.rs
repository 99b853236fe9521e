//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong reading or writing evidence. Every variant names the file (or the
/// text) it is about, so a one-line message is enough to find the problem.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// A file or directory could not be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// A file could not be written (or its temporary file renamed into place).
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The destination file.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// A file is not valid JSON, or does not match the schema of its kind.
    #[error("{}: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// Where in the file and what was wrong.
        source: serde_json::Error,
    },
    /// A value could not be turned into JSON (a non-finite number in a map key, say).
    #[error("encoding {what} as JSON: {source}")]
    Encode {
        /// What was being encoded.
        what: String,
        /// The serializer's error.
        source: serde_json::Error,
    },
    /// A JSON file whose `"kind"` is neither `"gate"` nor `"bench"`.
    #[error("{}: evidence kind {kind:?} is not \"gate\" or \"bench\"", path.display())]
    UnknownKind {
        /// The file.
        path: PathBuf,
        /// The kind found (empty when the field is missing).
        kind: String,
    },
    /// A file of another kind than the one read (a `best.json` given where a `finalists.json` is
    /// expected).
    #[error("{}: a file of kind {found}, not {expected}", path.display())]
    WrongKind {
        /// The file.
        path: PathBuf,
        /// The kind wanted.
        expected: crate::EvidenceKind,
        /// The kind found.
        found: crate::EvidenceKind,
    },
    /// A file written by a newer version of the schema than this build understands.
    #[error("{}: schema version {found} is newer than this build's {supported}; update attn", path.display())]
    SchemaTooNew {
        /// The file.
        path: PathBuf,
        /// The file's `"schema"`.
        found: u64,
        /// [`crate::SCHEMA_VERSION`].
        supported: u32,
    },
    /// A CSV file (evolution log) that could not be read or written.
    #[error("{}: {message}", path.display())]
    Csv {
        /// The file (`<memory>` for [`crate::BenchRun::to_csv`]).
        path: PathBuf,
        /// What went wrong, with the line number when known.
        message: String,
    },
    /// Problem text such as `"4,16,1024,64 causal"` that could not be parsed, or a bad dtype.
    #[error(transparent)]
    Problem(#[from] attn_problem::ProblemError),
    /// A micro-benchmark target that does not exist.
    #[error("unknown micro target {0:?} (hopper or cp-async)")]
    MicroTarget(String),
    /// A compute-sanitizer tool that does not exist.
    #[error("unknown compute-sanitizer tool {0:?} (memcheck, racecheck, synccheck or initcheck)")]
    SanitizeTool(String),
}
