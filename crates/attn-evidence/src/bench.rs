//! `cargo xtask bench`: timings of several implementations on several shapes, no verdict.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{EvidenceError, Implementation, Provenance, ShapeSpec, Timing};

/// One implementation timed on one shape.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchEntry {
    /// What ran.
    pub implementation: Implementation,
    /// On what (a decode batch: the varlen prefill batch over the same rows).
    pub shape: ShapeSpec,
    /// A decode entry's batch and bandwidths (absent for prefill, and in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<crate::DecodeRecord>,
    /// A backward entry's work (`bench --pass backward`: dQ, dK and dV timed; its TFLOP/s over
    /// the backward's FLOPs); absent for a forward entry, and in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward: Option<crate::BackwardRecord>,
    /// The raw samples.
    pub timing: Timing,
    /// Summary of `timing.samples` (µs).
    pub summary: attn_stats::Summary,
    /// Throughput at the median time, TFLOP/s.
    pub tflops: f64,
    /// For a varlen batch: the same implementation on the dense batch at its mean length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense_at_mean: Option<DenseAtMean>,
    /// The SM clock over the samples, MHz, read as the gate reads a block's: the device probe on
    /// the timed stream before and after them, averaged, else nvidia-smi after them (absent in
    /// older files, or where neither could read it). A
    /// bench times its entries one after another, and a power-limited GPU's clock moves between
    /// them: entries are comparable at like clocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_mhz: Option<f64>,
}

impl BenchEntry {
    /// Median time per query token, µs.
    pub fn per_token_us(&self) -> f64 {
        self.summary.median / self.shape.tokens().max(1) as f64
    }
}

/// A varlen batch against the dense batch at its mean length, the same implementation timed the
/// same way: is a batch of mixed lengths as fast per token as a dense one of the same tokens?
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenseAtMean {
    /// The dense batch: `B` its non-empty sequences, `S` their mean length (rounded).
    pub shape: ShapeSpec,
    /// Its median time, µs.
    pub median_us: f64,
    /// Varlen over dense median time per query token: at most 1.1 meets varlen's target (no
    /// slower per token than dense at the mean length, ±10%).
    pub per_token_ratio: f64,
}

impl DenseAtMean {
    /// The varlen target: no slower per token than dense at the mean length, within 10%.
    pub const TARGET: f64 = 1.10;

    /// The comparison of a varlen entry with the dense entry of the same implementation.
    pub fn of(varlen: &BenchEntry, dense: &BenchEntry) -> DenseAtMean {
        DenseAtMean {
            shape: dense.shape.clone(),
            median_us: dense.summary.median,
            per_token_ratio: varlen.per_token_us() / dense.per_token_us(),
        }
    }

    /// The dense batch's median time per query token, µs.
    pub fn per_token_us(&self) -> f64 {
        self.median_us / self.shape.tokens().max(1) as f64
    }

    /// Whether the target is met per token.
    pub fn meets_target(&self) -> bool {
        self.per_token_ratio <= DenseAtMean::TARGET
    }

    /// `varlen`'s attention work (visible query–key pairs) over the dense batch's: a batch of
    /// mixed lengths does Σ Lᵢ² work where the dense one does n·mean², so even at the same
    /// throughput its time per token is this factor above dense.
    pub fn work_ratio(&self, varlen: &BenchEntry) -> f64 {
        varlen.shape.flops() / self.shape.flops()
    }

    /// `varlen`'s time per unit of attention work over the dense batch's: the kernel's own cost
    /// of packing, scheduling and ragged tiles, free of the batch's arithmetic.
    pub fn per_work_ratio(&self, varlen: &BenchEntry) -> f64 {
        (varlen.summary.median / varlen.shape.flops()) / (self.median_us / self.shape.flops())
    }
}

/// One run of `cargo xtask bench`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRun {
    /// [`crate::SCHEMA_VERSION`] of the writer.
    pub schema: u32,
    /// Always [`crate::EvidenceKind::Bench`].
    pub kind: crate::EvidenceKind,
    /// Machine, software and commit.
    pub provenance: Provenance,
    /// Name of the shape suite, when one was used.
    #[serde(default)]
    pub suite: Option<String>,
    /// One entry per (implementation, shape).
    pub entries: Vec<BenchEntry>,
}

/// Column names of [`BenchRun::to_csv`].
pub const BENCH_CSV_HEADER: [&str; 15] = [
    "implementation",
    "backend",
    "batch",
    "heads",
    "seq_q",
    "seq_kv",
    "head_dim",
    "causal",
    "dtype",
    "median_us",
    "p10_us",
    "p90_us",
    "tflops",
    "n",
    "sm_mhz",
];

impl BenchRun {
    /// The entries as CSV, one row per entry, columns [`BENCH_CSV_HEADER`]; written beside the JSON
    /// for spreadsheets. Times in µs; the SM clock in whole MHz, empty where not measured.
    pub fn to_csv(&self) -> Result<String, EvidenceError> {
        let fail = |message: String| EvidenceError::Csv {
            path: PathBuf::from("<bench csv>"),
            message,
        };
        let mut writer = csv::Writer::from_writer(Vec::new());
        writer
            .write_record(BENCH_CSV_HEADER)
            .map_err(|e| fail(e.to_string()))?;
        for entry in &self.entries {
            let (shape, summary) = (&entry.shape, &entry.summary);
            let row = [
                entry.implementation.name.clone(),
                entry.implementation.backend.clone().unwrap_or_default(),
                shape.batch.to_string(),
                shape.heads.to_string(),
                shape.seq_q.to_string(),
                shape.seq_kv.to_string(),
                shape.head_dim.to_string(),
                shape.causal.to_string(),
                shape.dtype.to_string(),
                summary.median.to_string(),
                summary.p10.to_string(),
                summary.p90.to_string(),
                entry.tflops.to_string(),
                summary.n.to_string(),
                entry
                    .sm_mhz
                    .map_or(String::new(), |mhz| format!("{mhz:.0}")),
            ];
            writer.write_record(&row).map_err(|e| fail(e.to_string()))?;
        }
        let bytes = writer.into_inner().map_err(|e| fail(e.to_string()))?;
        String::from_utf8(bytes).map_err(|e| fail(e.to_string()))
    }
}
