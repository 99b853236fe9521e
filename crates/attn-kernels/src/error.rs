//! The one error type of this crate.

use crate::config::ConfigError;

/// Everything that can go wrong while building, launching or timing a kernel.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// No `libcuda.so` could be loaded.
    #[error("no CUDA driver found (libcuda.so): attn needs an NVIDIA GPU to run kernels")]
    NoDriver,
    /// A driver is there but no usable GPU.
    #[error("no usable CUDA GPU: {0}")]
    NoGpu(String),
    /// No `libnvrtc.so` could be loaded.
    #[error(
        "NVRTC not found (libnvrtc.so): install a CUDA 13 toolkit, or run `cargo xtask test` once to fetch \
         NVIDIA's wheels into target/cuda-wheels, and put its lib folder on LD_LIBRARY_PATH"
    )]
    NoNvrtc,
    /// The CUDA headers (`cuda_fp16.h`) were not found.
    #[error("CUDA headers not found (cuda_fp16.h): set CUDA_HOME to a CUDA toolkit (searched {searched})")]
    NoHeaders {
        /// Where we looked.
        searched: String,
    },
    /// `--impl NAME` names no registered implementation.
    #[error("unknown implementation `{name}` (known: {known})")]
    UnknownImpl {
        /// What was asked for.
        name: String,
        /// The registered names.
        known: String,
    },
    /// No registered implementation of the preference order runs on the device.
    #[error("no registered implementation runs on {device}: {why}; name one with --impl")]
    NoImplementationFor {
        /// The device, `sm_75 (Tesla T4)`.
        device: String,
        /// What each preferred one needs.
        why: String,
    },
    /// A config that cannot be valid, rejected before compiling.
    #[error("invalid config for `{implementation}`: {reason}")]
    InvalidConfig {
        /// The implementation.
        implementation: String,
        /// Why, in one line.
        reason: ConfigError,
    },
    /// A config's text that cannot be read (`K=V,K=V`).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Inputs the implementation does not handle (head dim, dtype, shape).
    #[error("`{implementation}` does not support {what}")]
    Unsupported {
        /// The implementation.
        implementation: String,
        /// What is not supported.
        what: String,
    },
    /// Tensors that do not fit together.
    #[error("shape mismatch: {0}")]
    Shape(String),
    /// NVRTC rejected the source; the log follows on the next lines.
    #[error("NVRTC could not compile `{implementation}` [{config}] for {arch}:\n{log}")]
    Compile {
        /// The implementation (or the user's file).
        implementation: String,
        /// The config and defines it was compiled with.
        config: String,
        /// The target architecture.
        arch: String,
        /// NVRTC's log.
        log: String,
    },
    /// A CUDA driver call failed.
    #[error("CUDA {call} failed: {source}")]
    Driver {
        /// Which call.
        call: &'static str,
        /// The driver's error.
        source: cudarc::driver::DriverError,
    },
    /// A TMA tensor map could not be encoded for an input.
    #[error("cannot encode the TMA tensor map of {tensor}: {reason}")]
    TensorMap {
        /// Which input (`Q`, `K`, `V`).
        tensor: &'static str,
        /// The driver's answer or what is unsupported.
        reason: String,
    },
    /// A cuBLAS call failed.
    #[error("cuBLAS {call} failed: {message}")]
    Cublas {
        /// Which call.
        call: &'static str,
        /// cuBLAS's error.
        message: String,
    },
    /// The Triton front end could not build a kernel (no Python or Triton, a signature off the
    /// ABI, Triton's own compile error), in one line.
    #[error("Triton: {0}")]
    Triton(String),
    /// ptxas (for the resource report) is missing or failed.
    #[error("ptxas: {0}")]
    Ptxas(String),
    /// A compile's cache entry from another machine is malformed.
    #[error("a kernel cache entry: {0}")]
    CacheEntry(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// Reading or converting tensors failed.
    #[error(transparent)]
    Oracle(#[from] attn_oracle::OracleError),
}

/// Shorthand for results of this crate.
pub type Result<T, E = KernelError> = std::result::Result<T, E>;

/// Attaches the name of the failed driver call to a driver error.
pub(crate) trait DriverContext<T> {
    fn during(self, call: &'static str) -> Result<T>;
}

impl KernelError {
    /// Whether a kernel faulted on the device (illegal address or instruction, misaligned
    /// access, trap): the CUDA context is lost, and nothing more can run in this process.
    pub fn is_fault(&self) -> bool {
        use cudarc::driver::sys::CUresult as R;
        matches!(
            self,
            KernelError::Driver { source, .. } if matches!(
                source.0,
                R::CUDA_ERROR_ILLEGAL_ADDRESS
                    | R::CUDA_ERROR_LAUNCH_FAILED
                    | R::CUDA_ERROR_ILLEGAL_INSTRUCTION
                    | R::CUDA_ERROR_MISALIGNED_ADDRESS
                    | R::CUDA_ERROR_INVALID_ADDRESS_SPACE
                    | R::CUDA_ERROR_INVALID_PC
                    | R::CUDA_ERROR_HARDWARE_STACK_ERROR
                    | R::CUDA_ERROR_ASSERT
                    | R::CUDA_ERROR_LAUNCH_TIMEOUT
            )
        )
    }
}

impl<T> DriverContext<T> for std::result::Result<T, cudarc::driver::DriverError> {
    fn during(self, call: &'static str) -> Result<T> {
        self.map_err(|source| KernelError::Driver { call, source })
    }
}
