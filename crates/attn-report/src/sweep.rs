//! Throughput against sequence length: every family of shapes (same GPU and timing mode, same B,
//! H, K/V heads, D, mask, window and dtype, self-attention: one problem varying only S) that the
//! bench runs cover at two or more sequence lengths gets a chart with a curve per implementation
//! and SDPA backend, and the GPU's physical lines.
//!
//! Points are the latest bench entry of each (implementation, sequence length) in the family, so a
//! `sweep` suite run draws whole curves and later runs update their points.

use std::collections::BTreeMap;

use attn_evidence::{slug, Evidence, ShapeSpec};

use crate::ceilings::{device_peak, matmul_rate};
use crate::charts::{ThroughputChart, ThroughputSeries};
use crate::model::{prefill_entries, EvidenceSet, Role};
use crate::setup::{short_gpu, Setup};
use crate::ReportOptions;

/// One family's chart with its file name and the evidence files it draws from.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepChart {
    /// `throughput-<family>.svg`.
    pub file: String,
    /// The GPU and timing mode of every point.
    pub setup: Setup,
    /// The chart's data.
    pub chart: ThroughputChart,
    /// Evidence files whose entries are on the chart, oldest first.
    pub sources: Vec<String>,
}

/// The fixed dimensions of a family of shapes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Family {
    setup: Setup,
    batch: usize,
    heads: usize,
    kv_heads: Option<usize>,
    head_dim: usize,
    causal: bool,
    window: Option<String>,
    dtype: String,
}

impl Family {
    fn of(setup: Setup, shape: &ShapeSpec) -> Self {
        Family {
            setup,
            batch: shape.batch,
            heads: shape.heads,
            kv_heads: shape.kv_heads,
            head_dim: shape.head_dim,
            causal: shape.causal,
            window: shape.window.as_ref().map(ToString::to_string),
            dtype: shape.dtype.to_string(),
        }
    }

    fn describe(&self) -> String {
        let heads = match self.kv_heads {
            Some(kv) => format!("{}/{kv}", self.heads),
            None => self.heads.to_string(),
        };
        format!(
            "B={}, H={heads}, D={}{}{}, {}",
            self.batch,
            self.head_dim,
            if self.causal { ", causal" } else { "" },
            self.window
                .as_ref()
                .map_or(String::new(), |w| format!(", window={w}")),
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
        for entry in prefill_entries(bench)
            // A varlen batch has no one sequence length to chart it at.
            .filter(|e| e.shape.seq_q == e.shape.seq_kv && e.shape.varlen.is_none())
        {
            if !entry.tflops.is_finite() || entry.tflops <= 0.0 {
                continue;
            }
            let family = families
                .entry(Family::of(Setup::of_entry(run, entry), &entry.shape))
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
    let lines = matmul_rate(&family.setup.gpu, options.matmul_tflops)
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
    let name = format!(
        "{} {} {}",
        family.setup.gpu,
        family.describe(),
        family.setup.mode
    );
    SweepChart {
        file: format!("throughput-{}.svg", slug(&name)),
        setup: family.setup.clone(),
        chart: ThroughputChart {
            title: format!(
                "Throughput vs sequence length: {} ({}, {} timing)",
                family.describe(),
                short_gpu(&family.setup.gpu),
                family.setup.mode
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
