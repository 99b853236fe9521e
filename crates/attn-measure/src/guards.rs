//! What lies around the inputs a gate uploads: NaN guards for a check (a read outside its inputs
//! then changes the output) or finite seeded canaries for a timed set (only writes are looked
//! for, and a NaN must not slow the kernel down). The decode and backward sets both upload
//! through [`Guards::upload`].

use attn_kernels::{Gpu, GuardedTensor};
use attn_oracle::HostTensor;

/// What lies around a set's inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guards {
    /// NaN guards, a read probe's (a check's inputs: what is read outside them is NaN).
    Reads,
    /// Finite seeded canaries (a timed set's: only writes are looked for).
    Writes,
}

impl Guards {
    /// `t` on the device as `name`, between these guards seeded from `seed`.
    pub fn upload(
        self,
        gpu: &Gpu,
        name: &str,
        t: &HostTensor,
        seed: u64,
    ) -> attn_kernels::Result<GuardedTensor> {
        match self {
            Guards::Reads => GuardedTensor::upload_for_reads(gpu, name, t, seed),
            Guards::Writes => GuardedTensor::upload(gpu, name, t, seed),
        }
    }
}
