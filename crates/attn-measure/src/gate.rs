//! One gate case, start to end: prepare, check, time both sides interleaved with every timed
//! output verified, compare, decide. Failures of the candidate (compile errors, faults) become
//! the case's status, never an error of the run; a hang ends the process through the watchdog.

use std::cell::Cell;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use attn_evidence::{
    CaseStatus, CorrectnessCheck, EdgeBattery, Flag, FlagKind, GateCase, GateRule, TimedOutputCheck,
};
use attn_kernels::planted::{ReferenceCopier, SideStreamWork};
use attn_kernels::{Candidate, Config, Gpu, GpuReference, HarnessKernels, Prepared, Timings};
use attn_oracle::{npy, tolerance, DType, Distribution, Window};
use attn_stats::{CompareOptions, Comparison, Sample};

use crate::baseline::{median, timing_evidence, Baseline};
use crate::battery::{run_battery, tile_sizes};
use crate::check::{run_checks, CheckContext, CheckRun, Watched};
use crate::decide::{decide, implausibility, remarkable_speedup};
use crate::defences::{case_defences, CaseFacts};
use crate::sdpa::Backend;
use crate::supervise::Watchdog;
use crate::timing::{
    interleave, CandidateKey, Interleave, Interleaved, KernelSide, PreparedCache, SdpaSide,
    TimedSide, TimingWatch, VerifiedOutputs,
};
use crate::{MeasureError, Problem, Result};

/// How every case of a run is judged.
#[derive(Debug, Clone)]
pub struct GatePlan {
    /// Correctness checks per case (cycling through the check distributions).
    pub checks: usize,
    /// Timing: harness options, blocks, clock guard.
    pub interleave: Interleave,
    /// Bootstrap and the gate threshold.
    pub compare: CompareOptions,
    /// Plausibility.
    pub rule: GateRule,
    /// The least time a candidate launch may take before it is a hang; the bound is
    /// max(this, `hang_factor` × the baseline's median) once the baseline is timed.
    pub hang_floor: Duration,
    /// See `hang_floor`.
    pub hang_factor: f64,
    /// The device's dense tensor peak, TFLOP/s, when known.
    pub peak_tflops: Option<f64>,
}

impl GatePlan {
    /// What a case's defence record needs beyond the case: the watchdog's bound where one
    /// (`watched`) bounds the launches, the device's peak, and `side_stream_launches` of the
    /// candidate's guard pass.
    pub(crate) fn case_facts(&self, watched: bool, side_stream_launches: usize) -> CaseFacts {
        CaseFacts {
            watchdog: watched.then_some((self.hang_floor.as_secs_f64(), self.hang_factor)),
            side_stream_launches,
            peak_tflops: self.peak_tflops,
        }
    }

    /// The decision on `case` by this plan (its reason passed through `annotate`), then the record
    /// of the defences that ran.
    pub(crate) fn settle(
        &self,
        mut case: GateCase,
        facts: &CaseFacts,
        annotate: impl FnOnce(&GateCase, String) -> String,
    ) -> GateCase {
        case.status = None;
        let decision = decide(&case, &self.rule, &self.compare, self.peak_tflops);
        case.passed = decision.status.passed();
        case.status = Some(decision.status);
        case.reason = annotate(&case, decision.reason);
        case.defences = case_defences(&case, &self.rule, facts);
        case
    }
}

/// A gate run's state across cases: the device, both sides, compiled kernels.
pub struct GateSession<'a> {
    gpu: &'a Gpu,
    candidate: &'a Candidate,
    baseline: &'a Baseline,
    plan: &'a GatePlan,
    candidates: PreparedCache,
    baselines: PreparedCache,
    references: HashMap<(DType, usize), Rc<GpuReference>>,
    watchdog: Option<&'a Watchdog>,
    side_work: Option<SideStreamWork>,
    copies_reference: bool,
    /// The edge battery already run in this session: the case that ran it, and its failed check
    /// if one failed.
    batteries: HashMap<BatteryKey, (String, Option<CorrectnessCheck>)>,
    /// Set after a fault: the CUDA context is lost, nothing more can run.
    pub lost: bool,
}

impl std::fmt::Debug for GateSession<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateSession")
            .field("candidate", &self.candidate.label())
            .field("lost", &self.lost)
            .finish_non_exhaustive()
    }
}

/// A case's candidate, ready to run: specialised for the problem's shape, compiled, and the GPU
/// reference of its dtype and head dim.
struct CaseKernel {
    candidate: Candidate,
    prepared: Rc<Prepared>,
    reference: Rc<GpuReference>,
}

/// What makes two cases' edge batteries the same: the candidate, its resolved config, and the
/// problem's dtype, head dim, mask, head group, window and batch layout.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct BatteryKey {
    candidate: CandidateKey,
    config: Config,
    dtype: DType,
    head_dim: usize,
    causal: bool,
    group: usize,
    window: Window,
    varlen: bool,
}

impl BatteryKey {
    fn of(kernel: &CaseKernel, problem: &Problem) -> BatteryKey {
        BatteryKey {
            candidate: CandidateKey::of(&kernel.candidate),
            config: kernel.prepared.config().clone(),
            dtype: problem.dtype,
            head_dim: problem.shape.head_dim,
            causal: problem.params.causal,
            group: problem.shape.group(),
            window: problem.params.window,
            varlen: problem.varlen.is_some(),
        }
    }
}

/// What a case's timing found: both sides' samples and clocks, the candidate's input sets and
/// verified outputs, and what its buffers showed after all the timed launches.
struct TimedCase {
    timed: Interleaved,
    sets: usize,
    verified: Option<VerifiedOutputs>,
    watch: TimingWatch,
}

/// With `ATTN_TRACE` set, the time each phase of a case took, one line each on stderr: where a
/// long gate run spends its time.
struct PhaseTrace {
    problem: String,
    mark: Option<std::time::Instant>,
}

impl PhaseTrace {
    fn new(problem: &Problem) -> PhaseTrace {
        PhaseTrace {
            problem: problem.to_string(),
            mark: std::env::var_os("ATTN_TRACE").map(|_| std::time::Instant::now()),
        }
    }

    /// Ends the phase `name` (begun at the previous call).
    fn done(&mut self, name: &str) {
        if let Some(mark) = self.mark.as_mut() {
            eprintln!(
                "trace: {}: {name} {:.2} s",
                self.problem,
                mark.elapsed().as_secs_f64()
            );
            *mark = std::time::Instant::now();
        }
    }
}

/// How an error ends a case: its status and reason, and whether it was a fault (the CUDA
/// context is then lost for the rest of the run).
pub(crate) fn ended_by(err: &MeasureError) -> (CaseStatus, String, bool) {
    let fault = matches!(err, MeasureError::Kernel(e) if e.is_fault());
    let (status, what) = if fault {
        (CaseStatus::Fault, "fault")
    } else {
        (CaseStatus::CouldNotRun, "could not run")
    };
    (status, format!("{what}: {err}"), fault)
}

/// An empty case of `problem` with a status and reason.
pub fn ended_case(problem: &Problem, status: CaseStatus, reason: String) -> GateCase {
    ended_case_of(problem.spec.clone(), None, status, reason)
}

/// An empty case of `shape` (and a decode batch's record) with a status and reason, its
/// defences all not run.
pub(crate) fn ended_case_of(
    shape: attn_evidence::ShapeSpec,
    decode: Option<attn_evidence::DecodeRecord>,
    status: CaseStatus,
    reason: String,
) -> GateCase {
    let mut case = GateCase {
        shape,
        decode,
        backward: None,
        config: Default::default(),
        correctness: vec![],
        candidate: None,
        baseline: None,
        comparison: None,
        candidate_tflops: None,
        baseline_tflops: None,
        flags: vec![],
        timed_outputs: None,
        clock_guard: None,
        battery: None,
        memory_floor_us: None,
        defences: vec![],
        status: Some(status),
        passed: false,
        reason,
    };
    case.defences = case_defences(&case, &GateRule::default(), &CaseFacts::default());
    case
}

impl<'a> GateSession<'a> {
    /// A session; `watchdog` bounds every candidate launch (see [`GatePlan::hang_floor`]).
    pub fn new(
        gpu: &'a Gpu,
        candidate: &'a Candidate,
        baseline: &'a Baseline,
        plan: &'a GatePlan,
        watchdog: Option<&'a Watchdog>,
    ) -> GateSession<'a> {
        GateSession {
            gpu,
            candidate,
            baseline,
            plan,
            candidates: PreparedCache::default(),
            baselines: PreparedCache::default(),
            references: HashMap::new(),
            watchdog,
            side_work: None,
            copies_reference: false,
            batteries: HashMap::new(),
            lost: false,
        }
    }

    /// Plants hidden work on another stream after every candidate launch (tests the guard).
    pub fn plant_side_stream_work(&mut self) -> Result<()> {
        self.side_work = Some(SideStreamWork::new(self.gpu)?);
        Ok(())
    }

    /// Plants a copy of the verifier's references into the timed outputs after every sample, as
    /// a candidate that found them in device memory would (tests that they are kept masked).
    pub fn plant_reference_copy(&mut self) {
        self.copies_reference = true;
    }

    /// The run's record from its `cases` (one per problem of `problems`, in order): the
    /// candidate's config as resolved for the first problem (each case records the config it
    /// actually ran), the baseline, the plan's options and rule, and the whole run's verdict
    /// (passed when every case passed).
    pub fn record(
        &self,
        problems: &[Problem],
        cases: Vec<GateCase>,
        provenance: attn_evidence::Provenance,
        suite: Option<String>,
    ) -> attn_evidence::GateRun {
        let resolved = match (self.candidate, problems.first()) {
            (
                Candidate::Registered {
                    implementation,
                    overrides,
                },
                Some(first),
            ) => implementation
                .resolve(overrides, first.shape.head_dim, &self.gpu.limits())
                .ok(),
            _ => None,
        };
        let passed = !cases.is_empty() && cases.iter().all(|c| c.passed);
        attn_evidence::GateRun {
            schema: attn_evidence::SCHEMA_VERSION,
            kind: attn_evidence::EvidenceKind::Gate,
            provenance,
            candidate: crate::baseline::candidate_implementation(self.candidate, resolved.as_ref()),
            baseline: self.baseline.implementation(),
            suite,
            options: self.plan.compare,
            rule: self.plan.rule.clone(),
            cases,
            passed,
        }
    }

    /// Judges `problem` with inputs from `seed`.
    pub fn case(&mut self, problem: &Problem, seed: u64) -> GateCase {
        match self.try_case(problem, seed) {
            Ok(case) => case,
            Err(err) => {
                let (status, reason, fault) = ended_by(&err);
                self.lost |= fault;
                let mut case = ended_case(problem, status, reason);
                case.defences = case_defences(&case, &self.plan.rule, &self.facts(0));
                case
            }
        }
    }

    /// The case's phases in order, each ending it when it fails: prepare, check, battery, time,
    /// record the timing; then the decision (`finish`).
    fn try_case(&mut self, problem: &Problem, seed: u64) -> Result<GateCase> {
        let mut case = ended_case(problem, CaseStatus::CouldNotRun, String::new());
        let mut trace = PhaseTrace::new(problem);
        let kernel = self.prepare(problem)?;
        case.config = kernel.prepared.config().0.clone();
        case.correctness = self.check(&kernel, problem, seed, &mut trace)?;
        if case.correctness.iter().any(|c| !c.passed) {
            return Ok(self.finish(case, 0));
        }
        let battery = self.battery(&kernel, problem, seed)?;
        trace.done("edge battery");
        let battery_failed = battery.checks.iter().any(|c| !c.passed);
        case.battery = Some(battery);
        if battery_failed {
            return Ok(self.finish(case, 0));
        }
        let timed = self.time(&kernel, problem, seed, &mut trace)?;
        let guard_launches = timed.timed.a.guard_stream_residual_us.len();
        self.record_timing(&mut case, problem, timed)?;
        Ok(self.finish(case, guard_launches))
    }

    /// The candidate specialised for `problem` and compiled (once per run), with the GPU
    /// reference of its dtype and head dim; a problem either side cannot run is refused first.
    fn prepare(&mut self, problem: &Problem) -> Result<CaseKernel> {
        problem.check_supported_by(self.candidate)?;
        self.baseline.check_supports(problem)?;
        let candidate =
            self.candidate
                .for_problem(&problem.shape, &problem.params, &self.gpu.limits());
        let (dtype, head_dim) = (problem.dtype, problem.shape.head_dim);
        let prepared = self.candidates.get(self.gpu, &candidate, dtype, head_dim)?;
        let reference = match self.references.entry((dtype, head_dim)) {
            Entry::Occupied(e) => Rc::clone(e.get()),
            Entry::Vacant(e) => {
                let reference = GpuReference::new(self.gpu, dtype, head_dim)?;
                Rc::clone(e.insert(Rc::new(reference)))
            }
        };
        Ok(CaseKernel {
            candidate,
            prepared,
            reference,
        })
    }

    /// Every candidate launch runs under the watchdog, bounded by the plan's floor until the
    /// baseline is timed.
    fn watched(&self) -> Watched<'a> {
        self.watchdog.map(|w| (w, self.plan.hang_floor))
    }

    /// The correctness checks, each with PyTorch's output on its inputs as a second reference.
    fn check(
        &self,
        kernel: &CaseKernel,
        problem: &Problem,
        seed: u64,
        trace: &mut PhaseTrace,
    ) -> Result<Vec<CorrectnessCheck>> {
        let (prepared, reference) = (&kernel.prepared, &kernel.reference);
        let (checks, watched) = (self.plan.checks, self.watched());
        let mut runs = run_checks(
            self.gpu, prepared, reference, problem, seed, checks, watched,
        )?;
        trace.done("compile and checks");
        // PyTorch is the second reference whatever the baseline the helper times (SDPA,
        // varlen_attn, FlexAttention or FlashAttention-3): SDPA's default backend wherever it
        // runs the problem as it is, else varlen_attn (windows, varlen batches).
        let second = [Backend::Default, Backend::Varlen]
            .into_iter()
            .find(|&b| crate::sdpa::refusal(problem, b).is_none());
        if let (Some(sdpa), Some(backend)) = (self.baseline.sdpa(), second) {
            second_reference(sdpa, backend, problem, &mut runs)?;
            trace.done("PyTorch's second reference");
        }
        Ok(runs.into_iter().map(|r| r.check).collect())
    }

    /// The edge battery, once per config, dtype, head dim, mask and batch layout in a run: a
    /// later case of the same [`BatteryKey`] carries the first one's failure, if any.
    fn battery(
        &mut self,
        kernel: &CaseKernel,
        problem: &Problem,
        seed: u64,
    ) -> Result<EdgeBattery> {
        let key = BatteryKey::of(kernel, problem);
        if let Some((first, failed)) = self.batteries.get(&key) {
            return Ok(EdgeBattery {
                shapes: vec![],
                checks: failed.iter().cloned().collect(),
                skipped: vec![],
                checked_in: Some(first.clone()),
            });
        }
        let own: Vec<usize> = ["BLOCK_M", "BLOCK_N"]
            .iter()
            .filter_map(|k| kernel.prepared.config().get(k))
            .map(|v| v as usize)
            .collect();
        let harness = HarnessKernels::new(self.gpu)?;
        let cx = CheckContext {
            gpu: self.gpu,
            prepared: &kernel.prepared,
            gpu_reference: &kernel.reference,
            harness: &harness,
            watched: self.watched(),
        };
        let variants = kernel.prepared.variants();
        let battery = run_battery(&cx, problem, &tile_sizes(&own), variants, seed ^ 0xed9e)?;
        let failed = battery.checks.iter().find(|c| !c.passed).cloned();
        self.batteries
            .insert(key, (problem.spec.to_string(), failed));
        Ok(battery)
    }

    /// Both sides timed interleaved (the candidate with every timed output verified, planted
    /// faults attached, its launches bounded by the watchdog); then the verifier's counts and
    /// what the candidate's buffers show after all the timed launches.
    fn time(
        &mut self,
        kernel: &CaseKernel,
        problem: &Problem,
        seed: u64,
        trace: &mut PhaseTrace,
    ) -> Result<TimedCase> {
        let (gpu, plan) = (self.gpu, self.plan);
        let mut cand = verified_side(gpu, plan, &kernel.prepared, problem, seed ^ 0x5eed)?;
        let sets = cand.set_count();
        if let Some(work) = self.side_work.as_mut() {
            cand.with_side_work(work);
        }
        let copier = self
            .copies_reference
            .then(|| ReferenceCopier::new(gpu, problem.dtype, problem.shape.head_dim))
            .transpose()?;
        if let Some(copier) = copier.as_ref() {
            cand.with_reference_copier(copier);
        }
        let bound = Rc::new(Cell::new(plan.hang_floor));
        if let Some(w) = self.watchdog {
            cand.with_watchdog(w, Rc::clone(&bound));
        }
        let mut compiled = None;
        let (baseline, baselines) = (self.baseline, &mut self.baselines);
        let mut base = baseline_side(gpu, baseline, baselines, &mut compiled, problem, seed)?;
        trace.done("timing set-up (input sets, references)");
        let (floor, factor) = (plan.hang_floor, plan.hang_factor);
        let timed = interleave(gpu, &mut cand, base.as_mut(), &plan.interleave, |first| {
            // No usable sample (none, or not finite) leaves the floor as the bound.
            let scaled = Duration::try_from_secs_f64(factor * median(&first.samples_us) * 1e-6);
            bound.set(scaled.map_or(floor, |scaled| floor.max(scaled)));
        })?;
        trace.done("timing");
        same_input_sets(&timed)?;
        let verified = cand.verifier.as_ref().map(|v| v.finish(gpu)).transpose()?;
        // The guards of every buffer and the inputs' checksums, after all the timed launches.
        let watch = cand.watch()?;
        drop(cand);
        drop(base);
        Ok(TimedCase {
            timed,
            sets,
            verified,
            watch,
        })
    }

    /// The case's evidence from its timing: the verified outputs, the memory floor, the flags,
    /// the clock guard, the comparison and both sides' timings.
    fn record_timing(&self, case: &mut GateCase, problem: &Problem, t: TimedCase) -> Result<()> {
        let plan = self.plan;
        let TimedCase {
            timed,
            sets,
            verified,
            watch,
        } = t;
        let timing = &plan.interleave.timing;
        case.timed_outputs = verified.map(|v| timed_output_check(v, watch, sets, timing));
        record_comparison(case, problem, self.gpu, plan, &timed)
    }

    /// What a case's defence record needs beyond the case (see [`GatePlan::case_facts`]).
    fn facts(&self, side_stream_launches: usize) -> CaseFacts {
        self.plan
            .case_facts(self.watchdog.is_some(), side_stream_launches)
    }

    /// The decision, then the record of the defences that ran (`side_stream_launches` of the
    /// candidate's guard pass, 0 when it was not timed).
    fn finish(&self, case: GateCase, side_stream_launches: usize) -> GateCase {
        self.plan
            .settle(case, &self.facts(side_stream_launches), |_, reason| reason)
    }
}

/// A prefill case's evidence from both sides' timing `timed` under `plan`: the memory floor,
/// escaped work, the clock guard, the comparison, both sides' timings and plausibility.
pub(crate) fn record_comparison(
    case: &mut GateCase,
    problem: &Problem,
    gpu: &Gpu,
    plan: &GatePlan,
    timed: &Interleaved,
) -> Result<()> {
    case.memory_floor_us = memory_floor(problem, gpu, &plan.interleave.timing);
    case.flags.extend(escaped_work(&timed.a));
    if timed.guard.blocks.iter().all(|b| b.mhz.is_none()) {
        case.flags.push(Flag::new(
            FlagKind::Note,
            "the SM clock could not be measured (device probe and nvidia-smi): throttled samples could not be dropped",
        ));
    }
    case.clock_guard = Some(timed.guard.clone());
    if let Some(comparison) = compare_sides(timed, &plan.compare)? {
        case.candidate_tflops = Some(problem.spec.tflops(comparison.candidate.median));
        case.baseline_tflops = Some(problem.spec.tflops(comparison.baseline.median));
        case.comparison = Some(comparison);
    }
    case.candidate = Some(timing_evidence(&timed.a));
    case.baseline = Some(timing_evidence(&timed.b));
    case.flags.extend(plausibility_flag(case, plan));
    Ok(())
}

/// The candidate's side on input sets for the plan's timing mode, every timed output verified
/// against the GPU reference within the normal inputs' tolerance.
fn verified_side<'s>(
    gpu: &'s Gpu,
    plan: &GatePlan,
    prepared: &'s Prepared,
    problem: &'s Problem,
    seed: u64,
) -> Result<KernelSide<'s>> {
    let mut cand = KernelSide::new(gpu, prepared, problem, seed)?;
    cand.prepare_for(&plan.interleave.timing)?;
    let reference = GpuReference::new(gpu, problem.dtype, problem.shape.head_dim)?;
    let tol = tolerance(problem.dtype, Distribution::Normal);
    cand.verify_outputs(reference, &tol, 4 * plan.interleave.timing.samples)?;
    Ok(cand)
}

/// The baseline's side on inputs of its own: SDPA in the helper's process, or a registered
/// kernel compiled once per run through `baselines` (held in `compiled` while it is timed).
pub(crate) fn baseline_side<'s>(
    gpu: &'s Gpu,
    baseline: &'s Baseline,
    baselines: &mut PreparedCache,
    compiled: &'s mut Option<Rc<Prepared>>,
    problem: &'s Problem,
    seed: u64,
) -> Result<Box<dyn TimedSide + 's>> {
    Ok(match baseline {
        Baseline::Sdpa { sdpa, backend, .. } => {
            Box::new(SdpaSide::new(gpu, sdpa, *backend, problem, seed ^ 0xba5e))
        }
        Baseline::Registered(c) => {
            let candidate = c.for_problem(&problem.shape, &problem.params, &gpu.limits());
            let (dtype, head_dim) = (problem.dtype, problem.shape.head_dim);
            let prepared = compiled.insert(baselines.get(gpu, &candidate, dtype, head_dim)?);
            Box::new(KernelSide::new(gpu, prepared, problem, seed ^ 0xba5e)?)
        }
    })
}

/// Refuses a timing whose sides rotated over different numbers of input sets: fewer sets leave
/// more of a side's inputs in L2, and the comparison would favour it (see evidence/METHOD.md,
/// `equal-input-sets`).
fn same_input_sets(timed: &Interleaved) -> Result<()> {
    // A side with no kept block has no sets to count: the clock guard's verdict says why.
    let both_timed = timed.guard.kept_blocks.iter().all(|&k| k > 0);
    if both_timed && timed.a.input_sets != timed.b.input_sets {
        return Err(MeasureError::Invalid(format!(
            "the candidate rotated over {} input sets and the baseline over {}: a comparison needs as many on both sides",
            timed.a.input_sets, timed.b.input_sets
        )));
    }
    Ok(())
}

/// The evidence of the timed outputs' verification and of the buffers' guards and checksums.
pub(crate) fn timed_output_check(
    verified: VerifiedOutputs,
    watch: TimingWatch,
    sets: usize,
    timing: &attn_kernels::TimingOptions,
) -> TimedOutputCheck {
    TimedOutputCheck {
        sets,
        samples_checked: verified.samples_checked,
        samples_bad: verified.samples_bad,
        first_bad: verified.first_bad,
        inputs_scrambled: true,
        launches_per_sample: Some(attn_kernels::timing::launches_per_sample(timing, sets)),
        reference_masked: true,
        outside: watch.outside,
        inputs_written: watch.inputs_written,
    }
}

/// The baseline against the candidate, resampled in the interleave's blocks (a block's samples
/// share its clock); a side left one block (an incomplete, inconclusive case) is compared sample
/// by sample. `None` with fewer than two samples a side.
pub(crate) fn compare_sides(
    timed: &Interleaved,
    options: &CompareOptions,
) -> Result<Option<Comparison>> {
    if timed.a.samples_us.len() < 2 || timed.b.samples_us.len() < 2 {
        return Ok(None);
    }
    let kept = timed.guard.kept_blocks;
    let block = if kept[0] >= 2 && kept[1] >= 2 {
        timed.guard.block_samples
    } else {
        1
    };
    let comparison = attn_stats::compare_in_blocks(
        &Sample::new(timed.b.samples_us.clone())?,
        &Sample::new(timed.a.samples_us.clone())?,
        block,
        options,
    )?;
    Ok(Some(comparison))
}

/// The flag of a timed case beyond the device's physical bounds (implausible), or of a speedup
/// within them that a reviewer should still look at.
pub(crate) fn plausibility_flag(case: &GateCase, plan: &GatePlan) -> Option<Flag> {
    if let Some(why) = implausibility(case, &plan.rule, plan.peak_tflops) {
        return Some(Flag::new(FlagKind::Implausible, why));
    }
    remarkable_speedup(case, &plan.rule).map(|speedup| {
        Flag::new(
            FlagKind::Note,
            format!("{speedup}: within the device's physical bounds, but worth a look (is the baseline this slow?)"),
        )
    })
}

/// The physical floor of one launch of `problem` on `gpu` (see
/// [`attn_evidence::memory_floor_us`]): Q, K and V read from DRAM, O written beyond the L2, at
/// the device's peak bandwidth ([`crate::provenance::memory_peak`]). In batch mode the L2 is not
/// flushed and a launch may find up to the L2's size of its inputs there: only the rest of its
/// reads count (a bound that holds whatever the L2 kept, so it never rejects an honest kernel).
pub fn memory_floor(
    problem: &Problem,
    gpu: &Gpu,
    timing: &attn_kernels::TimingOptions,
) -> Option<f64> {
    let peak = crate::provenance::memory_peak(gpu)?;
    let l2_resident = match timing.mode {
        attn_kernels::TimingMode::Batch => peak.l2_bytes,
        _ => None,
    };
    Some(memory_floor_with(problem, &peak, l2_resident))
}

/// [`memory_floor`] of `problem` on a device of `peak` bandwidth and L2, with the L2 flushed.
pub fn memory_floor_for(problem: &Problem, peak: &attn_evidence::MemoryPeak) -> f64 {
    memory_floor_with(problem, peak, None)
}

/// [`memory_floor_for`], with up to `l2_resident` bytes of the inputs possibly in the L2.
fn memory_floor_with(
    problem: &Problem,
    peak: &attn_evidence::MemoryPeak,
    l2_resident: Option<u64>,
) -> f64 {
    let bytes = problem.dtype.size_bytes() as u64;
    let (q, kv) = (problem.q_elements() as u64, problem.kv_elements() as u64);
    let read = (q + 2 * kv) * bytes;
    let write = q * bytes;
    let from_dram = read.saturating_sub(l2_resident.unwrap_or(0));
    attn_evidence::memory_floor_us(from_dram, write, peak.l2_bytes, peak.bandwidth_gbs)
}

/// Work that escaped the timed stream, seen in the guard pass on the device only: how long after
/// the timed stream's end event the work on our other streams finished (events recorded on every
/// one of them, [`Timings::guard_stream_residual_us`]), beyond a few µs of enqueue latency or a
/// tenth of the launch. Never host wall time, which other processes' use of the GPU stretches
/// (see evidence/METHOD.md, `escaped-work-on-device`).
pub fn escaped_work(timings: &Timings) -> Option<Flag> {
    let event = median(&timings.guard_event_us);
    let residual = median(&timings.guard_stream_residual_us);
    let still_busy = residual.is_finite() && residual > (0.1 * event).max(25.0);
    still_busy.then(|| {
        Flag::new(
            FlagKind::EscapedStream,
            format!(
                "the device kept working {residual:.1} µs after the timed stream's last event (events on every other stream, {event:.1} µs by the timed stream's events): work escapes the timed stream"
            ),
        )
    })
}

/// PyTorch's output (SDPA with `backend`, or varlen_attn) on each check's inputs, as a second
/// reference: how far the candidate is from it, and which of the two is closer to the f64 oracle
/// (by relative L2: the largest absolute error of any accurate kernel sits at the output's own
/// rounding, so it often ties).
fn second_reference(
    sdpa: &crate::sdpa::Sdpa,
    backend: Backend,
    problem: &Problem,
    runs: &mut [CheckRun],
) -> Result<()> {
    let io = |what: &'static str| {
        move |e: attn_oracle::OracleError| MeasureError::Sdpa(format!("{what}: {e}"))
    };
    let pytorch = crate::baseline::sdpa_implementation(backend).label();
    for (i, run) in runs.iter_mut().enumerate() {
        if !run.check.passed && run.check.failure.is_some_and(|f| f.is_defence()) {
            continue; // the verdict is already given, and not by values
        }
        let path = |name: &str| sdpa.scratch(&format!("{name}{i}.npy"));
        let (q, k, v, o) = (path("q"), path("k"), path("v"), path("o"));
        // SDPA at the check's own scale (drawn per check).
        let mut problem = problem.clone();
        if let Some(scale) = run.check.scale {
            problem.params = problem.params.with_scale(scale);
        }
        let problem = &problem;
        npy::write(&q, &run.inputs.q).map_err(io("writing SDPA's inputs"))?;
        npy::write(&k, &run.inputs.k).map_err(io("writing SDPA's inputs"))?;
        npy::write(&v, &run.inputs.v).map_err(io("writing SDPA's inputs"))?;
        if sdpa.run([&q, &k, &v], &o, problem, backend).is_err() {
            continue; // PyTorch cannot run this shape: the f64 oracle alone decides
        }
        let sdpa_out = npy::read_as(&o, problem.dtype).map_err(io("reading SDPA's output"))?;
        let distribution: Distribution = run.check.distribution.parse()?;
        let sdpa_verdict = problem.compare(
            &sdpa_out,
            &run.reference,
            &tolerance(problem.dtype, distribution),
        );
        let diff = run
            .output
            .to_f64()
            .iter()
            .zip(sdpa_out.to_f64())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        let check = &mut run.check;
        check.sdpa_max_abs = Some(diff);
        let (mine, theirs) = (check.rel_l2, sdpa_verdict.rel_l2);
        check.closer_to = Some(if mine <= theirs {
            format!("candidate is as close or closer to the f64 oracle than {pytorch}: rel L2 {mine:.3e} vs {theirs:.3e} (max abs {:.3e} vs {:.3e})", check.max_abs, sdpa_verdict.max_abs)
        } else {
            format!("{pytorch} is closer to the f64 oracle: rel L2 {theirs:.3e} vs candidate {mine:.3e} (max abs {:.3e} vs {:.3e})", sdpa_verdict.max_abs, check.max_abs)
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{escaped_work, memory_floor_for, memory_floor_with};
    use crate::Problem;
    use attn_evidence::MemoryPeak;
    use attn_kernels::{TimingMode, Timings};

    #[test]
    fn batch_mode_floor_counts_only_reads_the_l2_cannot_hold() {
        let mib = 1u64 << 20;
        let peak = MemoryPeak {
            bandwidth_gbs: 3352.0,
            l2_bytes: Some(50 * mib),
            source: "test".into(),
        };
        // 2,16,8192,128 fp16: 192 MiB read, 64 MiB written.
        let large = Problem::parse("2,16,8192,128").unwrap();
        let flushed = memory_floor_for(&large, &peak);
        let batch = memory_floor_with(&large, &peak, peak.l2_bytes);
        let expected = ((192 - 50) + (64 - 50)) as f64 * mib as f64 / 3352e9 * 1e6;
        assert!((batch - expected).abs() < 1e-9, "{batch} vs {expected}");
        assert!(batch < flushed);
        // A problem the L2 holds whole has no floor in batch mode.
        let small = Problem::parse("1,8,512,64").unwrap();
        assert_eq!(memory_floor_with(&small, &peak, peak.l2_bytes), 0.0);
        assert!(memory_floor_for(&small, &peak) > 0.0);
    }

    fn guard(event_us: &[f64], wall_us: &[f64], streams_us: &[f64]) -> Timings {
        Timings {
            mode: TimingMode::Graph,
            warmup: 0,
            launches_per_sample: 1,
            input_sets: 0,
            samples_us: vec![],
            wall_us: wall_us.to_vec(),
            guard_event_us: event_us.to_vec(),
            guard_residual_us: vec![3.0; event_us.len()],
            guard_stream_residual_us: streams_us.to_vec(),
        }
    }

    #[test]
    fn work_escaping_the_timed_stream_is_flagged_and_overheads_are_not() {
        // No other stream: nothing escapes, whatever the host's wall clock says. The false alarm
        // of #23: an honest mma against itself on a GPU other processes used.
        assert!(escaped_work(&guard(&[121.7; 5], &[274.7; 5], &[0.0; 5])).is_none());
        assert!(escaped_work(&guard(&[10.0, 11.0, 10.5], &[30.0, 35.0, 28.0], &[])).is_none());
        // A side stream idle by the end event, or finishing within enqueue latency: not flagged.
        assert!(escaped_work(&guard(&[11.0; 5], &[40.0; 5], &[4.0, 6.0, 3.0, 5.0, 2.0])).is_none());
        assert!(escaped_work(&guard(&[3000.0; 5], &[3030.0; 5], &[120.0; 5])).is_none());
        // A 1 GiB memset on another stream after an 11 µs kernel: 340 µs more by the device.
        let flag = escaped_work(&guard(&[11.0; 5], &[30.0; 5], &[340.0; 5])).unwrap();
        assert!(flag.message.contains("escapes the timed stream"), "{flag}");
        assert!(flag.message.contains("340.0 µs"), "{flag}");
        // Overlapping hidden work that the wall time hides: the device sees it.
        assert!(escaped_work(&guard(&[204.0; 5], &[210.0; 5], &[150.0; 5])).is_some());
    }
}
