//! A search's summaries as `cargo xtask evo` prints them: what is searched, each failed
//! candidate, the log's counts, the winner.

use std::path::Path;

use attn_evidence::{EvoBest, EvoCandidate, SearchSpec};

use crate::log::knobs_from_strings;
use crate::plan::format_knobs;

/// What is searched and how: `configs` before constraints, up to `budget` candidates, on
/// `workers`.
pub fn search_line(spec: &SearchSpec, configs: u64, budget: usize, workers: &[String]) -> String {
    let (target, shape, baseline) = (&spec.target, &spec.shape, &spec.baseline);
    let (population, generations, seed) = (spec.population, spec.generations, spec.seed);
    format!(
        "evo: {target} on {shape} vs {baseline} | {} knob(s), {configs} configs before constraints | population {population}, generations {generations}, budget {budget}, seed {seed} | {} worker(s): {}",
        spec.knobs.len(),
        workers.len(),
        workers.join(", ")
    )
}

/// A logged candidate with its status (for one that failed).
pub fn row_line(row: &EvoCandidate) -> String {
    let config = format_knobs(&knobs_from_strings(&row.config).unwrap_or_default());
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

/// The winner against the baseline, the command that confirms it, and where `best.json` is.
pub fn best_lines(best: &EvoBest, path: &Path) -> String {
    let config = format_knobs(&knobs_from_strings(&best.config).unwrap_or_default());
    format!(
        "best: {config} (generation {}): {:.2} µs, speedup {:.3}x [{:.3}, {:.3}] vs {}\nconfirm it: {}\nevidence: {}",
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
