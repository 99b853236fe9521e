//! A decode batch's inputs on the device between guards ([`GuardedDecodeSet`]), as a check and
//! a timed side hold them: what a launch wrote outside its buffers or into its inputs (the
//! lengths and block table included) is read back from them.

use attn_kernels::decode::{DecodeArgs, DeviceTable, LengthBuffers};
use attn_kernels::{Gpu, GuardedTensor, HarnessKernels};
use attn_oracle::{BlockTable, DecodeInputs, DecodeSpec};

pub use crate::guards::Guards;
use crate::Result;

/// One decode batch's inputs between guards, with the host copy of its block table to compare
/// the device's with.
#[derive(Debug)]
pub struct GuardedDecodeSet {
    /// Queries `[1, total_q, H, D]`.
    pub q: GuardedTensor,
    /// The K cache in the spec's layout.
    pub k: GuardedTensor,
    /// The V cache, as K.
    pub v: GuardedTensor,
    /// The int32 lengths.
    pub lengths: LengthBuffers,
    /// A paged cache's table on the device.
    pub table: Option<DeviceTable>,
    host_table: Option<BlockTable>,
}

impl GuardedDecodeSet {
    /// `inputs` uploaded between `guards` seeded from `seed`.
    pub fn upload(
        gpu: &Gpu,
        inputs: &DecodeInputs,
        seed: u64,
        guards: Guards,
    ) -> Result<GuardedDecodeSet> {
        let spec = &inputs.case.spec;
        let up = |name: &str, t, s| guards.upload(gpu, name, t, s);
        Ok(GuardedDecodeSet {
            q: up("Q", &inputs.q, seed)?,
            k: up("K", inputs.cache.k(), seed ^ 1)?,
            v: up("V", inputs.cache.v(), seed ^ 2)?,
            lengths: LengthBuffers::upload(gpu, spec)?,
            table: inputs
                .cache
                .table()
                .map(|t| DeviceTable::upload(gpu, t))
                .transpose()?,
            host_table: inputs.cache.table().cloned(),
        })
    }

    /// The set as a launch takes it, at softmax `scale`.
    pub fn args<'a>(&'a self, spec: &'a DecodeSpec, scale: f64) -> DecodeArgs<'a> {
        DecodeArgs {
            spec,
            q: &self.q,
            k: &self.k,
            v: &self.v,
            cu_seqlens_q: &self.lengths.cu_seqlens_q,
            seqlens_kv: &self.lengths.seqlens_kv,
            table: self.table.as_ref(),
            scale,
        }
    }

    /// The guards of Q, K and V read back: one line per buffer written outside.
    pub fn outside_writes(&self, gpu: &Gpu) -> Result<Vec<String>> {
        let mut found = Vec::new();
        for t in [&self.q, &self.k, &self.v] {
            if let Some(violation) = t.check(gpu)? {
                found.push(violation.to_string());
            }
        }
        Ok(found)
    }

    /// The int32 inputs that no longer hold what was uploaded (the lengths, the block table).
    pub fn integers_written(&self, gpu: &Gpu, spec: &DecodeSpec) -> Result<Vec<String>> {
        let mut written = self.lengths.changed(gpu, spec)?;
        if let (Some(table), Some(host)) = (&self.table, &self.host_table) {
            if table.changed(gpu, host)? {
                written.push("the block table".into());
            }
        }
        Ok(written)
    }

    /// Checksums of Q, K and V (`invariant`: unchanged by signed column permutations).
    pub fn checksums(
        &self,
        gpu: &Gpu,
        harness: &HarnessKernels,
        invariant: bool,
        seed: u64,
    ) -> Result<[u64; 3]> {
        Ok([
            harness.checksum(gpu, &self.q, invariant, seed)?,
            harness.checksum(gpu, &self.k, invariant, seed)?,
            harness.checksum(gpu, &self.v, invariant, seed)?,
        ])
    }
}

/// The names of the inputs whose checksums differ between `before` and `after`.
pub fn changed_inputs(before: &[u64; 3], after: &[u64; 3]) -> Vec<&'static str> {
    ["Q", "K", "V"]
        .into_iter()
        .zip(before.iter().zip(after))
        .filter(|(_, (b, a))| b != a)
        .map(|(name, _)| name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_inputs_names_exactly_the_checksums_that_moved() {
        assert!(changed_inputs(&[1, 2, 3], &[1, 2, 3]).is_empty());
        assert_eq!(changed_inputs(&[1, 2, 3], &[1, 9, 3]), ["K"]);
        assert_eq!(changed_inputs(&[1, 2, 3], &[0, 2, 4]), ["Q", "V"]);
    }
}
