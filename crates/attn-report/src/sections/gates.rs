//! The latest gate verdict of each (candidate, baseline, suite): its verdict line, table, rule,
//! flags, and the data of its speedup and bootstrap charts.

use attn_evidence::{slug, GateCase, GateRun};

use crate::charts::{BootstrapChart, SpeedupBar, SpeedupChart};
use crate::format::{micros, short_date, short_rev, speedup_ci, tflops};
use crate::model::{gate_candidate_label, gate_pass_suffix, Run};
use crate::setup::Setup;
use crate::table::Table;

/// The latest gate run of one (candidate, baseline) pair.
#[derive(Debug, Clone)]
pub struct GateSection {
    /// `"mma vs sdpa:default"`.
    pub title: String,
    /// Slug for chart file names.
    pub slug: String,
    /// The verdict line, e.g. `"✅ PASS: mma vs sdpa:default, 3/3 shapes passed on ..."`.
    pub verdict: String,
    /// One plain line naming the run (no markdown): what a folded section shows.
    pub summary: String,
    /// The GPU and timing mode of the run.
    pub setup: Setup,
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

pub(super) fn gate_section(run: &Run, gate: &GateRun) -> GateSection {
    let p = &gate.provenance;
    let passed_count = gate.cases.iter().filter(|c| c.passed).count();
    let candidate = gate_candidate_label(gate);
    let pass = gate_pass_suffix(gate);
    let title = format!("{candidate} vs {}{pass}", gate.baseline.label());
    let setup = gate.cases.first().map_or_else(
        || Setup::new(&p.gpu, attn_evidence::TimingMode::Flushed),
        |case| Setup::of_case(run, case),
    );
    let outcome = if gate.passed { "PASS" } else { "FAIL" };
    let summary = format!(
        "{} {outcome}: {title}, {}, {passed_count}/{} shapes, {setup}, {} UTC",
        if gate.passed { "✅" } else { "❌" },
        gate.suite.as_deref().unwrap_or("ad-hoc shapes"),
        gate.cases.len(),
        short_date(&p.date),
    );
    let verdict = format!(
        "{} **{outcome}**: `{}` vs `{}`{pass}, {passed_count}/{} shapes passed, on {setup} at `{}`{} ({} UTC)",
        if gate.passed { "✅" } else { "❌" },
        candidate,
        gate.baseline.label(),
        gate.cases.len(),
        short_rev(&p.git_rev),
        if p.git_dirty {
            " + uncommitted changes"
        } else {
            ""
        },
        short_date(&p.date),
    );
    let mode = crate::gate::run_modes(gate).unwrap_or_else(|| "not timed".into());
    let mut table = Table::new(&[
        "shape",
        &format!("{} median (µs, {mode})", gate.baseline.label()),
        &format!("{candidate} median (µs, {mode})"),
        "speedup [CI]",
        &format!("TFLOP/s ({mode})"),
        "verdict",
        "correct",
        "result",
        "short by",
        "defences",
    ])
    .numeric(&[1, 2, 3, 4]);
    let mut flags = Vec::new();
    let mut bars = Vec::new();
    for (i, case) in gate.cases.iter().enumerate() {
        table.push(gate_row(case));
        let (_, titles) = crate::gate::defences_cell(case);
        if let Some(titles) = titles {
            table.title_last(DEFENCES_COLUMN, titles);
        }
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
    // One file per section, i.e. per (candidate, baseline, suite or shape list, setup): the seed and large
    // suites keep separate charts, and so do two runs over different shapes given one by one.
    let shape_slug = format!(
        "{}-vs-{}-{}-{}",
        slug(&candidate),
        slug(&gate.baseline.label()),
        slug(&crate::model::gate_scope(gate)),
        slug(&setup.short())
    );
    GateSection {
        speedup: SpeedupChart {
            title: format!("Speedup of {title} per shape ({})", setup.short()),
            bars,
            threshold,
        },
        bootstrap: bootstrap_chart(gate, &format!("{title} ({})", setup.short())),
        title,
        slug: shape_slug,
        summary,
        setup,
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
        crate::gate::defences_cell(case).0,
    ]
}

/// The column of [`gate_row`] that lists the case's defences.
const DEFENCES_COLUMN: usize = 9;

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
