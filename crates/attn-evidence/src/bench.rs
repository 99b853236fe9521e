//! `cargo xtask bench`: timings of several implementations on several shapes, no verdict.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{EvidenceError, Implementation, Provenance, ShapeSpec, Timing};

/// One implementation timed on one shape.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchEntry {
    /// What ran.
    pub implementation: Implementation,
    /// On what.
    pub shape: ShapeSpec,
    /// The raw samples.
    pub timing: Timing,
    /// Summary of `timing.samples` (µs).
    pub summary: attn_stats::Summary,
    /// Throughput at the median time, TFLOP/s.
    pub tflops: f64,
}

/// One run of `cargo xtask bench`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRun {
    /// [`crate::SCHEMA_VERSION`] of the writer.
    pub schema: u32,
    /// Always `"bench"`.
    pub kind: String,
    /// Machine, software and commit.
    pub provenance: Provenance,
    /// Name of the shape suite, when one was used.
    #[serde(default)]
    pub suite: Option<String>,
    /// One entry per (implementation, shape).
    pub entries: Vec<BenchEntry>,
}

/// Column names of [`BenchRun::to_csv`].
pub const BENCH_CSV_HEADER: [&str; 14] = [
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
];

impl BenchRun {
    /// The entries as CSV, one row per entry, columns [`BENCH_CSV_HEADER`]; written beside the JSON
    /// for spreadsheets. Times in µs.
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
            ];
            writer.write_record(&row).map_err(|e| fail(e.to_string()))?;
        }
        let bytes = writer.into_inner().map_err(|e| fail(e.to_string()))?;
        String::from_utf8(bytes).map_err(|e| fail(e.to_string()))
    }
}
