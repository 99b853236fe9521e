//! Decode batches per GPU model and timing mode: each implementation's bandwidth beside the
//! device-to-device copy bandwidth measured in the same run, a table per batch and one chart.
//!
//! Each (implementation, overridden knobs, batch) shows its newest bench entry, so one table can
//! hold rows of several runs; every row names its run and divides only by its own run's copy
//! bandwidth.

use std::collections::BTreeMap;

use attn_evidence::{achieved_gbs, copy_fraction, BenchEntry, DecodeRecord, Evidence};

use crate::charts::{CopyLine, DecodeChart, DecodePoint, DecodeSeries};
use crate::format::{micros, percent, short_date};
use crate::model::{bench_entry_label, config_overrides, EvidenceSet, Run};
use crate::setup::Setup;
use crate::table::Table;

/// The decode batches of one GPU model in one timing mode.
#[derive(Debug, Clone)]
pub struct DecodeSection {
    /// The GPU model and timing mode of every number in it.
    pub setup: Setup,
    /// The chart's file name under `charts/` (`decode-bandwidth-<gpu>-<mode>.svg`).
    pub file: String,
    /// The implementations as their registry tunes them (no `--config`), batch by batch.
    pub chart: DecodeChart,
    /// Which evidence files each series of the chart comes from, one sentence.
    pub sources: String,
    /// One table per batch (its text form), in the order the batches were first timed.
    pub batches: Vec<(String, Table)>,
}

/// One implementation's newest entry on one batch.
struct Latest<'a> {
    run: &'a Run,
    entry: &'a BenchEntry,
    record: &'a DecodeRecord,
    label: String,
    overridden: bool,
}

impl Latest<'_> {
    fn gbs(&self) -> f64 {
        achieved_gbs(self.record.bytes, self.entry.summary.median)
    }
}

/// Every GPU model and timing mode with decode bench entries, in setup order; empty without any.
pub(super) fn decode_sections(evidence: &EvidenceSet) -> Vec<DecodeSection> {
    // setup → (batches in first-timed order, (label, batch) → newest entry).
    type Newest<'a> = (Vec<String>, BTreeMap<(String, String), Latest<'a>>);
    let mut setups: BTreeMap<Setup, Newest<'_>> = BTreeMap::new();
    for run in &evidence.runs {
        let Evidence::Bench(bench) = &run.evidence else {
            continue;
        };
        for entry in &bench.entries {
            let Some(record) = &entry.decode else {
                continue;
            };
            let (batches, latest) = setups.entry(Setup::of_entry(run, entry)).or_default();
            if !batches.contains(&record.text) {
                batches.push(record.text.clone());
            }
            let label = bench_entry_label(run, entry);
            let overridden = !entry.implementation.is_reference()
                && config_overrides(&run.evidence.provenance().command).is_some();
            // Runs are in time order: later inserts win.
            latest.insert(
                (label.clone(), record.text.clone()),
                Latest {
                    run,
                    entry,
                    record,
                    label,
                    overridden,
                },
            );
        }
    }
    setups
        .into_iter()
        .map(|(setup, (batches, latest))| section(setup, &batches, &latest))
        .collect()
}

fn section(
    setup: Setup,
    batches: &[String],
    latest: &BTreeMap<(String, String), Latest<'_>>,
) -> DecodeSection {
    // Ours as tuned, then ours with overridden knobs, then the references.
    let order = |l: &Latest<'_>| {
        (
            l.entry.implementation.is_reference(),
            l.overridden,
            l.label.clone(),
        )
    };
    let tables = batches
        .iter()
        .map(|batch| {
            let mut rows: Vec<&Latest<'_>> = latest
                .values()
                .filter(|l| &l.record.text == batch)
                .collect();
            rows.sort_by_key(|l| order(l));
            let mut table = batch_header();
            for row in rows {
                table.push(batch_row(row));
            }
            (batch.clone(), table)
        })
        .collect();
    let mut tuned: Vec<&Latest<'_>> = latest.values().filter(|l| !l.overridden).collect();
    tuned.sort_by_key(|l| order(l));
    DecodeSection {
        file: format!(
            "decode-bandwidth-{}.svg",
            attn_evidence::slug(&format!("{} {}", setup.gpu, setup.mode))
        ),
        chart: chart(&setup, &tuned),
        sources: sources(&tuned),
        batches: tables,
        setup,
    }
}

fn batch_header() -> Table {
    Table::new(&[
        "implementation",
        "median (µs)",
        "GB/s",
        "of copy (same run)",
        "copy GB/s (same run)",
        "timing mode",
        "run",
    ])
    .numeric(&[1, 2, 3, 4])
}

fn batch_row(row: &Latest<'_>) -> Vec<String> {
    let gbs = row.gbs();
    let copy = row.record.copy_gbs;
    vec![
        row.label.clone(),
        micros(row.entry.summary.median),
        format!("{gbs:.0}"),
        copy.and_then(|c| copy_fraction(gbs, c))
            .map_or("–".into(), |f| percent(100.0 * f)),
        copy.map_or("–".into(), |c| format!("{c:.0}")),
        row.entry.timing.mode.as_str().to_string(),
        format!("`{}`", row.run.path),
    ]
}

/// The tuned implementations' points, and the copy bandwidth of each run they come from.
fn chart(setup: &Setup, tuned: &[&Latest<'_>]) -> DecodeChart {
    let mut series: Vec<DecodeSeries> = Vec::new();
    for l in tuned {
        let queries = l.record.spec.seqlens_q();
        let point = DecodePoint {
            tokens: queries.iter().sum::<usize>() as f64 / queries.len().max(1) as f64,
            ragged: queries.windows(2).any(|w| w[0] != w[1]),
            gbs: l.gbs(),
        };
        match series.iter_mut().find(|s| s.label == l.label) {
            Some(s) => s.points.push(point),
            None => series.push(DecodeSeries {
                label: l.label.clone(),
                reference: l.entry.implementation.is_reference(),
                points: vec![point],
            }),
        }
    }
    for s in &mut series {
        s.points.sort_by(|a, b| a.tokens.total_cmp(&b.tokens));
    }
    let mut copy_lines: Vec<CopyLine> = Vec::new();
    let mut runs: Vec<&Run> = tuned.iter().map(|l| l.run).collect();
    runs.sort_by(|a, b| a.path.cmp(&b.path));
    runs.dedup_by(|a, b| a.path == b.path);
    for run in runs {
        // Every entry of a run carries the same copy measurement: the first one names it.
        let copy = tuned
            .iter()
            .filter(|l| l.run.path == run.path)
            .find_map(|l| l.record.copy_gbs);
        if let Some(gbs) = copy {
            copy_lines.push(CopyLine {
                label: format!(
                    "device-to-device copy, same run: {gbs:.0} GB/s (run of {} UTC)",
                    short_date(&run.evidence.provenance().date)
                ),
                gbs,
            });
        }
    }
    DecodeChart {
        title: format!("Decode bandwidth ({}, {} timing)", setup.gpu, setup.mode),
        series,
        copy_lines,
    }
}

/// `decode: 12 batches from `a`, 3 from `b`; sdpa:default: 12 batches from `a``.
fn sources(tuned: &[&Latest<'_>]) -> String {
    let mut per_label: Vec<(String, Vec<(String, usize)>)> = Vec::new();
    for l in tuned {
        let files = match per_label.iter_mut().find(|(label, _)| *label == l.label) {
            Some((_, files)) => files,
            None => {
                per_label.push((l.label.clone(), Vec::new()));
                &mut per_label.last_mut().expect("just pushed").1
            }
        };
        match files.iter_mut().find(|(file, _)| *file == l.run.path) {
            Some((_, count)) => *count += 1,
            None => files.push((l.run.path.clone(), 1)),
        }
    }
    per_label
        .into_iter()
        .map(|(label, mut files)| {
            files.sort();
            let files: Vec<String> = files
                .into_iter()
                .map(|(file, n)| format!("{n} batch(es) from `{file}`"))
                .collect();
            format!("{label}: {}", files.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}
