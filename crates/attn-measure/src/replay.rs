//! `--replay`: a stored gate run's decisions recomputed from its stored facts and raw samples,
//! on any machine, with the same [`decide`](crate::decide::decide) a live run uses.

use attn_evidence::GateRun;
use attn_stats::Sample;

use crate::decide::decide;
use crate::{MeasureError, Result};

/// A replayed run, and whether it reproduces the stored decisions.
#[derive(Debug, Clone)]
pub struct Replayed {
    /// The run with every comparison and decision recomputed.
    pub run: GateRun,
    /// Whether every case's verdict and comparison, and the run's verdict, are as stored.
    pub same: bool,
}

/// Recomputes every case of `stored`.
pub fn replay(stored: &GateRun) -> Result<Replayed> {
    let mut run = stored.clone();
    let peak = stored.provenance.peak_tflops;
    for (i, case) in run.cases.iter_mut().enumerate() {
        if let (Some(c), Some(b)) = (&case.candidate, &case.baseline) {
            // A bad stored value is named by its case, shape and fields.
            let named = |e: attn_stats::StatsError| {
                MeasureError::Invalid(format!(
                    "cases[{i}] ({}): candidate/baseline samples: {e}",
                    case.shape
                ))
            };
            // In the stored comparison's blocks (1 in evidence from before blocks were recorded).
            let block = case.comparison.as_ref().map_or(1, |c| c.block);
            case.comparison = Some(
                attn_stats::compare_in_blocks(
                    &Sample::new(b.samples.clone()).map_err(named)?,
                    &Sample::new(c.samples.clone()).map_err(named)?,
                    block,
                    &stored.options,
                )
                .map_err(named)?,
            );
            case.candidate_tflops = case
                .comparison
                .as_ref()
                .map(|c| case.tflops(c.candidate.median));
        }
        let decision = decide(case, &stored.rule, &stored.options, peak);
        case.passed = decision.status.passed();
        case.status = Some(decision.status);
        case.reason = decision.reason;
    }
    run.passed = !run.cases.is_empty() && run.cases.iter().all(|c| c.passed);
    let same = run.passed == stored.passed
        && run.cases.len() == stored.cases.len()
        && run.cases.iter().zip(&stored.cases).all(|(a, b)| {
            a.passed == b.passed
                && b.status.is_none_or(|s| Some(s) == a.status)
                && same_comparison(a.comparison.as_ref(), b.comparison.as_ref())
        });
    Ok(Replayed { run, same })
}

/// The same comparison up to floating-point summation order (the bootstrap's parallel sums may
/// differ in the last bits between machines and thread counts): medians, the speedup and the
/// difference's interval within 1e-9 relative, and the same verdict and gate result.
fn same_comparison(a: Option<&attn_stats::Comparison>, b: Option<&attn_stats::Comparison>) -> bool {
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1e-12);
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            let numbers = |c: &attn_stats::Comparison| {
                [
                    c.candidate.median,
                    c.baseline.median,
                    c.speedup.point,
                    c.speedup.lower,
                    c.speedup.upper,
                    c.diff_median.point,
                    c.diff_median.lower,
                    c.diff_median.upper,
                ]
            };
            a.verdict == b.verdict
                && a.gate == b.gate
                && numbers(a).iter().zip(numbers(b)).all(|(x, y)| close(*x, y))
        }
        _ => false,
    }
}
