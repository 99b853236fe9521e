//! Correctness checks of a prepared candidate on one problem.
//!
//! Each check draws fresh inputs from the next distribution of [`Distribution::CHECKS`] (normal,
//! large logits, peaky rows, constant rows, small variance) and poisons the output before the
//! launch. The whole output is compared with the GPU reference (`kernels/reference.cu`), and the
//! rows of [`RowSelection::for_check`](attn_oracle::RowSelection::for_check) with the f64
//! oracle; the reference's own error on those rows is measured each time and subtracted from the
//! tolerance of the whole-output comparison (the `bound` module), so that passing it bounds the
//! candidate's error against exact arithmetic everywhere. An output byte-identical to the
//! previous check's, on new inputs, is stale.
//!
//! Every check also varies what a kernel could otherwise assume and watches what it touches:
//!
//! - the softmax scale is drawn per check among [`SCALE_FACTORS`] × 1/√D ([`check_scale`]), so a
//!   kernel that ignores its `scale` argument fails;
//! - Q, K, V and O sit between guards ([`GuardedTensor`]) read back after every launch: a write
//!   outside the output is "wrote outside its output (N bytes after O)". Q, K and V's guards are
//!   NaNs of their dtype, the one after each as large as the input (up to
//!   [`READ_GUARD_MAX_BYTES`](attn_kernels::guard::READ_GUARD_MAX_BYTES)), so a kernel that reads
//!   past its inputs computes from NaN;
//! - Q, K and V are checksummed on the device before and after: "wrote into its inputs" (before
//!   any reference is computed from them, so the gate never blames its own reference);
//! - the launch runs twice on the same inputs, and the first output is judged against the
//!   references whatever the second gave;
//! - a first output that is wrong (unwritten, NaN/Inf or incorrect) is relaunched with the inputs'
//!   guards refilled (`reads`): if what lies outside the inputs changes it, the kernel "read
//!   outside its inputs (past K)", a verdict ahead of the wrong value it explains;
//! - outputs of the two launches that are not bitwise identical are appended to a wrong value's
//!   reason ("; also non-deterministic"), and a correct output that is unstable is a
//!   "non-deterministic output".
//!
//! The order of the verdicts: a write outside the output or into the inputs (the references would
//! be computed from inputs the kernel changed), a read outside the inputs, the wrong value
//! (`failure_of`'s order), then non-determinism.
//!
//! A varlen problem runs through the same check on packed inputs (each sequence drawn as its own
//! dense problem) launched with its offsets: the f64 oracle on each sequence's rows of the one row
//! policy, the whole packed output against the GPU reference computed with the same offsets, and
//! the offsets read back after every launch (a kernel that changed them "wrote into its inputs").

use std::time::Duration;

use attn_evidence::{CheckFailure, CorrectnessCheck, FullCheck, LaunchGuards};
use attn_kernels::guard::GUARD_BYTES;
use attn_kernels::{
    Gpu, GpuReference, GuardedTensor, HarnessKernels, Prepared, RowErrors, VarlenOffsets,
};
use attn_oracle::{tolerance, Distribution, HostTensor, Inputs, Reference, Tolerance};

use crate::bound::{reference_error, whole_output_bound};
use crate::random::next_random;
use crate::supervise::Watchdog;
use crate::{Problem, Result};

pub(crate) mod reads;

/// The multiples of the problem's scale (1/√D) the checks draw their softmax scale from: a kernel
/// that ignores its `scale` argument is wrong at every factor but 1.
pub const SCALE_FACTORS: [f64; 5] = [1.0, 0.5, 1.7, 0.3, 1.25];

/// The factor of the problem's scale used by check `index` of a case seeded `seed`: check 0
/// (normal inputs, the most scale-sensitive) always a factor other than 1, the others any of
/// [`SCALE_FACTORS`], except where a distribution's purpose is a magnitude of logits: large
/// magnitude stays at 1 (logits near 150 overflow a softmax without a running max, and its
/// tolerance allows for the f32 error of logits that size, not larger), peaky at 1 or above (one
/// dominant key).
pub fn scale_factor(seed: u64, index: usize, distribution: Distribution) -> f64 {
    let mut state = seed ^ 0x5ca1_e000_0000_0000 ^ (index as u64).wrapping_mul(0x9e37_79b9);
    let draw = next_random(&mut state);
    let allowed: Vec<f64> = SCALE_FACTORS
        .iter()
        .copied()
        .filter(|&f| index > 0 || f != 1.0)
        .filter(|&f| match distribution {
            Distribution::LargeMagnitude => f == 1.0,
            Distribution::Peaky => f >= 1.0,
            _ => true,
        })
        .collect();
    match allowed.len() {
        0 => 1.0,
        n => allowed[(draw % n as u64) as usize],
    }
}

/// The softmax scale of check `index`: the problem's scale times [`scale_factor`].
pub fn check_scale(problem: &Problem, seed: u64, index: usize, distribution: Distribution) -> f64 {
    problem.params.scale * scale_factor(seed, index, distribution)
}

/// `check` failed for `failure`, with `reason` (a decode or backward check's guard verdicts).
pub(crate) fn failed(
    mut check: attn_evidence::CorrectnessCheck,
    failure: attn_evidence::CheckFailure,
    reason: String,
) -> attn_evidence::CorrectnessCheck {
    check.passed = false;
    check.failure = Some(failure);
    check.reason = Some(reason);
    check
}

/// One correctness check: its record, and what it was computed from (for a second reference).
#[derive(Debug)]
pub struct CheckRun {
    /// As recorded in evidence.
    pub check: CorrectnessCheck,
    /// The inputs.
    pub inputs: Inputs,
    /// The candidate's output.
    pub output: HostTensor,
    /// The f64 oracle on the checked rows.
    pub reference: Reference,
}

/// The watchdog every candidate launch runs under, with its bound.
pub type Watched<'a> = Option<(&'a Watchdog, Duration)>;

/// `checks` checks of `prepared` on `problem`, seeds `seed`, `seed + 1`, …
pub fn run_checks(
    gpu: &Gpu,
    prepared: &Prepared,
    gpu_reference: &GpuReference,
    problem: &Problem,
    seed: u64,
    checks: usize,
    watched: Watched<'_>,
) -> Result<Vec<CheckRun>> {
    let harness = HarnessKernels::new(gpu)?;
    let mut runs: Vec<CheckRun> = Vec::with_capacity(checks);
    for i in 0..checks {
        let case_seed = seed.wrapping_add(i as u64);
        let distribution = Distribution::CHECKS[i % Distribution::CHECKS.len()];
        let previous = runs.last().map(|r| &r.output);
        let scale = check_scale(problem, seed, i, distribution);
        let run = check_one(
            &CheckContext {
                gpu,
                prepared,
                gpu_reference,
                harness: &harness,
                watched,
            },
            problem,
            case_seed,
            distribution,
            scale,
            previous,
        )?;
        runs.push(run);
    }
    Ok(runs)
}

/// What every check runs with: the device, the candidate, the references, the watchdog.
#[derive(Clone, Copy)]
pub(crate) struct CheckContext<'a> {
    /// The device.
    pub gpu: &'a Gpu,
    /// The candidate.
    pub prepared: &'a Prepared,
    /// The f32 reference and comparison kernels for the problem's dtype and head dim.
    pub gpu_reference: &'a GpuReference,
    /// Checksums.
    pub harness: &'a HarnessKernels,
    /// The watchdog and its bound.
    pub watched: Watched<'a>,
}

/// What the guards and checksums found after a launch.
struct Watch {
    guards: LaunchGuards,
    first_outside: Option<String>,
}

/// One check of `problem` on inputs of `distribution` from `seed` at softmax `scale` (the edge
/// battery calls it with its own small problems).
pub(crate) fn check_one(
    cx: &CheckContext<'_>,
    problem: &Problem,
    seed: u64,
    distribution: Distribution,
    scale: f64,
    previous: Option<&HostTensor>,
) -> Result<CheckRun> {
    let CheckContext {
        gpu,
        prepared,
        gpu_reference,
        harness,
        watched,
    } = *cx;
    let params = problem.params.with_scale(scale);
    let inputs = problem.generate(distribution, seed);
    // Every buffer between guards seeded from the check's seed (a kernel cannot know them); the
    // inputs' guards are NaNs, so what a kernel reads outside them shows in its output.
    let guard_seed = |i: u64| next_random(&mut (seed ^ 0x6a7d_0000 ^ i));
    let mut q = GuardedTensor::upload_for_reads(gpu, "Q", &inputs.q, guard_seed(1))?;
    let mut k = GuardedTensor::upload_for_reads(gpu, "K", &inputs.k, guard_seed(2))?;
    let mut v = GuardedTensor::upload_for_reads(gpu, "V", &inputs.v, guard_seed(3))?;
    let mut o = GuardedTensor::alloc_poisoned(gpu, "O", q.dims, problem.dtype, guard_seed(4))?;
    let input_guards_after: Vec<u64> = [&q, &k, &v]
        .iter()
        .map(|t| t.guard_bytes()[1] as u64)
        .collect();
    let sum_seed = guard_seed(5);
    let sums = |harness: &HarnessKernels| -> attn_kernels::Result<[u64; 3]> {
        Ok([
            harness.checksum(gpu, &q, false, sum_seed)?,
            harness.checksum(gpu, &k, false, sum_seed)?,
            harness.checksum(gpu, &v, false, sum_seed)?,
        ])
    };
    let before = sums(harness)?;
    // A varlen batch's offsets: read back after every launch like the other inputs.
    let offsets = problem
        .varlen
        .as_ref()
        .map(|varlen| gpu.upload_offsets(varlen))
        .transpose()?;
    // One launch on the inputs as they are, the output poisoned before it; its output.
    let launch = |q: &GuardedTensor,
                  k: &GuardedTensor,
                  v: &GuardedTensor,
                  o: &mut GuardedTensor|
     -> Result<HostTensor> {
        gpu.poison(o)?;
        let mut run = || -> attn_kernels::Result<()> {
            prepared.launch_batch(gpu, q, k, v, o, &params, offsets.as_ref())?;
            gpu.synchronize()
        };
        match watched {
            Some((watchdog, bound)) => watchdog.guard(bound, "a checked launch", run)?,
            None => run()?,
        }
        Ok(gpu.download(o)?)
    };

    // Two launches on the same inputs.
    let mut outputs: Vec<HostTensor> = Vec::with_capacity(2);
    for _ in 0..2 {
        outputs.push(launch(&q, &k, &v, &mut o)?);
        // Writes outside or into the inputs end the check before anything is computed from
        // them: they are the verdict.
        let watch = watch_launch(
            gpu,
            harness,
            [&q, &k, &v, &o],
            offsets.as_ref(),
            &before,
            &sums,
        )?;
        if let Some(mut watch) = watch {
            watch.guards.input_guards_after = input_guards_after;
            let output = outputs.swap_remove(0);
            return defence_failure(problem, inputs, output, seed, distribution, scale, watch);
        }
    }
    let second = outputs.pop().expect("two launches");
    let output = outputs.pop().expect("two launches");
    let differing = differing_elements(&output, &second);
    if differing > 0 {
        // The first launch is the one judged: the device's O holds the second's.
        gpu.copy_into(&output, &mut o)?;
    }

    // Correctness before determinism: the first output against both references.
    let Values {
        verdict,
        full,
        failure: value_failure,
        reason: value_reason,
        exact,
    } = judge_values(
        (gpu, gpu_reference),
        problem,
        &inputs,
        [&q, &k, &v, &o],
        (&output, previous),
        offsets.as_ref(),
        (seed, distribution, scale),
    )?;
    // A wrong value may come from memory outside the inputs: relaunched with their guards
    // refilled, an output that changes names the guards it read.
    let probe = match value_failure {
        Some(CheckFailure::Unwritten | CheckFailure::NonFinite | CheckFailure::Incorrect) => {
            let mut relaunch =
                |q: &GuardedTensor, k: &GuardedTensor, v: &GuardedTensor| launch(q, k, v, &mut o);
            reads::probe_reads(
                gpu,
                [&mut q, &mut k, &mut v],
                &output,
                differing == 0,
                &mut relaunch,
            )?
        }
        _ => reads::ReadProbe::default(),
    };
    let (failure, reason) = judged(
        value_failure,
        value_reason,
        &probe.regions,
        (differing, problem.q_elements(), "launches"),
    );
    let guards = LaunchGuards {
        guard_bytes: GUARD_BYTES as u64,
        input_guards_after,
        read_probe_launches: probe.launches,
        read_outside: probe.regions,
        outside: vec![],
        inputs_written: vec![],
        launches: 2,
        identical: differing == 0,
    };
    let check = CorrectnessCheck {
        seed,
        distribution: distribution.to_string(),
        passed: failure.is_none(),
        max_abs: verdict.max_abs,
        rel_l2: verdict.rel_l2,
        nan_count: verdict.nan_count + verdict.inf_count,
        poison_count: verdict.poison_count,
        reason,
        sdpa_max_abs: None,
        closer_to: None,
        failure,
        rows: Some(problem.oracle_rows(seed)),
        full: Some(full),
        scale: Some(scale),
        shape: None,
        guards: Some(guards),
    };
    Ok(CheckRun {
        check,
        inputs,
        output,
        reference: exact,
    })
}

/// The values of a check's first output, judged.
pub(crate) struct Values {
    /// Against the f64 oracle on the checked rows.
    pub verdict: attn_oracle::Verdict,
    /// Every element against the GPU reference.
    pub full: FullCheck,
    /// What failed, if anything ([`failure_of`]'s order).
    pub failure: Option<CheckFailure>,
    /// Its reason.
    pub reason: Option<String>,
    /// The f64 oracle on the checked rows.
    pub exact: Reference,
}

/// Judges `output` (the device's copy in `qkvo[3]`) of a check on `inputs` (on the device in
/// `qkvo[..3]`) drawn with `draw` (seed, distribution, softmax scale): the f64 oracle on its
/// rows, then the GPU reference on every element within the bound its own error on those rows
/// leaves; byte-identical to `previous` is stale.
pub(crate) fn judge_values(
    (gpu, gpu_reference): (&Gpu, &GpuReference),
    problem: &Problem,
    inputs: &Inputs,
    qkvo: [&GuardedTensor; 4],
    (output, previous): (&HostTensor, Option<&HostTensor>),
    offsets: Option<&VarlenOffsets>,
    (seed, distribution, scale): (u64, Distribution, f64),
) -> Result<Values> {
    let [q, k, v, o] = qkvo;
    let params = problem.params.with_scale(scale);
    let tol = tolerance(problem.dtype, distribution);
    let exact = problem.oracle(inputs, &params, seed)?;
    let verdict = problem.compare(output, &exact, &tol);
    // The GPU reference: its own error on the f64 rows first, then every element of the output.
    let gpu_ref = gpu_reference.compute(gpu, q, k, v, &params, offsets)?;
    let reference_vs_f64 = reference_error(&gpu_ref.download(gpu)?, &exact, problem);
    let bound = whole_output_bound(reference_vs_f64, &tol, || {
        format!("{problem} ({distribution}, seed {seed}, scale {scale:.4})")
    })?;
    let errors = gpu_reference.compare(gpu, o, &gpu_ref, bound)?;
    let full = full_check(&errors, problem, bound.floor(), reference_vs_f64);
    let stale = previous.is_some_and(|p| p.as_bytes() == output.as_bytes());
    let failure = failure_of(&verdict, &full, &tol, stale);
    let reason = failure.map(|f| failure_reason(f, &verdict, &full, &tol));
    Ok(Values {
        verdict,
        full,
        failure,
        reason,
        exact,
    })
}

/// A check's failure and reason once its first output is judged (`value`, `value_reason`), the
/// guards it read (`read_outside`) known, and its two `runs` ("launches", "calls") compared
/// (`differing` of `elements` differ): a read outside the inputs first, then the wrong value,
/// each with any non-determinism appended; only a correct output that is unstable is
/// non-deterministic.
pub(crate) fn judged(
    value: Option<CheckFailure>,
    value_reason: Option<String>,
    read_outside: &[String],
    (differing, elements, runs): (usize, usize, &str),
) -> (Option<CheckFailure>, Option<String>) {
    let unstable =
        format!("two {runs} on the same inputs differ in {differing} of {elements} elements");
    let also = if differing > 0 {
        format!("; also non-deterministic: {unstable}")
    } else {
        String::new()
    };
    let wrong = value_reason.unwrap_or_else(|| "wrong result".into());
    if !read_outside.is_empty() {
        let reason = format!(
            "{}; with NaN there: {wrong}{also}",
            reads::read_outside_reason(read_outside)
        );
        return (Some(CheckFailure::ReadOutside), Some(reason));
    }
    match value {
        Some(failure) => (Some(failure), Some(format!("{wrong}{also}"))),
        None if differing > 0 => (
            Some(CheckFailure::NonDeterministic),
            Some(format!("non-deterministic output: {unstable}")),
        ),
        None => (None, None),
    }
}

/// After a launch: the guards of every buffer, the inputs' checksums and a varlen batch's
/// offsets. `None` when clean.
fn watch_launch(
    gpu: &Gpu,
    harness: &HarnessKernels,
    buffers: [&GuardedTensor; 4],
    offsets: Option<&VarlenOffsets>,
    before: &[u64; 3],
    sums: &dyn Fn(&HarnessKernels) -> attn_kernels::Result<[u64; 3]>,
) -> Result<Option<Watch>> {
    let mut outside = Vec::new();
    for buffer in buffers {
        if let Some(violation) = buffer.check(gpu)? {
            outside.push(violation.to_string());
        }
    }
    let after = sums(harness)?;
    let mut inputs_written: Vec<String> = ["Q", "K", "V"]
        .iter()
        .zip(before.iter().zip(&after))
        .filter(|(_, (b, a))| b != a)
        .map(|(name, _)| name.to_string())
        .collect();
    if let Some(offsets) = offsets {
        inputs_written.extend(offsets.changed(gpu)?.into_iter().map(String::from));
    }
    if outside.is_empty() && inputs_written.is_empty() {
        return Ok(None);
    }
    Ok(Some(Watch {
        first_outside: outside.first().cloned(),
        guards: LaunchGuards {
            guard_bytes: GUARD_BYTES as u64,
            input_guards_after: vec![],
            read_probe_launches: 0,
            read_outside: vec![],
            outside,
            inputs_written,
            launches: 1,
            identical: true,
        },
    }))
}

/// Elements whose bits differ between two outputs of the same shape.
pub(crate) fn differing_elements(a: &HostTensor, b: &HostTensor) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return a.len().max(b.len()) / 2;
    }
    a.chunks_exact(2)
        .zip(b.chunks_exact(2))
        .filter(|(x, y)| x != y)
        .count()
}

/// A check ended by a write outside its output or into its inputs: the verdict is its reason.
fn defence_failure(
    problem: &Problem,
    inputs: Inputs,
    output: HostTensor,
    seed: u64,
    distribution: Distribution,
    scale: f64,
    watch: Watch,
) -> Result<CheckRun> {
    let params = problem.params.with_scale(scale);
    let tol = tolerance(problem.dtype, distribution);
    // The f64 oracle on the host's own copy of the inputs: what the second reference needs.
    let exact = problem.oracle(&inputs, &params, seed)?;
    let verdict = problem.compare(&output, &exact, &tol);
    let guards = &watch.guards;
    let (failure, reason) = if let Some(first) = &watch.first_outside {
        let more = guards.outside.len() - 1;
        let also = if more > 0 {
            format!("; also {}", guards.outside[1..].join(", "))
        } else {
            String::new()
        };
        (
            CheckFailure::WroteOutside,
            format!("wrote outside its output ({first}{also})"),
        )
    } else {
        (
            CheckFailure::WroteInputs,
            format!(
                "wrote into its inputs ({} changed across the launch: checksums before and after differ)",
                guards.inputs_written.join(", ")
            ),
        )
    };
    let check = CorrectnessCheck {
        seed,
        distribution: distribution.to_string(),
        passed: false,
        max_abs: verdict.max_abs,
        rel_l2: verdict.rel_l2,
        nan_count: verdict.nan_count + verdict.inf_count,
        poison_count: verdict.poison_count,
        reason: Some(reason),
        sdpa_max_abs: None,
        closer_to: None,
        failure: Some(failure),
        rows: Some(problem.oracle_rows(seed)),
        full: None,
        scale: Some(scale),
        shape: None,
        guards: Some(watch.guards),
    };
    Ok(CheckRun {
        check,
        inputs,
        output,
        reference: exact,
    })
}

fn full_check(
    errors: &RowErrors,
    problem: &Problem,
    atol: f64,
    reference_vs_f64: f64,
) -> FullCheck {
    let (worst, at) = errors.worst();
    let mut per_row: Vec<f64> = errors.max_abs.iter().map(|&e| f64::from(e)).collect();
    per_row.sort_by(f64::total_cmp);
    let q = |p: f64| -> f64 {
        if per_row.is_empty() {
            0.0
        } else {
            per_row[((per_row.len() - 1) as f64 * p).round() as usize]
        }
    };
    FullCheck {
        elements: (errors.rows() * problem.shape.head_dim) as u64,
        max_abs: f64::from(worst),
        rel_l2: errors.rel_l2(),
        bad_elements: errors.bad_elements(),
        bad_rows: errors.bad_rows() as u64,
        worst_row: {
            let id = problem.row_id(at);
            [id.batch, id.head, id.row]
        },
        row_max_abs: [q(0.5), q(0.99), q(1.0)],
        tolerance: atol,
        reference_vs_f64,
    }
}

/// What failed, most telling first: unwritten, NaN/Inf, stale, then wrong values (by the f64
/// rows or by any element of the whole output).
fn failure_of(
    verdict: &attn_oracle::Verdict,
    full: &FullCheck,
    tol: &Tolerance,
    stale: bool,
) -> Option<CheckFailure> {
    let rel_l2_ok = full
        .rel_l2
        .partial_cmp(&tol.rel_l2)
        .is_some_and(|o| o.is_le());
    let bad_full = full.bad_elements > 0 || !rel_l2_ok;
    if verdict.poison_count > 0 {
        Some(CheckFailure::Unwritten)
    } else if verdict.nan_count + verdict.inf_count > 0 {
        Some(CheckFailure::NonFinite)
    } else if stale {
        Some(CheckFailure::Stale)
    } else if !verdict.passed || bad_full {
        Some(CheckFailure::Incorrect)
    } else {
        None
    }
}

fn failure_reason(
    failure: CheckFailure,
    verdict: &attn_oracle::Verdict,
    full: &FullCheck,
    tol: &Tolerance,
) -> String {
    let [b, h, s] = full.worst_row;
    match failure {
        CheckFailure::Unwritten => format!(
            "{} output elements never written (still poison), first at {:?}",
            verdict.poison_count, verdict.worst
        ),
        CheckFailure::NonFinite => format!(
            "{} NaN/Inf output elements, first at {:?}",
            verdict.nan_count + verdict.inf_count,
            verdict.worst
        ),
        CheckFailure::Stale => {
            "output identical to the previous call's on new inputs (stale output)".into()
        }
        CheckFailure::Incorrect if !verdict.passed => format!(
            "{} against the f64 oracle (tolerance {:.3e}, or rel {:.3e} of a larger reference element), rel L2 {:.3e} (≤ {:.3e})",
            verdict.reason.as_deref().unwrap_or("wrong result"),
            tol.max_abs,
            tol.rel_l2,
            verdict.rel_l2,
            tol.rel_l2
        ),
        CheckFailure::Incorrect => format!(
            "{} elements in {} rows off the GPU reference by more than their bound ({:.3e}, or rel {:.3e} of a larger element, less the reference's error; max {:.3e} at b={b} h={h} row {s}), rel L2 {:.3e} (≤ {:.3e})",
            full.bad_elements,
            full.bad_rows,
            full.tolerance,
            tol.rel_l2,
            full.max_abs,
            full.rel_l2,
            tol.rel_l2
        ),
        // Found by the guards and launches, whose verdicts are their reasons (check_one).
        CheckFailure::WroteOutside
        | CheckFailure::WroteInputs
        | CheckFailure::ReadOutside
        | CheckFailure::NonDeterministic
        | CheckFailure::BrokeContract => "wrong result".into(),
    }
}

/// The first failed check, as one line (`None` when all pass).
pub fn first_failure(runs: &[CheckRun]) -> Option<String> {
    first_failed_check(runs.iter().map(|r| &r.check))
}

/// The first failed check of `checks` (a decode batch's, or [`first_failure`]'s runs'), in one
/// line: its inputs, seed and reason.
pub fn first_failed_check<'c>(
    checks: impl IntoIterator<Item = &'c CorrectnessCheck>,
) -> Option<String> {
    checks.into_iter().find(|c| !c.passed).map(|c| {
        format!(
            "{} inputs, seed {}: {}",
            c.distribution,
            c.seed,
            c.reason.as_deref().unwrap_or("wrong result")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn correctness_is_named_before_determinism_and_reads_before_both() {
        let wrong = || Some("7 NaN/Inf output elements, first at Some(3)".to_string());
        // Correct and stable: passed.
        assert_eq!(judged(None, None, &[], (0, 100, "launches")), (None, None));
        // Correct but unstable: only then non-deterministic.
        let (failure, reason) = judged(None, None, &[], (5, 100, "launches"));
        assert_eq!(failure, Some(CheckFailure::NonDeterministic));
        assert_eq!(
            reason.unwrap(),
            "non-deterministic output: two launches on the same inputs differ in 5 of 100 elements"
        );
        // Wrong and unstable: the wrong value, with the non-determinism appended.
        let (failure, reason) = judged(
            Some(CheckFailure::NonFinite),
            wrong(),
            &[],
            (5, 100, "launches"),
        );
        assert_eq!(failure, Some(CheckFailure::NonFinite));
        assert_eq!(
            reason.unwrap(),
            "7 NaN/Inf output elements, first at Some(3); also non-deterministic: two launches on the same inputs differ in 5 of 100 elements"
        );
        let (failure, reason) = judged(
            Some(CheckFailure::Incorrect),
            wrong(),
            &[],
            (0, 100, "launches"),
        );
        assert_eq!(failure, Some(CheckFailure::Incorrect));
        assert!(!reason.unwrap().contains("non-deterministic"));
        // A read outside the inputs explains the wrong value: named first, the value after it.
        let read = ["past K".to_string(), "past V".to_string()];
        let (failure, reason) = judged(
            Some(CheckFailure::NonFinite),
            wrong(),
            &read,
            (0, 100, "launches"),
        );
        assert_eq!(failure, Some(CheckFailure::ReadOutside));
        assert_eq!(
            reason.unwrap(),
            "read outside its inputs (past K, past V); with NaN there: 7 NaN/Inf output elements, first at Some(3)"
        );
        let (_, reason) = judged(
            Some(CheckFailure::Incorrect),
            wrong(),
            &read[..1],
            (9, 100, "launches"),
        );
        let reason = reason.unwrap();
        assert!(
            reason.starts_with("read outside its inputs (past K);"),
            "{reason}"
        );
        assert!(
            reason.ends_with("; also non-deterministic: two launches on the same inputs differ in 9 of 100 elements"),
            "{reason}"
        );
        // Its verdict is its reason, like the other defences'.
        assert!(CheckFailure::ReadOutside.is_defence());
    }

    #[test]
    fn every_case_draws_scales_other_than_one_over_root_d() {
        for seed in 0..200u64 {
            let factors: Vec<f64> = (0..5)
                .map(|i| scale_factor(seed, i, Distribution::CHECKS[i]))
                .collect();
            // The first check (normal inputs) never at 1/√D: a kernel ignoring `scale` fails it.
            assert_ne!(factors[0], 1.0, "seed {seed}");
            // Large-magnitude inputs keep their logits near 150; peaky ones their dominant key.
            assert_eq!(factors[1], 1.0, "seed {seed}");
            assert!(factors[2] >= 1.0, "seed {seed}");
            assert!(factors.iter().all(|f| SCALE_FACTORS.contains(f)));
        }
        // Seeded: the same case draws the same scales; other seeds draw others.
        let draw = |seed| scale_factor(seed, 4, Distribution::SmallVariance);
        assert_eq!(draw(7), draw(7));
        let distinct: std::collections::BTreeSet<u64> =
            (0..100).map(|s| draw(s).to_bits()).collect();
        assert_eq!(distinct.len(), SCALE_FACTORS.len(), "every factor drawn");
        let problem = Problem::parse("1,4,256,64").unwrap();
        let scale = check_scale(&problem, 3, 0, Distribution::Normal);
        assert!((scale / 0.125 - scale_factor(3, 0, Distribution::Normal)).abs() < 1e-15);
    }
}
