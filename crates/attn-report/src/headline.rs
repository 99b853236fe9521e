//! "At a glance": for each suite, a picture of the fastest of our implementations against the
//! FlashAttention-3 anchor and cuDNN (or SDPA's first backend measured), all timed in the suite's
//! latest bench run on one GPU, one chart per timing mode that GPU has a run of; and the suite's
//! latest gate decision on that GPU in one neutral line. Numbers of two GPUs never meet here.

use std::collections::BTreeMap;

use attn_evidence::{slug, BenchEntry, DType, Evidence, GateRun, ShapeSpec};

use crate::charts::{VersusChart, VersusSeries};
use crate::format::{short_date, short_rev, speedup, tflops};
use crate::model::{gate_candidate_label, prefill_entries, EvidenceSet, Role, Run};
use crate::setup::{short_gpu, Setup};
use crate::table::Table;

/// What the report says first about one suite.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteHeadline {
    /// The suite's name (`large`, `seed`, `sweep`, or `ad-hoc shapes`).
    pub suite: String,
    /// The GPU every number of this headline was measured on.
    pub gpu: String,
    /// One view per timing mode of the suite's latest bench runs on [`SuiteHeadline::gpu`].
    pub views: Vec<SuiteView>,
    /// The suite's latest gate decision on the same GPU, in one line.
    pub gate: Option<String>,
}

/// One bench run of a suite: its picture, its sentence and its numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteView {
    /// The GPU and timing mode of every number in the view.
    pub setup: Setup,
    /// `glance-<suite>-<gpu>-<mode>.svg`.
    pub file: String,
    /// Ours against the anchor and cuDNN, shape by shape.
    pub chart: VersusChart,
    /// The comparison in one sentence (markdown with `**bold**`).
    pub sentence: String,
    /// Where the numbers come from.
    pub source: String,
    /// Per shape: the fastest of ours and its speedup over each comparator.
    pub table: Table,
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

/// The latest bench run of a suite on one setup, with its entries of that setup.
type BenchOf<'a> = (&'a Run, Vec<&'a BenchEntry>);

/// One headline per suite with a bench or gate run, suites in name order.
pub fn headlines(evidence: &EvidenceSet) -> Vec<SuiteHeadline> {
    let mut benches: BTreeMap<String, BTreeMap<Setup, BenchOf<'_>>> = BTreeMap::new();
    // The GPU of each suite's latest bench run.
    let mut bench_gpu: BTreeMap<String, String> = BTreeMap::new();
    let mut gates: BTreeMap<(String, String), (&Run, &GateRun)> = BTreeMap::new();
    let mut gate_gpu: BTreeMap<String, String> = BTreeMap::new();
    // Runs are in time order: later inserts win.
    for run in &evidence.runs {
        let gpu = run.evidence.provenance().gpu.clone();
        match &run.evidence {
            Evidence::Bench(bench) => {
                let entries: Vec<&BenchEntry> = prefill_entries(bench).collect();
                if entries.is_empty() {
                    continue;
                }
                let shapes: Vec<&ShapeSpec> = entries.iter().map(|e| &e.shape).collect();
                let key = suite_key(&bench.suite, &shapes);
                let mut by_setup: BTreeMap<Setup, Vec<&BenchEntry>> = BTreeMap::new();
                for entry in entries {
                    by_setup
                        .entry(Setup::of_entry(run, entry))
                        .or_default()
                        .push(entry);
                }
                let suite = benches.entry(key.clone()).or_default();
                for (setup, entries) in by_setup {
                    suite.insert(setup, (run, entries));
                }
                bench_gpu.insert(key, gpu);
            }
            Evidence::Gate(gate) => {
                let shapes: Vec<&ShapeSpec> = gate.cases.iter().map(|c| &c.shape).collect();
                let key = (suite_key(&gate.suite, &shapes), gpu.clone());
                // An experiment with overridden knobs stands for the suite only until a run of the
                // tuning itself exists.
                let tuned_before = gates.get(&key).is_some_and(|(r, _)| !r.config_overridden());
                if !(run.config_overridden() && tuned_before) {
                    gate_gpu.insert(key.0.clone(), gpu);
                    gates.insert(key, (run, gate));
                }
            }
        }
    }
    let mut suites: Vec<&String> = benches.keys().chain(gate_gpu.keys()).collect();
    // Named suites first, by name; ad-hoc shapes last.
    suites.sort_by_key(|s| (s.as_str() == NO_SUITE, s.as_str()));
    suites.dedup();
    suites
        .into_iter()
        .map(|suite| {
            let gpu = bench_gpu
                .get(suite)
                .or_else(|| gate_gpu.get(suite))
                .cloned()
                .unwrap_or_default();
            let views = benches
                .get(suite)
                .into_iter()
                .flatten()
                .filter(|(setup, _)| setup.gpu == gpu)
                .map(|(setup, (run, entries))| view(suite, setup, run, entries))
                .collect();
            let gate = gates
                .get(&(suite.clone(), gpu.clone()))
                .map(|(run, gate)| gate_line(run, gate));
            SuiteHeadline {
                suite: suite.clone(),
                gpu,
                views,
                gate,
            }
        })
        .collect()
}

fn view(suite: &str, setup: &Setup, run: &Run, entries: &[&BenchEntry]) -> SuiteView {
    let comparison = SuiteComparison::of(entries);
    SuiteView {
        setup: setup.clone(),
        file: format!(
            "glance-{}.svg",
            slug(&format!("{suite} {} {}", setup.gpu, setup.mode))
        ),
        chart: comparison.chart(suite, setup),
        sentence: comparison.sentence(),
        source: source_line(run, setup),
        table: comparison.table(),
    }
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
    fn of(bench: &[&'a BenchEntry]) -> Self {
        let comparators = comparator_labels(bench);
        let mut shapes: Vec<String> = Vec::new();
        for entry in bench {
            let shape = entry.shape.to_string();
            if !shapes.contains(&shape) {
                shapes.push(shape);
            }
        }
        let rows = shapes
            .into_iter()
            .map(|shape| {
                let entries: Vec<&BenchEntry> = bench
                    .iter()
                    .copied()
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

    /// The picture: the fastest of ours, the FA3 anchors and cuDNN (else SDPA's first backend).
    fn chart(&self, suite: &str, setup: &Setup) -> VersusChart {
        let anchors = self
            .comparators
            .iter()
            .enumerate()
            .filter(|(_, label)| label.starts_with("fa3"));
        let sdpa = ["sdpa:cudnn"]
            .iter()
            .chain(&SDPA_ORDER)
            .find_map(|want| self.comparators.iter().position(|c| c == want))
            .map(|i| (i, &self.comparators[i]));
        let shown: Vec<(usize, &String)> = anchors.chain(sdpa).collect();
        let mut ours: Vec<String> = Vec::new();
        for best in self.rows.iter().filter_map(|r| r.best) {
            let label = best.implementation.label();
            if !ours.contains(&label) {
                ours.push(label);
            }
        }
        let mut series = vec![VersusSeries {
            label: format!("fastest of ours ({})", ours.join(", ")),
            values: self.rows.iter().map(|r| r.best.map(|e| e.tflops)).collect(),
        }];
        series.extend(shown.iter().map(|(i, label)| {
            VersusSeries {
                label: (*label).clone(),
                values: self
                    .rows
                    .iter()
                    .map(|r| r.comparators[*i].map(|e| e.tflops))
                    .collect(),
            }
        }));
        let against: Vec<&str> = shown.iter().map(|(_, l)| l.as_str()).collect();
        let against = match against.as_slice() {
            [] => "no reference timed".to_owned(),
            labels => format!("vs {}", labels.join(" and ")),
        };
        VersusChart {
            title: format!(
                "{suite}: fastest of ours {against} ({}, {} timing)",
                short_gpu(&setup.gpu),
                setup.mode
            ),
            shapes: self.rows.iter().map(|r| r.shape.clone()).collect(),
            series,
        }
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
fn comparator_labels(bench: &[&BenchEntry]) -> Vec<String> {
    let mut labels: Vec<(usize, String)> = Vec::new();
    for entry in bench {
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
fn source_line(run: &Run, setup: &Setup) -> String {
    let p = run.evidence.provenance();
    format!(
        "From `{}` ({} UTC, {}; {setup}): every implementation timed in the same call; speedup = their median time / ours, above 1× is faster.",
        run.path,
        short_date(&p.date),
        short_rev(&p.git_rev),
    )
}

/// `Latest gate on NVIDIA H100, batch timing: hopper vs sdpa:default, 2/4 shapes passed (…).`
fn gate_line(run: &Run, gate: &GateRun) -> String {
    let passed = gate.cases.iter().filter(|c| c.passed).count();
    let setup = gate.cases.first().map(|case| Setup::of_case(run, case));
    format!(
        "Latest gate on {}: {} vs {}{}, {passed}/{} shapes passed the gate ({} UTC at {}; details under Gate verdicts).",
        setup.map_or_else(|| gate.provenance.gpu.clone(), |s| s.to_string()),
        gate_candidate_label(gate),
        gate.baseline.label(),
        crate::model::gate_pass_suffix(gate),
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
