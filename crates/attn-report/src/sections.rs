//! What the report says: tables and chart data derived from the [`EvidenceSet`]. Markdown and HTML
//! both render these, so the two outputs cannot disagree.

use std::collections::{BTreeMap, HashMap};

use attn_evidence::{slug, GateCase, GateRun};

use crate::ceilings::{device_peak, PhysicalLine, MATMUL_LINE};
use crate::charts::{
    BootstrapChart, ConvergenceChart, RooflineChart, RooflinePoint, SpeedupBar, SpeedupChart,
};
use crate::format::{
    micros, percent, short_date, short_rev, significant, speedup, speedup_ci, tflops,
};
use crate::headline::{headlines, SuiteHeadline};
use crate::model::{gate_candidate_label, EvidenceSet, Run, MEDIAN_CI_RESAMPLES, MEDIAN_CI_SEED};
use crate::progress::{progressions, ShapeProgress};
use crate::sweep::{sweep_charts, SweepChart};
use crate::table::Table;
use crate::ReportOptions;

/// The latest gate run of one (candidate, baseline) pair.
#[derive(Debug, Clone)]
pub struct GateSection {
    /// `"mma vs sdpa:default"`.
    pub title: String,
    /// Slug for chart file names.
    pub slug: String,
    /// The verdict line, e.g. `"✅ PASS: mma vs sdpa:default, 3/3 shapes passed on ..."`.
    pub verdict: String,
    /// Whether the run passed.
    pub passed: bool,
    /// Per-shape medians, speedup, verdict.
    pub table: Table,
    /// The gate rule in words.
    pub rule: String,
    /// Flags raised by any case, prefixed with the shape.
    pub flags: Vec<String>,
    /// Bars of the speedup chart.
    pub speedup: SpeedupChart,
    /// The bootstrap histogram of one case, when its raw samples are present.
    pub bootstrap: Option<BootstrapChart>,
    /// Evidence file of this run.
    pub file: String,
}

/// Everything the report shows, in page order.
#[derive(Debug, Clone)]
pub struct Sections {
    /// One line summing up the evidence, or saying there is none.
    pub summary: String,
    /// Latest gate verdict per (candidate, baseline).
    pub gates: Vec<GateSection>,
    /// Index of the latest gate run overall within `gates` (for the PR comment).
    pub latest_gate: Option<usize>,
    /// Per suite: the fastest of ours against SDPA's backends and the FA3 anchor.
    pub glance: Vec<SuiteHeadline>,
    /// Throughput against sequence length, one chart per family of shapes.
    pub sweeps: Vec<SweepChart>,
    /// Per shape: speedup over each run's own baseline, run by run.
    pub progressions: Vec<ShapeProgress>,
    /// Every implementation against SDPA's backends, shape by shape (latest bench entries).
    pub implementations: Option<Table>,
    /// Varlen batches against the dense batch at their mean length (latest entry of each).
    pub varlen: Option<Table>,
    /// `hopper` against FlashAttention-3 and cuDNN timed in one bench run (latest of each shape).
    pub against_fa3: Option<Table>,
    /// The latest bench run's entries, with the file's name.
    pub bench: Option<(String, Table)>,
    /// Nsight Compute metrics.
    pub ncu: Option<Table>,
    /// The Nsight Compute profiles on a roofline.
    pub roofline: Option<RooflineChart>,
    /// Best candidate of each search.
    pub searches: Option<Table>,
    /// Convergence charts, one per search log with scores, with their file names.
    pub convergence: Vec<(String, ConvergenceChart)>,
    /// Every evidence file with its provenance.
    pub files: Table,
}

/// CSS class of a verdict cell, for colouring in HTML.
pub fn verdict_class(cell: &str) -> Option<&'static str> {
    match cell {
        "pass" | "faster" => Some("good"),
        "FAIL" | "slower" => Some("bad"),
        _ => None,
    }
}

impl Sections {
    /// Derives every section from the evidence.
    pub fn build(evidence: &EvidenceSet, options: &ReportOptions) -> Self {
        let gates: Vec<GateSection> = evidence
            .latest_gates()
            .into_iter()
            .map(|(index, gate)| gate_section(&evidence.runs[index], gate))
            .collect();
        let latest_run = evidence.latest_gates().into_iter().map(|(i, _)| i).max();
        let latest_gate = latest_run.and_then(|run| {
            let file = &evidence.runs[run].path;
            gates.iter().position(|g| &g.file == file)
        });
        Sections {
            summary: summary(evidence),
            latest_gate,
            glance: headlines(evidence),
            sweeps: sweep_charts(evidence, options),
            progressions: progressions(evidence),
            implementations: implementations_table(evidence),
            varlen: varlen_table(evidence),
            against_fa3: against_fa3_table(evidence),
            bench: bench_table(evidence),
            ncu: ncu_table(evidence),
            roofline: roofline(evidence),
            searches: search_table(evidence),
            convergence: convergence(evidence),
            files: files_table(evidence),
            gates,
        }
    }
}

fn summary(evidence: &EvidenceSet) -> String {
    if !evidence.dir_exists {
        return "No evidence yet: the evidence directory does not exist. Run `cargo xtask gate` or `cargo xtask bench` on a GPU machine to produce some.".into();
    }
    if evidence.is_empty() {
        return "No evidence yet: the evidence directory holds no gate, bench, ncu or search results. Run `cargo xtask gate` or `cargo xtask bench` on a GPU machine to produce some.".into();
    }
    let gates = evidence.gates().count();
    let benches = evidence.runs.len() - gates;
    let mut line = format!(
        "{gates} gate run(s), {benches} bench run(s), {} ncu kernel summary(ies), {} search log(s).",
        evidence.ncu.len(),
        evidence.searches.len()
    );
    if let Some(last) = evidence.runs.last() {
        let p = last.evidence.provenance();
        line.push_str(&format!(
            " Latest: {} UTC on {} at {}{}.",
            short_date(&p.date),
            p.gpu,
            short_rev(&p.git_rev),
            if p.git_dirty {
                " (uncommitted changes)"
            } else {
                ""
            }
        ));
    }
    line
}

fn gate_section(run: &Run, gate: &GateRun) -> GateSection {
    let p = &gate.provenance;
    let passed_count = gate.cases.iter().filter(|c| c.passed).count();
    let candidate = gate_candidate_label(gate);
    let title = format!("{candidate} vs {}", gate.baseline.label());
    let verdict = format!(
        "{} **{}**: `{}` vs `{}`, {passed_count}/{} shapes passed, on {} at `{}`{} ({} UTC)",
        if gate.passed { "✅" } else { "❌" },
        if gate.passed { "PASS" } else { "FAIL" },
        candidate,
        gate.baseline.label(),
        gate.cases.len(),
        p.gpu,
        short_rev(&p.git_rev),
        if p.git_dirty {
            " + uncommitted changes"
        } else {
            ""
        },
        short_date(&p.date),
    );
    let mut table = Table::new(&[
        "shape",
        &format!("{} median (µs)", gate.baseline.label()),
        &format!("{candidate} median (µs)"),
        "speedup [CI]",
        "TFLOP/s",
        "verdict",
        "correct",
        "result",
        "short by",
    ])
    .numeric(&[1, 2, 3, 4]);
    let mut flags = Vec::new();
    let mut bars = Vec::new();
    for (i, case) in gate.cases.iter().enumerate() {
        table.push(gate_row(case));
        flags.extend(case.flags.iter().map(|f| format!("{}: {f}", case.shape)));
        if let Some(guard) = case.clock_guard.as_ref().filter(|g| g.too_few_blocks()) {
            flags.push(format!(
                "{}: timed in {} and {} blocks of {} samples (candidate, baseline): too few for the interval to see the clock wander (in this design a kernel against itself read up to 1.11×); the verdict is not established",
                case.shape, guard.kept_blocks[0], guard.kept_blocks[1], guard.block_samples
            ));
        }
        if let Some(c) = &case.comparison {
            // A shape a run timed twice (older suites under --causal) gets its own tick: `(2)`.
            let earlier = gate.cases[..i]
                .iter()
                .filter(|e| e.comparison.is_some() && e.shape == case.shape)
                .count();
            let shape = match earlier {
                0 => case.shape.to_string(),
                n => format!("{} ({})", case.shape, n + 1),
            };
            bars.push(SpeedupBar {
                shape,
                point: c.speedup.point,
                lower: c.speedup.lower,
                upper: c.speedup.upper,
                passed: case.passed,
            });
        }
    }
    let comparison = gate.cases.iter().find_map(|c| c.comparison.as_ref());
    // The gate bounds candidate median / baseline median; in speedup terms that is its inverse
    // (a ratchet's bound is the regression tolerance's).
    let threshold = comparison.map(|c| match gate.rule.mode {
        attn_evidence::GateMode::Faster => min_speedup(c.gate.threshold),
        attn_evidence::GateMode::NoRegression { tolerance } => min_speedup(1.0 + tolerance),
    });
    let rule = match comparison {
        Some(_) => crate::gate::rule_sentence(gate),
        None => "Gate rule: every correctness check must pass; no timing comparison was recorded."
            .into(),
    };
    // One file per section, i.e. per (candidate, baseline, suite or shape list): the seed and large
    // suites keep separate charts, and so do two runs over different shapes given one by one.
    let shape_slug = format!(
        "{}-vs-{}-{}",
        slug(&candidate),
        slug(&gate.baseline.label()),
        slug(&crate::model::gate_scope(gate))
    );
    GateSection {
        speedup: SpeedupChart {
            title: format!("Speedup of {title} per shape ({})", p.gpu),
            bars,
            threshold,
        },
        bootstrap: bootstrap_chart(gate, &title),
        title,
        slug: shape_slug,
        verdict,
        passed: gate.passed,
        table,
        rule,
        flags,
        file: run.path.clone(),
    }
}

fn gate_row(case: &GateCase) -> Vec<String> {
    let dash = || "–".to_string();
    let checks = &case.correctness;
    let correct = if checks.is_empty() {
        "not checked".into()
    } else {
        let ok = checks.iter().filter(|c| c.passed).count();
        let worst = checks.iter().map(|c| c.max_abs).fold(0.0, f64::max);
        format!("{ok}/{} (max abs {:.1e})", checks.len(), worst)
    };
    let (base, cand, ratio, verdict) = match &case.comparison {
        Some(c) => (
            micros(c.baseline.median),
            micros(c.candidate.median),
            speedup_ci(c.speedup.point, c.speedup.lower, c.speedup.upper),
            c.verdict.to_string(),
        ),
        None => (dash(), dash(), dash(), "not timed".into()),
    };
    vec![
        case.shape.to_string(),
        base,
        cand,
        ratio,
        case.candidate_tflops.map(tflops).unwrap_or_else(dash),
        verdict,
        correct,
        if case.passed {
            "pass".into()
        } else {
            "FAIL".into()
        },
        shortfall(case),
    ]
}

/// How far a failing case is from passing: the further speedup it needs, or what else failed.
fn shortfall(case: &GateCase) -> String {
    if case.passed {
        return "–".into();
    }
    if case.correctness.iter().any(|c| !c.passed) {
        return "incorrect".into();
    }
    match &case.comparison {
        Some(c) => {
            let needed = min_speedup(c.gate.threshold) / c.speedup.point;
            if needed > 1.0 {
                format!("needs {needed:.2}× faster")
            } else {
                "CI not below 0".into()
            }
        }
        None => "not timed".into(),
    }
}

/// The smallest speedup the gate accepts, from its bound on candidate / baseline median.
fn min_speedup(gate_threshold: f64) -> f64 {
    1.0 / gate_threshold
}

/// The bootstrap histogram of the first case that has a comparison and both raw samples, recomputed
/// from the samples and the recorded seed.
fn bootstrap_chart(gate: &GateRun, title: &str) -> Option<BootstrapChart> {
    gate.cases.iter().find_map(|case| {
        let c = case.comparison.as_ref()?;
        let baseline = attn_stats::Sample::new(case.baseline.as_ref()?.samples.clone()).ok()?;
        let candidate = attn_stats::Sample::new(case.candidate.as_ref()?.samples.clone()).ok()?;
        let options = attn_stats::BootstrapOptions {
            resamples: c.resamples,
            confidence: c.confidence,
            seed: c.seed,
            method: c.speedup.method,
        };
        let replicates = attn_stats::speedup_replicates(&baseline, &candidate, &options);
        Some(BootstrapChart {
            title: format!(
                "Bootstrap distribution of the speedup, {title}, {} (seed {})",
                case.shape, c.seed
            ),
            replicates,
            point: c.speedup.point,
            lower: c.speedup.lower,
            upper: c.speedup.upper,
            threshold: Some(min_speedup(c.gate.threshold)),
        })
    })
}

/// Text under the progression table saying how its CIs were computed.
pub fn progression_note() -> String {
    format!(
        "Each point is one run: the run's baseline median / our median on the same shape in the same run (the gate's baseline; in a bench run sdpa:default, else the first SDPA backend measured), so a baseline that moved between runs does not read as progress; above 1× is faster. CIs of medians: percentile bootstrap over the raw samples, {MEDIAN_CI_RESAMPLES} resamples, seed {MEDIAN_CI_SEED}; CIs of speedups: the gate's BCa bootstrap."
    )
}

fn latest_bench(evidence: &EvidenceSet) -> Option<(&Run, &attn_evidence::BenchRun)> {
    evidence
        .runs
        .iter()
        .rev()
        .find_map(|run| match &run.evidence {
            attn_evidence::Evidence::Bench(bench) => Some((run, bench)),
            attn_evidence::Evidence::Gate(_) => None,
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

/// TFLOP/s of every implementation on every benched shape (the latest entry of each pair over all
/// bench runs), with the best of the project's kernels against SDPA's default and flash backends
/// and against PyTorch's fastest kernel measured on the shape.
fn implementations_table(evidence: &EvidenceSet) -> Option<Table> {
    let mut latest: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut shapes: Vec<String> = Vec::new();
    let mut labels: Vec<(bool, String)> = Vec::new();
    for run in &evidence.runs {
        let attn_evidence::Evidence::Bench(bench) = &run.evidence else {
            continue;
        };
        for e in &bench.entries {
            let (shape, label) = (e.shape.to_string(), e.implementation.label());
            if !shapes.contains(&shape) {
                shapes.push(shape.clone());
            }
            if !labels.iter().any(|(_, l)| *l == label) {
                labels.push((e.implementation.is_reference(), label.clone()));
            }
            latest.insert((shape, label), e.tflops);
        }
    }
    if shapes.is_empty() {
        return None;
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
    Some(table)
}

/// Every varlen bench entry measured against the dense batch at its mean length (the latest of
/// each implementation and batch): time per token, the batch's work over the dense one's, and time
/// per unit of work, against varlen's target; and against PyTorch's varlen_attn on the same packed
/// batch where the same run timed it on as many input sets (`--sdpa-backends varlen`).
fn varlen_table(evidence: &EvidenceSet) -> Option<Table> {
    let mut latest: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
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
                (e.shape.to_string(), e.implementation.label()),
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
    if latest.is_empty() {
        return None;
    }
    let mut table = Table::new(&[
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
    .numeric(&[3, 4, 5, 6, 7, 9, 10]);
    for row in latest.into_values() {
        table.push(row);
    }
    Some(table)
}

/// `hopper` against FlashAttention-3 (and SDPA's default, cuDNN) per shape, each ratio from one
/// run, never a ratio of two runs' ratios; the latest of each shape. A gate run against `fa3`
/// (blocks of the two sides interleaved, a CI) is taken over a bench run; a bench run only where
/// every side records as many input sets as hopper's (older bench runs timed FA3 and SDPA on 2 to 8
/// resident sets against the kernel's one per launch, which favoured them by up to 18%). A row
/// without cuDNN from its own run takes it from the latest batch-mode gate run of hopper against
/// SDPA's default on the shape and on the same GPU model (its own interleaved ratio, named in the
/// run column): one row never puts figures of two GPUs side by side.
fn against_fa3_table(evidence: &EvidenceSet) -> Option<Table> {
    // (GPU, shape) → (cuDNN TFLOP/s, hopper vs cuDNN, run), the latest batch-mode gate run against it.
    let mut cudnn_gates: HashMap<(String, String), [String; 3]> = HashMap::new();
    for run in &evidence.runs {
        let attn_evidence::Evidence::Gate(gate) = &run.evidence else {
            continue;
        };
        // The tuned hopper only: a run with overridden knobs is labelled with them.
        if gate_candidate_label(gate) != "hopper" || gate.baseline.label() != "sdpa:default" {
            continue;
        }
        for case in &gate.cases {
            let batch = case
                .candidate
                .as_ref()
                .is_some_and(|t| t.mode == attn_evidence::TimingMode::Batch);
            let (true, Some(c), Some(base)) = (batch, &case.comparison, case.baseline_tflops)
            else {
                continue;
            };
            cudnn_gates.insert(
                (
                    run.evidence.provenance().gpu.clone(),
                    case.shape.to_string(),
                ),
                [
                    tflops(base),
                    speedup_ci(c.speedup.point, c.speedup.lower, c.speedup.upper),
                    format!("cuDNN: gate {}", run.path),
                ],
            );
        }
    }
    // (shape, from a gate run, GPU, row)
    let mut rows: Vec<(String, bool, String, Vec<String>)> = Vec::new();
    let mut put = |shape: String, gated: bool, gpu: &str, row: Vec<String>| match rows
        .iter_mut()
        .find(|(s, ..)| *s == shape)
    {
        Some(existing) if existing.1 && !gated => {}
        Some(existing) => *existing = (shape, gated, gpu.to_string(), row),
        None => rows.push((shape, gated, gpu.to_string(), row)),
    };
    let verdict = |vs_fa3: f64| if vs_fa3 >= 1.0 { "meets" } else { "misses" }.to_string();
    for run in &evidence.runs {
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
                        case.shape.to_string(),
                        true,
                        &run.evidence.provenance().gpu,
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
                        hopper.shape.to_string(),
                        false,
                        &run.evidence.provenance().gpu,
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
    if rows.is_empty() {
        return None;
    }
    for (shape, _, gpu, row) in &mut rows {
        let cudnn = cudnn_gates.get(&(gpu.clone(), shape.clone()));
        if let (true, Some([tflops, speedup, run])) = (row[3] == "–", cudnn) {
            row[3] = tflops.clone();
            row[5] = speedup.clone();
            row[9] = format!("{}; {run}", row[9]);
        }
    }
    let mut table = Table::new(&[
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
    .numeric(&[1, 2, 3, 4, 5, 7]);
    for (.., row) in rows {
        table.push(row);
    }
    Some(table)
}

fn bench_table(evidence: &EvidenceSet) -> Option<(String, Table)> {
    let (run, bench) = latest_bench(evidence)?;
    let mut table = Table::new(&[
        "implementation",
        "shape",
        "median (µs)",
        "p10 (µs)",
        "p90 (µs)",
        "TFLOP/s",
        "n",
    ])
    .numeric(&[2, 3, 4, 5, 6]);
    for e in &bench.entries {
        table.push(vec![
            e.implementation.label(),
            e.shape.to_string(),
            micros(e.summary.median),
            micros(e.summary.p10),
            micros(e.summary.p90),
            tflops(e.tflops),
            e.summary.n.to_string(),
        ]);
    }
    Some((run.path.clone(), table))
}

fn ncu_table(evidence: &EvidenceSet) -> Option<Table> {
    if evidence.ncu.is_empty() {
        return None;
    }
    let mut table = Table::new(&[
        "profile",
        "commit",
        "time (µs)",
        "TFLOP/s",
        "of dense matmul",
        "of device peak",
        "tensor pipe",
        "SM busy",
        "warps active",
        "registers/thread",
        "bound by",
        "next step",
    ])
    .numeric(&[2, 3, 4, 5, 6, 7, 8, 9]);
    let dash = || "–".to_string();
    let cell = |value: Option<f64>, show: fn(f64) -> String| value.map(show).unwrap_or_else(dash);
    for row in &evidence.ncu {
        let of_peak = row
            .tflops
            .zip(device_peak(&row.gpu))
            .map(|(t, peak)| t / peak.tflops);
        let profile = if row.label.is_empty() {
            row.kernel.clone()
        } else {
            row.label.clone()
        };
        table.push(vec![
            profile,
            row.git_rev.clone(),
            cell(row.time_us, micros),
            cell(row.tflops, |t| format!("{t:.1}")),
            cell(row.tflops_fraction, |f| percent(100.0 * f)),
            cell(of_peak, |f| percent(100.0 * f)),
            cell(row.tensor_pct, percent),
            cell(row.sm_pct, percent),
            cell(row.warps_active_pct, percent),
            cell(row.registers, |r| format!("{r:.0}")),
            row.bound.clone().unwrap_or_else(dash),
            row.next_step.clone().unwrap_or_else(dash),
        ]);
    }
    Some(table)
}

/// The ncu profiles on a roofline: the DRAM roof and compute roofs the profiles were scored against
/// (measured copy bandwidth, dense-matmul rate), and the device peak from ncu's device attributes.
fn roofline(evidence: &EvidenceSet) -> Option<RooflineChart> {
    let points: Vec<RooflinePoint> = evidence
        .ncu
        .iter()
        .filter_map(|row| {
            let (flops, bytes, tflops) = (row.flops?, row.dram_bytes?, row.tflops?);
            (bytes > 0.0 && flops > 0.0 && tflops > 0.0).then(|| RooflinePoint {
                label: if row.label.is_empty() {
                    row.kernel.clone()
                } else {
                    row.label.clone()
                },
                intensity: flops / bytes,
                tflops,
            })
        })
        .collect();
    if points.is_empty() {
        return None;
    }
    // Roofs from the latest profile that has them (profiles are in file-name order).
    let dram_roof = evidence
        .ncu
        .iter()
        .rev()
        .find_map(|row| row.dram_roof_bytes_per_s)
        .map(|b| {
            (
                b,
                "copy, read + write, measured; what the profiles are scored against".to_owned(),
            )
        });
    let matmul = evidence
        .ncu
        .iter()
        .rev()
        .find_map(|row| row.matmul_roof_tflops)
        .map(|tflops| PhysicalLine {
            name: MATMUL_LINE,
            tflops,
            source: "cuBLAS, measured; what the profiles are scored against".into(),
        });
    let peak = evidence
        .ncu
        .iter()
        .rev()
        .find_map(|row| device_peak(&row.gpu));
    let gpu = evidence
        .ncu
        .iter()
        .map(|row| row.gpu.name.as_str())
        .find(|name| !name.is_empty())
        .unwrap_or("GPU not recorded");
    Some(RooflineChart {
        title: format!("Roofline of the Nsight Compute profiles ({gpu})"),
        points,
        dram_roof,
        lines: matmul.into_iter().chain(peak).collect(),
    })
}

fn search_table(evidence: &EvidenceSet) -> Option<Table> {
    if evidence.searches.is_empty() {
        return None;
    }
    let mut table = Table::new(&[
        "search",
        "candidates",
        "valid",
        "generations",
        "best score",
        "best median (µs)",
        "best speedup [CI]",
        "best config",
    ])
    .numeric(&[1, 2, 3, 4, 5, 6]);
    for log in &evidence.searches {
        let valid: Vec<_> = log.rows.iter().filter(|r| r.status.is_ok()).collect();
        let best = valid.iter().filter(|r| r.score.is_some()).max_by(|a, b| {
            a.score
                .unwrap_or(f64::MIN)
                .total_cmp(&b.score.unwrap_or(f64::MIN))
        });
        let generations = log
            .rows
            .iter()
            .map(|r| r.generation)
            .max()
            .map_or(0, |g| g + 1);
        let dash = || "–".to_string();
        table.push(vec![
            log.name.clone(),
            log.rows.len().to_string(),
            valid.len().to_string(),
            generations.to_string(),
            best.and_then(|b| b.score)
                .map(|s| significant(s, 4))
                .unwrap_or_else(dash),
            best.and_then(|b| b.median_us)
                .map(micros)
                .unwrap_or_else(dash),
            best.and_then(|b| match (b.speedup, b.speedup_lower, b.speedup_upper) {
                (Some(p), Some(l), Some(u)) => Some(speedup_ci(p, l, u)),
                (Some(p), _, _) => Some(speedup(p)),
                _ => None,
            })
            .unwrap_or_else(dash),
            best.map(|b| {
                // The knobs and, in a search over several implementations, the implementation
                // under its log column's name, all in name order.
                let implementation = b.config.implementation.iter();
                let mut cells: Vec<(&str, String)> = implementation
                    .map(|name| (attn_evidence::IMPL_KNOB, name.clone()))
                    .chain(
                        b.config
                            .knobs
                            .iter()
                            .map(|(k, v)| (k.as_str(), v.to_string())),
                    )
                    .collect();
                cells.sort();
                cells
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(dash),
        ]);
    }
    Some(table)
}

fn convergence(evidence: &EvidenceSet) -> Vec<(String, ConvergenceChart)> {
    evidence
        .searches
        .iter()
        .filter_map(|log| {
            let mut per_generation: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
            for row in log.rows.iter().filter(|r| r.status.is_ok()) {
                if let Some(score) = row.score.filter(|s| s.is_finite()) {
                    per_generation
                        .entry(row.generation)
                        .or_default()
                        .push(score);
                }
            }
            if per_generation.is_empty() {
                return None;
            }
            let mut best = f64::NEG_INFINITY;
            let generations = per_generation
                .into_iter()
                .map(|(generation, mut scores)| {
                    scores.sort_by(f64::total_cmp);
                    best = scores.iter().copied().fold(best, f64::max);
                    let mid = scores.len() / 2;
                    let median = if scores.len() % 2 == 1 {
                        scores[mid]
                    } else {
                        (scores[mid - 1] + scores[mid]) / 2.0
                    };
                    (generation, best, median)
                })
                .collect();
            Some((
                format!("convergence-{}.svg", slug(&log.name)),
                ConvergenceChart {
                    title: format!("Search convergence: {}", log.name),
                    generations,
                },
            ))
        })
        .collect()
}

fn files_table(evidence: &EvidenceSet) -> Table {
    let mut table = Table::new(&[
        "file",
        "kind",
        "date (UTC)",
        "GPU",
        "commit",
        "driver",
        "PyTorch",
        "SM clock (MHz)",
    ]);
    let dash = || "–".to_string();
    for run in &evidence.runs {
        let p = run.evidence.provenance();
        let clocks = match (p.clocks.sm_mhz_before, p.clocks.sm_mhz_after) {
            (Some(b), Some(a)) if a != b => format!("{b} → {a}"),
            (Some(b), _) => b.to_string(),
            (None, Some(a)) => a.to_string(),
            (None, None) => dash(),
        };
        table.push(vec![
            run.path.clone(),
            run.evidence.kind().to_string(),
            short_date(&p.date),
            p.gpu.clone(),
            format!(
                "{}{}",
                short_rev(&p.git_rev),
                if p.git_dirty { " (dirty)" } else { "" }
            ),
            p.driver.clone().unwrap_or_else(dash),
            p.pytorch.clone().unwrap_or_else(dash),
            clocks,
        ]);
    }
    table
}
