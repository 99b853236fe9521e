//! The one error type of attn-measure.

use thiserror::Error;

/// What can go wrong while measuring; every variant prints as one line with its context.
#[derive(Debug, Error)]
pub enum MeasureError {
    /// A CUDA, NVRTC or launch failure (the kernel crate's error, with its context).
    #[error(transparent)]
    Kernel(#[from] attn_kernels::KernelError),
    /// A bad problem or an oracle failure.
    #[error(transparent)]
    Oracle(#[from] attn_oracle::OracleError),
    /// A problem that is not one (bad shape text, a zero extent, unrunnable lengths).
    #[error(transparent)]
    Problem(#[from] attn_oracle::ProblemError),
    /// A statistics failure (too few samples, bad options).
    #[error(transparent)]
    Stats(#[from] attn_stats::StatsError),
    /// An evidence file that cannot be read or written.
    #[error(transparent)]
    Evidence(#[from] attn_evidence::EvidenceError),
    /// Nsight Compute could not be found or could not profile (its own one-line errors).
    #[error(transparent)]
    Ncu(#[from] attn_ncu::NcuError),
    /// A search that cannot be set up, resumed or driven (attn-evo's own one-line errors).
    #[error(transparent)]
    Evo(#[from] attn_evo::EvoError),
    /// PyTorch SDPA could not be used or failed on a job.
    #[error("PyTorch SDPA: {0}")]
    Sdpa(String),
    /// A Python callable broke its calling contract, in the helper's words: a candidate's
    /// verdict ([`crate::py_gate::Refusal::status`]), a baseline's reason it cannot run.
    #[error("{message}")]
    Refused {
        /// How.
        refusal: crate::py_gate::Refusal,
        /// One line.
        message: String,
    },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, e.g. "starting python3".
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// compute-sanitizer is not where it was looked for; found before anything runs.
    #[error("{name} not found {looked} (compute-sanitizer ships with the CUDA toolkit; put it on PATH or give its path)")]
    SanitizerNotFound {
        /// The program looked for.
        name: String,
        /// Where: `at PATH`, or `on PATH, in ...`.
        looked: String,
    },
    /// compute-sanitizer could not judge the candidate (the target failed without a finding, the
    /// run timed out, the sanitizer could not start it).
    #[error("compute-sanitizer {0}")]
    Sanitizer(String),
    /// A request that makes no sense (unknown suite, bad option), said in one line.
    #[error("{0}")]
    Invalid(String),
}

/// The result type of attn-measure.
pub type Result<T> = std::result::Result<T, MeasureError>;
