//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong while running ncu, parsing its CSV or storing evidence.
///
/// Messages are one line and, where the user can act, say what to do.
#[derive(Debug, thiserror::Error)]
pub enum NcuError {
    /// The text has no ncu CSV header (`"ID","Process ID",...`).
    #[error(
        "no ncu CSV header found (expected a line starting with \"ID\"; was ncu run with --csv?)"
    )]
    NoHeader,

    /// The header is CSV but neither the `details` nor the `raw` page layout.
    #[error("line {line}: unrecognised ncu CSV header: missing column {missing:?}")]
    UnrecognisedHeader {
        /// 1-based line of the header in the input.
        line: usize,
        /// The column we looked for and did not find.
        missing: String,
    },

    /// A row could not be read as CSV, or has the wrong number of fields.
    #[error("line {line}: malformed CSV row: {message}")]
    MalformedRow {
        /// 1-based line in the input.
        line: usize,
        /// What the CSV reader or the field count check said.
        message: String,
    },

    /// The launch ID column holds something that is not a non-negative integer.
    #[error("line {line}: launch ID {value:?} is not a non-negative integer")]
    BadLaunchId {
        /// 1-based line in the input.
        line: usize,
        /// The text found in the ID column.
        value: String,
    },

    /// A kernel filter given as `regex:...` is not a valid regular expression.
    #[error("kernel filter {pattern:?} is not a valid regex: {message}")]
    BadPattern {
        /// The pattern as given, without the `regex:` prefix.
        pattern: String,
        /// What the regex compiler said.
        message: String,
    },

    /// A metric needed for a computation is absent or `n/a` for this kernel.
    #[error("kernel {kernel:?}: metric {metric} is missing or n/a (add it to the metric set)")]
    MissingMetric {
        /// The kernel (possibly truncated for readability).
        kernel: String,
        /// The metric name.
        metric: String,
    },

    /// No kernel of a capture matches the kernel filter.
    #[error("no kernel in {capture} matches {filter:?}; kernels there: {}", kernels.join(" | "))]
    NoMatchingKernel {
        /// The capture (its file name).
        capture: String,
        /// The filter as given (empty when none).
        filter: String,
        /// The kernels the capture holds, shortened.
        kernels: Vec<String>,
    },

    /// A metric-set name that is not a [`crate::metrics::Purpose`].
    #[error(
        "unknown purpose {0:?} (overview, tensor, memory, occupancy, bank-conflicts, spills, stalls, all)"
    )]
    UnknownPurpose(String),

    /// The ncu executable could not be started because it does not exist.
    #[error(
        "ncu not found at {path:?}: install Nsight Compute (it ships with the CUDA toolkit) and put ncu on PATH, or pass its full path"
    )]
    NcuNotFound {
        /// The program we tried to start.
        path: PathBuf,
    },

    /// The ncu executable exists but could not be started (permissions, bad interpreter...).
    #[error("could not start ncu at {path:?}: {source}")]
    Spawn {
        /// The program we tried to start.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },

    /// `ERR_NVGPUCTRPERM`: the user may not read GPU performance counters.
    #[error(
        "ncu has no permission to read GPU performance counters (ERR_NVGPUCTRPERM): run as root, or load the driver with NVreg_RestrictProfilingToAdminUsers=0 (see https://developer.nvidia.com/ERR_NVGPUCTRPERM)"
    )]
    CounterPermission,

    /// ncu does not know one of the requested metrics on this GPU.
    #[error(
        "ncu rejected a metric: {message} (check the metric set matches the GPU architecture)"
    )]
    UnknownMetric {
        /// ncu's own `==ERROR==` line.
        message: String,
    },

    /// The kernel filter matched no launch, so nothing was profiled.
    #[error(
        "ncu profiled no kernel: nothing matched --kernel-name {kernel_filter} after skipping {launch_skip} launches (check the kernel name and --launch-skip)"
    )]
    NoKernelsProfiled {
        /// The `--kernel-name` argument given to ncu.
        kernel_filter: String,
        /// The `--launch-skip` given to ncu.
        launch_skip: u32,
    },

    /// A profile with no kernel at all where one was to be scored.
    #[error("the profile holds no kernel to score")]
    NoKernels,

    /// The profiled program itself exited with an error.
    #[error("the profiled program failed (exit code {code}): {detail}")]
    TargetFailed {
        /// The program's exit code as reported by ncu.
        code: i32,
        /// The last ncu or program line that says why, if any.
        detail: String,
    },

    /// ncu failed for a reason we do not classify; its first error line is kept.
    #[error("ncu failed ({status}): {detail}")]
    NcuFailed {
        /// Exit status as text (`exit status: 1`, `signal: 9`...).
        status: String,
        /// ncu's first `==ERROR==` line, or the last line of its output.
        detail: String,
    },

    /// Reading or writing a file failed.
    #[error("{path:?}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },

    /// An evidence file is not valid JSON of the expected shape.
    #[error("{path:?}: not valid ncu evidence JSON: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// What serde said.
        source: serde_json::Error,
    },
}
