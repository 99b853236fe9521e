//! The input sets a side rotates among: how many, uploaded between canary guards with poisoned
//! outputs, and read back for writes outside them or into them.

use attn_kernels::{
    Gpu, GuardedTensor, HarnessKernels, Prepared, TimingMode, TimingOptions, VarlenOffsets,
};
use attn_oracle::Distribution;

use crate::random::next_random;
use crate::{Problem, Result};

/// How many input sets to rotate among: enough to exceed twice the L2 between reuses, at most 8,
/// and never more than a quarter of the device's memory.
pub fn input_set_count(problem: &Problem, gpu: &Gpu) -> usize {
    let set_bytes = (2 * problem.q_elements() + 2 * problem.kv_elements()) * 2;
    let wanted = (2 * gpu.info().l2_bytes as usize)
        .div_ceil(set_bytes.max(1))
        .clamp(2, 8);
    let affordable = (gpu.info().total_memory / 4 / set_bytes.max(1)).max(1);
    wanted.min(affordable)
}

/// The L2 flush size both sides use: twice the L2, at least 2 MiB.
pub fn flush_bytes(gpu: &Gpu) -> usize {
    (gpu.info().l2_bytes as usize).max(1 << 20) * 2
}

/// Device-resident input sets with their (poisoned) output buffers, every buffer between canary
/// guards ([`GuardedTensor`]; read back with [`InputSets::outside_writes`] after a timing).
#[derive(Debug)]
pub struct InputSets {
    /// Q of each set.
    pub q: Vec<GuardedTensor>,
    /// K of each set.
    pub k: Vec<GuardedTensor>,
    /// V of each set.
    pub v: Vec<GuardedTensor>,
    /// O of each set, poisoned.
    pub o: Vec<GuardedTensor>,
    /// A varlen batch's offsets, uploaded for each set (empty for a dense batch).
    pub offsets: Vec<VarlenOffsets>,
    /// The seed set `i` was drawn from is `seed + i`.
    pub(super) seed: u64,
    guard_bytes: usize,
}

impl InputSets {
    /// `count` fresh normal sets (seeds `seed`, `seed+1`, ...), uploaded between guards.
    pub fn new(gpu: &Gpu, problem: &Problem, count: usize, seed: u64) -> Result<InputSets> {
        InputSets::with_guards(gpu, problem, count, seed, attn_kernels::guard::GUARD_BYTES)
    }

    /// As [`InputSets::new`] with guards of `guard_bytes` on each side of every buffer; 0 for
    /// exact allocations (what compute-sanitizer runs on: its memcheck must see the true bounds,
    /// which guards would hide).
    pub fn with_guards(
        gpu: &Gpu,
        problem: &Problem,
        count: usize,
        seed: u64,
        guard_bytes: usize,
    ) -> Result<InputSets> {
        let mut sets = InputSets {
            q: vec![],
            k: vec![],
            v: vec![],
            o: vec![],
            offsets: vec![],
            seed,
            guard_bytes,
        };
        sets.grow(gpu, problem, count)?;
        Ok(sets)
    }

    /// Adds fresh sets until there are `count`.
    pub fn grow(&mut self, gpu: &Gpu, problem: &Problem, count: usize) -> Result<()> {
        for i in self.len()..count {
            let set_seed = self.seed.wrapping_add(i as u64);
            let inputs = problem.generate(Distribution::Normal, set_seed);
            if let Some(varlen) = &problem.varlen {
                self.offsets.push(gpu.upload_offsets(varlen)?);
            }
            let guard = |n: u64| next_random(&mut (set_seed ^ 0x9a2d_5e75 ^ n));
            let bytes = self.guard_bytes;
            self.q.push(GuardedTensor::upload_with(
                gpu,
                "Q",
                &inputs.q,
                guard(1),
                bytes,
            )?);
            self.k.push(GuardedTensor::upload_with(
                gpu,
                "K",
                &inputs.k,
                guard(2),
                bytes,
            )?);
            self.v.push(GuardedTensor::upload_with(
                gpu,
                "V",
                &inputs.v,
                guard(3),
                bytes,
            )?);
            self.o.push(GuardedTensor::alloc_poisoned_with(
                gpu,
                "O",
                inputs.q.dims,
                problem.dtype,
                guard(4),
                bytes,
            )?);
        }
        Ok(())
    }

    /// The canary guards of every buffer of every set, read back: one line per buffer written
    /// outside (`"128 bytes after O of input set 3"`).
    pub fn outside_writes(&self, gpu: &Gpu) -> Result<Vec<String>> {
        let mut found = Vec::new();
        for (i, set) in [&self.q, &self.k, &self.v, &self.o]
            .iter()
            .flat_map(|buffers| buffers.iter().enumerate())
        {
            if let Some(violation) = set.check(gpu)? {
                found.push(format!("{violation} of input set {i}"));
            }
        }
        Ok(found)
    }

    /// Checksums of every set's Q, K and V that the signed column permutations of the timing
    /// leave unchanged (see [`HarnessKernels::checksum`]).
    pub fn invariant_checksums(
        &self,
        gpu: &Gpu,
        harness: &HarnessKernels,
        seed: u64,
    ) -> Result<Vec<[u64; 3]>> {
        (0..self.len())
            .map(|i| -> Result<[u64; 3]> {
                Ok([
                    harness.checksum(gpu, &self.q[i], true, seed)?,
                    harness.checksum(gpu, &self.k[i], true, seed)?,
                    harness.checksum(gpu, &self.v[i], true, seed)?,
                ])
            })
            .collect()
    }

    /// Number of sets.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Set `i`'s varlen offsets (`None` for a dense batch).
    pub fn offsets(&self, i: usize) -> Option<&VarlenOffsets> {
        self.offsets.get(i)
    }

    /// Launches `prepared` on set `i` (asynchronously).
    pub fn launch(
        &mut self,
        gpu: &Gpu,
        prepared: &Prepared,
        problem: &Problem,
        i: usize,
    ) -> attn_kernels::Result<()> {
        prepared.launch_batch(
            gpu,
            &self.q[i],
            &self.k[i],
            &self.v[i],
            &mut self.o[i],
            &problem.params,
            self.offsets.get(i),
        )
    }
}

/// The work a batch-mode sample needs at least, FLOP: 10 ms of the H100's dense fp16 peak, so
/// that a sample's launch gaps and the event timer's resolution stay under 0.1% of it. Launches
/// beyond that add nothing to the measurement and cost an input set each (memory, generation,
/// and in the gate a GPU reference per set: see evidence/METHOD.md, `batch-sample-flop`).
pub const BATCH_SAMPLE_FLOP: f64 = 1e13;

/// The input sets a side needs for `opts`: [`input_set_count`], or in batch mode one per launch
/// of a sample (every launch of a sample on its own inputs and output, each poisoned before the
/// sample and verified after it): `batch_launches`, but no more than [`batch_launches_for`] the
/// problem's work, nor than a quarter of the device's memory holds.
pub fn sets_for(problem: &Problem, gpu: &Gpu, opts: &TimingOptions) -> usize {
    let count = input_set_count(problem, gpu);
    if opts.mode != TimingMode::Batch {
        return count;
    }
    let set_bytes = ((2 * problem.q_elements() + 2 * problem.kv_elements()) * 2
        + 8 * attn_kernels::guard::GUARD_BYTES)
        .max(1);
    let affordable = (gpu.info().total_memory / 4 / set_bytes).max(1);
    count.max(batch_launches_for(problem, opts.batch_launches).min(affordable))
}

/// Launches a batch sample of `problem` needs: `asked`, or fewer where fewer already make
/// [`BATCH_SAMPLE_FLOP`] of work (a 2,32/8,8192,128 launch is 2.2 TFLOP: 5 launches).
pub fn batch_launches_for(problem: &Problem, asked: usize) -> usize {
    let flops = problem.spec.flops();
    let enough = if flops > 0.0 {
        (BATCH_SAMPLE_FLOP / flops).ceil().min(asked as f64) as usize
    } else {
        asked
    };
    enough.clamp(1, asked.max(1))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_batch_sample_has_as_many_launches_as_make_its_work() {
        let launches = |shape: &str, asked| {
            let problem = crate::Problem::new(shape.parse().unwrap()).unwrap();
            super::batch_launches_for(&problem, asked)
        };
        // Small problems: every launch asked for (a sample is still under 10 TFLOP).
        assert_eq!(launches("1,4,256,64", 50), 50);
        assert_eq!(launches("4,16,2048,128", 50), 50);
        assert_eq!(launches("2,16,4096,128", 50), 37);
        // Large ones: enough launches for 10 TFLOP (2.2 TFLOP a launch; causal does half).
        assert_eq!(launches("2,32/8,8192,128", 50), 5);
        assert_eq!(launches("2,32/8,8192,128 causal", 50), 10);
        assert_eq!(launches("2,16,16384,128", 50), 3);
        // Never more than asked, never none.
        assert_eq!(launches("2,16,16384,128", 2), 2);
        assert_eq!(launches("1,4,256,64", 0), 1);
    }
}
