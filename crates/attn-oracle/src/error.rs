//! The crate's one error type.

use std::path::PathBuf;

use attn_problem::{DType, ProblemError, RowId};

/// Everything that can go wrong in this crate; each variant carries the context needed to act on it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OracleError {
    /// A problem that is not one: bad shape or dtype text, a zero extent, unrunnable lengths.
    #[error(transparent)]
    Problem(#[from] ProblemError),
    /// Text that is not a distribution name.
    #[error("unknown distribution {input:?} (expected one of: {expected})")]
    ParseDistribution {
        /// The text given.
        input: String,
        /// The accepted names, comma separated.
        expected: String,
    },
    /// A tensor whose dims do not fit the others (Q is `[B,H,S_q,D]`, K and V `[B,H,S_kv,D]`).
    #[error("tensor {tensor} has dims {found:?}, expected {expected}")]
    DimsMismatch {
        /// Which tensor: "q", "k", "v" or "output".
        tensor: &'static str,
        /// What was expected, in words.
        expected: String,
        /// The dims it has.
        found: [usize; 4],
    },
    /// A tensor whose data length is not the product of its dims.
    #[error("tensor with dims {dims:?} holds {found} elements, expected {expected}")]
    DataLength {
        /// The tensor's dims.
        dims: [usize; 4],
        /// Product of the dims.
        expected: usize,
        /// Elements actually held.
        found: usize,
    },
    /// A byte buffer of the wrong length for the tensor it should hold.
    #[error(
        "{found} bytes cannot hold a {dtype} tensor with dims {dims:?} ({expected} bytes expected)"
    )]
    ByteLength {
        /// The requested dims.
        dims: [usize; 4],
        /// The requested element type.
        dtype: DType,
        /// Bytes needed.
        expected: usize,
        /// Bytes given.
        found: usize,
    },
    /// `HostTensor::dtype` on f64 data: f64 exists on the host only (references, fixtures).
    #[error("tensor with dims {dims:?} holds f64 data, which is not a device dtype")]
    NoDeviceDType {
        /// The tensor's dims.
        dims: [usize; 4],
    },
    /// A softmax scale that is NaN or infinite.
    #[error("softmax scale {scale} is not finite")]
    InvalidScale {
        /// The scale given.
        scale: f64,
    },
    /// A row selection that cannot be honoured.
    #[error("invalid row selection (rows_per_head={rows_per_head}): {reason}")]
    InvalidRowSelection {
        /// The requested rows per (batch, head).
        rows_per_head: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A forward logsumexp given to the backward that is NaN or infinite for a row that sees keys.
    #[error(
        "logsumexp {value} at batch {}, head {}, row {}: that row sees keys, so the backward needs the forward's finite logsumexp",
        row.batch, row.head, row.row
    )]
    InvalidLse {
        /// The row (batch, query head, query row).
        row: RowId,
        /// The value given.
        value: f64,
    },
    /// Tile sizes for the tiled algorithm that are zero.
    #[error("invalid tile sizes block_m={block_m}, block_n={block_n}: both must be >= 1")]
    InvalidBlocks {
        /// Query rows per tile.
        block_m: usize,
        /// Keys per tile.
        block_n: usize,
    },
    /// An I/O failure on a file.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file that is not a `.npy` this crate can read.
    #[error("{}: not a supported .npy file: {reason}", path.display())]
    Npy {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Input files that cannot make one problem as they are (see `npy::read_inputs`): the message
    /// names the file and says what to do.
    #[error("{message}")]
    Input {
        /// The file refused (of several, the one that does not fit the others).
        path: PathBuf,
        /// What is wrong, on one line, the file named as the caller labelled it.
        message: String,
    },
}
