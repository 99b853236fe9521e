//! Throughput against sequence length: every family of shapes (same GPU, B, H, D, causality and
//! dtype, self-attention) that the bench runs cover at two or more sequence lengths gets a chart
//! with a curve per implementation and SDPA backend, and the GPU's physical lines.
//!
//! Points are the latest bench entry of each (implementation, sequence length) in the family, so a
//! `sweep` suite run draws whole curves and later runs update their points.

use std::collections::BTreeMap;

use attn_evidence::{slug, Evidence, ShapeSpec};

use crate::ceilings::{device_peak, matmul_rate};
use crate::charts::{ThroughputChart, ThroughputSeries};
use crate::model::{EvidenceSet, Role};
use crate::ReportOptions;

/// One family's chart with its file name and the evidence files it draws from.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepChart {
    /// `throughput-<family>.svg`.
    pub file: String,
    /// The chart's data.
    pub chart: ThroughputChart,
    /// Evidence files whose entries are on the chart, oldest first.
    pub sources: Vec<String>,
}

/// The fixed dimensions of a family of shapes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Family {
    gpu: String,
    batch: usize,
    heads: usize,
    head_dim: usize,
    causal: bool,
    dtype: String,
}

impl Family {
    fn of(gpu: &str, shape: &ShapeSpec) -> Self {
        Family {
            gpu: gpu.to_owned(),
            batch: shape.batch,
            heads: shape.heads,
            head_dim: shape.head_dim,
            causal: shape.causal,
            dtype: shape.dtype.to_string(),
        }
    }

    fn describe(&self) -> String {
        format!(
            "B={}, H={}, D={}{}, {}",
            self.batch,
            self.heads,
            self.head_dim,
            if self.causal { ", causal" } else { "" },
            self.dtype
        )
    }
}

/// What one family collects: per (role, label) the latest TFLOP/s per sequence length, the runs used.
#[derive(Default)]
struct FamilyPoints {
    series: BTreeMap<(Role, String), BTreeMap<usize, f64>>,
    runs: Vec<usize>,
}

/// One chart per family measured at two or more sequence lengths, families in order.
pub fn sweep_charts(evidence: &EvidenceSet, options: &ReportOptions) -> Vec<SweepChart> {
    let mut families: BTreeMap<Family, FamilyPoints> = BTreeMap::new();
    for (index, run) in evidence.runs.iter().enumerate() {
        let Evidence::Bench(bench) = &run.evidence else {
            continue;
        };
        for entry in bench
            .entries
            .iter()
            // A varlen batch has no one sequence length to chart it at.
            .filter(|e| e.shape.seq_q == e.shape.seq_kv && e.shape.varlen.is_none())
        {
            if !entry.tflops.is_finite() || entry.tflops <= 0.0 {
                continue;
            }
            let family = families
                .entry(Family::of(&bench.provenance.gpu, &entry.shape))
                .or_default();
            let key = (
                Role::of(&entry.implementation),
                entry.implementation.label(),
            );
            family
                .series
                .entry(key)
                .or_default()
                .insert(entry.shape.seq_q, entry.tflops);
            if !family.runs.contains(&index) {
                family.runs.push(index);
            }
        }
    }
    families
        .into_iter()
        .filter(|(_, points)| sequence_lengths(points) >= 2)
        .map(|(family, points)| chart(evidence, options, &family, points))
        .collect()
}

fn sequence_lengths(points: &FamilyPoints) -> usize {
    let mut lengths: Vec<usize> = points
        .series
        .values()
        .flat_map(|s| s.keys().copied())
        .collect();
    lengths.sort_unstable();
    lengths.dedup();
    lengths.len()
}

fn chart(
    evidence: &EvidenceSet,
    options: &ReportOptions,
    family: &Family,
    points: FamilyPoints,
) -> SweepChart {
    let latest = points.runs.last().map(|i| &evidence.runs[*i]);
    let peak = latest.and_then(|run| device_peak(&run.gpu_facts()));
    let lines = matmul_rate(&family.gpu, options.matmul_tflops)
        .into_iter()
        .chain(peak)
        .collect();
    let series = points
        .series
        .into_iter()
        .map(|((role, label), by_length)| ThroughputSeries {
            label,
            reference: role != Role::Ours,
            points: by_length.into_iter().collect(),
        })
        .collect();
    let name = format!("{} {}", family.gpu, family.describe());
    SweepChart {
        file: format!("throughput-{}.svg", slug(&name)),
        chart: ThroughputChart {
            title: format!(
                "Throughput vs sequence length: {} ({})",
                family.describe(),
                family.gpu
            ),
            series,
            lines,
        },
        sources: points
            .runs
            .iter()
            .map(|i| evidence.runs[*i].path.clone())
            .collect(),
    }
}
