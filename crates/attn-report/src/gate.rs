//! The gate's result as markdown (terminal output, PR comment, job summary), and the gate rule in
//! words: one wording, used by `cargo xtask gate` and by the report alike.

use attn_evidence::{DefenceOutcome, GateCase, GateMode, GateRun};

use crate::{format, table::Table};

/// The rule a gate run was judged by, in one sentence.
pub fn rule_sentence(run: &GateRun) -> String {
    let o = &run.options;
    let plausibility = if run.rule.allow_implausible {
        "implausible results allowed by a person".to_string()
    } else {
        format!(
            "a result above the device's dense tensor peak or below its memory floor (where either is unknown, {:.0}× faster than the baseline) is implausible",
            run.rule.max_speedup
        )
    };
    let ci = format!(
        "the {:.0}% bootstrap CI (BCa, {} resamples, seed {}) of candidate − baseline median",
        o.bootstrap.confidence * 100.0,
        o.bootstrap.resamples,
        o.bootstrap.seed
    );
    let timed = match run.rule.mode {
        GateMode::Faster => format!(
            "candidate median ≤ {:.2} × baseline median (speedup ≥ {:.3}×), and {ci} lies entirely below 0",
            o.gate_threshold,
            1.0 / o.gate_threshold,
        ),
        GateMode::NoRegression { tolerance } => format!(
            "and it does not regress (a ratchet against an earlier revision): it fails only when candidate median > {:.2} × baseline median and {ci} lies entirely above 0",
            1.0 + tolerance
        ),
    };
    format!(
        "Gate rule: a shape passes when every correctness check passes (and every timed output is verified), {timed}; {plausibility}. Speedup = baseline median / candidate median; times are µs per call."
    )
}

/// A case's defences as a table cell (`"9 of 11"`, `"–"` for a case recorded before defences
/// were) and, one line each, what every defence covered or why it did not run.
pub fn defences_cell(case: &GateCase) -> (String, Option<String>) {
    if case.defences.is_empty() {
        return ("–".into(), None);
    }
    let ran = case.defences.iter().filter(|d| d.ran).count();
    let caught = case
        .defences
        .iter()
        .filter(|d| d.outcome == DefenceOutcome::Failed)
        .count();
    let mut cell = format!("{ran} of {}", case.defences.len());
    if caught > 0 {
        cell.push_str(&format!(", {caught} caught"));
    }
    let lines: Vec<String> = case
        .defences
        .iter()
        .map(|d| {
            let outcome = match d.outcome {
                DefenceOutcome::Passed => "passed",
                DefenceOutcome::Failed => "CAUGHT",
                DefenceOutcome::NotRun => "not run",
            };
            format!("{}: {outcome}: {}", d.name, d.covered)
        })
        .collect();
    (cell, Some(lines.join("\n")))
}

/// The timing mode of a gate run's timed cases (`"batch"`, `"graph and batch"` if they differ),
/// `None` when nothing was timed.
pub fn run_modes(run: &GateRun) -> Option<String> {
    let mut modes: Vec<&str> = Vec::new();
    for case in &run.cases {
        if let Some(t) = case.candidate.as_ref().or(case.baseline.as_ref()) {
            if !modes.contains(&t.mode.as_str()) {
                modes.push(t.mode.as_str());
            }
        }
    }
    (!modes.is_empty()).then(|| modes.join(" and "))
}

/// The result table (markdown, also readable in a terminal).
pub fn markdown(run: &GateRun) -> String {
    let mode = run_modes(run).map_or_else(String::new, |m| format!(", {m}"));
    let mut table = Table::new(&[
        "shape",
        &format!("candidate µs{mode}"),
        &format!("baseline µs{mode}"),
        "speedup [95% CI]",
        "TFLOP/s cand / base",
        "verdict",
        "gate",
        "defences",
    ])
    .numeric(&[1, 2, 4]);
    for case in &run.cases {
        let (cand, base, speed, tf, verdict) = match &case.comparison {
            Some(c) => (
                format::micros(c.candidate.median),
                format::micros(c.baseline.median),
                format::speedup_ci(c.speedup.point, c.speedup.lower, c.speedup.upper),
                format!(
                    "{} / {}",
                    format::tflops(case.candidate_tflops.unwrap_or(f64::NAN)),
                    format::tflops(case.baseline_tflops.unwrap_or(f64::NAN))
                ),
                c.verdict.to_string(),
            ),
            None => (
                "–".into(),
                "–".into(),
                "–".into(),
                "–".into(),
                "not timed".into(),
            ),
        };
        table.push(vec![
            case.shape.to_string(),
            cand,
            base,
            speed,
            tf,
            verdict,
            match case.status {
                Some(status) if !case.passed => format!("FAIL: {status}"),
                _ if case.passed => "pass".into(),
                _ => "FAIL".into(),
            },
            defences_cell(case).0,
        ]);
    }
    let mut out = format!(
        "**attn gate: {}** — `{}` vs `{}`{} on {}{} ({})\n\n",
        if run.passed { "PASSED" } else { "FAILED" },
        crate::model::gate_candidate_label(run),
        run.baseline.label(),
        crate::model::gate_pass_suffix(run),
        run.provenance.gpu,
        run_modes(run).map_or_else(String::new, |m| format!(", {m} timing")),
        format::short_rev(&run.provenance.git_rev)
    );
    out.push_str(&table.to_markdown());
    out.push_str(&format!("\n{}\n", rule_sentence(run)));
    for case in &run.cases {
        if !case.passed || !case.flags.is_empty() {
            out.push_str(&format!("\n- `{}`: {}", case.shape, case.reason));
            for flag in &case.flags {
                out.push_str(&format!("\n  - flag: {flag}"));
            }
        }
    }
    out.push('\n');
    out
}
