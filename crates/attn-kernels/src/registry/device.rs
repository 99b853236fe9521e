//! What the registry knows of a device: the limits configs are validated against and the
//! figures the tuning policy sizes grids by.

/// A device's limits and size, read from the driver where the GPU is opened
/// ([`crate::Gpu::limits`]), or a named preset where there is no GPU (CPU tests, `cargo xtask
/// kernels`, the checks made before a GPU is probed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceLimits {
    /// Compute capability (major, minor).
    pub capability: (i32, i32),
    /// Streaming multiprocessors: the tuning's "one wave" is a block per SM slot.
    pub sm_count: u32,
    /// L2 cache, bytes.
    pub l2_bytes: u32,
    /// Threads per block.
    pub max_threads_per_block: u32,
    /// Dynamic shared memory per block after opting in, bytes.
    pub max_shared_per_block: u32,
    /// Shared memory of one SM, bytes.
    pub shared_per_sm: u32,
    /// Shared memory the driver reserves of an SM's for each resident block, bytes.
    pub reserved_shared_per_block: u32,
}

/// The name validation has always used for [`DeviceLimits`].
pub type Limits = DeviceLimits;

impl DeviceLimits {
    /// An H100 SXM (sm_90): 132 SMs, 50 MiB of L2, 1024 threads and 227 KiB of shared memory per
    /// block, 228 KiB per SM with 1 KiB reserved per resident block.
    pub const H100: DeviceLimits = DeviceLimits {
        capability: (9, 0),
        sm_count: 132,
        l2_bytes: 50 << 20,
        max_threads_per_block: 1024,
        max_shared_per_block: 232_448,
        shared_per_sm: 233_472,
        reserved_shared_per_block: 1024,
    };

    /// An H200 (sm_90): the H100 SXM's SMs and shared memory, 60 MiB of L2.
    pub const H200: DeviceLimits = DeviceLimits {
        l2_bytes: 60 << 20,
        ..DeviceLimits::H100
    };

    /// `sm_90` and the like.
    pub fn sm(&self) -> String {
        format!("sm_{}{}", self.capability.0, self.capability.1)
    }

    /// The SMs as a count of blocks (one wave of one block per SM).
    pub(crate) fn sms(&self) -> usize {
        self.sm_count.max(1) as usize
    }
}

/// The GPUs an implementation runs on, by compute capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gpus {
    /// This capability and every newer one.
    From((i32, i32)),
    /// This capability alone: code for an architecture-specific target (`compute_90a`, Hopper's
    /// wgmma and TMA) runs on no other.
    Only((i32, i32)),
}

impl Gpus {
    /// What the tensor-core kernels need (mma.sync, ldmatrix, cp.async).
    pub const SM80_AND_NEWER: Gpus = Gpus::From((8, 0));

    /// Whether a device of compute capability `capability` is among them.
    pub fn include(self, capability: (i32, i32)) -> bool {
        match self {
            Gpus::From(first) => capability >= first,
            Gpus::Only(only) => capability == only,
        }
    }

    /// Refuses, in one line naming `implementation`, a device of `capability` it does not run on.
    pub fn require(self, implementation: &str, capability: (i32, i32)) -> crate::Result<()> {
        if self.include(capability) {
            return Ok(());
        }
        Err(crate::KernelError::Unsupported {
            implementation: implementation.into(),
            what: format!(
                "sm_{}{} (it needs {})",
                capability.0,
                capability.1,
                self.describe()
            ),
        })
    }

    /// `sm_80 or newer`, `sm_90`.
    pub fn describe(self) -> String {
        match self {
            Gpus::From((major, minor)) => format!("sm_{major}{minor} or newer"),
            Gpus::Only((major, minor)) => format!("sm_{major}{minor}"),
        }
    }
}
