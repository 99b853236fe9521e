//! Comparisons of implementations on one GPU model in one timing mode: every implementation
//! against SDPA's backends, hopper against FlashAttention-3 and cuDNN, varlen batches against
//! dense, and the latest bench run's entries.

use std::collections::{BTreeMap, HashMap};

use crate::format::{micros, speedup_ci, tflops};
use crate::model::{gate_candidate_label, prefill_entries, EvidenceSet, Run};
use crate::setup::Setup;
use crate::table::Table;

/// The latest bench run with prefill entries (a run of decode batches only is the decode
/// section's).
fn latest_bench(evidence: &EvidenceSet) -> Option<(&Run, &attn_evidence::BenchRun)> {
    evidence
        .runs
        .iter()
        .rev()
        .find_map(|run| match &run.evidence {
            attn_evidence::Evidence::Bench(bench) if prefill_entries(bench).next().is_some() => {
                Some((run, bench))
            }
            _ => None,
        })
}

/// Column order of the implementations matrix: the project's kernels from simplest to most
/// specialised, then the references. Names not listed sort after their group, alphabetically.
const IMPLEMENTATION_ORDER: [&str; 13] = [
    "naive",
    "tiled",
    "mma",
    "hopper",
    "hybrid-pv",
    "hybrid-qk",
    "cublas",
    "sdpa:default",
    "sdpa:flash",
    "sdpa:cudnn",
    "sdpa:efficient",
    "sdpa:math",
    "fa3",
];

/// Per GPU model and timing mode, TFLOP/s of every implementation on every benched shape (the
/// latest entry of each pair over the bench runs of that setup), with the best of the project's
/// kernels against SDPA's default and flash backends and against PyTorch's fastest kernel measured
/// on the shape: every ratio divides two numbers of one setup.
pub(super) fn implementations_tables(evidence: &EvidenceSet) -> Vec<(Setup, Table)> {
    let mut entries: BTreeMap<Setup, Vec<&attn_evidence::BenchEntry>> = BTreeMap::new();
    for run in &evidence.runs {
        let attn_evidence::Evidence::Bench(bench) = &run.evidence else {
            continue;
        };
        for e in prefill_entries(bench) {
            entries.entry(Setup::of_entry(run, e)).or_default().push(e);
        }
    }
    entries
        .into_iter()
        .map(|(setup, entries)| (setup, implementations_table(&entries)))
        .collect()
}

/// The implementations matrix of entries of one setup, in time order.
fn implementations_table(entries: &[&attn_evidence::BenchEntry]) -> Table {
    let mut latest: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut shapes: Vec<String> = Vec::new();
    let mut labels: Vec<(bool, String)> = Vec::new();
    for e in entries {
        let (shape, label) = (e.shape.to_string(), e.implementation.label());
        if !shapes.contains(&shape) {
            shapes.push(shape.clone());
        }
        if !labels.iter().any(|(_, l)| *l == label) {
            labels.push((e.implementation.is_reference(), label.clone()));
        }
        latest.insert((shape, label), e.tflops);
    }
    let rank = |label: &str| {
        IMPLEMENTATION_ORDER
            .iter()
            .position(|l| *l == label)
            .unwrap_or(IMPLEMENTATION_ORDER.len())
    };
    labels.sort_by(|a, b| (a.0, rank(&a.1), &a.1).cmp(&(b.0, rank(&b.1), &b.1)));
    let mut header = vec!["shape".to_string()];
    header.extend(labels.iter().map(|(_, l)| l.clone()));
    header.extend([
        "best ours / sdpa:default".into(),
        "best ours / sdpa:flash".into(),
        "best ours / fastest PyTorch".into(),
    ]);
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = Table::new(&header).numeric(&(1..header.len()).collect::<Vec<_>>());
    for shape in &shapes {
        let value = |label: &str| latest.get(&(shape.clone(), label.to_string())).copied();
        let best_ours = labels
            .iter()
            .filter(|(reference, _)| !reference)
            .filter_map(|(_, l)| value(l))
            .fold(None, |best: Option<f64>, t| {
                Some(best.map_or(t, |b| b.max(t)))
            });
        let ratio = |reference: &str| match (best_ours, value(reference)) {
            (Some(ours), Some(theirs)) if theirs > 0.0 => format!("{:.2}×", ours / theirs),
            _ => "–".into(),
        };
        let mut row = vec![shape.clone()];
        row.extend(
            labels
                .iter()
                .map(|(_, l)| value(l).map(tflops).unwrap_or_else(|| "–".into())),
        );
        // PyTorch's fastest kernel on the shape, whichever it is (a window or varlen batch has
        // only varlen_attn and FlexAttention, which the two columns before do not cover).
        let fastest_pytorch = labels
            .iter()
            .filter(|(_, l)| l.starts_with("sdpa:"))
            .filter_map(|(_, l)| value(l).map(|t| (t, l)))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        let versus_fastest = match (best_ours, fastest_pytorch) {
            (Some(ours), Some((theirs, label))) if theirs > 0.0 => {
                format!(
                    "{:.2}× ({})",
                    ours / theirs,
                    label.trim_start_matches("sdpa:")
                )
            }
            _ => "–".into(),
        };
        row.extend([ratio("sdpa:default"), ratio("sdpa:flash"), versus_fastest]);
        table.push(row);
    }
    table
}

/// Every varlen bench entry measured against the dense batch at its mean length (the latest of
/// each implementation and batch): time per token, the batch's work over the dense one's, and time
/// per unit of work, against varlen's target; and against PyTorch's varlen_attn on the same packed
/// batch where the same run timed it on as many input sets (`--sdpa-backends varlen`).
pub(super) fn varlen_tables(evidence: &EvidenceSet) -> Vec<(Setup, Table)> {
    let mut latest: BTreeMap<(Setup, String, String), Vec<String>> = BTreeMap::new();
    let target = attn_evidence::DenseAtMean::TARGET;
    let meets = |ratio: f64| if ratio <= target { "meets" } else { "misses" };
    for run in &evidence.runs {
        let attn_evidence::Evidence::Bench(bench) = &run.evidence else {
            continue;
        };
        for e in &bench.entries {
            let Some(dense) = &e.dense_at_mean else {
                continue;
            };
            let per_work = dense.per_work_ratio(e);
            let pytorch = bench.entries.iter().find(|p| {
                p.implementation.label() == "sdpa:varlen"
                    && p.shape == e.shape
                    && p.timing.input_sets.is_some()
                    && p.timing.input_sets == e.timing.input_sets
            });
            latest.insert(
                (
                    Setup::of_entry(run, e),
                    e.shape.to_string(),
                    e.implementation.label(),
                ),
                vec![
                    e.implementation.label(),
                    e.shape.to_string(),
                    dense.shape.to_string(),
                    format!("{:.2}", e.per_token_us() * 1e3),
                    format!("{:.2}", dense.per_token_us() * 1e3),
                    format!("{:.2}×", dense.per_token_ratio),
                    format!("{:.2}×", dense.work_ratio(e)),
                    format!("{per_work:.2}×"),
                    format!(
                        "{} per token, {} per work",
                        meets(dense.per_token_ratio),
                        meets(per_work)
                    ),
                    pytorch.map_or("–".into(), |p| format!("{:.2}", p.per_token_us() * 1e3)),
                    pytorch.map_or("–".into(), |p| {
                        format!("{:.2}×", p.summary.median / e.summary.median)
                    }),
                ],
            );
        }
    }
    let mut tables: Vec<(Setup, Table)> = Vec::new();
    for ((setup, ..), row) in latest {
        match tables.last_mut() {
            Some((last, table)) if *last == setup => table.push(row),
            _ => {
                let mut table = varlen_header();
                table.push(row);
                tables.push((setup, table));
            }
        }
    }
    tables
}

fn varlen_header() -> Table {
    Table::new(&[
        "implementation",
        "varlen batch",
        "dense at the mean length",
        "ns/token",
        "dense ns/token",
        "per token",
        "work",
        "per work",
        "target (≤ 1.10×)",
        "varlen_attn ns/token",
        "vs varlen_attn",
    ])
    .numeric(&[3, 4, 5, 6, 7, 9, 10])
}

/// `hopper` against FlashAttention-3 (and SDPA's default, cuDNN) per GPU model, timing mode and
/// shape, each ratio from one run, never a ratio of two runs' ratios; the latest of each. A gate
/// run against `fa3` (blocks of the two sides interleaved, a CI) is taken over a bench run; a bench
/// run only where every side records as many input sets as hopper's (fewer resident sets favour
/// the side that has them: see evidence/METHOD.md, "Input sets"). A row without cuDNN from its own
/// run takes it from the latest gate run of hopper against SDPA's default on the shape in the same
/// setup (its own interleaved ratio, named in the run column): no table mixes two setups.
/// The first date at which FlashAttention-3's side was timed by its kernels' span on the device
/// (evidence/METHOD.md, `fa3-device-span`); older runs timed it by the host clock, which adds
/// JAX's dispatch to FA3 alone, so their FA3 figures are not timed as hopper's are.
pub const FA3_DEVICE_SPAN_SINCE: &str = "2026-12-02T17:12:43Z";

/// Whether a run timed FA3 the way it timed hopper (ISO-8601 UTC dates order as strings).
fn fa3_timed_on_device(run: &crate::model::Run) -> bool {
    run.evidence.provenance().date.as_str() >= FA3_DEVICE_SPAN_SINCE
}

pub(super) fn against_fa3_tables(evidence: &EvidenceSet) -> Vec<(Setup, Table)> {
    // (setup, shape) → (cuDNN TFLOP/s, hopper vs cuDNN, run), the latest gate run against it.
    let mut cudnn_gates: HashMap<(Setup, String), [String; 3]> = HashMap::new();
    for run in &evidence.runs {
        let attn_evidence::Evidence::Gate(gate) = &run.evidence else {
            continue;
        };
        // The tuned hopper only: a run with overridden knobs is labelled with them.
        if gate_candidate_label(gate) != "hopper" || gate.baseline.label() != "sdpa:default" {
            continue;
        }
        for case in &gate.cases {
            let (Some(c), Some(base)) = (&case.comparison, case.baseline_tflops) else {
                continue;
            };
            cudnn_gates.insert(
                (Setup::of_case(run, case), case.shape.to_string()),
                [
                    tflops(base),
                    speedup_ci(c.speedup.point, c.speedup.lower, c.speedup.upper),
                    format!("cuDNN: gate {}", run.path),
                ],
            );
        }
    }
    // (setup, shape, from a gate run, row)
    let mut rows: Vec<(Setup, String, bool, Vec<String>)> = Vec::new();
    let mut put = |setup: Setup, shape: String, gated: bool, row: Vec<String>| match rows
        .iter_mut()
        .find(|(s, sh, ..)| *s == setup && *sh == shape)
    {
        Some(existing) if existing.2 && !gated => {}
        Some(existing) => *existing = (setup, shape, gated, row),
        None => rows.push((setup, shape, gated, row)),
    };
    let verdict = |vs_fa3: f64| if vs_fa3 >= 1.0 { "meets" } else { "misses" }.to_string();
    for run in evidence.runs.iter().filter(|run| fa3_timed_on_device(run)) {
        match &run.evidence {
            attn_evidence::Evidence::Gate(gate)
                if gate_candidate_label(gate) == "hopper" && gate.baseline.label() == "fa3" =>
            {
                for case in &gate.cases {
                    let (Some(c), Some(cand), Some(base)) = (
                        &case.comparison,
                        case.candidate_tflops,
                        case.baseline_tflops,
                    ) else {
                        continue;
                    };
                    let clocks = case
                        .clock_guard
                        .as_ref()
                        .and_then(|g| Some((g.mean_kept_mhz(0)?, g.mean_kept_mhz(1)?)));
                    // Speed at equal clocks, only where the clocks are each block's mean over
                    // its span: the edge probes of older files swung more than the ratio.
                    let spans = case
                        .clock_guard
                        .as_ref()
                        .is_some_and(attn_evidence::ClockGuard::kept_blocks_span_measured);
                    let per_clock = clocks
                        .filter(|_| spans)
                        .map_or("–".into(), |(ours, theirs)| {
                            format!("{:.2}×", c.speedup.point * theirs / ours)
                        });
                    put(
                        Setup::of_case(run, case),
                        case.shape.to_string(),
                        true,
                        vec![
                            case.shape.to_string(),
                            tflops(cand),
                            tflops(base),
                            "–".into(),
                            speedup_ci(c.speedup.point, c.speedup.lower, c.speedup.upper),
                            "–".into(),
                            clocks.map_or("–".into(), |(ours, theirs)| {
                                format!("{ours:.0} / {theirs:.0}")
                            }),
                            per_clock,
                            verdict(c.speedup.point),
                            format!("gate {}", run.path),
                        ],
                    );
                }
            }
            attn_evidence::Evidence::Bench(bench) => {
                let find = |shape: &attn_evidence::ShapeSpec, label: &str| {
                    bench
                        .entries
                        .iter()
                        .find(|e| &e.shape == shape && e.implementation.label() == label)
                };
                for hopper in bench
                    .entries
                    .iter()
                    .filter(|e| e.implementation.label() == "hopper")
                {
                    let sets = hopper.timing.input_sets;
                    let fair = |e: &&attn_evidence::BenchEntry| {
                        sets.is_some() && e.timing.input_sets == sets
                    };
                    let Some(fa3) = find(&hopper.shape, "fa3").filter(fair) else {
                        continue;
                    };
                    let cudnn = find(&hopper.shape, "sdpa:default").filter(fair);
                    let speed = |other: &attn_evidence::BenchEntry| {
                        other.summary.median / hopper.summary.median
                    };
                    let vs_fa3 = speed(fa3);
                    put(
                        Setup::of_entry(run, hopper),
                        hopper.shape.to_string(),
                        false,
                        vec![
                            hopper.shape.to_string(),
                            tflops(hopper.tflops),
                            tflops(fa3.tflops),
                            cudnn.map_or("–".into(), |e| tflops(e.tflops)),
                            format!("{vs_fa3:.2}×"),
                            cudnn.map_or("–".into(), |e| format!("{:.2}×", speed(e))),
                            match (hopper.sm_mhz, fa3.sm_mhz) {
                                (Some(ours), Some(theirs)) => format!("{ours:.0} / {theirs:.0}"),
                                _ => "–".into(),
                            },
                            // A bench entry does not record how its clock was read.
                            "–".into(),
                            verdict(vs_fa3),
                            format!("bench {}", run.path),
                        ],
                    );
                }
            }
            _ => {}
        }
    }
    for (setup, shape, _, row) in &mut rows {
        let cudnn = cudnn_gates.get(&(setup.clone(), shape.clone()));
        if let (true, Some([tflops, speedup, run])) = (row[3] == "–", cudnn) {
            row[3] = tflops.clone();
            row[5] = speedup.clone();
            row[9] = format!("{}; {run}", row[9]);
        }
    }
    // Stable: within a setup, shapes keep the order they first appeared in.
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let mut tables: Vec<(Setup, Table)> = Vec::new();
    for (setup, .., row) in rows {
        match tables.last_mut() {
            Some((last, table)) if *last == setup => table.push(row),
            _ => {
                let mut table = against_fa3_header();
                table.push(row);
                tables.push((setup, table));
            }
        }
    }
    tables
}

fn against_fa3_header() -> Table {
    Table::new(&[
        "shape",
        "hopper TFLOP/s",
        "FA3 TFLOP/s",
        "cuDNN TFLOP/s",
        "hopper vs FA3",
        "hopper vs cuDNN",
        "SM MHz hopper / FA3",
        "hopper vs FA3 per clock",
        "target (≥ 1.00× FA3)",
        "run",
    ])
    .numeric(&[1, 2, 3, 4, 5, 7])
}

/// The latest bench run's entries, with its file and the setups its entries were timed in.
pub(super) fn bench_table(evidence: &EvidenceSet) -> Option<(String, Vec<Setup>, Table)> {
    let (run, bench) = latest_bench(evidence)?;
    let mut setups: Vec<Setup> = prefill_entries(bench)
        .map(|e| Setup::of_entry(run, e))
        .collect();
    setups.sort();
    setups.dedup();
    let mut table = Table::new(&[
        "implementation",
        "shape",
        "median (µs)",
        "p10 (µs)",
        "p90 (µs)",
        "TFLOP/s",
        "n",
        "timing mode",
    ])
    .numeric(&[2, 3, 4, 5, 6]);
    for e in prefill_entries(bench) {
        table.push(vec![
            e.implementation.label(),
            e.shape.to_string(),
            micros(e.summary.median),
            micros(e.summary.p10),
            micros(e.summary.p90),
            tflops(e.tflops),
            e.summary.n.to_string(),
            e.timing.mode.as_str().to_string(),
        ]);
    }
    Some((run.path.clone(), setups, table))
}
