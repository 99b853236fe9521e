//! A user's Python callable as the gate's candidate (`gate --py FILE.py:FUNCTION`): called as
//! `fn(q, k, v, scale=, causal=) -> O` in a helper process of its own (never the baseline's), on
//! the gate's inputs, and judged by the prefill gate's phases and decision as far as a callable
//! allows; what it does not allow is said in the case's defences, so that a PASS says what it
//! proves.
//!
//! - check: each check's inputs drawn by the gate (the check distributions, the softmax scale
//!   drawn per check), written for the helper, which calls the callable twice on them and refuses
//!   a broken calling contract (a view of the inputs, changed inputs, a down-cast, another stream
//!   left current, a patched timer, one memory for both outputs); the first output against the
//!   f64 oracle on its rows and the GPU reference on every element, stale against the previous
//!   check's, the two outputs bitwise compared;
//! - battery: the prefill battery's dense and grouped edge shapes through the same check;
//! - time: the helper's callable protocol ([`crate::sdpa::Sdpa::time`] with [`Backend::Py`]):
//!   fresh inputs drawn in place for every sample, every timed output against a float32
//!   reference, aliasing, changed inputs, a patched timer and escaped work refused; interleaved
//!   with the baseline in ABBA blocks under the clock guard, the whole helper call under the
//!   watchdog, the callable's process stopped ([`Sdpa::pause`]) whenever its own block is not
//!   running, so that no thread of it shares the GPU with the baseline's blocks.
//!
//! A refusal during timing ends the case with the refusal's own status ([`Refusal::status`]), its
//! checks and battery kept.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use attn_evidence::{
    CaseStatus, CheckFailure, CorrectnessCheck, Defence, DefenceName, Flag, FlagKind, GateCase,
    TimedOutputCheck,
};
use attn_kernels::registry::Variants;
use attn_kernels::{Gpu, GpuReference, GuardedTensor, TimingOptions, Timings};
use attn_oracle::{npy, Distribution, HostTensor};
use serde::Deserialize;

use crate::baseline::{median, Baseline};
use crate::battery::{battery_problems, tile_sizes};
use crate::check::{
    check_scale, differing_elements, failed, judge_values, judged, scale_factor, Values,
};
use crate::defences::{case_defences, CaseFacts};
use crate::gate::{baseline_side, ended_by, ended_case, record_comparison, GatePlan};
use crate::sdpa::{Backend, Sdpa};
use crate::supervise::Watchdog;
use crate::timing::{interleave, PreparedCache, SdpaSide, TimedSide};
use crate::{MeasureError, Problem, Result};

/// How a Python callable broke its calling contract, as the helper names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Refusal {
    /// An output off the reference (during timing: a stale or remembered output).
    Wrong,
    /// Two calls' outputs in one memory (a remembered output).
    Remembered,
    /// It changed its inputs.
    Inputs,
    /// Work outlived the timed stream in most samples.
    Escaped,
    /// A view of its inputs, a down-cast, not a tensor of Q's shape, another stream left current,
    /// a patched timer.
    Contract,
}

impl Refusal {
    /// The status a candidate's case ends with when it is refused while timed (what
    /// [`crate::decide::decide`] reads from [`Refusal::record`]).
    pub fn status(self) -> CaseStatus {
        match self {
            Refusal::Wrong | Refusal::Remembered => CaseStatus::TimedOutputDiffers,
            Refusal::Inputs => CaseStatus::WroteInputs,
            Refusal::Escaped => CaseStatus::EscapedStream,
            Refusal::Contract => CaseStatus::BrokeContract,
        }
    }

    /// Records a refusal while timed in `case` where the decision reads it (so that a replay
    /// decides as the run did): an output off its reference or remembered as a bad timed sample,
    /// changed inputs as inputs written, escaped work and a broken contract as their flags.
    pub fn record(self, case: &mut GateCase, message: String) {
        // The helper stops at the sample it refuses: that one is what the record counts.
        let timed = |samples_bad, first_bad, inputs_written| TimedOutputCheck {
            sets: 0,
            samples_checked: 1,
            samples_bad,
            first_bad,
            inputs_scrambled: false,
            launches_per_sample: None,
            reference_masked: false,
            outside: vec![],
            inputs_written,
        };
        match self {
            Refusal::Wrong | Refusal::Remembered => {
                case.timed_outputs = Some(timed(1, Some(message), vec![]));
            }
            Refusal::Inputs => case.timed_outputs = Some(timed(0, None, vec![message])),
            Refusal::Escaped => case.flags.push(Flag::new(FlagKind::EscapedStream, message)),
            Refusal::Contract => case.flags.push(Flag::new(FlagKind::BrokeContract, message)),
        }
    }

    /// The failure a refusal in a correctness check records.
    pub fn failure(self) -> CheckFailure {
        match self {
            Refusal::Wrong => CheckFailure::Incorrect,
            Refusal::Remembered => CheckFailure::Stale,
            Refusal::Inputs => CheckFailure::WroteInputs,
            Refusal::Escaped | Refusal::Contract => CheckFailure::BrokeContract,
        }
    }
}

/// The edge battery's variants for a callable: grouped heads (it receives K and V with their own
/// head count), no windows (it is given none).
const CALLABLE_VARIANTS: Variants = Variants {
    grouped_heads: true,
    window: false,
    varlen: false,
};

/// The least time a checked call on a shape new to the session may take before it is a hang: a
/// callable may compile its kernels for each new shape.
const FIRST_CALL_BOUND: Duration = Duration::from_secs(600);

/// What a callable's case records as not run, and why: what a PASS does not cover.
const NOT_COVERED: [(DefenceName, &str); 3] = [
    (
        DefenceName::GuardRegions,
        "a Python callable allocates its own output: no guards or poison around it, and writes outside its own allocations are not watched",
    ),
    (
        DefenceName::InputPermutations,
        "a callable's timed inputs are drawn afresh in place for every sample instead (the same addresses, new values)",
    ),
    (
        DefenceName::SideStream,
        "no side-stream guard pass: a callable's work that outlives the timed stream is measured by the host's wait for the whole device after each sample, refused when most samples show it",
    ),
];

/// What makes two cases' edge batteries the same: dtype, head dim, mask, head group.
type BatteryKey = (attn_oracle::DType, usize, bool, usize);

/// A py candidate's gate run: the device, the candidate's own helper with its callable loaded,
/// the baseline, the plan.
pub struct PyGate<'a> {
    gpu: &'a Gpu,
    helper: &'a Sdpa,
    baseline: &'a Baseline,
    plan: &'a GatePlan,
    watchdog: Option<&'a Watchdog>,
    baselines: PreparedCache,
    /// The edge battery's first run in this session, by dtype, head dim, mask and group.
    batteries: Vec<(String, BatteryKey, Option<CorrectnessCheck>)>,
    /// The shapes the callable has been called on in this session.
    called: std::cell::RefCell<std::collections::HashSet<String>>,
}

impl std::fmt::Debug for PyGate<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PyGate").finish_non_exhaustive()
    }
}

impl<'a> PyGate<'a> {
    /// A session of the callable loaded in `helper` ([`Sdpa::load_callable`]), which must not be
    /// the baseline's helper: a callable's module runs in its process.
    pub fn new(
        gpu: &'a Gpu,
        helper: &'a Sdpa,
        baseline: &'a Baseline,
        plan: &'a GatePlan,
        watchdog: Option<&'a Watchdog>,
    ) -> PyGate<'a> {
        PyGate {
            gpu,
            helper,
            baseline,
            plan,
            watchdog,
            baselines: PreparedCache::default(),
            batteries: vec![],
            called: Default::default(),
        }
    }

    /// Judges `problem` with inputs from `seed`.
    pub fn case(&mut self, problem: &Problem, seed: u64) -> GateCase {
        match self.try_case(problem, seed) {
            Ok(case) => case,
            Err(err) => {
                let (status, reason, _) = ended_by(&err);
                let mut case = ended_case(problem, status, reason);
                case.defences = self.defences(&case);
                case
            }
        }
    }

    fn try_case(&mut self, problem: &Problem, seed: u64) -> Result<GateCase> {
        if let Some(why) = crate::sdpa::refusal(problem, Backend::Py) {
            return Err(MeasureError::Invalid(why));
        }
        self.baseline.check_supports(problem)?;
        let mut case = ended_case(problem, CaseStatus::CouldNotRun, String::new());
        let reference = GpuReference::new(self.gpu, problem.dtype, problem.shape.head_dim)?;
        let mut previous = None;
        for i in 0..self.plan.checks {
            let distribution = Distribution::CHECKS[i % Distribution::CHECKS.len()];
            let scale = check_scale(problem, seed, i, distribution);
            let draw = (seed.wrapping_add(i as u64), distribution, scale);
            let (check, output) = self.check(&reference, problem, draw, previous.as_ref())?;
            let failed = !check.passed;
            case.correctness.push(check);
            if failed {
                return Ok(self.finish(case));
            }
            previous = output;
        }
        let battery = self.battery(&reference, problem, seed ^ 0xed9e)?;
        let failed = battery.checks.iter().any(|c| !c.passed);
        case.battery = Some(battery);
        if failed {
            return Ok(self.finish(case));
        }
        match self.time(&mut case, problem, seed) {
            Ok(()) => {}
            // Refused while timed: recorded where the decision reads it, the checks kept.
            Err(MeasureError::Refused { refusal, message }) => refusal.record(&mut case, message),
            Err(err) => return Err(err),
        }
        Ok(self.finish(case))
    }

    /// One check: the callable's two outputs on inputs of `draw` (seed, distribution, scale),
    /// the first judged, the two compared; the first output when it was written.
    fn check(
        &self,
        reference: &GpuReference,
        problem: &Problem,
        draw: (u64, Distribution, f64),
        previous: Option<&HostTensor>,
    ) -> Result<(CorrectnessCheck, Option<HostTensor>)> {
        let (seed, distribution, scale) = draw;
        let mut scaled = problem.clone();
        scaled.params = problem.params.with_scale(scale);
        let inputs = problem.generate(distribution, seed);
        let path = |name: &str| self.helper.scratch(&format!("py-{name}.npy"));
        let (q, k, v, o, second) = (path("q"), path("k"), path("v"), path("o"), path("o2"));
        let io =
            |e: attn_oracle::OracleError| MeasureError::Invalid(format!("a py check's files: {e}"));
        for (file, tensor) in [(&q, &inputs.q), (&k, &inputs.k), (&v, &inputs.v)] {
            npy::write(file, tensor).map_err(io)?;
        }
        let mut check = CorrectnessCheck {
            seed,
            distribution: distribution.to_string(),
            passed: false,
            max_abs: f64::NAN,
            rel_l2: f64::NAN,
            nan_count: 0,
            poison_count: 0,
            reason: None,
            sdpa_max_abs: None,
            closer_to: None,
            failure: None,
            rows: Some(problem.oracle_rows(seed)),
            full: None,
            scale: Some(scale),
            shape: None,
            guards: None,
        };
        // Two calls; the first on a shape may compile (torch.compile, Triton's JIT) for minutes.
        let bound = if self.called.borrow_mut().insert(problem.spec.to_string()) {
            (self.plan.hang_floor * 2).max(FIRST_CALL_BOUND)
        } else {
            self.plan.hang_floor * 2
        };
        let called = self.bounded(bound, "a checked call", || {
            self.helper.run_callable([&q, &k, &v], &o, &second, &scaled)
        });
        match called {
            Ok(()) => {}
            Err(MeasureError::Refused { refusal, message }) => {
                return Ok((failed(check, refusal.failure(), message), None));
            }
            Err(e) => return Err(e),
        }
        let output = npy::read_as(&o, problem.dtype).map_err(io)?;
        let again = npy::read_as(&second, problem.dtype).map_err(io)?;
        let gpu = self.gpu;
        let upload =
            |name: &str, t: &HostTensor, i: u64| GuardedTensor::upload(gpu, name, t, seed ^ i);
        let (dq, dk, dv) = (
            upload("Q", &inputs.q, 1)?,
            upload("K", &inputs.k, 2)?,
            upload("V", &inputs.v, 3)?,
        );
        let d_out = upload("O", &output, 4)?;
        let Values {
            verdict,
            full,
            failure,
            reason,
            ..
        } = judge_values(
            (gpu, reference),
            problem,
            &inputs,
            [&dq, &dk, &dv, &d_out],
            (&output, previous),
            None,
            draw,
        )?;
        check.max_abs = verdict.max_abs;
        check.rel_l2 = verdict.rel_l2;
        check.nan_count = verdict.nan_count + verdict.inf_count;
        check.poison_count = verdict.poison_count;
        check.full = Some(full);
        let differing = differing_elements(&output, &again);
        (check.failure, check.reason) = judged(
            failure,
            reason,
            &[],
            (differing, problem.q_elements(), "calls"),
        );
        check.passed = check.failure.is_none();
        Ok((check, Some(output)))
    }

    /// The dense and grouped edge shapes, once per dtype, head dim, mask and group in a run.
    fn battery(
        &mut self,
        reference: &GpuReference,
        problem: &Problem,
        seed: u64,
    ) -> Result<attn_evidence::EdgeBattery> {
        let spec = &problem.spec;
        let key = (
            problem.dtype,
            spec.head_dim,
            spec.causal,
            spec.heads / spec.kv_heads(),
        );
        if let Some((first, _, failed)) = self.batteries.iter().find(|b| b.1 == key) {
            return Ok(attn_evidence::EdgeBattery {
                shapes: vec![],
                checks: failed.iter().cloned().collect(),
                skipped: vec![],
                checked_in: Some(first.clone()),
            });
        }
        let problems = battery_problems(problem, &tile_sizes(&[]), CALLABLE_VARIANTS)?;
        let mut battery = attn_evidence::EdgeBattery {
            shapes: problems.iter().map(|p| p.to_string()).collect(),
            checks: vec![],
            skipped: vec![],
            checked_in: None,
        };
        for (i, edge) in problems.iter().enumerate() {
            let edge_seed = seed.wrapping_add(7919 * i as u64);
            let distribution = Distribution::Distinct;
            let scale = edge.params.scale * scale_factor(edge_seed, 1, distribution);
            // The battery keeps the case's dtype and head dim: its reference serves.
            let (mut check, _) =
                self.check(reference, edge, (edge_seed, distribution, scale), None)?;
            check.shape = Some(edge.to_string());
            let failed = !check.passed;
            battery.checks.push(check);
            if failed {
                break;
            }
        }
        let failed = battery.checks.iter().find(|c| !c.passed).cloned();
        self.batteries.push((spec.to_string(), key, failed));
        Ok(battery)
    }

    /// Both sides timed interleaved, the callable through its helper's protocol; then the
    /// evidence: verified outputs, floor, clock guard, comparison.
    fn time(&mut self, case: &mut GateCase, problem: &Problem, seed: u64) -> Result<()> {
        let (gpu, plan) = (self.gpu, self.plan);
        let bound = Rc::new(Cell::new(plan.hang_floor));
        let mut cand = Bounded {
            side: SdpaSide::new(gpu, self.helper, Backend::Py, problem, seed ^ 0x5eed),
            helper: self.helper,
            watchdog: self.watchdog,
            bound: Rc::clone(&bound),
        };
        // The callable's process is stopped whenever it is not being timed (the baseline's
        // blocks included), and let go again when the timing ends, however it ends.
        self.helper.pause()?;
        let _paused = Paused(self.helper);
        let mut compiled = None;
        let mut base = baseline_side(
            gpu,
            self.baseline,
            &mut self.baselines,
            &mut compiled,
            problem,
            seed,
        )?;
        let (floor, factor) = (plan.hang_floor, plan.hang_factor);
        let timed = interleave(gpu, &mut cand, base.as_mut(), &plan.interleave, |first| {
            let scaled = Duration::try_from_secs_f64(factor * median(&first.samples_us) * 1e-6);
            bound.set(scaled.map_or(floor, |scaled| floor.max(scaled)));
        })?;
        // The helper refuses a sample with any output off its reference: every one it returned
        // was verified.
        case.timed_outputs = Some(TimedOutputCheck {
            sets: timed.a.input_sets,
            samples_checked: timed.a.samples_us.len(),
            samples_bad: 0,
            first_bad: None,
            inputs_scrambled: false,
            launches_per_sample: Some(timed.a.launches_per_sample),
            reference_masked: false,
            outside: vec![],
            inputs_written: vec![],
        });
        record_comparison(case, problem, gpu, plan, &timed)
    }

    /// `f` under the watchdog with `bound`, when there is one.
    fn bounded<T>(&self, bound: Duration, what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        match self.watchdog {
            Some(w) => w.guard(bound, what, f),
            None => f(),
        }
    }

    fn facts(&self) -> CaseFacts {
        self.plan.case_facts(self.watchdog.is_some(), 0)
    }

    /// The defences that ran, with what a callable's case does not cover said as not run.
    fn defences(&self, case: &GateCase) -> Vec<Defence> {
        let mut defences = case_defences(case, &self.plan.rule, &self.facts());
        for (name, why) in NOT_COVERED {
            if let Some(d) = defences.iter_mut().find(|d| d.name == name) {
                *d = Defence::not_run(name, why);
            }
        }
        // A callable's check has no launch guards to read these from: its own record.
        let checks: Vec<&CorrectnessCheck> = (case.correctness.iter())
            .chain(case.battery.iter().flat_map(|b| b.checks.iter()))
            .collect();
        let caught = |f: CheckFailure| checks.iter().any(|c| c.failure == Some(f));
        let ran = [
            (
                DefenceName::InputChecksums,
                format!("Q, K and V compared bit for bit with copies after both calls of each of {} checks, and summed around every timed sample", checks.len()),
                caught(CheckFailure::WroteInputs),
            ),
            (
                DefenceName::Determinism,
                format!("two calls on each of {} checks' inputs compared bitwise", checks.len()),
                caught(CheckFailure::NonDeterministic),
            ),
        ];
        for (name, covered, caught) in ran {
            if let Some(d) = defences.iter_mut().find(|d| d.name == name) {
                *d = if checks.is_empty() {
                    Defence::not_run(name, "not reached: the case ended before its checks")
                } else {
                    Defence::ran(name, covered, caught)
                };
            }
        }
        defences
    }

    fn finish(&self, case: GateCase) -> GateCase {
        let mut case = self.plan.settle(case, &self.facts(), |_, reason| reason);
        case.defences = self.defences(&case);
        case
    }
}

/// A timed side whose every block runs under the watchdog (a callable that never returns ends
/// the process there, as a hung kernel does).
struct Bounded<'s> {
    side: SdpaSide<'s>,
    /// The callable's helper: resumed for each of its blocks, paused after.
    helper: &'s Sdpa,
    watchdog: Option<&'s Watchdog>,
    /// Per call: the plan's floor, then the larger of it and a multiple of the baseline's first
    /// median.
    bound: Rc<Cell<Duration>>,
}

impl TimedSide for Bounded<'_> {
    fn block(&mut self, opts: &TimingOptions) -> Result<Timings> {
        let launches = (opts.warmup + opts.samples * opts.batch_launches.max(1) + 1) as u32;
        self.helper.resume()?;
        let timed = match self.watchdog {
            Some(w) => w.guard(self.bound.get() * launches, "a timed call", || {
                self.side.block(opts)
            }),
            None => self.side.block(opts),
        };
        self.helper.pause()?;
        timed
    }
}

/// A paused helper, resumed when this is dropped.
struct Paused<'s>(&'s Sdpa);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        let _ = self.0.resume();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_ends_a_case_with_its_own_status_and_check_failure() {
        let table = [
            (
                "wrong",
                CaseStatus::TimedOutputDiffers,
                CheckFailure::Incorrect,
            ),
            (
                "remembered",
                CaseStatus::TimedOutputDiffers,
                CheckFailure::Stale,
            ),
            ("inputs", CaseStatus::WroteInputs, CheckFailure::WroteInputs),
            (
                "escaped",
                CaseStatus::EscapedStream,
                CheckFailure::BrokeContract,
            ),
            (
                "contract",
                CaseStatus::BrokeContract,
                CheckFailure::BrokeContract,
            ),
        ];
        let problem = Problem::parse("1,8,256,64").unwrap();
        for (name, status, failure) in table {
            let refusal: Refusal = serde_json::from_str(&format!("\"{name}\"")).unwrap();
            assert_eq!(
                (refusal.status(), refusal.failure()),
                (status, failure),
                "{name}"
            );
            // Recorded while timed, the decision (and so a replay) reads that status back.
            let mut case = ended_case(&problem, CaseStatus::CouldNotRun, String::new());
            case.status = None;
            refusal.record(&mut case, format!("{name} while timed"));
            let rule = attn_evidence::GateRule::default();
            let options = attn_stats::CompareOptions::default();
            let decision = crate::decide::decide(&case, &rule, &options, None);
            assert_eq!(decision.status, status, "{name}: {}", decision.reason);
            assert!(decision.reason.contains(name), "{}", decision.reason);
        }
        // A broken contract is a defence's verdict: its reason is the helper's own words.
        assert!(CheckFailure::BrokeContract.is_defence());
    }
}
