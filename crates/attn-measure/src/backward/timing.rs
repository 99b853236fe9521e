//! A backward kernel as a timed side ([`BackwardSide`]): input sets of fresh normal Q, K, V and
//! dO with O and the LSE from the gate's reference forward, every buffer between finite canary
//! guards, a workspace with a NaN tail per set. For the candidate every timed launch is verified:
//! the gradients are poisoned before each sample and, after it, every element of dQ, dK and dV is
//! counted against the set's GPU reference gradients within the checks' bounds (their rounding
//! scales included), on the GPU and without a host wait; after the timing every guard, tail and
//! input checksum is read back ([`BackwardSide::watch`]).
//!
//! Not yet the forward's defences: the inputs are not turned through signed permutations between
//! samples, and the references are not stored masked (a candidate that finds them in memory
//! could copy them).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use attn_evidence::TimedOutputCheck;
use attn_kernels::backward::{GpuBackwardReference, PreparedBackward, ReferenceGradients};
use attn_kernels::{Counters, Gpu, Harness, HarnessKernels, SampleHooks, TimingOptions, Timings};
use attn_oracle::{backward_tolerance, Distribution, Gradient, Tolerance};

use super::sets::{BackwardInputs, BackwardOutputs};
use crate::guards::Guards;
use crate::supervise::Watchdog;
use crate::timing::{TimedSide, TimingWatch, VerifiedOutputs};
use crate::{Problem, Result};

/// Input sets of `problem` to rotate among: enough that twice the L2 lies between reuses of one,
/// at most 8, at least 2 where two fit in a quarter of the device's memory.
pub fn backward_set_count(problem: &Problem, l2_bytes: usize, total_memory: usize) -> usize {
    let element = problem.dtype.size_bytes();
    // Q, O, dO, dQ and K, V, dK, dV, in the input dtype.
    let set_bytes = 4 * element * (problem.q_elements() + problem.kv_elements());
    let wanted = (2 * l2_bytes).div_ceil(set_bytes.max(1)).clamp(2, 8);
    let affordable = (total_memory / 4 / set_bytes.max(1)).max(1);
    wanted.min(affordable)
}

/// One input set and its outputs on the device.
struct BackwardSet {
    inputs: BackwardInputs,
    outputs: BackwardOutputs,
    /// The GPU reference's gradients and scales, and each gradient's bound on them (the
    /// candidate's sets only).
    reference: Option<(ReferenceGradients, [Tolerance; 3])>,
}

/// A backward kernel on its own input sets (see the module).
pub struct BackwardSide<'a> {
    gpu: &'a Gpu,
    prepared: &'a PreparedBackward,
    problem: &'a Problem,
    sets: RefCell<Vec<BackwardSet>>,
    harness: Harness<'a>,
    /// The candidate's verification: its reference kernels, bounds and running counts.
    verifier: Option<Verifier>,
    /// The candidate's inputs' checksums before the timing, with the checksum kernels and seed.
    sums: Option<(HarnessKernels, u64, Vec<Vec<u64>>)>,
    watchdog: Option<(&'a Watchdog, Rc<Cell<Duration>>)>,
}

impl std::fmt::Debug for BackwardSide<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackwardSide")
            .field("prepared", &self.prepared.label())
            .field("sets", &self.sets.borrow().len())
            .finish_non_exhaustive()
    }
}

impl<'a> BackwardSide<'a> {
    /// `prepared` on `sets` input sets of `problem` drawn from `seed`; with `verify`, every timed
    /// launch is checked (see the module).
    pub fn new(
        gpu: &'a Gpu,
        prepared: &'a PreparedBackward,
        problem: &'a Problem,
        sets: usize,
        seed: u64,
        verify: bool,
    ) -> Result<BackwardSide<'a>> {
        let (dtype, d) = (problem.dtype, problem.shape.head_dim);
        let reference = GpuBackwardReference::new(gpu, dtype, d)?;
        let plan = prepared.plan(&problem.shape, problem.varlen.as_ref())?;
        let mut all = Vec::new();
        for i in 0..sets.max(1) {
            let set_seed = seed.wrapping_add(i as u64);
            let inputs = problem.generate(Distribution::Normal, set_seed);
            let d_o = problem
                .generate(Distribution::Normal, set_seed ^ 0x5eed_d0d0)
                .q;
            let guard = set_seed ^ 0x9a2d_5e75;
            let (inputs, _) = BackwardInputs::upload(
                gpu,
                problem,
                &problem.params,
                &reference,
                [&inputs.q, &inputs.k, &inputs.v, &d_o],
                (guard, Guards::Writes),
            )?;
            let mut set = BackwardSet {
                outputs: BackwardOutputs::alloc(gpu, problem, &plan, guard)?,
                inputs,
                reference: None,
            };
            if verify {
                let args = set.inputs.args(problem, problem.params);
                let r = reference.gradients(gpu, &args)?;
                let table = backward_tolerance(dtype, Distribution::Normal);
                let bounds = [
                    table.for_gradient(Gradient::Dq, &r.dq.download(gpu)?),
                    table.for_gradient(Gradient::Dk, &r.dk.download(gpu)?),
                    table.for_gradient(Gradient::Dv, &r.dv.download(gpu)?),
                ];
                set.reference = Some((r, bounds));
            }
            all.push(set);
        }
        gpu.synchronize()?;
        let sums = verify
            .then(|| -> Result<_> {
                let kernels = HarnessKernels::new(gpu)?;
                let sum_seed = seed ^ 0x5e75_c4ec;
                let before = all
                    .iter()
                    .map(|set| checksums(gpu, &kernels, set, sum_seed))
                    .collect::<Result<Vec<_>>>()?;
                Ok((kernels, sum_seed, before))
            })
            .transpose()?;
        let verifier = verify.then(|| Verifier {
            reference,
            checked: 0,
            bad: 0,
            first_bad: None,
            sample: 0,
        });
        Ok(BackwardSide {
            gpu,
            prepared,
            problem,
            sets: RefCell::new(all),
            harness: Harness::new(gpu)?,
            verifier,
            sums,
            watchdog: None,
        })
    }

    /// Number of input sets.
    pub fn set_count(&self) -> usize {
        self.sets.borrow().len()
    }

    /// Every launch must finish within `bound` (the watchdog ends the process otherwise).
    pub fn with_watchdog(&mut self, watchdog: &'a Watchdog, bound: Rc<Cell<Duration>>) {
        self.watchdog = Some((watchdog, bound));
    }

    /// The timed launches' verification so far (`None` for a side that does not verify).
    pub fn verified(&self) -> Option<VerifiedOutputs> {
        self.verifier.as_ref().map(|v| VerifiedOutputs {
            samples_checked: v.checked,
            samples_bad: v.bad,
            first_bad: v.first_bad.clone(),
        })
    }

    /// After a timing: every buffer's guards and workspace tail, and (for the candidate) the
    /// inputs' checksums and LSE against those before it.
    pub fn watch(&self) -> Result<TimingWatch> {
        let sets = self.sets.borrow();
        let mut watch = TimingWatch::default();
        for (i, set) in sets.iter().enumerate() {
            let mut outside = set.inputs.outside(self.gpu)?;
            outside.extend(set.outputs.outside(self.gpu)?);
            watch
                .outside
                .extend(outside.into_iter().map(|w| format!("{w} of input set {i}")));
            if let Some((kernels, seed, before)) = &self.sums {
                let after = checksums(self.gpu, kernels, set, *seed)?;
                for ((name, b), a) in ["Q", "K", "V", "O", "dO", "LSE"]
                    .iter()
                    .zip(&before[i])
                    .zip(&after)
                {
                    if b != a {
                        watch
                            .inputs_written
                            .push(format!("{name} of input set {i} changed"));
                    }
                }
            }
        }
        Ok(watch)
    }

    /// The evidence of the timed launches' verification, with what [`BackwardSide::watch`]
    /// found; `None` for a side that does not verify.
    pub fn timed_outputs(&self, timing: &TimingOptions) -> Result<Option<TimedOutputCheck>> {
        let Some(verified) = self.verified() else {
            return Ok(None);
        };
        let watch = self.watch()?;
        let sets = self.set_count();
        Ok(Some(TimedOutputCheck {
            sets,
            samples_checked: verified.samples_checked,
            samples_bad: verified.samples_bad,
            first_bad: verified.first_bad,
            inputs_scrambled: false,
            launches_per_sample: Some(attn_kernels::timing::launches_per_sample(timing, sets)),
            reference_masked: false,
            outside: watch.outside,
            inputs_written: watch.inputs_written,
        }))
    }
}

/// Checksums of a set's five u16 inputs, and of its LSE's bits.
fn checksums(
    gpu: &Gpu,
    kernels: &HarnessKernels,
    set: &BackwardSet,
    seed: u64,
) -> Result<Vec<u64>> {
    let mut sums = set.inputs.checksums(gpu, kernels, seed)?;
    let lse = set.inputs.lse.download(gpu)?;
    sums.push(
        lse.as_bytes()
            .iter()
            .fold(seed, |acc, &b| acc.rotate_left(5) ^ u64::from(b)),
    );
    Ok(sums)
}

/// The candidate's verification state.
struct Verifier {
    reference: GpuBackwardReference,
    checked: usize,
    bad: usize,
    first_bad: Option<String>,
    /// Samples taken so far, over every block.
    sample: usize,
}

/// The candidate's sample hooks: poison the sample's gradients before it, count their bad
/// elements after it.
struct Hooks<'h> {
    gpu: &'h Gpu,
    sets: &'h RefCell<Vec<BackwardSet>>,
    verifier: Option<&'h mut Verifier>,
    /// Per sample of this block: (sample number, sets) and its counters.
    pending: Vec<(usize, Vec<usize>, Counters)>,
}

impl SampleHooks for Hooks<'_> {
    fn before_sample(&mut self, sample_sets: &[usize]) -> attn_kernels::Result<()> {
        if self.verifier.is_none() {
            return Ok(());
        }
        let mut sets = self.sets.borrow_mut();
        for &i in sample_sets {
            let out = &mut sets[i].outputs;
            for t in [&mut out.dq, &mut out.dk, &mut out.dv] {
                self.gpu.poison(t)?;
            }
        }
        Ok(())
    }

    fn after_sample(&mut self, sample_sets: &[usize]) -> attn_kernels::Result<()> {
        let Some(verifier) = self.verifier.as_deref_mut() else {
            return Ok(());
        };
        let sets = self.sets.borrow();
        let mut counters = Counters::new(self.gpu, 3 * sample_sets.len())?;
        for (n, &i) in sample_sets.iter().enumerate() {
            let set = &sets[i];
            let (reference, bounds) = set.reference.as_ref().expect("a verified side's sets");
            let out = &set.outputs;
            let gradients = [
                (&out.dq, &reference.dq, &reference.dq_scale),
                (&out.dk, &reference.dk, &reference.dk_scale),
                (&out.dv, &reference.dv, &reference.dv_scale),
            ];
            for (g, (out, want, scale)) in gradients.into_iter().enumerate() {
                verifier.reference.count_bad_async(
                    self.gpu,
                    out,
                    (want, scale),
                    &bounds[g],
                    &mut counters,
                    3 * n + g,
                )?;
            }
        }
        self.pending
            .push((verifier.sample, sample_sets.to_vec(), counters));
        verifier.sample += 1;
        Ok(())
    }
}

impl TimedSide for BackwardSide<'_> {
    fn block(&mut self, opts: &TimingOptions) -> Result<Timings> {
        let count = self.set_count();
        let (gpu, prepared, problem) = (self.gpu, self.prepared, self.problem);
        let sets = &self.sets;
        let mut launch = |i: usize| -> attn_kernels::Result<()> {
            let mut all = sets.borrow_mut();
            let BackwardSet {
                inputs, outputs, ..
            } = &mut all[i];
            let args = inputs.args(problem, problem.params);
            let BackwardOutputs {
                dq,
                dk,
                dv,
                workspace,
            } = outputs;
            prepared.launch_args(gpu, &args, dq, dk, dv, workspace.buffer())?;
            Ok(())
        };
        let mut hooks = Hooks {
            gpu,
            sets,
            verifier: self.verifier.as_mut(),
            pending: Vec::new(),
        };
        let timed = match self.watchdog.as_ref().map(|(w, bound)| (*w, bound.get())) {
            Some((w, bound)) => {
                let launches = (opts.warmup + count + 1) as u32;
                w.guard(bound * launches, "a timed backward launch", || {
                    self.harness.time(count, opts, &mut launch, &mut hooks)
                })
            }
            None => self.harness.time(count, opts, &mut launch, &mut hooks),
        };
        let timed = timed?;
        // The block's counts, read after its timing (the read synchronises).
        let pending = std::mem::take(&mut hooks.pending);
        if let Some(verifier) = hooks.verifier {
            for (sample, sample_sets, counters) in pending {
                let counts = counters.read(gpu)?;
                verifier.checked += 1;
                if let Some(at) = counts.iter().position(|&c| c > 0) {
                    verifier.bad += 1;
                    let name = ["dQ", "dK", "dV"][at % 3];
                    let set = sample_sets[at / 3];
                    verifier.first_bad.get_or_insert_with(|| {
                        format!(
                            "timed sample {sample} on input set {set}: {} {name} elements off the GPU reference or unwritten",
                            counts[at]
                        )
                    });
                }
            }
        }
        Ok(timed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_counts_rotate_past_the_l2_within_memory() {
        let small = Problem::parse("1,8/2,512,64 causal bf16").unwrap();
        let large = Problem::parse("8,32/8,16384,128 causal bf16").unwrap();
        let (l2, memory) = (60 << 20, 140usize << 30);
        assert_eq!(backward_set_count(&small, l2, memory), 8);
        assert_eq!(backward_set_count(&large, l2, memory), 2);
        // Where two would not fit in a quarter of the memory: one.
        assert_eq!(backward_set_count(&large, l2, 4 << 30), 1);
    }
}
