//! Timing one problem: input sets on the device, prepared candidates, the candidate's side
//! (with every timed output verified) and the baseline's, sampled in alternating blocks (after a
//! warm-up round, each side first in every other round) with clock-throttled blocks dropped and
//! re-taken.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use attn_evidence::{BlockClock, ClockGuard};
use attn_kernels::guard::span_mhz;
use attn_kernels::planted::{ReferenceCopier, SideStreamWork};
use attn_kernels::telemetry::{self, ClockReading};
use attn_kernels::{
    Candidate, ColumnMap, Counters, ElementBound, Gpu, GpuReference, GuardedTensor, Harness,
    HarnessKernels, Prepared, ReferenceOutput, RowMask, SampleHooks, TimingMode, TimingOptions,
    Timings, VarlenOffsets,
};
use attn_oracle::{DType, Distribution, Tolerance};

use crate::check;
use crate::supervise::Watchdog;
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
    seed: u64,
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

/// Prepared candidates, compiled once per (candidate, dtype, head dim).
#[derive(Default)]
pub struct PreparedCache {
    prepared: HashMap<(String, DType, usize), Prepared>,
}

/// What tells two candidates apart in a [`PreparedCache`]: the implementation (or the user's
/// file and the hash of its text), the knobs, and for a revision its text and headers. Knobs alone would let `mma` and `hopper`, both
/// with their defaults, share one compiled kernel.
pub fn cache_key(candidate: &Candidate) -> String {
    match candidate {
        Candidate::Registered {
            implementation,
            overrides,
        } => format!("{}[{overrides}]", implementation.name),
        Candidate::Source {
            path,
            source,
            entry,
            defines,
        } => format!(
            "{}:{entry}@{}[{defines}]",
            path.display(),
            attn_kernels::compile::sha256_hex(source.as_bytes())
        ),
        // The same candidate at a revision (a ratchet's baseline) is another kernel: its text
        // and headers (the folder is named by their hash).
        Candidate::Revision {
            of,
            source,
            include_dir,
            ..
        } => format!(
            "{}@{}:{}",
            cache_key(of),
            attn_kernels::compile::sha256_hex(source.as_bytes()),
            include_dir.display()
        ),
    }
}

impl std::fmt::Debug for PreparedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedCache")
            .field("entries", &self.prepared.len())
            .finish()
    }
}

impl PreparedCache {
    /// `candidate` prepared for `dtype` and `head_dim` (compiled on first use).
    pub fn get(
        &mut self,
        gpu: &Gpu,
        candidate: &Candidate,
        dtype: DType,
        head_dim: usize,
    ) -> Result<&Prepared> {
        let key = (cache_key(candidate), dtype, head_dim);
        if !self.prepared.contains_key(&key) {
            let prepared = Prepared::new(gpu, candidate, dtype, head_dim)?;
            self.prepared.insert(key.clone(), prepared);
        }
        Ok(&self.prepared[&key])
    }
}

/// One side of a comparison, sampled a block at a time.
pub trait TimedSide {
    /// Takes one block of samples with `opts`.
    fn block(&mut self, opts: &TimingOptions) -> Result<Timings>;
}

/// Checks the timed launches' outputs and keeps them from being remembered. Before each sample
/// (outside the timed region) its input sets are turned through fresh signed column
/// permutations — Q and K through one (Q·Kᵀ unchanged), V and the set's reference through another
/// (the output turns with V) — so no timed launch sees inputs any launch saw before, and a kernel
/// that caches outputs by content gains nothing; then the outputs are poisoned. After the sample
/// it counts on the GPU (no host wait, so verification adds no idle gap between samples) the
/// elements that are unwritten, not finite or off the reference; [`OutputVerifier::finish`]
/// reads the counts.
#[derive(Debug)]
pub struct OutputVerifier {
    reference: GpuReference,
    references: Vec<ReferenceOutput>,
    bound: ElementBound,
    counters: Counters,
    /// (sample, input set) of each counter slot used.
    slots: Vec<(usize, usize)>,
    samples: usize,
    /// The state of the permutations' generator (splitmix64).
    rng: u64,
    /// The maps of the latest sample, kept alive until their kernels have run.
    maps: Vec<ColumnMap>,
}

/// Entropy for a secret: the process's random hasher state mixed with `seed` and `i` (the seed
/// alone is recorded in evidence; this is not).
fn secret_entropy(seed: u64, i: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(seed);
    hasher.write_u64(i);
    hasher.finish()
}

/// One step of splitmix64.
pub(crate) fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A random signed permutation of `d` columns as `code[j] = src_j | (negate_j << 16)`.
pub fn signed_permutation(d: usize, state: &mut u64) -> Vec<i32> {
    let mut src: Vec<i32> = (0..d as i32).collect();
    for i in (1..d).rev() {
        let j = (next_random(state) % (i as u64 + 1)) as usize;
        src.swap(i, j);
    }
    src.into_iter()
        .map(|s| s | (((next_random(state) & 1) as i32) << 16))
        .collect()
}

/// What [`OutputVerifier::finish`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedOutputs {
    /// Samples whose outputs were checked.
    pub samples_checked: usize,
    /// Samples with at least one bad element.
    pub samples_bad: usize,
    /// The first bad sample, one line.
    pub first_bad: Option<String>,
}

impl OutputVerifier {
    /// References of every set of `sets` (normal inputs), and counters for `capacity` checks.
    ///
    /// The bound is the checks' ([`crate::check`]): `tol` less the GPU reference's own error
    /// against the f64 oracle, measured on the first set's check rows. A fixed share of `tol`
    /// would judge the timed outputs more strictly than the checks did and reject an honest
    /// kernel whose error sits near the bound.
    pub fn new(
        gpu: &Gpu,
        problem: &Problem,
        sets: &InputSets,
        reference: GpuReference,
        tol: &Tolerance,
        capacity: usize,
        seed: u64,
    ) -> Result<OutputVerifier> {
        let bound = Self::bound(gpu, problem, sets, &reference, tol)?;
        // Each reference stored masked under a secret of its own (never in the evidence, not
        // derived from the recorded seed alone): a kernel that found it could copy only noise.
        let rows = problem.output_rows();
        let references = (0..sets.len())
            .map(|i| {
                let mask = RowMask::secret(rows, secret_entropy(seed, i as u64));
                reference.compute_with(
                    gpu,
                    &sets.q[i],
                    &sets.k[i],
                    &sets.v[i],
                    &problem.params,
                    sets.offsets(i),
                    mask,
                )
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(OutputVerifier {
            counters: Counters::new(gpu, capacity)?,
            reference,
            references,
            bound,
            slots: Vec::with_capacity(capacity),
            samples: 0,
            rng: seed,
            maps: Vec::new(),
        })
    }

    /// The whole-output bound on `sets`: `tol` less the reference's error on set 0's check rows.
    fn bound(
        gpu: &Gpu,
        problem: &Problem,
        sets: &InputSets,
        reference: &GpuReference,
        tol: &Tolerance,
    ) -> Result<ElementBound> {
        // Set 0's inputs as they sit on the device (cheaper than drawing them again, and the
        // very values timed).
        let inputs = attn_oracle::Inputs {
            spec: attn_oracle::CaseSpec {
                shape: problem.shape,
                dtype: problem.dtype,
                distribution: Distribution::Normal,
                seed: sets.seed,
            },
            q: gpu.download(&sets.q[0])?,
            k: gpu.download(&sets.k[0])?,
            v: gpu.download(&sets.v[0])?,
        };
        let exact = problem.oracle(&inputs, &problem.params, sets.seed)?;
        let gpu_ref = reference.compute(
            gpu,
            &sets.q[0],
            &sets.k[0],
            &sets.v[0],
            &problem.params,
            sets.offsets(0),
        )?;
        let reference_vs_f64 = check::reference_error(&gpu_ref.download(gpu)?, &exact, problem);
        check::whole_output_bound(reference_vs_f64, tol, || {
            format!("{problem} (timed input set 0, seed {})", sets.seed)
        })
    }

    /// Reads the counts (synchronises).
    pub fn finish(&self, gpu: &Gpu) -> Result<VerifiedOutputs> {
        let counts = self.counters.read(gpu)?;
        let mut bad_samples: Vec<usize> = Vec::new();
        let mut first_bad = None;
        for (slot, &(sample, set)) in self.slots.iter().enumerate() {
            let bad = counts.get(slot).copied().unwrap_or(0);
            if bad > 0 {
                if first_bad.is_none() {
                    first_bad = Some(format!(
                        "timed sample {sample} on input set {set}: {bad} of {} elements unwritten, not finite or off the reference",
                        self.references[set].elements()
                    ));
                }
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

/// A kernel (candidate or registered baseline) on its own input sets.
pub struct KernelSide<'a> {
    gpu: &'a Gpu,
    prepared: &'a Prepared,
    problem: &'a Problem,
    sets: RefCell<InputSets>,
    harness: Harness<'a>,
    /// Checks every timed output when present.
    pub verifier: Option<OutputVerifier>,
    side_work: Option<&'a mut SideStreamWork>,
    watchdog: Option<(&'a Watchdog, Rc<Cell<Duration>>)>,
    seed: u64,
    /// The inputs' invariant checksums when verification began (see [`KernelSide::watch`]).
    sums: Option<(HarnessKernels, u64, Vec<[u64; 3]>)>,
    copier: Option<&'a ReferenceCopier>,
}

/// What a timing did to the candidate's buffers besides its outputs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimingWatch {
    /// Writes found in the canary guards, one line each.
    pub outside: Vec<String>,
    /// Inputs whose invariant checksum changed (`"Q of input set 2"`).
    pub inputs_written: Vec<String>,
}

/// The work a batch-mode sample needs at least, FLOP: 10 ms of the H100's dense fp16 peak, so
/// that a sample's launch gaps and the event timer's resolution stay under 0.1% of it. Launches
/// beyond that add nothing to the measurement and cost an input set each (memory, generation,
/// and in the gate a GPU reference per set: at 2,32/8,8192,128, 50 sets took 57 s to set up).
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

impl std::fmt::Debug for KernelSide<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelSide")
            .field("prepared", &self.prepared)
            .field("problem", &self.problem.spec)
            .finish_non_exhaustive()
    }
}

impl<'a> KernelSide<'a> {
    /// `prepared` on fresh input sets drawn from `seed`.
    pub fn new(
        gpu: &'a Gpu,
        prepared: &'a Prepared,
        problem: &'a Problem,
        seed: u64,
    ) -> Result<KernelSide<'a>> {
        let sets = InputSets::new(gpu, problem, input_set_count(problem, gpu), seed)?;
        Ok(KernelSide {
            gpu,
            prepared,
            problem,
            sets: RefCell::new(sets),
            harness: Harness::new(gpu)?,
            verifier: None,
            side_work: None,
            watchdog: None,
            seed,
            sums: None,
            copier: None,
        })
    }

    /// Input sets for `opts` ([`sets_for`]): call before [`KernelSide::verify_outputs`] (the
    /// verifier holds a reference per set); [`TimedSide::block`] calls it too.
    pub fn prepare_for(&mut self, opts: &TimingOptions) -> Result<()> {
        let wanted = sets_for(self.problem, self.gpu, opts);
        if wanted <= self.sets.borrow().len() {
            return Ok(());
        }
        if self.verifier.is_some() {
            return Err(crate::MeasureError::Invalid(
                "input sets must be prepared for the timing mode before outputs are verified"
                    .into(),
            ));
        }
        self.sets.borrow_mut().grow(self.gpu, self.problem, wanted)
    }

    /// Number of input sets.
    pub fn set_count(&self) -> usize {
        self.sets.borrow().len()
    }

    /// After a timing: the canary guards of every buffer, and (when verifying) the inputs'
    /// invariant checksums against those taken when verification began.
    pub fn watch(&self) -> Result<TimingWatch> {
        let sets = self.sets.borrow();
        let mut watch = TimingWatch {
            outside: sets.outside_writes(self.gpu)?,
            inputs_written: vec![],
        };
        // A varlen batch's offsets are inputs too: they must come back as uploaded.
        for (set, offsets) in sets.offsets.iter().enumerate() {
            for name in offsets.changed(self.gpu)? {
                watch
                    .inputs_written
                    .push(format!("{name} of input set {set} changed"));
            }
        }
        if let Some((harness, seed, before)) = &self.sums {
            let after = sets.invariant_checksums(self.gpu, harness, *seed)?;
            for (set, (b, a)) in before.iter().zip(&after).enumerate() {
                for (name, (x, y)) in ["Q", "K", "V"].iter().zip(b.iter().zip(a)) {
                    if x != y {
                        watch
                            .inputs_written
                            .push(format!("{name} of input set {set} changed"));
                    }
                }
            }
        }
        Ok(watch)
    }

    /// Verifies every timed output (of up to `samples` samples) against the GPU reference with
    /// the checks' rule: within `tol` less the reference's own error on these inputs.
    pub fn verify_outputs(
        &mut self,
        reference: GpuReference,
        tol: &Tolerance,
        samples: usize,
    ) -> Result<()> {
        // Every distinct set of a sample takes a slot (batch mode: every launch of it).
        let capacity = samples * self.sets.borrow().len() + 16;
        let harness = HarnessKernels::new(self.gpu)?;
        let sum_seed = next_random(&mut (self.seed ^ 0x5e75_c4ec));
        let before = self
            .sets
            .borrow()
            .invariant_checksums(self.gpu, &harness, sum_seed)?;
        self.sums = Some((harness, sum_seed, before));
        let verifier = OutputVerifier::new(
            self.gpu,
            self.problem,
            &self.sets.borrow(),
            reference,
            tol,
            capacity,
            self.seed ^ 0x5c7a_3b1e,
        )?;
        self.verifier = Some(verifier);
        Ok(())
    }

    /// A planted cheat: after every sample, before verification, the outputs are overwritten with
    /// the verifier's references as they sit in device memory.
    pub fn with_reference_copier(&mut self, copier: &'a ReferenceCopier) {
        self.copier = Some(copier);
    }

    /// Launches `work` after every launch (a planted fault: hidden work on another stream).
    pub fn with_side_work(&mut self, work: &'a mut SideStreamWork) {
        self.side_work = Some(work);
    }

    /// Every launch must finish within `bound` (the watchdog ends the process otherwise); the
    /// bound may be changed between blocks.
    pub fn with_watchdog(&mut self, watchdog: &'a Watchdog, bound: Rc<Cell<Duration>>) {
        self.watchdog = Some((watchdog, bound));
    }
}

struct Hooks<'s, 'a> {
    gpu: &'a Gpu,
    sets: &'s RefCell<InputSets>,
    verifier: Option<&'s mut OutputVerifier>,
    /// The watchdog, and the bound of one sample.
    watchdog: Option<(&'a Watchdog, Duration)>,
    /// A planted cheat: the verifier's references copied into the outputs before they are counted.
    copier: Option<&'a ReferenceCopier>,
}

impl SampleHooks for Hooks<'_, '_> {
    fn before_sample(&mut self, sets: &[usize]) -> attn_kernels::Result<()> {
        let Some(verifier) = self.verifier.as_deref_mut() else {
            return Ok(());
        };
        let mut all = self.sets.borrow_mut();
        let d = all.q[0].dims[3];
        verifier.maps.clear();
        for (n, &i) in sets.iter().enumerate() {
            if !sets[..n].contains(&i) {
                let qk = ColumnMap::upload(self.gpu, &signed_permutation(d, &mut verifier.rng))?;
                let v = ColumnMap::upload(self.gpu, &signed_permutation(d, &mut verifier.rng))?;
                let InputSets {
                    q, k, v: values, ..
                } = &mut *all;
                verifier.reference.scramble(self.gpu, &mut q[i], &qk)?;
                verifier.reference.scramble(self.gpu, &mut k[i], &qk)?;
                verifier.reference.scramble(self.gpu, &mut values[i], &v)?;
                verifier
                    .reference
                    .scramble_reference(self.gpu, &mut verifier.references[i], &v)?;
                verifier.maps.extend([qk, v]);
            }
            self.gpu.poison(&mut all.o[i])?;
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
        let sample = verifier.samples;
        verifier.samples += 1;
        let mut all = self.sets.borrow_mut();
        for (i, &set) in sets.iter().enumerate() {
            if sets[..i].contains(&set) {
                continue;
            }
            if let Some(copier) = self.copier {
                copier.copy(self.gpu, &verifier.references[set], &mut all.o[set])?;
            }
            let slot = verifier.slots.len();
            if slot >= verifier.counters.len() {
                break; // more samples than planned: the rest go unchecked (counted as checked: no)
            }
            verifier.reference.count_bad_async(
                self.gpu,
                &all.o[set],
                &verifier.references[set],
                verifier.bound,
                &mut verifier.counters,
                slot,
            )?;
            verifier.slots.push((sample, set));
        }
        Ok(())
    }
}

impl TimedSide for KernelSide<'_> {
    fn block(&mut self, opts: &TimingOptions) -> Result<Timings> {
        self.prepare_for(opts)?;
        let count = self.sets.borrow().len();
        let (gpu, prepared, problem) = (self.gpu, self.prepared, self.problem);
        let sets = &self.sets;
        let mut side_work = self.side_work.as_deref_mut();
        let mut launch = |i: usize| -> attn_kernels::Result<()> {
            sets.borrow_mut().launch(gpu, prepared, problem, i)?;
            if let Some(work) = side_work.as_deref_mut() {
                work.launch()?;
            }
            Ok(())
        };
        let per_sample = attn_kernels::timing::launches_per_sample(opts, count) as u32;
        let mut hooks = Hooks {
            gpu,
            sets,
            verifier: self.verifier.as_mut(),
            watchdog: self
                .watchdog
                .as_ref()
                .map(|(w, bound)| (*w, bound.get() * per_sample)),
            copier: self.copier,
        };
        let timed = match self.watchdog.as_ref().map(|(w, bound)| (*w, bound.get())) {
            // Warm-up and graph capture run under one deadline for all their launches; then
            // each completed sample gives the next one its own.
            Some((w, bound)) => {
                let launches = (opts.warmup + count + 1) as u32;
                w.guard(bound * launches, "a timed launch", || {
                    self.harness.time(count, opts, &mut launch, &mut hooks)
                })
            }
            None => self.harness.time(count, opts, &mut launch, &mut hooks),
        };
        Ok(timed?)
    }
}

/// PyTorch SDPA with a backend, as a timed side.
#[derive(Debug)]
pub struct SdpaSide<'a> {
    gpu: &'a Gpu,
    sdpa: &'a crate::sdpa::Sdpa,
    backend: crate::sdpa::Backend,
    problem: &'a Problem,
    seed: u64,
    flush_bytes: usize,
}

impl<'a> SdpaSide<'a> {
    /// SDPA on `problem`, on as many input sets as a kernel side takes for the same options
    /// ([`sets_for`]; batch mode: one per launch of a sample). On fewer sets, a side finds more
    /// of its inputs in L2: FlashAttention-3 measured 238 µs on 2 sets and 280 on 50 at
    /// (4,16,2048,128), where the kernel side rotated over 50.
    pub fn new(
        gpu: &'a Gpu,
        sdpa: &'a crate::sdpa::Sdpa,
        backend: crate::sdpa::Backend,
        problem: &'a Problem,
        seed: u64,
    ) -> SdpaSide<'a> {
        SdpaSide {
            gpu,
            sdpa,
            backend,
            problem,
            seed,
            flush_bytes: flush_bytes(gpu),
        }
    }
}

impl TimedSide for SdpaSide<'_> {
    fn block(&mut self, opts: &TimingOptions) -> Result<Timings> {
        // Nothing of this process may still run on the device while the helper's process times:
        // it would share the GPU with the set-up's references or a verifier's checks, and a
        // first block once measured twice its time.
        self.gpu.synchronize()?;
        self.sdpa.time(
            self.problem,
            self.backend,
            opts,
            sets_for(self.problem, self.gpu, opts),
            self.seed,
            self.flush_bytes,
        )
    }
}

/// A side's guard pass: wall, event, host residual and device (other streams) residual times, µs.
type GuardPass = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>);

/// How two sides are sampled against each other.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interleave {
    /// The harness options; `samples` is the clean samples wanted per side.
    pub timing: TimingOptions,
    /// Samples per block: the sides alternate block by block, after a warm-up round, each side
    /// first in every other round ([`round_order`]), so both see the same clocks and temperature;
    /// the comparison resamples whole blocks ([`attn_stats::compare_in_blocks`]).
    pub block: usize,
    /// A block whose SM clock, measured on the device over it, is more than this fraction under
    /// the median of its side's earlier judged blocks is dropped and re-taken ([`ThrottleRule`]).
    pub clock_dip: f64,
    /// A block under this fraction of the device's maximum SM clock is dropped whatever its side
    /// ran at before (a hardware brake).
    pub clock_floor: f64,
    /// The device's maximum SM clock, MHz.
    pub max_sm_mhz: u32,
}

/// How far under its side's median a block's clock may dip: 10%. A power-limited GPU runs each
/// kernel at the clock its own power draw allows, so a side's level is the kernel's cost, not
/// noise, and no fraction of the maximum suits every kernel: under a sustained attention load
/// an H100 ran 1.45–1.76 GHz of its 1.98 GHz maximum by 50 µs probes at the blocks' edges, lower
/// over whole blocks, where a rule of 75% of the maximum (1485 MHz, nvbench's) kept no block of
/// the baseline side in eight rounds of a hopper-against-hopper gate (2026-11-27), and 90% had
/// dropped block after block before. What is noise is a dip: a block clocked well under its own
/// side's others.
pub const CLOCK_DIP: f64 = 0.10;

/// The fraction of the maximum SM clock under which any block is dropped: 50%, where hardware
/// slowdowns (thermal or power brakes) put the clock, far under any sustained load's level.
pub const CLOCK_FLOOR: f64 = 0.5;

/// Samples per block unless asked otherwise: a tenth of `samples` (at least 1), ten blocks a side.
pub fn default_block(samples: usize) -> usize {
    (samples / 10).max(1)
}

impl Interleave {
    /// Blocks of [`default_block`] samples, judged by [`CLOCK_DIP`] and [`CLOCK_FLOOR`].
    pub fn new(timing: TimingOptions, max_sm_mhz: u32) -> Interleave {
        Interleave {
            timing,
            block: default_block(timing.samples),
            clock_dip: CLOCK_DIP,
            clock_floor: CLOCK_FLOOR,
            max_sm_mhz,
        }
    }
}

/// Which blocks are kept: those whose SM clock is at most `dip` under the median of the same
/// side's earlier judged blocks (none for its first: only the floor applies) and at least
/// `floor` of `max_mhz`; a block whose clock could not be measured is kept (and the case says
/// so). The warm-up round is no side's reference: it follows an idle GPU and runs high.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThrottleRule {
    /// See [`Interleave::clock_dip`].
    pub dip: f64,
    /// See [`Interleave::clock_floor`].
    pub floor: f64,
    /// The device's maximum SM clock, MHz.
    pub max_mhz: u32,
}

impl ThrottleRule {
    /// The clock under which any block is dropped, MHz.
    pub fn floor_mhz(&self) -> f64 {
        f64::from(self.max_mhz) * self.floor
    }

    /// The clock under which a block is dropped, MHz, after its side's `earlier` judged blocks'
    /// measured clocks.
    pub fn threshold_mhz(&self, earlier: &[f64]) -> f64 {
        let mut earlier = earlier.to_vec();
        let own_level = if earlier.is_empty() {
            0.0
        } else {
            (1.0 - self.dip) * attn_stats::statistic::median(&mut earlier)
        };
        self.floor_mhz().max(own_level)
    }

    /// Whether a block measured at `mhz` is kept after its side's `earlier` judged blocks, and
    /// the threshold it was held to.
    pub fn judge(&self, mhz: Option<f64>, earlier: &[f64]) -> (bool, f64) {
        let threshold = self.threshold_mhz(earlier);
        (mhz.is_none_or(|m| m >= threshold), threshold)
    }

    /// The rule, one line, for evidence.
    pub fn describe(&self, source: &str) -> String {
        format!(
            "kept unless the SM clock measured over the block ({source}) is more than {:.0}% under the median of its side's earlier blocks (a transient dip; each side runs at the clock its own power draw allows) or under {:.0}% of the {} MHz maximum ({:.0} MHz)",
            self.dip * 100.0,
            self.floor * 100.0,
            self.max_mhz,
            self.floor_mhz()
        )
    }
}

/// The SM clock over a block from the device: a stamp of every SM's cycle counter on the timed
/// stream before the block and one after it ([`HarnessKernels::stamp_clocks`]), so the clock is
/// the mean over the block's whole span ([`span_mhz`]).
struct BlockProbe {
    kernels: HarnessKernels,
    before: attn_kernels::guard::ClockStamps,
    after: attn_kernels::guard::ClockStamps,
}

impl BlockProbe {
    fn new(gpu: &Gpu) -> Option<BlockProbe> {
        let kernels = HarnessKernels::new(gpu).ok()?;
        // Twice as many thread blocks as SMs, each reserving an SM's worth of shared memory
        // (`HarnessKernels::stamp_clocks`): the first wave puts one on every SM.
        let blocks = 2 * gpu.info().sm_count.max(1) as usize;
        let before = attn_kernels::guard::ClockStamps::new(gpu, blocks).ok()?;
        let after = attn_kernels::guard::ClockStamps::new(gpu, blocks).ok()?;
        Some(BlockProbe {
            kernels,
            before,
            after,
        })
    }

    fn before(&mut self, gpu: &Gpu) -> attn_kernels::Result<()> {
        self.kernels.stamp_clocks(gpu, &mut self.before)
    }

    fn after(&mut self, gpu: &Gpu) -> attn_kernels::Result<Option<f64>> {
        self.kernels.stamp_clocks(gpu, &mut self.after)?;
        Ok(span_mhz(&self.before.read(gpu)?, &self.after.read(gpu)?))
    }
}

/// `side`'s block of `opts` with the SM clock over it, read as [`interleave`] reads a block's
/// (the device probe, else nvidia-smi after it; `None` where neither can).
pub fn clocked_block(
    gpu: &Gpu,
    side: &mut dyn TimedSide,
    opts: &TimingOptions,
) -> Result<(Timings, Option<f64>)> {
    let mut clocks = DeviceClocks::new(gpu);
    clocks.before()?;
    let timings = side.block(opts)?;
    let (mhz, _) = clocks.after()?;
    Ok((timings, mhz))
}

/// The samples of both sides, and what the clock guard did.
#[derive(Debug, Clone)]
pub struct Interleaved {
    /// Side A (the candidate): its kept samples, and the guard pass of its first block.
    pub a: Timings,
    /// Side B (the baseline).
    pub b: Timings,
    /// Blocks kept and dropped.
    pub guard: ClockGuard,
    /// The clock read before the first block and after the last.
    pub clocks: (Option<ClockReading>, Option<ClockReading>),
}

/// Which side runs first in round `round` of [`interleave`] (0 the candidate, 1 the baseline):
/// the baseline in even rounds, the candidate in odd ones (B A, A B, B A, …: an ABBA design).
/// Why: in the gate's evidence up to 2026-11-26 (151 cases, the order always B A), a run's first
/// block, always the baseline's, read 117 MHz above the run's others on average. Those readings
/// were spin probes at the blocks' edges, and on 2026-11-27 such readings swung ±5% between
/// blocks whose times agreed within 1%, so the bias they showed may be the probe's more than the
/// clock's (blocks are now clocked over their whole span). The design costs one block per side
/// and removes the question: the warm-up round takes the first block out of the judgement, and
/// over every two rounds after it each side runs first once, so a drifting clock moves both alike.
pub fn round_order(round: usize) -> [usize; 2] {
    if round % 2 == 0 {
        [1, 0]
    } else {
        [0, 1]
    }
}

/// Samples `a` and `b` in alternating blocks, until each has `timing.samples` clean samples or
/// each has had four times its blocks. Round 0 warms the GPU up: a block of each side (the
/// baseline first, so that its time is known before the candidate's first block:
/// `after_first_baseline_block` sees it), timed and clocked like the others, its samples never
/// kept (a run's first block follows an idle GPU: [`round_order`]); each side's
/// guard pass comes from it. The rounds after it alternate which side runs first
/// ([`round_order`]). Each block's SM clock is measured on the device (nvidia-smi where the probe
/// cannot run) and judged by [`ThrottleRule`].
pub fn interleave(
    gpu: &Gpu,
    a: &mut dyn TimedSide,
    b: &mut dyn TimedSide,
    plan: &Interleave,
    after_first_baseline_block: impl FnMut(&Timings),
) -> Result<Interleaved> {
    let mut clocks = DeviceClocks::new(gpu);
    interleave_with(&mut clocks, a, b, plan, after_first_baseline_block)
}

/// Where [`interleave`] reads the SM clock of each block.
pub trait BlockClocks {
    /// How a block's clock is read, for the evidence's rule line.
    fn source(&self) -> &'static str;
    /// Before a block.
    fn before(&mut self) -> Result<()>;
    /// After the block: its clock, MHz, and how it was read (`"device-span"` or `"nvidia-smi"`).
    fn after(&mut self) -> Result<(Option<f64>, &'static str)>;
    /// The device's clock and temperature now (before the first block and after the last).
    fn reading(&self) -> Option<ClockReading>;
}

/// The GPU's clocks: the device probe around each block, nvidia-smi after it where the probe
/// cannot run.
struct DeviceClocks<'g> {
    gpu: &'g Gpu,
    probe: Option<BlockProbe>,
}

impl<'g> DeviceClocks<'g> {
    fn new(gpu: &'g Gpu) -> DeviceClocks<'g> {
        DeviceClocks {
            gpu,
            probe: BlockProbe::new(gpu),
        }
    }
}

impl BlockClocks for DeviceClocks<'_> {
    fn source(&self) -> &'static str {
        if self.probe.is_some() {
            "device: every SM's clock64() over %globaltimer, stamped on the timed stream before and after it"
        } else {
            "nvidia-smi after it"
        }
    }

    fn before(&mut self) -> Result<()> {
        if let Some(p) = self.probe.as_mut() {
            p.before(self.gpu)?;
        }
        Ok(())
    }

    fn after(&mut self) -> Result<(Option<f64>, &'static str)> {
        Ok(match self.probe.as_mut() {
            Some(p) => (p.after(self.gpu)?, BlockClock::SPAN_SOURCE),
            None => (self.reading().map(|c| f64::from(c.sm_mhz)), "nvidia-smi"),
        })
    }

    fn reading(&self) -> Option<ClockReading> {
        telemetry::read_clocks(self.gpu.info().ordinal)
    }
}

/// [`interleave`] with the block clocks of `clocks` (a test's own, without a GPU).
pub fn interleave_with(
    clocks: &mut dyn BlockClocks,
    a: &mut dyn TimedSide,
    b: &mut dyn TimedSide,
    plan: &Interleave,
    mut after_first_baseline_block: impl FnMut(&Timings),
) -> Result<Interleaved> {
    let wanted = plan.timing.samples;
    let block = plan.block.clamp(1, wanted.max(1));
    let blocks_needed = wanted.div_ceil(block);
    let rule = ThrottleRule {
        dip: plan.clock_dip,
        floor: plan.clock_floor,
        max_mhz: plan.max_sm_mhz,
    };
    let before = clocks.reading();
    let source = clocks.source();
    let mut merged: [Option<Timings>; 2] = [None, None];
    let mut kept = [0usize; 2];
    let mut dropped = [0usize; 2];
    let mut min_kept: Option<f64> = None;
    let mut blocks: Vec<BlockClock> = Vec::new();
    let mut guard: [Option<GuardPass>; 2] = [None, None];
    let mut started = [false; 2];
    // Round 0 warms up; rounds 1 to 4 · blocks_needed may be judged.
    for round in 0..=4 * blocks_needed {
        let warming_up = round == 0;
        if !warming_up && kept[0] >= blocks_needed && kept[1] >= blocks_needed {
            break;
        }
        for side in round_order(round) {
            if !warming_up && kept[side] >= blocks_needed {
                continue;
            }
            let first = !started[side];
            started[side] = true;
            let opts = TimingOptions {
                samples: block.min(wanted - kept[side] * block).max(1),
                warmup: if first { plan.timing.warmup } else { 2 },
                guard_launches: if guard[side].is_none() {
                    plan.timing.guard_launches
                } else {
                    0
                },
                ..plan.timing
            };
            clocks.before()?;
            let timings = if side == 0 {
                a.block(&opts)?
            } else {
                b.block(&opts)?
            };
            // The guard pass judges where the work ran, not how fast: it is kept even from a
            // block whose samples are dropped (or work escaping the stream could hide behind a
            // throttled first block).
            if guard[side].is_none() && !timings.guard_event_us.is_empty() {
                guard[side] = Some((
                    timings.wall_us.clone(),
                    timings.guard_event_us.clone(),
                    timings.guard_residual_us.clone(),
                    timings.guard_stream_residual_us.clone(),
                ));
            }
            let (clock, how) = clocks.after()?;
            if side == 1 && first {
                after_first_baseline_block(&timings);
            }
            if warming_up {
                blocks.push(BlockClock {
                    side,
                    mhz: clock,
                    source: how.into(),
                    kept: false,
                    warmup: true,
                    threshold_mhz: None,
                });
                continue;
            }
            // The side's judged blocks so far: the level this one is held to.
            let earlier: Vec<f64> = blocks
                .iter()
                .filter(|b| b.side == side && !b.warmup)
                .filter_map(|b| b.mhz)
                .collect();
            let (keep, threshold) = rule.judge(clock, &earlier);
            blocks.push(BlockClock {
                side,
                mhz: clock,
                source: how.into(),
                kept: keep,
                warmup: false,
                threshold_mhz: clock.map(|_| threshold.round()),
            });
            if !keep {
                dropped[side] += 1;
                continue;
            }
            min_kept = match (min_kept, clock) {
                (Some(m), Some(c)) => Some(m.min(c)),
                (m, c) => m.or(c),
            };
            kept[side] += 1;
            match &mut merged[side] {
                Some(all) => all.samples_us.extend(timings.samples_us),
                // The side's untimed launches were its first block's (the warm-up round's).
                slot => {
                    *slot = Some(Timings {
                        warmup: plan.timing.warmup,
                        ..timings
                    })
                }
            }
        }
    }
    let after = clocks.reading();
    let empty = || Timings {
        mode: plan.timing.mode,
        warmup: plan.timing.warmup,
        launches_per_sample: 1,
        input_sets: 0,
        samples_us: vec![],
        wall_us: vec![],
        guard_event_us: vec![],
        guard_residual_us: vec![],
        guard_stream_residual_us: vec![],
    };
    let [a_t, b_t] = merged;
    let with_guard = |t: Option<Timings>, g: Option<GuardPass>| {
        let mut t = t.unwrap_or_else(empty);
        if let Some((wall, event, residual, streams)) = g {
            (
                t.wall_us,
                t.guard_event_us,
                t.guard_residual_us,
                t.guard_stream_residual_us,
            ) = (wall, event, residual, streams);
        }
        t
    };
    let [a_g, b_g] = guard;
    let measured = blocks.iter().any(|b| b.mhz.is_some());
    Ok(Interleaved {
        a: with_guard(a_t, a_g),
        b: with_guard(b_t, b_g),
        guard: ClockGuard {
            block_samples: block,
            kept_blocks: kept,
            dropped_blocks: dropped,
            threshold_mhz: measured.then(|| rule.floor_mhz().round() as u32),
            min_kept_mhz: min_kept.map(|m| m.round() as u32),
            complete: kept[0] >= blocks_needed && kept[1] >= blocks_needed,
            rule: Some(rule.describe(source)),
            blocks,
        },
        clocks: (before, after),
    })
}

#[cfg(test)]
mod tests {
    use super::{cache_key, round_order, signed_permutation};

    /// A side whose block `n` (from 1) returns samples of value `1000 · side + n`, logging every
    /// call with its options.
    struct FakeSide {
        side: usize,
        calls: usize,
        log: std::rc::Rc<std::cell::RefCell<Vec<(usize, attn_kernels::TimingOptions)>>>,
    }

    impl super::TimedSide for FakeSide {
        fn block(
            &mut self,
            opts: &attn_kernels::TimingOptions,
        ) -> crate::Result<attn_kernels::Timings> {
            self.calls += 1;
            self.log.borrow_mut().push((self.side, *opts));
            Ok(fake_timings(
                opts,
                vec![(1000 * self.side + self.calls) as f64; opts.samples],
            ))
        }
    }

    /// A block's timings: `samples_us`, and a guard pass of `opts.guard_launches` launches of 1 µs.
    fn fake_timings(
        opts: &attn_kernels::TimingOptions,
        samples_us: Vec<f64>,
    ) -> attn_kernels::Timings {
        let guard = vec![1.0; opts.guard_launches];
        attn_kernels::Timings {
            mode: opts.mode,
            warmup: opts.warmup,
            launches_per_sample: 1,
            input_sets: 2,
            samples_us,
            wall_us: guard.clone(),
            guard_event_us: guard.clone(),
            guard_residual_us: guard.clone(),
            guard_stream_residual_us: guard,
        }
    }

    /// Block clocks from a list, one per block.
    struct FakeClocks(std::vec::IntoIter<f64>);

    impl super::BlockClocks for FakeClocks {
        fn source(&self) -> &'static str {
            "a test's list"
        }
        fn before(&mut self) -> crate::Result<()> {
            Ok(())
        }
        fn after(&mut self) -> crate::Result<(Option<f64>, &'static str)> {
            Ok((self.0.next(), "device"))
        }
        fn reading(&self) -> Option<attn_kernels::telemetry::ClockReading> {
            None
        }
    }

    /// Both sides the same kernel on a GPU whose clock sags for a while in the run's middle (a
    /// power-limited H100 ran about 10% slower for some seconds of a gate run): sample `t` of the
    /// run, whichever side takes it, lasts 110 µs from 45% to 85% of the run, else 100, give or
    /// take a little.
    struct WanderingGpu {
        side: usize,
        clock: std::rc::Rc<std::cell::Cell<usize>>,
        run_samples: usize,
    }

    impl super::TimedSide for WanderingGpu {
        fn block(
            &mut self,
            opts: &attn_kernels::TimingOptions,
        ) -> crate::Result<attn_kernels::Timings> {
            let samples_us = (0..opts.samples)
                .map(|_| {
                    let t = self.clock.get();
                    self.clock.set(t + 1);
                    let at = t as f64 / self.run_samples as f64;
                    let sag = if (0.45..0.85).contains(&at) {
                        10.0
                    } else {
                        0.0
                    };
                    100.0 + sag + 0.05 * ((t * 7 + self.side) % 5) as f64
                })
                .collect();
            Ok(fake_timings(opts, samples_us))
        }
    }

    #[test]
    fn a_kernel_against_itself_under_a_wandering_clock_is_no_change() {
        let verdict = |block: usize| {
            let clock = std::rc::Rc::new(std::cell::Cell::new(0));
            let side = |side| WanderingGpu {
                side,
                clock: clock.clone(),
                // The warm-up block of each side and 20 samples a side: the whole run.
                run_samples: 2 * (block + 20),
            };
            let (mut a, mut b) = (side(0), side(1));
            let timing = attn_kernels::TimingOptions {
                samples: 20,
                guard_launches: 0,
                ..attn_kernels::TimingOptions::default()
            };
            let plan = super::Interleave {
                block,
                ..super::Interleave::new(timing, 1980)
            };
            let mut clocks = FakeClocks(vec![1500.0; 64].into_iter());
            let timed = super::interleave_with(&mut clocks, &mut a, &mut b, &plan, |_| {}).unwrap();
            let sample =
                |t: &attn_kernels::Timings| attn_stats::Sample::new(t.samples_us.clone()).unwrap();
            let (b, a) = (sample(&timed.b), sample(&timed.a));
            let opts = attn_stats::CompareOptions::default();
            let in_blocks = attn_stats::compare_in_blocks(&b, &a, block, &opts).unwrap();
            (
                in_blocks.verdict,
                attn_stats::compare(&b, &a, &opts).unwrap().verdict,
            )
        };
        use attn_stats::Verdict::{Faster, NoChange};
        // The default: ten blocks a side, each side's blocks spread over the whole run.
        assert_eq!(super::default_block(20), 2);
        assert_eq!(verdict(2).0, NoChange);
        // The design before: two blocks a side (A B B A), resampled one by one. The baseline's
        // both fall in the sag and the kernel beats itself: why the gate refuses fewer than
        // MIN_BLOCKS_A_SIDE a side (in hopper against itself on an H100 too:
        // evidence/gate/2026-11-27T09-16-11Z against 09-17-37Z).
        assert_eq!(verdict(10).1, Faster);
        assert!(attn_evidence::too_few_blocks(10, 20usize.div_ceil(10)));
    }

    #[test]
    fn a_warm_up_round_is_never_kept_and_the_sides_then_take_turns_going_first() {
        let log = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let side = |side| FakeSide {
            side,
            calls: 0,
            log: log.clone(),
        };
        let (mut a, mut b) = (side(0), side(1));
        let timing = attn_kernels::TimingOptions {
            samples: 20,
            ..attn_kernels::TimingOptions::default()
        };
        let plan = super::Interleave {
            block: 10,
            ..super::Interleave::new(timing, 1980)
        };
        // Warm-up B, A (a cool GPU, higher clocks: no side's reference); round 1 A, B; round 2
        // B, A (B dips more than 10% under its median: dropped); round 3 B alone (A has its two
        // blocks).
        let mut clocks =
            FakeClocks(vec![1900.0, 1800.0, 1700.0, 1690.0, 1400.0, 1680.0, 1670.0].into_iter());
        let mut first_baseline = Vec::new();
        let timed = super::interleave_with(&mut clocks, &mut a, &mut b, &plan, |t| {
            first_baseline.push(t.samples_us[0])
        })
        .unwrap();
        let order: Vec<usize> = log.borrow().iter().map(|(side, _)| *side).collect();
        assert_eq!(order, [1, 0, 0, 1, 1, 0, 1]);
        // Each side's first block (the warm-up) takes the untimed launches and the guard pass.
        for (i, (side, opts)) in log.borrow().iter().enumerate() {
            let first = i < 2;
            assert_eq!(
                opts.warmup,
                if first { timing.warmup } else { 2 },
                "call {i} (side {side})"
            );
            assert_eq!(
                opts.guard_launches,
                if first { timing.guard_launches } else { 0 }
            );
        }
        // The hang bound comes from the baseline's warm-up block.
        assert_eq!(first_baseline, [1001.0]);
        // No warm-up sample and no throttled one is kept.
        assert_eq!(timed.a.samples_us, [[2.0; 10], [3.0; 10]].concat());
        assert_eq!(timed.b.samples_us, [[1002.0; 10], [1004.0; 10]].concat());
        assert_eq!(timed.a.warmup, timing.warmup);
        assert_eq!(timed.a.guard_event_us.len(), timing.guard_launches);
        let guard = &timed.guard;
        assert_eq!((guard.kept_blocks, guard.dropped_blocks), ([2, 2], [0, 1]));
        assert!(guard.complete);
        assert_eq!(guard.min_kept_mhz, Some(1670));
        let flags: Vec<(bool, bool)> = guard.blocks.iter().map(|b| (b.warmup, b.kept)).collect();
        assert_eq!(
            flags,
            [
                (true, false),
                (true, false),
                (false, true),
                (false, true),
                (false, false),
                (false, true),
                (false, true)
            ]
        );
        // Each judged block records the threshold it was held to: the floor for a side's first,
        // then 90% of the median of the side's earlier judged blocks.
        let thresholds: Vec<Option<f64>> = guard.blocks.iter().map(|b| b.threshold_mhz).collect();
        assert_eq!(
            thresholds,
            [
                None,
                None,
                Some(990.0),
                Some(990.0),
                Some(1521.0),
                Some(1530.0),
                Some(1391.0)
            ]
        );
        // Evidence: the kept blocks' mean clock per side leaves the warm-up out.
        assert_eq!(guard.mean_kept_mhz(1), Some((1690.0 + 1670.0) / 2.0));
    }

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

    #[test]
    fn the_baseline_runs_first_and_a_drifting_clock_favours_neither_side() {
        // The warm-up round: the baseline first (its time bounds the candidate's first block).
        assert_eq!(round_order(0), [1, 0]);
        // The judged rounds 1..=2n in order, as block positions: a clock falling linearly over
        // the run (each block slower than the one before) costs both sides the same in total.
        for rounds in [2usize, 4, 6, 20] {
            let mut position_sum = [0usize; 2];
            let mut position = 0;
            for round in 1..=rounds {
                let order = round_order(round);
                assert_ne!(order[0], order[1]);
                for side in order {
                    position_sum[side] += position;
                    position += 1;
                }
            }
            assert_eq!(position_sum[0], position_sum[1], "{rounds} rounds");
        }
    }
    use attn_kernels::{Candidate, Config};

    #[test]
    fn implementations_with_the_same_knobs_have_their_own_cache_entries() {
        let mma = Candidate::registered("mma", Config::default()).unwrap();
        let hopper = Candidate::registered("hopper", Config::default()).unwrap();
        let tiled = Candidate::registered("tiled", "BLOCK_M=64".parse().unwrap()).unwrap();
        let tiled_default = Candidate::registered("tiled", Config::default()).unwrap();
        let keys = [&mma, &hopper, &tiled, &tiled_default].map(cache_key);
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(cache_key(&mma), cache_key(&mma.clone()));
        // The candidate and itself at a revision (a ratchet) never share a kernel.
        let at = Candidate::Revision {
            of: Box::new(mma.clone()),
            source: "// mma at an earlier revision".into(),
            include_dir: std::env::temp_dir(),
            revision: "0123456".into(),
        };
        assert_ne!(cache_key(&at), cache_key(&mma));
    }

    #[test]
    fn signed_permutations_permute_every_column_and_flip_some_signs() {
        let mut state = 7;
        let mut flips = 0;
        let mut previous = Vec::new();
        for _ in 0..20 {
            let code = signed_permutation(128, &mut state);
            let mut sources: Vec<i32> = code.iter().map(|c| c & 0xffff).collect();
            flips += code.iter().filter(|c| *c >> 16 == 1).count();
            assert_ne!(code, previous, "each draw is new");
            previous = code;
            sources.sort_unstable();
            assert_eq!(sources, (0..128).collect::<Vec<_>>());
        }
        assert!(flips > 20 * 128 / 4 && flips < 20 * 128 * 3 / 4, "{flips}");
    }
}

#[cfg(test)]
mod throttle_tests {
    use super::{ThrottleRule, CLOCK_DIP, CLOCK_FLOOR};

    fn rule() -> ThrottleRule {
        ThrottleRule {
            dip: CLOCK_DIP,
            floor: CLOCK_FLOOR,
            max_mhz: 1980,
        }
    }

    /// The blocks of one side in order: which are kept.
    fn judge(clocks: &[f64]) -> Vec<bool> {
        let mut earlier = Vec::new();
        clocks
            .iter()
            .map(|&mhz| {
                let (kept, _) = rule().judge(Some(mhz), &earlier);
                earlier.push(mhz);
                kept
            })
            .collect()
    }

    #[test]
    fn a_side_is_judged_by_its_own_level_and_a_dip_under_it_is_dropped() {
        assert_eq!(rule().floor_mhz(), 990.0);
        // A power-limited side, steady under 75% of the maximum (a rule that dropped these kept
        // none of them): all kept; so is a side drifting down as the GPU warms.
        assert!(judge(&[1450.0, 1440.0, 1462.0, 1431.0, 1447.0])
            .iter()
            .all(|&k| k));
        assert!(judge(&[1760.0, 1700.0, 1650.0, 1600.0, 1560.0])
            .iter()
            .all(|&k| k));
        // A transient dip more than 10% under the side's median: dropped, and the side's level
        // holds for the next block.
        assert_eq!(
            judge(&[1700.0, 1690.0, 1480.0, 1695.0]),
            [true, true, false, true]
        );
        // The median, not the mean: one dip does not lower the bar for the next.
        assert_eq!(rule().threshold_mhz(&[1700.0, 1690.0, 1200.0]), 1521.0);
        // Under the floor (a hardware brake): dropped even as a side's first block.
        assert_eq!(judge(&[900.0, 1600.0]), [false, true]);
        // Unmeasured: kept (and the case records that it was not measured).
        assert!(rule().judge(None, &[1700.0]).0);
        let line = rule().describe("device");
        assert!(line.contains("10% under the median"), "{line}");
        assert!(
            line.contains("50% of the 1980 MHz maximum (990 MHz)"),
            "{line}"
        );
    }
}
