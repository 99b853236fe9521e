//! `cargo xtask gate`: correctness checks plus a statistical comparison against a baseline, per shape.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::{Implementation, Provenance, ShapeSpec, Timing};

/// How a correctness check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckFailure {
    /// Elements beyond the tolerance.
    Incorrect,
    /// Elements never written (still poison).
    Unwritten,
    /// NaN or Inf elements.
    NonFinite,
    /// The output is byte-identical to the previous check's on new inputs.
    Stale,
    /// Bytes changed in the canary guards before or after a buffer (the output's, or an input's).
    WroteOutside,
    /// Q, K or V changed across the launch (their checksums differ).
    WroteInputs,
    /// The output depends on what lies in the guards around Q, K or V: the kernel read outside
    /// its inputs.
    ReadOutside,
    /// Two launches on the same inputs gave outputs that are not bitwise identical.
    NonDeterministic,
    /// A Python callable broke its calling contract (a view of its inputs, a down-cast, another
    /// stream left current, a patched timer).
    BrokeContract,
}

impl CheckFailure {
    /// Whether this is one of the gate's defences against cheating (guards, checksums,
    /// determinism) rather than a wrong value: its reason is the verdict itself.
    pub fn is_defence(self) -> bool {
        matches!(
            self,
            CheckFailure::WroteOutside
                | CheckFailure::WroteInputs
                | CheckFailure::ReadOutside
                | CheckFailure::NonDeterministic
                | CheckFailure::BrokeContract
        )
    }
}

/// What the gate watched around a checked launch besides its values: canary guards around every
/// buffer, checksums of the inputs, a second launch on the same inputs, and on a failed check,
/// relaunches with the inputs' guards refilled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchGuards {
    /// Guard bytes before each of Q, K, V and O, and after O (and, in older files, after each).
    pub guard_bytes: u64,
    /// Guard bytes after each of Q, K and V, whose guards hold NaNs (empty in older files: their
    /// guards after were `guard_bytes` of finite canaries).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_guards_after: Vec<u64>,
    /// Launches after a failed check with the inputs' guards refilled (finite, then NaN one guard
    /// at a time): 0 when the check passed or wrote outside.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub read_probe_launches: u32,
    /// The guards whose contents changed the output (`"past K"`, `"before Q"`); empty when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_outside: Vec<String>,
    /// Writes found in the guards, one line each (`"128 bytes after O"`); empty when clean.
    #[serde(default)]
    pub outside: Vec<String>,
    /// Inputs whose checksum changed across the launches (`"Q"`, `"K"`, `"V"`).
    #[serde(default)]
    pub inputs_written: Vec<String>,
    /// Launches on the same inputs (2: the second checks that the output is deterministic).
    pub launches: u32,
    /// Whether those launches' outputs were bitwise identical.
    pub identical: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The whole output compared with the GPU reference (f32, `kernels/reference.cu`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FullCheck {
    /// Elements compared: all of them.
    pub elements: u64,
    /// Largest |out − ref| over finite, written elements.
    pub max_abs: f64,
    /// ‖out − ref‖₂ / ‖ref‖₂.
    pub rel_l2: f64,
    /// Elements beyond `tolerance`, unwritten or not finite.
    pub bad_elements: u64,
    /// Rows with at least one bad element.
    pub bad_rows: u64,
    /// `[b, h, s]` of the row with the largest error (a varlen batch: `[sequence, head, row within
    /// the sequence]`).
    pub worst_row: [usize; 3],
    /// The per-row largest errors: median, 99th percentile and maximum over rows.
    pub row_max_abs: [f64; 3],
    /// Absolute tolerance per element: the oracle table's bound less the reference's own
    /// measured error (`reference_vs_f64`); an element whose reference `r` lies above the
    /// table's magnitude is allowed `rel_l2·|r|` less the same.
    pub tolerance: f64,
    /// The GPU reference's largest error against the f64 oracle on the checked rows: why the
    /// reference can judge the rest.
    pub reference_vs_f64: f64,
}

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
    /// How it failed, when it did (absent in schema-1 files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<CheckFailure>,
    /// Which rows the f64 oracle computed (absent in schema-1 files: every row up to 2M query
    /// elements, else 64 sampled rows per head).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<String>,
    /// The whole output against the GPU reference (absent in schema-1 files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full: Option<FullCheck>,
    /// The softmax scale the check passed (drawn per check around 1/√D; absent in older files,
    /// whose checks all used 1/√D).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    /// The shape checked, when it is not the case's own (an edge shape of the battery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<String>,
    /// Guards, input checksums and the determinism launch (absent in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guards: Option<LaunchGuards>,
}

/// The edge-shape battery: correctness (not timing) on small shapes chosen to break tiling for
/// the case's head dim, dtype and mask (ragged lengths at every tile size, `S_q ≠ S_kv` both ways,
/// `S = 1`, odd batch and head counts, causal rows that see no key). Run once per candidate
/// config, head dim, dtype and mask in a gate run; stops at the first failing shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EdgeBattery {
    /// Every shape of the battery, in order.
    pub shapes: Vec<String>,
    /// The checks run, one per shape, until the first failure.
    #[serde(default)]
    pub checks: Vec<CorrectnessCheck>,
    /// Shapes the candidate declined to launch (one line each, with its reason).
    #[serde(default)]
    pub skipped: Vec<String>,
    /// When this case did not run the battery itself: the earlier case that did (same config,
    /// head dim, dtype and mask).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked_in: Option<String>,
}

/// The outputs of the timed launches, checked after every sample against the reference of the
/// input set they ran on (outputs are poisoned before each sample, outside the timed region).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimedOutputCheck {
    /// Input sets rotated among.
    pub sets: usize,
    /// Samples whose outputs were checked.
    pub samples_checked: usize,
    /// Samples with at least one bad element.
    pub samples_bad: usize,
    /// The first bad sample, one line.
    #[serde(default)]
    pub first_bad: Option<String>,
    /// Whether every timed sample ran on inputs turned through fresh signed column permutations
    /// (so no launch saw inputs an earlier one had seen, and outputs cannot be remembered).
    #[serde(default)]
    pub inputs_scrambled: bool,
    /// Launches per timed sample, each on its own input set and output (poisoned before the
    /// sample, verified after it); absent in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launches_per_sample: Option<usize>,
    /// Whether the references the timed outputs were verified against were kept transformed
    /// (rows permuted and bits masked with a secret key) while the candidate ran.
    #[serde(default)]
    pub reference_masked: bool,
    /// Writes found after timing in the canary guards of the candidate's buffers, one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outside: Vec<String>,
    /// Inputs whose (permutation-invariant) checksum changed during timing, one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs_written: Vec<String>,
}

/// Blocks of samples dropped because the SM clock was throttled, and re-taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockGuard {
    /// Samples a block, per side; candidate and baseline blocks alternate (see `blocks`).
    pub block_samples: usize,
    /// Blocks kept per side (candidate, baseline).
    pub kept_blocks: [usize; 2],
    /// Blocks dropped per side.
    pub dropped_blocks: [usize; 2],
    /// The SM clock under which any block is dropped, MHz (none where the clock is unreadable):
    /// in older files the one threshold of every block; in files whose blocks carry their own, the floor, each block's
    /// own threshold being in [`BlockClock::threshold_mhz`].
    pub threshold_mhz: Option<u32>,
    /// The lowest SM clock read after a kept block, MHz.
    pub min_kept_mhz: Option<u32>,
    /// Whether each side has its full count of clean samples.
    pub complete: bool,
    /// The rule blocks were kept by, one line (absent in older files: 90% of the maximum by
    /// nvidia-smi after each block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The SM clock of each block as measured, MHz, in the order taken, with the side (0
    /// candidate, 1 baseline) and whether it was kept: in newer files a warm-up round (the
    /// baseline, then the candidate; never kept), then rounds that alternate which side runs
    /// first (B A, A B, …); older files alternate B A throughout, with no warm-up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<BlockClock>,
}

/// The fewest kept blocks a side a timing comparison may rest on when a block holds more than one
/// sample: each block runs under its own clock, and a power-limited GPU's clock wanders over
/// seconds, so that two blocks a side call a kernel faster than itself (evidence/METHOD.md,
/// `min-blocks-a-side`).
pub const MIN_BLOCKS_A_SIDE: usize = 4;

/// Whether `blocks` blocks of `block_samples` samples are too few ([`MIN_BLOCKS_A_SIDE`]) for a
/// comparison's interval to see the clock wander (single samples share nothing: never too few).
pub fn too_few_blocks(block_samples: usize, blocks: usize) -> bool {
    block_samples > 1 && blocks < MIN_BLOCKS_A_SIDE
}

impl ClockGuard {
    /// Whether the comparison rests on too few kept blocks on either side ([`too_few_blocks`]):
    /// its verdict is not established.
    pub fn too_few_blocks(&self) -> bool {
        self.kept_blocks
            .iter()
            .any(|&k| too_few_blocks(self.block_samples, k))
    }

    /// The mean SM clock over `side`'s kept blocks (0 candidate, 1 baseline), MHz; `None` when
    /// none of them was measured. On a power-limited GPU the side that draws more power runs at a
    /// lower clock.
    pub fn mean_kept_mhz(&self, side: usize) -> Option<f64> {
        let mhz: Vec<f64> = self
            .blocks
            .iter()
            .filter(|b| b.side == side && b.kept)
            .filter_map(|b| b.mhz)
            .collect();
        (!mhz.is_empty()).then(|| mhz.iter().sum::<f64>() / mhz.len() as f64)
    }

    /// Whether every kept block's clock was measured over its whole span
    /// ([`BlockClock::SPAN_SOURCE`]): only then do the sides' clocks say what each ran at.
    pub fn kept_blocks_span_measured(&self) -> bool {
        let mut kept = self.blocks.iter().filter(|b| b.kept).peekable();
        kept.peek().is_some()
            && kept.all(|b| b.mhz.is_some() && b.source == BlockClock::SPAN_SOURCE)
    }
}

/// One timed block's SM clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockClock {
    /// 0 the candidate, 1 the baseline.
    pub side: usize,
    /// The SM clock over the block, MHz (none where it could not be measured).
    pub mhz: Option<f64>,
    /// How it was measured: `"device-span"` (every SM's clock64 and %globaltimer stamped on the
    /// timed stream before and after the block: the mean clock over it), `"device"` (older
    /// files: a 50 µs clock probe before and one after the block, averaged: the clock at the
    /// block's edges, not over it) or `"nvidia-smi"` (read after the block).
    pub source: String,
    /// Whether the block's samples were kept.
    pub kept: bool,
    /// A warm-up block (the first round): timed and clocked like the others, never kept, and not
    /// counted as dropped (absent in older files, which have none).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warmup: bool,
    /// The clock under which this block would have been dropped, MHz: each side
    /// is judged by its own level (the median of its earlier blocks); absent for warm-up and
    /// unmeasured blocks, and in older files, where [`ClockGuard::threshold_mhz`] held for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_mhz: Option<f64>,
}

impl BlockClock {
    /// [`BlockClock::source`] of a clock measured over the block's whole span on the device.
    pub const SPAN_SOURCE: &'static str = "device-span";
}

/// What ended a gate case: the one typed outcome every reader (markdown, replay, report) uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CaseStatus {
    /// Correct, verified, plausible, and faster by the gate rule.
    Passed,
    /// Correct, but not faster by the gate rule.
    NotFaster,
    /// Correct, but slower than the baseline beyond the ratchet's tolerance
    /// ([`GateMode::NoRegression`]).
    Regression,
    /// Too few clean samples (throttled clocks): no decision.
    Inconclusive,
    /// Faster than the device can be, or more than the rule's limit faster than the baseline.
    Implausible,
    /// Wrong values.
    Incorrect,
    /// Output elements never written.
    Unwritten,
    /// NaN or Inf output.
    NonFinite,
    /// Output unchanged on new inputs.
    StaleOutput,
    /// Wrote into the canary guards before or after a buffer.
    WroteOutside,
    /// Changed its inputs.
    WroteInputs,
    /// Its output depends on memory outside its inputs.
    ReadOutside,
    /// Two launches on the same inputs differ.
    NonDeterministic,
    /// What the timed launches produced differs from the checked output.
    TimedOutputDiffers,
    /// Work ran outside the timed stream.
    EscapedStream,
    /// A Python callable broke its calling contract: it returned a view of its inputs, a
    /// down-cast or no tensor of Q's shape, left another stream current or patched the timer.
    BrokeContract,
    /// A launch did not finish within the bound.
    Hang,
    /// The kernel faulted (the CUDA context is lost).
    Fault,
    /// Could not be compiled, launched or measured.
    CouldNotRun,
}

impl CaseStatus {
    /// Whether this status passes the gate.
    pub fn passed(self) -> bool {
        self == CaseStatus::Passed
    }

    /// The status as it reads in tables.
    pub fn as_str(self) -> &'static str {
        match self {
            CaseStatus::Passed => "pass",
            CaseStatus::NotFaster => "not faster",
            CaseStatus::Regression => "regression",
            CaseStatus::Inconclusive => "inconclusive",
            CaseStatus::Implausible => "implausible",
            CaseStatus::Incorrect => "incorrect",
            CaseStatus::Unwritten => "unwritten output",
            CaseStatus::NonFinite => "NaN/Inf output",
            CaseStatus::StaleOutput => "stale output",
            CaseStatus::WroteOutside => "wrote outside its output",
            CaseStatus::WroteInputs => "wrote into its inputs",
            CaseStatus::ReadOutside => "read outside its inputs",
            CaseStatus::NonDeterministic => "non-deterministic output",
            CaseStatus::TimedOutputDiffers => "timed output differs",
            CaseStatus::EscapedStream => "work escapes the stream",
            CaseStatus::BrokeContract => "broke the calling contract",
            CaseStatus::Hang => "hang",
            CaseStatus::Fault => "fault",
            CaseStatus::CouldNotRun => "could not run",
        }
    }
}

impl std::fmt::Display for CaseStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a flag is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlagKind {
    /// Work escaped the timed stream (rejects the case).
    EscapedStream,
    /// A Python callable broke its calling contract while it was timed (rejects the case).
    BrokeContract,
    /// The SM clock was throttled or moved during timing.
    Throttled,
    /// Faster than the device or the rule allows.
    Implausible,
    /// Anything else worth a look.
    Note,
}

/// Something a reviewer should look at, typed; schema-1 files stored plain text, which is
/// classified once, here, when read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "FlagRepr")]
pub struct Flag {
    /// What it is about.
    pub kind: FlagKind,
    /// One line.
    pub message: String,
}

impl Flag {
    /// A flag of `kind`.
    pub fn new(kind: FlagKind, message: impl Into<String>) -> Flag {
        Flag {
            kind,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Flag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum FlagRepr {
    Typed { kind: FlagKind, message: String },
    Legacy(String),
}

impl From<FlagRepr> for Flag {
    fn from(repr: FlagRepr) -> Flag {
        match repr {
            FlagRepr::Typed { kind, message } => Flag { kind, message },
            FlagRepr::Legacy(message) => {
                let kind = if message.contains("escapes the timed stream") {
                    FlagKind::EscapedStream
                } else if message.contains("SM clock") {
                    FlagKind::Throttled
                } else if message.contains("above 10x") {
                    FlagKind::Implausible
                } else {
                    FlagKind::Note
                };
                Flag { kind, message }
            }
        }
    }
}

/// What a timed comparison must show for a case to pass.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum GateMode {
    /// The candidate is faster: median ≤ `options.gate_threshold` × the baseline's and the CI
    /// of the median difference below 0 (the usual gate).
    #[default]
    Faster,
    /// A ratchet (the baseline is the candidate at an earlier revision): the case fails only on
    /// a regression, a median above (1 + `tolerance`) × the baseline's with the CI of the median
    /// difference above 0.
    NoRegression {
        /// The slowdown tolerated, e.g. 0.02 for 2 %.
        tolerance: f64,
    },
}

impl GateMode {
    /// Whether this is the usual gate (written only when it is not).
    pub fn is_faster(&self) -> bool {
        *self == GateMode::Faster
    }
}

/// The gate's rule beyond the statistics: what must be shown, plausibility and time bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateRule {
    /// Faster than the baseline, or no regression against it (files without it: faster).
    #[serde(default, skip_serializing_if = "GateMode::is_faster")]
    pub mode: GateMode,
    /// A candidate more than this many times faster than the baseline is implausible.
    pub max_speedup: f64,
    /// Implausible results may pass (a person said `--allow-implausible`).
    pub allow_implausible: bool,
    /// A candidate launch that has not finished after this many seconds is a hang.
    #[serde(default)]
    pub hang_bound_s: Option<f64>,
    /// A case flagged for a throttled SM clock is inconclusive. Schema-1 runs predate the rule
    /// (their throttle flags were notes): their replays keep their verdicts.
    #[serde(default)]
    pub throttle_inconclusive: bool,
}

impl Default for GateRule {
    fn default() -> Self {
        GateRule {
            mode: GateMode::Faster,
            max_speedup: 10.0,
            allow_implausible: false,
            hang_bound_s: None,
            throttle_inconclusive: true,
        }
    }
}

impl GateRule {
    /// The rule schema-1 runs were judged by (no stored rule): the same plausibility limit,
    /// throttle flags as notes.
    pub fn schema1() -> GateRule {
        GateRule {
            throttle_inconclusive: false,
            ..GateRule::default()
        }
    }
}

/// The gate's result for one shape.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateCase {
    /// The problem size (a decode case: the varlen prefill batch over the same rows).
    pub shape: ShapeSpec,
    /// A decode case's batch and bandwidths (absent for prefill, and in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<crate::DecodeRecord>,
    /// A backward case's work and declarations (absent for a forward case, and in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward: Option<crate::BackwardRecord>,
    /// The candidate's config on this shape, where it differs from the run's (an implementation
    /// may tune its knobs per shape); integers (strings in files written before knobs were typed).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "crate::search::knob_values"
    )]
    pub config: BTreeMap<String, i64>,
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
    /// Things a reviewer should look at even when the case passed, e.g. an SM clock that moved.
    #[serde(default)]
    pub flags: Vec<Flag>,
    /// The timed launches' outputs, verified (absent in schema-1 files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_outputs: Option<TimedOutputCheck>,
    /// Clock-throttled blocks dropped and re-taken (absent in schema-1 files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_guard: Option<ClockGuard>,
    /// The edge-shape battery for this case's config, head dim, dtype and mask (absent in older
    /// files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub battery: Option<EdgeBattery>,
    /// The physical floor of one launch, µs: the bytes it must move (Q, K and V read, O beyond
    /// the L2 written) at the device's peak memory bandwidth. A median below it is implausible
    /// (absent in older files, or where the bandwidth is unknown or the L2 not flushed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_floor_us: Option<f64>,
    /// The defences that ran on this case, what each covered and found, and those that did not
    /// run and why (absent in older files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub defences: Vec<crate::Defence>,
    /// What ended the case (absent in schema-1 files; replay derives it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CaseStatus>,
    /// Whether the case passed the gate (correct, and the comparison passed the gate rule).
    pub passed: bool,
    /// Why it passed or failed, one line.
    pub reason: String,
}

impl GateCase {
    /// Floating-point operations of one launch: the backward's where the case is one, else the
    /// forward's (a decode case: its prefill batch's).
    pub fn flops(&self) -> f64 {
        self.backward
            .as_ref()
            .map_or_else(|| self.shape.flops(), |b| b.flops)
    }

    /// Throughput in TFLOP/s when one launch takes `time_us` microseconds.
    pub fn tflops(&self, time_us: f64) -> f64 {
        self.flops() / (time_us * 1e-6) / 1e12
    }
}

/// One run of `cargo xtask gate`: a candidate against a baseline on a suite of shapes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateRun {
    /// [`crate::SCHEMA_VERSION`] of the writer.
    pub schema: u32,
    /// Always [`crate::EvidenceKind::Gate`].
    pub kind: crate::EvidenceKind,
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
    /// Plausibility and time bounds (schema-1 files: [`GateRule::schema1`]).
    #[serde(default = "GateRule::schema1")]
    pub rule: GateRule,
    /// One result per shape, in suite order.
    pub cases: Vec<GateCase>,
    /// Whether every case passed.
    pub passed: bool,
}

#[cfg(test)]
mod tests {
    use super::ClockGuard;

    #[test]
    fn a_comparison_on_two_blocks_a_side_is_not_established() {
        let guard = |block_samples, kept_blocks| ClockGuard {
            block_samples,
            kept_blocks,
            dropped_blocks: [0, 0],
            threshold_mhz: None,
            min_kept_mhz: None,
            complete: true,
            rule: None,
            blocks: vec![],
        };
        assert!(guard(10, [2, 2]).too_few_blocks());
        assert!(guard(2, [10, 3]).too_few_blocks());
        assert!(!guard(2, [10, 10]).too_few_blocks());
        // Single samples are blocks of one: resampled one by one, nothing shared.
        assert!(!guard(1, [2, 2]).too_few_blocks());
    }
}
