//! Timing one problem: input sets on the device, prepared candidates, the candidate's side
//! (with every timed output verified) and the baseline's, sampled in alternating blocks with
//! clock-throttled blocks dropped and re-taken.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use attn_evidence::ClockGuard;
use attn_kernels::planted::SideStreamWork;
use attn_kernels::telemetry::{self, ClockReading};
use attn_kernels::{
    Candidate, ColumnMap, Counters, DeviceTensor, Gpu, GpuReference, Harness, Prepared,
    ReferenceOutput, SampleHooks, TimingOptions, Timings,
};
use attn_oracle::{generate, CaseSpec, DType, Distribution};

use crate::supervise::Watchdog;
use crate::{Problem, Result};

/// How many input sets to rotate among: enough to exceed twice the L2 between reuses, at most 8,
/// and never more than a quarter of the device's memory.
pub fn input_set_count(problem: &Problem, gpu: &Gpu) -> usize {
    let shape = &problem.shape;
    let set_bytes = (2 * shape.q_len() + 2 * shape.kv_len()) * 2;
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

/// Device-resident input sets with their (poisoned) output buffers.
#[derive(Debug)]
pub struct InputSets {
    /// Q of each set.
    pub q: Vec<DeviceTensor>,
    /// K of each set.
    pub k: Vec<DeviceTensor>,
    /// V of each set.
    pub v: Vec<DeviceTensor>,
    /// O of each set, poisoned.
    pub o: Vec<DeviceTensor>,
}

impl InputSets {
    /// `count` fresh normal sets (seeds `seed`, `seed+1`, ...), uploaded.
    pub fn new(gpu: &Gpu, problem: &Problem, count: usize, seed: u64) -> Result<InputSets> {
        let mut sets = InputSets {
            q: vec![],
            k: vec![],
            v: vec![],
            o: vec![],
        };
        for i in 0..count {
            let inputs = generate(&CaseSpec {
                shape: problem.shape,
                dtype: problem.dtype,
                distribution: Distribution::Normal,
                seed: seed.wrapping_add(i as u64),
            });
            sets.q.push(gpu.upload(&inputs.q)?);
            sets.k.push(gpu.upload(&inputs.k)?);
            sets.v.push(gpu.upload(&inputs.v)?);
            sets.o
                .push(gpu.alloc_poisoned(inputs.q.dims, problem.dtype)?);
        }
        Ok(sets)
    }

    /// Number of sets.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Launches `prepared` on set `i` (asynchronously).
    pub fn launch(
        &mut self,
        gpu: &Gpu,
        prepared: &Prepared,
        problem: &Problem,
        i: usize,
    ) -> Result<()> {
        prepared.launch(
            gpu,
            &self.q[i],
            &self.k[i],
            &self.v[i],
            &mut self.o[i],
            &problem.params,
        )?;
        Ok(())
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
    atol: f64,
    counters: Counters,
    /// (sample, input set) of each counter slot used.
    slots: Vec<(usize, usize)>,
    samples: usize,
    /// The state of the permutations' generator (splitmix64).
    rng: u64,
    /// The maps of the latest sample, kept alive until their kernels have run.
    maps: Vec<ColumnMap>,
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
    pub fn new(
        gpu: &Gpu,
        problem: &Problem,
        sets: &InputSets,
        reference: GpuReference,
        atol: f64,
        capacity: usize,
        seed: u64,
    ) -> Result<OutputVerifier> {
        let references = (0..sets.len())
            .map(|i| reference.compute(gpu, &sets.q[i], &sets.k[i], &sets.v[i], &problem.params))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(OutputVerifier {
            counters: Counters::new(gpu, capacity)?,
            reference,
            references,
            atol,
            slots: Vec::with_capacity(capacity),
            samples: 0,
            rng: seed,
            maps: Vec::new(),
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
                        self.references[set].shape().q_len()
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
        })
    }

    /// Verifies every timed output (of up to `samples` samples) against the GPU reference
    /// within `atol`.
    pub fn verify_outputs(
        &mut self,
        reference: GpuReference,
        atol: f64,
        samples: usize,
    ) -> Result<()> {
        let capacity = samples * self.sets.borrow().len().min(8) + 16;
        let verifier = OutputVerifier::new(
            self.gpu,
            self.problem,
            &self.sets.borrow(),
            reference,
            atol,
            capacity,
            self.seed ^ 0x5c7a_3b1e,
        )?;
        self.verifier = Some(verifier);
        Ok(())
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
        let all = self.sets.borrow();
        for (i, &set) in sets.iter().enumerate() {
            if sets[..i].contains(&set) {
                continue;
            }
            let slot = verifier.slots.len();
            if slot >= verifier.counters.len() {
                break; // more samples than planned: the rest go unchecked (counted as checked: no)
            }
            verifier.reference.count_bad_async(
                self.gpu,
                &all.o[set],
                &verifier.references[set],
                verifier.atol,
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
        let count = self.sets.borrow().len();
        let (gpu, prepared, problem) = (self.gpu, self.prepared, self.problem);
        let sets = &self.sets;
        let mut side_work = self.side_work.as_deref_mut();
        let mut launch = |i: usize| -> attn_kernels::Result<()> {
            let mut all = sets.borrow_mut();
            let InputSets { q, k, v, o } = &mut *all;
            prepared.launch(gpu, &q[i], &k[i], &v[i], &mut o[i], &problem.params)?;
            if let Some(work) = side_work.as_deref_mut() {
                work.launch()?;
            }
            Ok(())
        };
        let per_sample = match opts.mode {
            attn_kernels::TimingMode::Batch => opts.batch_launches.max(1),
            _ => 1,
        } as u32;
        let mut hooks = Hooks {
            gpu,
            sets,
            verifier: self.verifier.as_mut(),
            watchdog: self
                .watchdog
                .as_ref()
                .map(|(w, bound)| (*w, bound.get() * per_sample)),
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
    sdpa: &'a crate::sdpa::Sdpa,
    backend: crate::sdpa::Backend,
    problem: &'a Problem,
    sets: usize,
    seed: u64,
    flush_bytes: usize,
}

impl<'a> SdpaSide<'a> {
    /// SDPA on `problem` with as many input sets as a kernel side would use.
    pub fn new(
        gpu: &Gpu,
        sdpa: &'a crate::sdpa::Sdpa,
        backend: crate::sdpa::Backend,
        problem: &'a Problem,
        seed: u64,
    ) -> SdpaSide<'a> {
        SdpaSide {
            sdpa,
            backend,
            problem,
            sets: input_set_count(problem, gpu),
            seed,
            flush_bytes: flush_bytes(gpu),
        }
    }
}

impl TimedSide for SdpaSide<'_> {
    fn block(&mut self, opts: &TimingOptions) -> Result<Timings> {
        self.sdpa.time(
            self.problem,
            self.backend,
            opts,
            self.sets,
            self.seed,
            self.flush_bytes,
        )
    }
}

/// A side's guard pass: wall, event and residual times, µs.
type GuardPass = (Vec<f64>, Vec<f64>, Vec<f64>);

/// How two sides are sampled against each other.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interleave {
    /// The harness options; `samples` is the clean samples wanted per side.
    pub timing: TimingOptions,
    /// Samples per block: the sides alternate block by block (A B A B …) so both see the same
    /// clocks and temperature.
    pub block: usize,
    /// A block after which the SM clock reads under this fraction of the device's maximum is
    /// dropped and re-taken (nvbench's rule).
    pub throttle_fraction: f64,
    /// The device's maximum SM clock, MHz.
    pub max_sm_mhz: u32,
}

impl Interleave {
    /// Blocks of 10 samples, dropped under 90% of the maximum SM clock.
    pub fn new(timing: TimingOptions, max_sm_mhz: u32) -> Interleave {
        Interleave {
            timing,
            block: 10,
            throttle_fraction: 0.9,
            max_sm_mhz,
        }
    }
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

/// Samples `a` and `b` in alternating blocks (B first, so the baseline's time is known before
/// the candidate's first block), until each has `timing.samples` clean samples or each has had
/// twice its blocks.
pub fn interleave(
    gpu: &Gpu,
    a: &mut dyn TimedSide,
    b: &mut dyn TimedSide,
    plan: &Interleave,
    mut after_first_baseline_block: impl FnMut(&Timings),
) -> Result<Interleaved> {
    let wanted = plan.timing.samples;
    let block = plan.block.clamp(1, wanted.max(1));
    let blocks_needed = wanted.div_ceil(block);
    let ordinal = gpu.info().ordinal;
    let threshold = (f64::from(plan.max_sm_mhz) * plan.throttle_fraction) as u32;
    let before = telemetry::read_clocks(ordinal);
    let mut merged: [Option<Timings>; 2] = [None, None];
    let mut kept = [0usize; 2];
    let mut dropped = [0usize; 2];
    let mut min_kept: Option<u32> = None;
    let mut guard: [Option<GuardPass>; 2] = [None, None];
    let mut attempts = 0;
    while (kept[0] < blocks_needed || kept[1] < blocks_needed) && attempts < 4 * blocks_needed {
        attempts += 1;
        for side in [1usize, 0] {
            if kept[side] >= blocks_needed {
                continue;
            }
            let first = merged[side].is_none();
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
            let timings = if side == 0 {
                a.block(&opts)?
            } else {
                b.block(&opts)?
            };
            // The guard pass judges where the work ran, not how fast: it is kept even from a
            // block whose samples are dropped (or work escaping the stream could hide behind a
            // throttled first block).
            if guard[side].is_none() && !timings.wall_us.is_empty() {
                guard[side] = Some((
                    timings.wall_us.clone(),
                    timings.guard_event_us.clone(),
                    timings.guard_residual_us.clone(),
                ));
            }
            let clock = telemetry::read_clocks(ordinal).map(|c| c.sm_mhz);
            if clock.is_some_and(|mhz| mhz < threshold) {
                dropped[side] += 1;
                continue;
            }
            min_kept = match (min_kept, clock) {
                (Some(m), Some(c)) => Some(m.min(c)),
                (m, c) => m.or(c),
            };
            kept[side] += 1;
            if side == 1 && first {
                after_first_baseline_block(&timings);
            }
            match &mut merged[side] {
                Some(all) => all.samples_us.extend(timings.samples_us),
                slot => *slot = Some(timings),
            }
        }
    }
    let after = telemetry::read_clocks(ordinal);
    let empty = || Timings {
        mode: plan.timing.mode,
        warmup: plan.timing.warmup,
        launches_per_sample: 1,
        samples_us: vec![],
        wall_us: vec![],
        guard_event_us: vec![],
        guard_residual_us: vec![],
    };
    let [a_t, b_t] = merged;
    let with_guard = |t: Option<Timings>, g: Option<GuardPass>| {
        let mut t = t.unwrap_or_else(empty);
        if let Some((wall, event, residual)) = g {
            (t.wall_us, t.guard_event_us, t.guard_residual_us) = (wall, event, residual);
        }
        t
    };
    let [a_g, b_g] = guard;
    Ok(Interleaved {
        a: with_guard(a_t, a_g),
        b: with_guard(b_t, b_g),
        guard: ClockGuard {
            block_samples: block,
            kept_blocks: kept,
            dropped_blocks: dropped,
            threshold_mhz: before.map(|_| threshold),
            min_kept_mhz: min_kept,
            complete: kept[0] >= blocks_needed && kept[1] >= blocks_needed,
            rule: None,
            blocks: vec![],
        },
        clocks: (before, after),
    })
}

#[cfg(test)]
mod tests {
    use super::{cache_key, signed_permutation};
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
