//! The verification of every timed output: inputs turned through fresh signed column
//! permutations before each sample, outputs poisoned, then counted on the GPU against references
//! kept masked under a secret.

use std::cell::RefCell;
use std::time::Duration;

use attn_kernels::planted::ReferenceCopier;
use attn_kernels::{
    ColumnMap, Counters, ElementBound, Gpu, GpuReference, ReferenceOutput, RowMask, SampleHooks,
};
use attn_oracle::{Distribution, Tolerance};

use super::sets::InputSets;
use crate::bound::{reference_error, whole_output_bound};
use crate::random::{secret_entropy, signed_permutation};
use crate::supervise::Watchdog;
use crate::{Problem, Result};

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
        let reference_vs_f64 = reference_error(&gpu_ref.download(gpu)?, &exact, problem);
        whole_output_bound(reference_vs_f64, tol, || {
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

/// What a kernel side does around each timed sample: the verifier's permutations and poison
/// before it, its counts and the watchdog's kick after it.
pub(super) struct Hooks<'s, 'a> {
    pub gpu: &'a Gpu,
    pub sets: &'s RefCell<InputSets>,
    pub verifier: Option<&'s mut OutputVerifier>,
    /// The watchdog, and the bound of one sample.
    pub watchdog: Option<(&'a Watchdog, Duration)>,
    /// A planted cheat: the verifier's references copied into the outputs before they are counted.
    pub copier: Option<&'a ReferenceCopier>,
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
