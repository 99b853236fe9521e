//! A decode kernel as a timed side ([`DecodeSide`]): input sets sized by memory so the L2 holds
//! none, and, for the candidate, every timed output verified as a prefill candidate's is: the
//! inputs turned through fresh signed column permutations before each sample (Q and the K cache
//! through one, the V cache and the reference through another), the outputs poisoned, and the
//! bad elements counted on the GPU against references kept masked under a secret. Every buffer
//! lies between canary guards, read back after the timing with the lengths, the block tables and
//! the inputs' invariant checksums ([`DecodeSide::watch`]), as a prefill side's are.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use attn_kernels::decode::PreparedDecode;
use attn_kernels::{
    ColumnMap, Counters, ElementBound, Gpu, GpuReference, GuardedTensor, Harness, HarnessKernels,
    ReferenceOutput, RowMask, SampleHooks, TimingOptions, Timings,
};
use attn_oracle::{
    generate_decode, reference_decode, tolerance, DecodeCase, DecodeInputs, DecodeSpec,
    Distribution, RowSelection,
};

use super::sets::{changed_inputs, GuardedDecodeSet, Guards};
use crate::bound::{reference_error, whole_output_bound};
use crate::random::{secret_entropy, signed_permutation};
use crate::supervise::Watchdog;
use crate::timing::{TimedSide, TimingWatch, VerifiedOutputs};
use crate::{Problem, Result};

/// Input sets of `spec` to rotate among: enough to exceed twice the L2 between reuses, at most
/// 8, at least 2 where two fit in a quarter of the device's memory (a large batch's cache is GBs).
pub fn decode_set_count(spec: &DecodeSpec, l2_bytes: usize, total_memory: usize) -> usize {
    let tokens: usize = spec.seqlens_kv().iter().sum();
    let cache = 2 * tokens * spec.kv_heads() * spec.head_dim() * spec.dtype().size_bytes();
    let set_bytes = cache + 2 * spec.bytes().q as usize;
    let wanted = (2 * l2_bytes).div_ceil(set_bytes.max(1)).clamp(2, 8);
    let affordable = (total_memory / 4 / set_bytes.max(1)).max(1);
    wanted.min(affordable)
}

/// The prefill problem over the same rows, whose layout of Q and O (packed varlen) the GPU
/// reference and the whole-output bound share.
pub fn rows_problem(spec: &DecodeSpec) -> Result<Problem> {
    Problem::new(attn_evidence::decode_shape(spec))
}

/// A decode kernel on its own input sets, every buffer between canary guards.
pub struct DecodeSide<'a> {
    gpu: &'a Gpu,
    prepared: &'a PreparedDecode,
    spec: DecodeSpec,
    sets: RefCell<Vec<GuardedDecodeSet>>,
    outs: RefCell<Vec<GuardedTensor>>,
    harness: Harness<'a>,
    /// The candidate's inputs' invariant checksums before the timing, with the checksum kernels
    /// and seed (a baseline's inputs are not watched).
    sums: Option<(HarnessKernels, u64, Vec<[u64; 3]>)>,
    /// Checks every timed output when present.
    pub verifier: Option<DecodeVerifier>,
    watchdog: Option<(&'a Watchdog, Rc<Cell<Duration>>)>,
}

impl std::fmt::Debug for DecodeSide<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeSide")
            .field("prepared", &self.prepared)
            .field("sets", &self.sets.borrow().len())
            .finish_non_exhaustive()
    }
}

/// The `sets` input sets of `spec` drawn from `seed` (normal inputs, set i from seed + i), as
/// [`DecodeSide::new`] draws them: drawn once, they serve every implementation a bench times on
/// the batch (a long cache takes seconds to draw on the CPU).
pub fn draw_decode_sets(spec: &DecodeSpec, sets: usize, seed: u64) -> Result<Vec<DecodeInputs>> {
    (0..sets.max(1))
        .map(|i| {
            let case = DecodeCase {
                spec: spec.clone(),
                distribution: Distribution::Normal,
                seed: seed.wrapping_add(i as u64),
            };
            Ok(generate_decode(&case)?)
        })
        .collect()
}

impl<'a> DecodeSide<'a> {
    /// `prepared` on `sets` input sets of `spec` drawn from `seed` (normal inputs); with `verify`,
    /// every timed output is checked (see the module).
    pub fn new(
        gpu: &'a Gpu,
        prepared: &'a PreparedDecode,
        spec: &DecodeSpec,
        sets: usize,
        seed: u64,
        verify: bool,
    ) -> Result<DecodeSide<'a>> {
        let inputs = draw_decode_sets(spec, sets, seed)?;
        DecodeSide::on_inputs(gpu, prepared, spec, &inputs, seed, verify)
    }

    /// [`DecodeSide::new`] on input sets drawn before ([`draw_decode_sets`] of `spec`), each
    /// uploaded between fresh guards.
    pub fn on_inputs(
        gpu: &'a Gpu,
        prepared: &'a PreparedDecode,
        spec: &DecodeSpec,
        inputs: &[DecodeInputs],
        seed: u64,
        verify: bool,
    ) -> Result<DecodeSide<'a>> {
        let problem = rows_problem(spec)?;
        let mut batches = Vec::new();
        let mut outs = Vec::new();
        let mut verifier = verify
            .then(|| DecodeVerifier::new(gpu, spec, seed))
            .transpose()?;
        let sets = inputs.len();
        for (i, inputs) in inputs.iter().enumerate() {
            let guard_seed = inputs.case.seed ^ 0x9a2d_5e75;
            let set = GuardedDecodeSet::upload(gpu, inputs, guard_seed, Guards::Writes)?;
            if let Some(v) = verifier.as_mut() {
                v.add_set(gpu, &problem, inputs, i == 0)?;
            }
            let (dims, dtype) = (set.q.dims, spec.dtype());
            outs.push(GuardedTensor::alloc_poisoned(
                gpu,
                "O",
                dims,
                dtype,
                guard_seed ^ 3,
            )?);
            batches.push(set);
        }
        if let Some(v) = verifier.as_mut() {
            v.counters = Some(Counters::new(gpu, 4 * 2048 * sets.max(1) + 16)?);
        }
        let sums = verify
            .then(|| -> Result<_> {
                let harness = HarnessKernels::new(gpu)?;
                let sum_seed = seed ^ 0x5e75_c4ec;
                let before = batches
                    .iter()
                    .map(|set| set.checksums(gpu, &harness, true, sum_seed))
                    .collect::<Result<Vec<_>>>()?;
                Ok((harness, sum_seed, before))
            })
            .transpose()?;
        Ok(DecodeSide {
            gpu,
            prepared,
            spec: spec.clone(),
            sets: RefCell::new(batches),
            outs: RefCell::new(outs),
            harness: Harness::new(gpu)?,
            sums,
            verifier,
            watchdog: None,
        })
    }

    /// Number of input sets.
    pub fn set_count(&self) -> usize {
        self.sets.borrow().len()
    }

    /// After a timing: every buffer's guards, the lengths and block tables, and (for the
    /// candidate) the inputs' invariant checksums against those taken before it.
    pub fn watch(&self) -> Result<TimingWatch> {
        let (sets, outs) = (self.sets.borrow(), self.outs.borrow());
        let mut watch = TimingWatch::default();
        for (i, (set, out)) in sets.iter().zip(outs.iter()).enumerate() {
            let mut outside = set.outside_writes(self.gpu)?;
            outside.extend(out.check(self.gpu)?.map(|v| v.to_string()));
            watch
                .outside
                .extend(outside.into_iter().map(|w| format!("{w} of input set {i}")));
            let mut written: Vec<String> = match &self.sums {
                Some((harness, seed, before)) => {
                    let after = set.checksums(self.gpu, harness, true, *seed)?;
                    changed_inputs(&before[i], &after)
                        .into_iter()
                        .map(String::from)
                        .collect()
                }
                None => vec![],
            };
            written.extend(set.integers_written(self.gpu, &self.spec)?);
            watch.inputs_written.extend(
                written
                    .into_iter()
                    .map(|w| format!("{w} of input set {i} changed")),
            );
        }
        Ok(watch)
    }

    /// Every launch must finish within `bound` (the watchdog ends the process otherwise).
    pub fn with_watchdog(&mut self, watchdog: &'a Watchdog, bound: Rc<Cell<Duration>>) {
        self.watchdog = Some((watchdog, bound));
    }
}

impl TimedSide for DecodeSide<'_> {
    fn block(&mut self, opts: &TimingOptions) -> Result<Timings> {
        let count = self.set_count();
        let (gpu, prepared, spec) = (self.gpu, self.prepared, &self.spec);
        let (sets, outs) = (&self.sets, &self.outs);
        let scale = spec.params().scale;
        let mut launch = |i: usize| -> attn_kernels::Result<()> {
            let sets = sets.borrow();
            prepared.launch_args(gpu, &sets[i].args(spec, scale), &mut outs.borrow_mut()[i])?;
            Ok(())
        };
        let per_sample = attn_kernels::timing::launches_per_sample(opts, count) as u32;
        let mut hooks = DecodeHooks {
            gpu,
            sets,
            outs,
            verifier: self.verifier.as_mut(),
            watchdog: self
                .watchdog
                .as_ref()
                .map(|(w, bound)| (*w, bound.get() * per_sample)),
        };
        let timed = match self.watchdog.as_ref().map(|(w, bound)| (*w, bound.get())) {
            Some((w, bound)) => {
                let launches = (opts.warmup + count + 1) as u32;
                w.guard(bound * launches, "a timed decode launch", || {
                    self.harness.time(count, opts, &mut launch, &mut hooks)
                })
            }
            None => self.harness.time(count, opts, &mut launch, &mut hooks),
        };
        Ok(timed?)
    }
}

/// The references of a decode side's sets on the GPU (from the logical K and V, uploaded for the
/// purpose and freed), the whole-output bound, and the counts.
pub struct DecodeVerifier {
    reference: GpuReference,
    references: Vec<ReferenceOutput>,
    bound: Option<ElementBound>,
    counters: Option<Counters>,
    slots: Vec<(usize, usize)>,
    samples: usize,
    rng: u64,
    seed: u64,
    maps: Vec<ColumnMap>,
}

impl std::fmt::Debug for DecodeVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeVerifier")
            .field("samples", &self.samples)
            .finish_non_exhaustive()
    }
}

impl DecodeVerifier {
    fn new(gpu: &Gpu, spec: &DecodeSpec, seed: u64) -> Result<DecodeVerifier> {
        Ok(DecodeVerifier {
            reference: GpuReference::new(gpu, spec.dtype(), spec.head_dim())?,
            references: Vec::new(),
            bound: None,
            counters: None,
            slots: Vec::new(),
            samples: 0,
            rng: seed ^ 0x5c7a_3b1e,
            seed,
            maps: Vec::new(),
        })
    }

    /// The reference of one set, masked; the first set also fixes the bound (the normal inputs'
    /// tolerance less the GPU reference's own error against the f64 oracle on every row).
    fn add_set(
        &mut self,
        gpu: &Gpu,
        problem: &Problem,
        inputs: &attn_oracle::DecodeInputs,
        first: bool,
    ) -> Result<()> {
        let spec = &inputs.case.spec;
        let (k, v) = inputs.cache.logical(spec)?;
        let (q, k, v) = (gpu.upload(&inputs.q)?, gpu.upload(&k)?, gpu.upload(&v)?);
        let offsets = gpu.upload_offsets(spec.varlen())?;
        let params = spec.params();
        if first {
            let plain = self
                .reference
                .compute(gpu, &q, &k, &v, &params, Some(&offsets))?;
            let exact = reference_decode(spec, &inputs.q, &inputs.cache, &RowSelection::All)?;
            let error = reference_error(&plain.download(gpu)?, &exact, problem);
            let tol = tolerance(spec.dtype(), Distribution::Normal);
            self.bound = Some(whole_output_bound(error, &tol, || {
                format!("{} (timed input set 0, seed {})", spec, inputs.case.seed)
            })?);
        }
        let rows = problem.output_rows();
        let set = self.references.len() as u64;
        let mask = RowMask::secret(rows, secret_entropy(self.seed, set));
        let masked = self
            .reference
            .compute_with(gpu, &q, &k, &v, &params, Some(&offsets), mask)?;
        self.references.push(masked);
        gpu.synchronize()?;
        Ok(())
    }

    /// Reads the counts (synchronises).
    pub fn finish(&self, gpu: &Gpu) -> Result<VerifiedOutputs> {
        let counts = match &self.counters {
            Some(c) => c.read(gpu)?,
            None => vec![],
        };
        let mut bad_samples: Vec<usize> = Vec::new();
        let mut first_bad = None;
        for (slot, &(sample, set)) in self.slots.iter().enumerate() {
            let bad = counts.get(slot).copied().unwrap_or(0);
            if bad > 0 {
                first_bad.get_or_insert_with(|| {
                    format!(
                        "timed sample {sample} on input set {set}: {bad} of {} elements unwritten, not finite or off the reference",
                        self.references[set].elements()
                    )
                });
                if bad_samples.last() != Some(&sample) {
                    bad_samples.push(sample);
                }
            }
        }
        Ok(VerifiedOutputs {
            samples_checked: self.samples,
            samples_bad: bad_samples.len(),
            first_bad,
        })
    }
}

/// What a decode side does around each timed sample (see the module).
struct DecodeHooks<'s, 'a> {
    gpu: &'a Gpu,
    sets: &'s RefCell<Vec<GuardedDecodeSet>>,
    outs: &'s RefCell<Vec<GuardedTensor>>,
    verifier: Option<&'s mut DecodeVerifier>,
    watchdog: Option<(&'a Watchdog, Duration)>,
}

impl SampleHooks for DecodeHooks<'_, '_> {
    fn before_sample(&mut self, sets: &[usize]) -> attn_kernels::Result<()> {
        let Some(verifier) = self.verifier.as_deref_mut() else {
            return Ok(());
        };
        let mut all = self.sets.borrow_mut();
        let mut outs = self.outs.borrow_mut();
        verifier.maps.clear();
        for (n, &i) in sets.iter().enumerate() {
            if !sets[..n].contains(&i) {
                let d = all[i].q.dims[3];
                let qk = ColumnMap::upload(self.gpu, &signed_permutation(d, &mut verifier.rng))?;
                let vm = ColumnMap::upload(self.gpu, &signed_permutation(d, &mut verifier.rng))?;
                let batch = &mut all[i];
                verifier.reference.scramble(self.gpu, &mut batch.q, &qk)?;
                verifier.reference.scramble(self.gpu, &mut batch.k, &qk)?;
                verifier.reference.scramble(self.gpu, &mut batch.v, &vm)?;
                verifier.reference.scramble_reference(
                    self.gpu,
                    &mut verifier.references[i],
                    &vm,
                )?;
                verifier.maps.extend([qk, vm]);
            }
            self.gpu.poison(&mut outs[i])?;
        }
        Ok(())
    }

    fn after_sample(&mut self, sets: &[usize]) -> attn_kernels::Result<()> {
        if let Some((w, bound)) = self.watchdog {
            w.kick(bound);
        }
        let Some(verifier) = self.verifier.as_deref_mut() else {
            return Ok(());
        };
        let (Some(bound), Some(counters)) = (verifier.bound, verifier.counters.as_mut()) else {
            return Ok(());
        };
        let sample = verifier.samples;
        verifier.samples += 1;
        let outs = self.outs.borrow();
        for (i, &set) in sets.iter().enumerate() {
            if sets[..i].contains(&set) {
                continue;
            }
            let slot = verifier.slots.len();
            if slot >= counters.len() {
                break;
            }
            verifier.reference.count_bad_async(
                self.gpu,
                &outs[set],
                &verifier.references[set],
                bound,
                counters,
                slot,
            )?;
            verifier.slots.push((sample, set));
        }
        Ok(())
    }
}

/// PyTorch SDPA on a decode batch of equal lengths (or FlashInfer on a paged one) as a timed
/// side: the helper's own input sets, as many as the candidate's (see evidence/METHOD.md,
/// `equal-input-sets`), its output checked by the helper before it times.
#[derive(Debug)]
pub struct SdpaDecodeSide<'a> {
    gpu: &'a Gpu,
    sdpa: &'a crate::sdpa::Sdpa,
    backend: crate::sdpa::Backend,
    spec: &'a DecodeSpec,
    sets: usize,
    seed: u64,
    flush_bytes: usize,
}

impl<'a> SdpaDecodeSide<'a> {
    /// SDPA's `backend` (or FlashInfer) on `sets` input sets of `spec` drawn from `seed`.
    pub fn new(
        gpu: &'a Gpu,
        sdpa: &'a crate::sdpa::Sdpa,
        backend: crate::sdpa::Backend,
        spec: &'a DecodeSpec,
        sets: usize,
        seed: u64,
    ) -> SdpaDecodeSide<'a> {
        SdpaDecodeSide {
            gpu,
            sdpa,
            backend,
            spec,
            sets,
            seed,
            flush_bytes: crate::timing::flush_bytes(gpu),
        }
    }
}

impl TimedSide for SdpaDecodeSide<'_> {
    fn block(&mut self, opts: &TimingOptions) -> Result<Timings> {
        // Nothing of this process may still run while the helper times (evidence/METHOD.md,
        // `sdpa-idle-device`).
        self.gpu.synchronize()?;
        self.sdpa.time_decode(
            self.spec,
            self.backend,
            opts,
            self.sets,
            self.seed,
            self.flush_bytes,
        )
    }
}
