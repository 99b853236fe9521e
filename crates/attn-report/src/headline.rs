//! "At a glance": for each suite, the fastest of our implementations against SDPA's backends and the
//! FlashAttention-3 anchor (when the evidence has it), as speedups and TFLOP/s, from the suite's
//! latest bench run (every implementation timed in one call, so the ratios are from one call), and
//! the suite's latest gate decision in one neutral line.

use std::collections::BTreeMap;

use attn_evidence::{BenchEntry, BenchRun, DType, Evidence, GateRun, ShapeSpec};

use crate::format::{short_date, short_rev, speedup, tflops};
use crate::model::{gate_candidate_label, EvidenceSet, Role, Run};
use crate::table::Table;

/// What the report says first about one suite.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteHeadline {
    /// The suite's name (`large`, `seed`, `sweep`, or `ad-hoc shapes`).
    pub suite: String,
    /// Sentences, most important first (markdown with `**bold**`).
    pub lines: Vec<String>,
    /// Per shape: the fastest of ours and its speedup over each comparator, when a bench run exists.
    pub table: Option<Table>,
}

/// Name given to runs without a suite.
const NO_SUITE: &str = "ad-hoc shapes";

/// SDPA's backends in the order the headline compares with them (and a bench run's baseline is
/// chosen: the first present).
pub(crate) const SDPA_ORDER: [&str; 5] = [
    "sdpa:default",
    "sdpa:cudnn",
    "sdpa:flash",
    "sdpa:efficient",
    "sdpa:math",
];

/// One headline per suite with a bench or gate run, suites in name order.
pub fn headlines(evidence: &EvidenceSet) -> Vec<SuiteHeadline> {
    let mut benches: BTreeMap<String, (&Run, &BenchRun)> = BTreeMap::new();
    let mut gates: BTreeMap<String, (&Run, &GateRun)> = BTreeMap::new();
    // Runs are in time order: later inserts win.
    for run in &evidence.runs {
        match &run.evidence {
            Evidence::Bench(bench) => {
                let shapes: Vec<&ShapeSpec> = bench.entries.iter().map(|e| &e.shape).collect();
                benches.insert(suite_key(&bench.suite, &shapes), (run, bench));
            }
            Evidence::Gate(gate) => {
                let shapes: Vec<&ShapeSpec> = gate.cases.iter().map(|c| &c.shape).collect();
                let key = suite_key(&gate.suite, &shapes);
                // An experiment with overridden knobs stands for the suite only until a run of the
                // tuning itself exists.
                let tuned_before = gates.get(&key).is_some_and(|(r, _)| !r.config_overridden());
                if !(run.config_overridden() && tuned_before) {
                    gates.insert(key, (run, gate));
                }
            }
        }
    }
    let mut suites: Vec<&String> = benches.keys().chain(gates.keys()).collect();
    // Named suites first, by name; ad-hoc shapes last.
    suites.sort_by_key(|s| (s.as_str() == NO_SUITE, s.as_str()));
    suites.dedup();
    suites
        .into_iter()
        .map(|suite| {
            let mut lines = Vec::new();
            let mut table = None;
            if let Some((run, bench)) = benches.get(suite) {
                let comparison = SuiteComparison::of(bench);
                lines.push(comparison.sentence());
                lines.push(source_line(run));
                table = Some(comparison.table());
            }
            if let Some((run, gate)) = gates.get(suite) {
                lines.push(gate_line(run, gate));
            }
            SuiteHeadline {
                suite: suite.clone(),
                lines,
                table,
            }
        })
        .collect()
}

/// A suite's headline key: its name, with " causal" when every shape of the run is causal and
/// " bf16" when every shape is in bf16 (a suite run with `--causal` or `--dtype bf16` is a family
/// of its own, not a newer run of the same one).
fn suite_key(suite: &Option<String>, shapes: &[&ShapeSpec]) -> String {
    let Some(name) = suite else {
        return NO_SUITE.into();
    };
    let all = |f: fn(&ShapeSpec) -> bool| !shapes.is_empty() && shapes.iter().all(|s| f(s));
    let mut key = name.clone();
    if all(|s| s.causal) && !name.contains("causal") {
        key.push_str(" causal");
    }
    if all(|s| s.dtype == DType::Bf16) {
        key.push_str(" bf16");
    }
    key
}

/// One shape of a bench run: the fastest of ours and every comparator's entry.
struct ShapeRow<'a> {
    shape: String,
    best: Option<&'a BenchEntry>,
    comparators: Vec<Option<&'a BenchEntry>>,
}

/// A bench run read as "ours against the comparators".
struct SuiteComparison<'a> {
    comparators: Vec<String>,
    rows: Vec<ShapeRow<'a>>,
}

impl<'a> SuiteComparison<'a> {
    fn of(bench: &'a BenchRun) -> Self {
        let comparators = comparator_labels(bench);
        let mut shapes: Vec<String> = Vec::new();
        for entry in &bench.entries {
            let shape = entry.shape.to_string();
            if !shapes.contains(&shape) {
                shapes.push(shape);
            }
        }
        let rows = shapes
            .into_iter()
            .map(|shape| {
                let entries: Vec<&BenchEntry> = bench
                    .entries
                    .iter()
                    .filter(|e| e.shape.to_string() == shape)
                    .collect();
                let best = entries
                    .iter()
                    .copied()
                    .filter(|e| Role::of(&e.implementation) == Role::Ours && e.tflops.is_finite())
                    .max_by(|a, b| a.tflops.total_cmp(&b.tflops));
                let comparators = comparators
                    .iter()
                    .map(|label| {
                        entries
                            .iter()
                            .copied()
                            .find(|e| &e.implementation.label() == label)
                    })
                    .collect();
                ShapeRow {
                    shape,
                    best,
                    comparators,
                }
            })
            .collect();
        SuiteComparison { comparators, rows }
    }

    /// Speedups of the fastest of ours over comparator `index`, shape by shape.
    fn speedups(&self, index: usize) -> Vec<f64> {
        self.rows
            .iter()
            .filter_map(|row| ratio(row.best?, row.comparators[index]?))
            .collect()
    }

    /// `Fastest of ours: **hopper** on 4/4 shapes, 518–648 TFLOP/s. Speedup over sdpa:default …`
    fn sentence(&self) -> String {
        let winners = self.winners();
        if winners.is_empty() {
            return "None of our implementations was benched in this suite's latest run.".into();
        }
        let rates: Vec<f64> = self
            .rows
            .iter()
            .filter_map(|r| r.best)
            .map(|e| e.tflops)
            .collect();
        let mut out = format!(
            "Fastest of ours: {winners}, {} TFLOP/s.",
            range(&rates, tflops)
        );
        let against: Vec<String> = (0..self.comparators.len())
            .filter_map(|i| {
                let speedups = self.speedups(i);
                (!speedups.is_empty()).then(|| {
                    format!(
                        "over {} {}",
                        self.comparators[i],
                        speedup_summary(&speedups)
                    )
                })
            })
            .collect();
        if !against.is_empty() {
            out.push_str(&format!(" Speedup {}.", against.join(", ")));
        }
        if !self.comparators.iter().any(|c| c.starts_with("fa3")) {
            out.push_str(" No FlashAttention-3 anchor in this run.");
        }
        out
    }

    /// `**hopper** on 4/4 shapes`, or each winner with its count.
    fn winners(&self) -> String {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for row in &self.rows {
            let Some(best) = row.best else { continue };
            let label = best.implementation.label();
            match counts.iter_mut().find(|(l, _)| *l == label) {
                Some((_, n)) => *n += 1,
                None => counts.push((label, 1)),
            }
        }
        counts.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        let total = self.rows.len();
        counts
            .iter()
            .map(|(label, n)| format!("**{label}** on {n}/{total} shapes"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn table(&self) -> Table {
        let mut headers = vec![
            "shape".to_string(),
            "fastest of ours".into(),
            "TFLOP/s".into(),
        ];
        headers.extend(
            self.comparators
                .iter()
                .map(|c| format!("vs {c} (its TFLOP/s)")),
        );
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        let mut table = Table::new(&headers).numeric(&(2..headers.len()).collect::<Vec<_>>());
        for row in &self.rows {
            let mut cells = vec![
                row.shape.clone(),
                row.best
                    .map(|e| e.implementation.label())
                    .unwrap_or_else(|| "–".into()),
                row.best
                    .map(|e| tflops(e.tflops))
                    .unwrap_or_else(|| "–".into()),
            ];
            cells.extend(
                row.comparators
                    .iter()
                    .map(|theirs| match (row.best, theirs) {
                        (Some(ours), Some(theirs)) => match ratio(ours, theirs) {
                            Some(r) => format!("{} ({})", speedup(r), tflops(theirs.tflops)),
                            None => "–".into(),
                        },
                        (None, Some(theirs)) => format!("– ({})", tflops(theirs.tflops)),
                        _ => "–".into(),
                    }),
            );
            table.push(cells);
        }
        table
    }
}

/// SDPA backends (in [`SDPA_ORDER`], then any other) and FA3 anchors present in the run.
fn comparator_labels(bench: &BenchRun) -> Vec<String> {
    let mut labels: Vec<(usize, String)> = Vec::new();
    for entry in &bench.entries {
        let role = Role::of(&entry.implementation);
        if !matches!(role, Role::Sdpa | Role::Anchor) {
            continue;
        }
        let label = entry.implementation.label();
        let rank = match role {
            Role::Anchor => SDPA_ORDER.len() + 1,
            _ => SDPA_ORDER
                .iter()
                .position(|l| *l == label)
                .unwrap_or(SDPA_ORDER.len()),
        };
        if !labels.iter().any(|(_, l)| *l == label) {
            labels.push((rank, label));
        }
    }
    labels.sort();
    labels.into_iter().map(|(_, l)| l).collect()
}

/// Their median time over ours (above 1: ours is faster).
fn ratio(ours: &BenchEntry, theirs: &BenchEntry) -> Option<f64> {
    let r = theirs.summary.median / ours.summary.median;
    (r.is_finite() && r > 0.0).then_some(r)
}

/// `1.07×`, or `0.96×–1.07× (geometric mean 1.01×)` over several shapes.
fn speedup_summary(values: &[f64]) -> String {
    if values.len() == 1 {
        return speedup(values[0]);
    }
    let geomean = (values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp();
    format!(
        "{} (geometric mean {})",
        range(values, speedup),
        speedup(geomean)
    )
}

/// `low–high` of `values` shown with `show`, or the one value when all are equal.
fn range(values: &[f64], show: fn(f64) -> String) -> String {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (low, high) = (show(low), show(high));
    if low == high {
        low
    } else {
        format!("{low}–{high}")
    }
}

/// Where the numbers come from, in one line.
fn source_line(run: &Run) -> String {
    let p = run.evidence.provenance();
    format!(
        "From `{}` ({} UTC, {} on {}): every implementation timed in the same call; speedup = their median time / ours, above 1× is faster.",
        run.path,
        short_date(&p.date),
        short_rev(&p.git_rev),
        p.gpu
    )
}

/// `Latest gate: hopper vs sdpa:default, 2/4 shapes passed (2026-11-22 17:14 UTC).`
fn gate_line(run: &Run, gate: &GateRun) -> String {
    let passed = gate.cases.iter().filter(|c| c.passed).count();
    format!(
        "Latest gate: {} vs {}, {passed}/{} shapes passed the gate ({} UTC at {}; details under Gate verdicts).",
        gate_candidate_label(gate),
        gate.baseline.label(),
        gate.cases.len(),
        short_date(&run.evidence.provenance().date),
        short_rev(&run.evidence.provenance().git_rev),
    )
}

#[cfg(test)]
mod tests {
    use super::{suite_key, NO_SUITE};
    use attn_evidence::{DType, ShapeSpec};

    fn shape(text: &str, dtype: DType) -> ShapeSpec {
        ShapeSpec {
            dtype,
            ..text.parse().unwrap()
        }
    }

    #[test]
    fn a_causal_or_bf16_run_of_a_suite_has_its_own_headline() {
        let plain = shape("2,16,512,128", DType::F16);
        let causal = shape("2,16,512,128 causal", DType::F16);
        let causal_bf16 = shape("2,16,512,128 causal", DType::Bf16);
        let sweep = Some("sweep".to_string());
        assert_eq!(suite_key(&sweep, &[&plain, &causal]), "sweep");
        assert_eq!(suite_key(&sweep, &[&causal]), "sweep causal");
        assert_eq!(suite_key(&sweep, &[&causal_bf16]), "sweep causal bf16");
        assert_eq!(suite_key(&sweep, &[&causal, &causal_bf16]), "sweep causal");
        assert_eq!(
            suite_key(&Some("large causal".into()), &[&causal]),
            "large causal"
        );
        assert_eq!(suite_key(&sweep, &[]), "sweep");
        assert_eq!(suite_key(&None, &[&causal]), NO_SUITE);
    }
}
