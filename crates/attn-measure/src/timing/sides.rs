//! The two sides of a comparison, each sampled a block at a time: a kernel on its own input sets
//! (the candidate, every timed output verified, or a registered baseline), or PyTorch SDPA.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use attn_kernels::planted::{ReferenceCopier, SideStreamWork};
use attn_kernels::{Gpu, GpuReference, Harness, HarnessKernels, Prepared, TimingOptions, Timings};
use attn_oracle::Tolerance;

use super::sets::{flush_bytes, input_set_count, sets_for, InputSets};
use super::verify::{Hooks, OutputVerifier};
use crate::random::next_random;
use crate::supervise::Watchdog;
use crate::{Problem, Result};

/// One side of a comparison, sampled a block at a time.
pub trait TimedSide {
    /// Takes one block of samples with `opts`.
    fn block(&mut self, opts: &TimingOptions) -> Result<Timings>;
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
    /// ([`sets_for`]; batch mode: one per launch of a sample): on fewer sets a side finds more of
    /// its inputs in L2 (see evidence/METHOD.md, `equal-input-sets`).
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
        // Nothing of this process may still run on the device while the helper's process times,
        // or it shares the GPU with the set-up's references or a verifier's checks (see
        // evidence/METHOD.md, `sdpa-idle-device`).
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
