//! A search's summaries as `cargo xtask evo` prints them: what is searched, each failed
//! candidate, the log's counts, the winner.

use std::collections::BTreeMap;
use std::path::Path;

use attn_evidence::{EvoBest, EvoCandidate, SearchSpec};

/// An implementation (when there is one) and its knobs as `best.json` and `finalists.json` hold
/// them, on one line as [`attn_evidence::ImplConfig::describe`] writes a config.
pub(crate) fn describe_parts(
    implementation: Option<&str>,
    knobs: &BTreeMap<String, i64>,
) -> String {
    let knobs: Vec<String> = knobs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let knobs = knobs.join(",");
    match implementation {
        Some(name) if knobs.is_empty() => name.to_string(),
        Some(name) => format!("{name} {knobs}"),
        None => knobs,
    }
}

/// What is searched and how: `configs` before constraints, up to `budget` candidates, on
/// `workers`.
pub fn search_line(spec: &SearchSpec, configs: u64, budget: usize, workers: &[String]) -> String {
    let (target, shape, baseline) = (&spec.target, spec.problem_text(), &spec.baseline);
    let (population, generations, seed) = (spec.population, spec.generations, spec.seed);
    let knobs = if spec.implementations.is_empty() {
        format!("{} knob(s)", spec.knobs.len())
    } else {
        let each: Vec<String> = spec
            .implementations
            .iter()
            .map(|i| format!("{} {}", i.name, i.knobs.len()))
            .collect();
        format!(
            "{} implementations (knobs: {})",
            spec.implementations.len(),
            each.join(", ")
        )
    };
    format!(
        "evo: {target} on {shape} vs {baseline} | {knobs}, {configs} configs before constraints | population {population}, generations {generations}, budget {budget}, seed {seed} | {} worker(s): {}",
        workers.len(),
        workers.join(", ")
    )
}

/// A logged candidate with its status (for one that failed).
pub fn row_line(row: &EvoCandidate) -> String {
    let config = row.config.describe();
    format!("  gen {} {config}: {}", row.generation, row.status)
}

/// How many candidates the log at `log` holds, valid and invalid.
pub fn counts_line(rows: &[EvoCandidate], log: &Path) -> String {
    let invalid = rows.iter().filter(|r| !r.status.is_ok()).count();
    let valid = rows.len() - invalid;
    let log = log.display();
    format!(
        "evo: {} candidates, {valid} valid, {invalid} invalid; log {log}",
        rows.len()
    )
}

/// The winner against the baseline, how it was chosen when not by speedup, the command that
/// confirms it, and where `best.json` is.
pub fn best_lines(best: &EvoBest, path: &Path) -> String {
    let config = describe_parts(best.implementation.as_deref(), &best.config);
    let chosen = if best.ncu.is_empty() {
        String::new()
    } else {
        format!("\n{}", best.ncu)
    };
    format!(
        "best: {} (generation {}): {:.2} µs, speedup {:.3}x [{:.3}, {:.3}] vs {}{chosen}\nconfirm it: {}\nevidence: {}",
        config,
        best.generation,
        best.median_us.unwrap_or(f64::NAN),
        best.speedup.unwrap_or(f64::NAN),
        best.speedup_lower.unwrap_or(f64::NAN),
        best.speedup_upper.unwrap_or(f64::NAN),
        best.baseline,
        best.reproduce,
        path.display()
    )
}
