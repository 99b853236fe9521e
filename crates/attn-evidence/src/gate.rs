//! `cargo xtask gate`: correctness checks plus a statistical comparison against a baseline, per shape.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::{Implementation, Provenance, ShapeSpec, Timing};

/// One correctness check of the candidate against the fp32 oracle on one seeded input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorrectnessCheck {
    /// Seed of the input generator.
    pub seed: u64,
    /// Input distribution, e.g. `"normal"`, `"uniform"`, `"large-logits"`.
    pub distribution: String,
    /// Whether the output was within tolerance, free of NaN and fully written.
    pub passed: bool,
    /// Largest absolute error against the oracle.
    pub max_abs: f64,
    /// Relative L2 error `‖out − ref‖₂ / ‖ref‖₂`.
    pub rel_l2: f64,
    /// Number of NaN or infinite outputs.
    pub nan_count: usize,
    /// Number of outputs still holding the poison pattern written before launch (never written).
    pub poison_count: usize,
    /// Why the check failed (one line), when it did.
    #[serde(default)]
    pub reason: Option<String>,
    /// Largest absolute difference between the candidate and SDPA, when SDPA ran.
    #[serde(default)]
    pub sdpa_max_abs: Option<f64>,
    /// Which reference the candidate is closer to (`"oracle"` or `"sdpa"`), when both ran.
    #[serde(default)]
    pub closer_to: Option<String>,
}

/// The gate's result for one shape.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateCase {
    /// The problem size.
    pub shape: ShapeSpec,
    /// The candidate's config on this shape, where it differs from the run's (an implementation
    /// may tune its knobs per shape).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
    /// Correctness checks, one per (seed, distribution).
    #[serde(default)]
    pub correctness: Vec<CorrectnessCheck>,
    /// Candidate timings (absent when correctness failed and timing was skipped).
    #[serde(default)]
    pub candidate: Option<Timing>,
    /// Baseline timings.
    #[serde(default)]
    pub baseline: Option<Timing>,
    /// Summaries, bootstrap CIs, rank test and verdict of candidate against baseline.
    #[serde(default)]
    pub comparison: Option<attn_stats::Comparison>,
    /// Candidate throughput at its median time, TFLOP/s.
    #[serde(default)]
    pub candidate_tflops: Option<f64>,
    /// Baseline throughput at its median time, TFLOP/s.
    #[serde(default)]
    pub baseline_tflops: Option<f64>,
    /// Things a reviewer should look at even when the case passed, one line each, e.g.
    /// `"speedup above 10x: look again"`, `"SM clock changed 1980 -> 1755 MHz"`.
    #[serde(default)]
    pub flags: Vec<String>,
    /// Whether the case passed the gate (correct, and the comparison passed the gate rule).
    pub passed: bool,
    /// Why it passed or failed, one line.
    pub reason: String,
}

/// One run of `cargo xtask gate`: a candidate against a baseline on a suite of shapes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateRun {
    /// [`crate::SCHEMA_VERSION`] of the writer.
    pub schema: u32,
    /// Always `"gate"`.
    pub kind: String,
    /// Machine, software and commit.
    pub provenance: Provenance,
    /// The implementation under test.
    pub candidate: Implementation,
    /// What it is compared with (usually SDPA).
    pub baseline: Implementation,
    /// Name of the shape suite, when one was used.
    #[serde(default)]
    pub suite: Option<String>,
    /// Confidence, resamples, seed and threshold of the comparisons.
    pub options: attn_stats::CompareOptions,
    /// One result per shape, in suite order.
    pub cases: Vec<GateCase>,
    /// Whether every case passed.
    pub passed: bool,
}
