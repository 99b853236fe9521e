//! A backward problem through the gate ([`BackwardGate`]): the forward's phases and decision
//! ([`crate::decide::decide`]) on the backward's work.
//!
//! - check ([`super::check`]): fresh seeded inputs over the check distributions, every gradient
//!   element against the GPU reference and the f64 oracle, guards, workspace tail, checksums, the
//!   launch twice (bitwise the same where the candidate declares itself deterministic);
//! - battery: the same check on the forward's edge problems ([`battery_problems`]: dense edges,
//!   the declared head groups and windows beyond the case's own, varlen edges), once per
//!   [`BatteryKey`] in a run;
//! - time ([`super::timing`]): input sets past the L2, every timed launch of the candidate
//!   verified, ABBA blocks with the clock guard ([`crate::timing::interleave`]);
//! - record: the backward's FLOPs and memory floor ([`attn_evidence::BackwardRecord`]).
//!
//! The baseline is a registered backward implementation (`backward-naive`, `backward-mma`) at
//! its defaults, or PyTorch SDPA's backward through autograd ([`super::sdpa`], its gradients
//! judged against the f64 oracle before it is timed), on as many input sets as the candidate.

use std::cell::Cell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use attn_evidence::{BackwardRecord, CaseStatus, CorrectnessCheck, EdgeBattery, GateCase};
use attn_kernels::backward::{find_backward, GpuBackwardReference, PreparedBackward};
use attn_kernels::{Config, Gpu, HarnessKernels, KernelError};
use attn_oracle::{DType, Distribution, Window};

use super::check::{check_one, oracle_is_full, run_backward_checks, CheckInputs};
use super::sdpa::{backward_refusal, check_sdpa_gradients, sdpa_backend_of, SdpaBackwardSide};
use super::timing::{backward_set_count, BackwardSide};
use crate::baseline::{median, timing_evidence};
use crate::battery::{battery_problems, tile_sizes};
use crate::check::scale_factor;
use crate::defences::{case_defences, CaseFacts};
use crate::gate::{compare_sides, ended_by, ended_case, plausibility_flag, GatePlan};
use crate::sdpa::{Backend, Sdpa};
use crate::supervise::Watchdog;
use crate::timing::{interleave, TimedSide};
use crate::{MeasureError, Problem, Result};

/// The backward kernel under test.
#[derive(Debug, Clone)]
pub enum BackwardCandidate {
    /// A registered backward implementation with knob overrides.
    Registered {
        /// Its name (`backward-mma`).
        name: String,
        /// Knobs over its defaults.
        overrides: Config,
    },
    /// A user's backward kernel file (kernels/README.md's "Backward entry point") and its defines.
    Source {
        /// The `.cu` file.
        path: PathBuf,
        /// Its `-D` defines, declarations included.
        defines: Config,
    },
}

impl BackwardCandidate {
    /// The registered implementation `name` with `overrides`, refused in one line when the
    /// backward registry does not hold it.
    pub fn registered(name: &str, overrides: Config) -> Result<BackwardCandidate> {
        find_backward(name)?;
        Ok(BackwardCandidate::Registered {
            name: name.into(),
            overrides,
        })
    }

    /// Refuses, in one line, a problem a registered implementation declares it does not take
    /// (a head dim, a variant) or overrides outside its knobs' domains and rules (judged on an
    /// H100's limits, the device's own when it compiles); a `--src` kernel's declarations are
    /// read when it compiles.
    pub fn check_supports(&self, problem: &Problem) -> Result<()> {
        if let BackwardCandidate::Registered { name, overrides } = self {
            let implementation = registered_supports(name, problem)?;
            let limits = attn_kernels::DeviceLimits::H100;
            implementation.resolve(overrides, problem.shape.head_dim, &limits)?;
        }
        Ok(())
    }

    /// Compiles and loads it for `dtype` and `head_dim`.
    pub fn prepare(&self, gpu: &Gpu, dtype: DType, head_dim: usize) -> Result<PreparedBackward> {
        Ok(match self {
            BackwardCandidate::Registered { name, overrides } => {
                PreparedBackward::new(gpu, name, overrides, dtype, head_dim)?
            }
            BackwardCandidate::Source { path, defines } => {
                PreparedBackward::from_source(gpu, path, defines, dtype, head_dim)?
            }
        })
    }

    /// As evidence records it.
    pub fn implementation(&self) -> attn_evidence::Implementation {
        match self {
            BackwardCandidate::Registered { name, overrides } => {
                let mut implementation = attn_evidence::Implementation::named(name.clone());
                implementation.config = overrides.0.clone();
                implementation
            }
            BackwardCandidate::Source { path, defines } => {
                let mut implementation = attn_evidence::Implementation::named(format!(
                    "src:{}",
                    path.file_name()
                        .map(|n| n.to_string_lossy())
                        .unwrap_or_default()
                ));
                implementation.config = defines.0.clone();
                implementation
            }
        }
    }
}

/// The registered backward implementation `name`, refused in one line when it does not take
/// `problem`'s head dim or variants.
fn registered_supports(
    name: &str,
    problem: &Problem,
) -> Result<&'static attn_kernels::backward::BackwardImplementation> {
    let implementation = find_backward(name)?;
    implementation.check_head_dim(problem.shape.head_dim)?;
    implementation.check_supports(&problem.shape, &problem.params, problem.varlen.is_some())?;
    Ok(implementation)
}

/// What a backward candidate is compared with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackwardBaseline {
    /// A registered backward implementation at its defaults.
    Registered(String),
    /// PyTorch SDPA's backward with a backend of SDPA's own, or FlashAttention-3's
    /// ([`Backend::Fa3`]), through the helper ([`super::sdpa`]).
    Sdpa(Backend),
}

impl BackwardBaseline {
    /// The baseline `--baseline NAME` names for a backward problem (`sdpa` with `backend`, the
    /// `--sdpa-backend`, or `sdpa:BACKEND`), refused in one line when it cannot time one.
    pub fn from_name(name: &str, backend: Backend) -> Result<BackwardBaseline> {
        if let Some(sdpa) = sdpa_backend_of(name, backend) {
            return Ok(BackwardBaseline::Sdpa(sdpa?));
        }
        if find_backward(name).is_ok() {
            return Ok(BackwardBaseline::Registered(name.into()));
        }
        let known: Vec<&str> = attn_kernels::backward::backward_registry()
            .iter()
            .map(|i| i.name)
            .collect();
        Err(MeasureError::Invalid(format!(
            "--baseline {name} cannot time a backward pass: give a backward implementation ({}) or PyTorch SDPA (sdpa, sdpa:cudnn, sdpa:flash, sdpa:efficient, sdpa:math)",
            known.join(", ")
        )))
    }

    /// Refuses, in one line, a problem this baseline cannot run.
    pub fn check_supports(&self, problem: &Problem) -> Result<()> {
        match self {
            BackwardBaseline::Registered(name) => {
                registered_supports(name, problem)?;
                Ok(())
            }
            BackwardBaseline::Sdpa(backend) => match backward_refusal(problem, *backend) {
                Some(why) => Err(MeasureError::Invalid(why)),
                None => Ok(()),
            },
        }
    }

    /// Refuses, in one line, a timing mode this baseline cannot be timed in (FA3: batch only)
    /// and, for FA3, a missing library: before any helper or GPU probe.
    pub fn check_mode(&self, mode: attn_kernels::TimingMode) -> Result<()> {
        if let BackwardBaseline::Sdpa(backend) = self {
            backend.check_mode(mode)?;
            if *backend == Backend::Fa3 {
                Backend::fa3_library()?;
            }
        }
        Ok(())
    }

    /// The SDPA backend, when the baseline is SDPA's backward (it needs the helper).
    pub fn sdpa_backend(&self) -> Option<Backend> {
        match self {
            BackwardBaseline::Sdpa(backend) => Some(*backend),
            BackwardBaseline::Registered(_) => None,
        }
    }

    /// As evidence records it.
    pub fn implementation(&self) -> attn_evidence::Implementation {
        match self {
            BackwardBaseline::Registered(name) => {
                attn_evidence::Implementation::named(name.clone())
            }
            BackwardBaseline::Sdpa(backend) => crate::baseline::sdpa_implementation(*backend),
        }
    }
}

/// What makes two cases' backward batteries the same.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct BatteryKey {
    dtype: DType,
    head_dim: usize,
    causal: bool,
    group: usize,
    window: Window,
    varlen: bool,
}

impl BatteryKey {
    fn of(problem: &Problem) -> BatteryKey {
        BatteryKey {
            dtype: problem.dtype,
            head_dim: problem.shape.head_dim,
            causal: problem.params.causal,
            group: problem.shape.group(),
            window: problem.params.window,
            varlen: problem.varlen.is_some(),
        }
    }
}

/// A backward gate run's state across cases.
pub struct BackwardGate<'a> {
    gpu: &'a Gpu,
    candidate: &'a BackwardCandidate,
    baseline: &'a BackwardBaseline,
    plan: &'a GatePlan,
    watchdog: Option<&'a Watchdog>,
    /// The helper an SDPA baseline runs in.
    sdpa: Option<&'a Sdpa>,
    batteries: HashMap<BatteryKey, (String, Option<CorrectnessCheck>)>,
    /// Set after a fault: the CUDA context is lost.
    pub lost: bool,
}

impl std::fmt::Debug for BackwardGate<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackwardGate")
            .field("candidate", &self.candidate)
            .field("lost", &self.lost)
            .finish_non_exhaustive()
    }
}

/// An empty backward case of `problem` with a status and reason.
pub fn ended_backward_case(problem: &Problem, status: CaseStatus, reason: String) -> GateCase {
    let mut case = ended_case(problem, status, reason);
    case.backward = Some(BackwardRecord::new(
        &problem.spec,
        false,
        oracle_is_full(problem),
    ));
    case
}

impl<'a> BackwardGate<'a> {
    /// A session of `candidate` against `baseline`; `watchdog` bounds every candidate launch.
    pub fn new(
        gpu: &'a Gpu,
        candidate: &'a BackwardCandidate,
        baseline: &'a BackwardBaseline,
        plan: &'a GatePlan,
        watchdog: Option<&'a Watchdog>,
    ) -> BackwardGate<'a> {
        BackwardGate {
            gpu,
            candidate,
            baseline,
            plan,
            watchdog,
            sdpa: None,
            batteries: HashMap::new(),
            lost: false,
        }
    }

    /// The helper process an SDPA baseline ([`BackwardBaseline::Sdpa`]) runs in.
    pub fn with_sdpa(mut self, sdpa: Option<&'a Sdpa>) -> BackwardGate<'a> {
        self.sdpa = sdpa;
        self
    }

    /// Judges `problem`'s backward with inputs from `seed`.
    pub fn case(&mut self, problem: &Problem, seed: u64) -> GateCase {
        match self.try_case(problem, seed) {
            Ok(case) => case,
            Err(err) => {
                let (status, reason, fault) = ended_by(&err);
                self.lost |= fault;
                let mut case = ended_backward_case(problem, status, reason);
                case.defences = case_defences(&case, &self.plan.rule, &self.facts());
                case
            }
        }
    }

    fn watched(&self) -> crate::check::Watched<'a> {
        self.watchdog.map(|w| (w, self.plan.hang_floor))
    }

    fn try_case(&mut self, problem: &Problem, seed: u64) -> Result<GateCase> {
        self.candidate.check_supports(problem)?;
        self.baseline.check_supports(problem)?;
        let mut case = ended_backward_case(problem, CaseStatus::CouldNotRun, String::new());
        let (gpu, dtype, d) = (self.gpu, problem.dtype, problem.shape.head_dim);
        let prepared = self.candidate.prepare(gpu, dtype, d)?;
        if let Some(what) =
            prepared
                .variants()
                .missing(&problem.shape, &problem.params, problem.varlen.is_some())
        {
            return Err(KernelError::Unsupported {
                implementation: prepared.label().into(),
                what: what.into(),
            }
            .into());
        }
        case.config = prepared.config().0.clone();
        case.backward = Some(BackwardRecord::new(
            &problem.spec,
            prepared.deterministic(),
            oracle_is_full(problem),
        ));
        let watched = self.watched();
        case.correctness =
            run_backward_checks(gpu, &prepared, problem, seed, self.plan.checks, watched)?;
        if case.correctness.iter().any(|c| !c.passed) {
            return Ok(self.finish(case));
        }
        let battery = self.battery(&prepared, problem, seed ^ 0xed9e)?;
        let battery_failed = battery.checks.iter().any(|c| !c.passed);
        case.battery = Some(battery);
        if battery_failed {
            return Ok(self.finish(case));
        }
        self.time(&mut case, &prepared, problem, seed)?;
        Ok(self.finish(case))
    }

    /// The edge battery (see the module), once per [`BatteryKey`] in a run: a later case of the
    /// same key carries the first one's failure, if any.
    fn battery(
        &mut self,
        prepared: &PreparedBackward,
        problem: &Problem,
        seed: u64,
    ) -> Result<EdgeBattery> {
        let key = BatteryKey::of(problem);
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
            .filter_map(|k| prepared.config().get(k))
            .map(|v| v as usize)
            .collect();
        let edges = battery_problems(problem, &tile_sizes(&own), prepared.variants())?;
        let harness = HarnessKernels::new(self.gpu)?;
        let reference = GpuBackwardReference::new(self.gpu, problem.dtype, problem.shape.head_dim)?;
        let mut battery = EdgeBattery {
            shapes: edges.iter().map(|p| p.to_string()).collect(),
            checks: vec![],
            skipped: vec![],
            checked_in: None,
        };
        for (i, edge) in edges.iter().enumerate() {
            let edge_seed = seed.wrapping_add(7919 * i as u64);
            let distribution = Distribution::CHECKS[i % Distribution::CHECKS.len()];
            // Any factor, 1 included (index 1 of the draw allows it), as a forward battery's.
            let scale = edge.params.scale * scale_factor(edge_seed, 1, distribution);
            let ctx = CheckInputs {
                problem: edge,
                distribution,
                seed: edge_seed,
                scale,
            };
            let run = check_one(
                self.gpu,
                prepared,
                &reference,
                &harness,
                &ctx,
                self.watched(),
            );
            let mut check = match run {
                Ok((check, _)) => check,
                // A shape the host refuses before launching (the plan's own limits): recorded,
                // not held against it. Faults and other errors end the case.
                Err(MeasureError::Kernel(
                    e @ (KernelError::Unsupported { .. } | KernelError::InvalidConfig { .. }),
                )) => {
                    battery.skipped.push(format!("{edge}: {e}"));
                    continue;
                }
                Err(e) => return Err(e),
            };
            check.shape = Some(edge.to_string());
            let failed = !check.passed;
            battery.checks.push(check);
            if failed {
                break;
            }
        }
        let failed = battery.checks.iter().find(|c| !c.passed).cloned();
        self.batteries
            .insert(key, (problem.spec.to_string(), failed));
        Ok(battery)
    }

    /// Both sides timed interleaved, the candidate's every timed launch verified; then the
    /// evidence: verified gradients, memory floor, clock guard, comparison.
    fn time(
        &mut self,
        case: &mut GateCase,
        prepared: &PreparedBackward,
        problem: &Problem,
        seed: u64,
    ) -> Result<()> {
        let (gpu, plan) = (self.gpu, self.plan);
        let info = gpu.info();
        let sets = backward_set_count(problem, info.l2_bytes as usize, info.total_memory);
        let mut cand = BackwardSide::new(gpu, prepared, problem, sets, seed ^ 0x5eed, true)?;
        let bound = Rc::new(Cell::new(plan.hang_floor));
        if let Some(w) = self.watchdog {
            cand.with_watchdog(w, Rc::clone(&bound));
        }
        // As many sets as the candidate rotates over (evidence/METHOD.md, `equal-input-sets`).
        let count = cand.set_count();
        let base_prepared: PreparedBackward;
        let mut base: Box<dyn TimedSide + '_> = match self.baseline {
            BackwardBaseline::Registered(name) => {
                base_prepared = PreparedBackward::new(
                    gpu,
                    name,
                    &Config::default(),
                    problem.dtype,
                    problem.shape.head_dim,
                )?;
                Box::new(BackwardSide::new(
                    gpu,
                    &base_prepared,
                    problem,
                    count,
                    seed ^ 0xba5e,
                    false,
                )?)
            }
            BackwardBaseline::Sdpa(backend) => {
                let sdpa = self.sdpa.ok_or_else(|| {
                    MeasureError::Sdpa("the backward gate was given no helper process".into())
                })?;
                // A yardstick that computes something else is no baseline: judged first.
                check_sdpa_gradients(gpu, sdpa, *backend, problem, seed ^ 0xc4ec)?;
                Box::new(SdpaBackwardSide::new(
                    gpu,
                    sdpa,
                    *backend,
                    problem,
                    count,
                    seed ^ 0xba5e,
                ))
            }
        };
        let (floor, factor) = (plan.hang_floor, plan.hang_factor);
        let base_side: &mut dyn TimedSide = base.as_mut();
        let timed = interleave(gpu, &mut cand, base_side, &plan.interleave, |first| {
            let scaled = Duration::try_from_secs_f64(factor * median(&first.samples_us) * 1e-6);
            bound.set(scaled.map_or(floor, |scaled| floor.max(scaled)));
        })?;
        let timing = &plan.interleave.timing;
        case.timed_outputs = cand.timed_outputs(timing)?;
        case.memory_floor_us = backward_memory_floor(problem, gpu, timing);
        case.clock_guard = Some(timed.guard.clone());
        if let Some(comparison) = compare_sides(&timed, &plan.compare)? {
            case.candidate_tflops = Some(case.tflops(comparison.candidate.median));
            case.baseline_tflops = Some(case.tflops(comparison.baseline.median));
            case.comparison = Some(comparison);
        }
        case.candidate = Some(timing_evidence(&timed.a));
        case.baseline = Some(timing_evidence(&timed.b));
        case.flags.extend(plausibility_flag(case, plan));
        Ok(())
    }

    fn facts(&self) -> CaseFacts {
        // No side-stream guard pass runs on a backward side: its defence records none.
        self.plan.case_facts(self.watchdog.is_some(), 0)
    }

    fn finish(&self, case: GateCase) -> GateCase {
        self.plan.settle(case, &self.facts(), |_, reason| reason)
    }
}

/// The physical floor of one backward launch of `problem` on `gpu`: its bytes
/// ([`attn_evidence::ShapeSpec::backward_bytes`]) at the device's peak bandwidth, the gradients
/// written beyond the L2; in batch mode, where the L2 is not flushed, only the reads it cannot
/// hold count (a bound that holds whatever the L2 kept).
pub fn backward_memory_floor(
    problem: &Problem,
    gpu: &Gpu,
    timing: &attn_kernels::TimingOptions,
) -> Option<f64> {
    let peak = crate::provenance::memory_peak(gpu)?;
    let l2_resident = match timing.mode {
        attn_kernels::TimingMode::Batch => peak.l2_bytes,
        _ => None,
    };
    Some(backward_floor_with(problem, &peak, l2_resident))
}

fn backward_floor_with(
    problem: &Problem,
    peak: &attn_evidence::MemoryPeak,
    l2_resident: Option<u64>,
) -> f64 {
    let element = problem.dtype.size_bytes() as u64;
    let (q, kv) = (problem.q_elements() as u64, problem.kv_elements() as u64);
    let write = (q + 2 * kv) * element;
    let read = problem.spec.backward_bytes() - write;
    let from_dram = read.saturating_sub(l2_resident.unwrap_or(0));
    attn_evidence::memory_floor_us(from_dram, write, peak.l2_bytes, peak.bandwidth_gbs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backward_floor_counts_every_read_and_the_gradients_written() {
        let mib = 1u64 << 20;
        let peak = attn_evidence::MemoryPeak {
            bandwidth_gbs: 3352.0,
            l2_bytes: Some(50 * mib),
            source: "test".into(),
        };
        // 2,16,8192,128 fp16: Q, K, V, O, dO 320 MiB and the LSE 1 MiB read; 192 MiB written.
        let problem = Problem::parse("2,16,8192,128").unwrap();
        let flushed = backward_floor_with(&problem, &peak, None);
        let lse = 2 * 16 * 8192 * 4;
        let expected_read = 320 * mib + lse;
        let expected =
            attn_evidence::memory_floor_us(expected_read, 192 * mib, peak.l2_bytes, 3352.0);
        assert!((flushed - expected).abs() < 1e-9, "{flushed} vs {expected}");
        let batch = backward_floor_with(&problem, &peak, peak.l2_bytes);
        assert!(batch < flushed);
        // The forward's floor is lower: it moves less.
        assert!(flushed > crate::gate::memory_floor_for(&problem, &peak));
    }

    #[test]
    fn backward_baselines_are_backward_implementations() {
        let from = |name| BackwardBaseline::from_name(name, Backend::Default);
        assert_eq!(
            from("backward-naive").unwrap(),
            BackwardBaseline::Registered("backward-naive".into())
        );
        for name in ["hopper", "nothing", "sdpa:flex"] {
            let err = from(name).unwrap_err().to_string();
            assert!(
                err.contains("cannot time a backward pass") && err.contains("backward-naive"),
                "{name}: {err}"
            );
            assert!(!err.contains('\n'));
        }
        // SDPA's backward, named as the forward's evidence labels it.
        assert_eq!(
            from("sdpa").unwrap(),
            BackwardBaseline::Sdpa(Backend::Default)
        );
        let cudnn = from("sdpa:cudnn").unwrap();
        assert_eq!(cudnn.implementation().label(), "sdpa:cudnn");
        assert_eq!(cudnn.sdpa_backend(), Some(Backend::Cudnn));
        let window = Problem::parse("2,16,2048,128 causal window=256,-1").unwrap();
        let err = cudnn.check_supports(&window).unwrap_err().to_string();
        assert!(
            err.contains("sliding-window") && !err.contains('\n'),
            "{err}"
        );
        let gqa = Problem::parse("2,16/4,2048,128 causal bf16").unwrap();
        assert!(cudnn.check_supports(&gqa).is_ok());
        assert!(from("sdpa:fast")
            .unwrap_err()
            .to_string()
            .contains("unknown SDPA backend"));
        assert!(BackwardCandidate::registered("hopper", Config::default()).is_err());
        // FlashAttention-3's backward: through JAX, so batch mode only, said before any probe.
        let fa3 = from("fa3").unwrap();
        assert_eq!(fa3, BackwardBaseline::Sdpa(Backend::Fa3));
        let err = fa3
            .check_mode(attn_kernels::TimingMode::Graph)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--mode batch") && !err.contains('\n'), "{err}");
    }

    #[test]
    fn a_backward_case_that_ends_early_still_says_it_is_a_backward() {
        let problem = Problem::parse("1,8,512,64 causal").unwrap();
        let case = ended_backward_case(&problem, CaseStatus::CouldNotRun, "why".into());
        let record = case.backward.as_ref().unwrap();
        assert_eq!(record.flops, problem.spec.backward_flops());
        assert_eq!(case.flops(), 2.5 * problem.spec.flops());
    }
}
