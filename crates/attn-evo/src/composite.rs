//! `--fitness composite`: once the search has measured its candidates, its finalists (the
//! fastest valid ones) are profiled with Nsight Compute and ranked by attn-ncu's composite
//! fitness ([`attn_ncu::fitness`]):
//!
//! ```text
//! score = 1000·speedup + 2·tensor% + 1·SM busy%
//!       − (5·syncs per tile + 1·registers over 168 + 1·KiB spilled)
//! ```
//!
//! The speedup is the finalist's from the search; tensor%, SM busy%, registers and spills are
//! ncu's counters (a path of several kernels, like cuBLAS's, is scored over all of them:
//! [`attn_ncu::FitnessInputs::from_kernels`]); syncs per tile is the engineer's count, as
//! `cargo xtask ncu` takes it ([`SYNCS_PER_TILE_SOURCE`]). The composite winner becomes
//! `best.json`'s config; every finalist's terms go to `finalists.json`. The caller profiles (in
//! xtask: ncu in its own process group with a timeout, per finalist), this ranks.

use attn_evidence::{
    CandidateStatus, EvoCandidate, EvoFinalist, EvoFinalists, EvoFitness, ImplConfig, Provenance,
    SearchSpec,
};
use attn_ncu::{FitnessInputs, FitnessWeights, KernelSummary};

use crate::plan::split_row;
use crate::space::Knobs;

/// Where the composite's syncs-per-tile input comes from (recorded in `finalists.json`).
pub const SYNCS_PER_TILE_SOURCE: &str = "--syncs-per-tile (default 1): the barriers per K/V tile of the kernel's main loop, counted by the engineer in its source, as `cargo xtask ncu --syncs-per-tile` takes it (ncu has no counter for it); one number for every finalist, so it lowers every score alike and does not reorder them";

/// How a composite-fitness search picks and scores its finalists.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Composite {
    /// Finalists profiled: the fastest valid candidates, at most this many.
    pub finalists: usize,
    /// Barriers per K/V tile, for every finalist ([`SYNCS_PER_TILE_SOURCE`]).
    pub syncs_per_tile: f64,
    /// The formula's weights.
    pub weights: FitnessWeights,
}

/// The finalists of `rows`: valid ones with a speedup, fastest first (the earliest among
/// equals), at most `count`.
pub fn finalists(rows: &[EvoCandidate], count: usize) -> Vec<&EvoCandidate> {
    let mut valid: Vec<&EvoCandidate> = rows
        .iter()
        .filter(|r| r.status.is_ok() && r.speedup.is_some())
        .collect();
    let speedup = |r: &EvoCandidate| r.speedup.unwrap_or(f64::MIN);
    valid.sort_by(|a, b| speedup(b).total_cmp(&speedup(a)));
    valid.truncate(count);
    valid
}

/// Profiles each finalist of `rows` with `profile` (its implementation and knobs → the kernels
/// ncu measured, or why there are none), scores it, and ranks them all: the best composite
/// first, then those that could not be scored, by speedup. `profiling` says how ncu ran.
pub fn rank_finalists(
    spec: &SearchSpec,
    run: &str,
    rows: &[EvoCandidate],
    composite: &Composite,
    profiling: String,
    provenance: Option<Provenance>,
    mut profile: impl FnMut(Option<&str>, &Knobs) -> Result<Vec<KernelSummary>, String>,
) -> EvoFinalists {
    let mut ranked: Vec<EvoFinalist> = finalists(rows, composite.finalists)
        .into_iter()
        .enumerate()
        .map(|(i, row)| {
            let ImplConfig {
                implementation,
                knobs,
            } = split_row(spec, row);
            let speedup = row.speedup.unwrap_or(f64::NAN);
            let (status, kernels, fitness) = match profile(implementation.as_deref(), &knobs) {
                Err(why) => (CandidateStatus::invalid(why), vec![], None),
                Ok(kernels) => {
                    let syncs = composite.syncs_per_tile;
                    match FitnessInputs::from_kernels(&kernels, speedup, syncs) {
                        Ok(inputs) => {
                            let scored = attn_ncu::fitness(&inputs, &composite.weights);
                            (CandidateStatus::Ok, kernels, Some(scored))
                        }
                        Err(why) => (CandidateStatus::invalid(why.to_string()), kernels, None),
                    }
                }
            };
            EvoFinalist {
                rank: 0,
                speedup_rank: i + 1,
                implementation,
                config: knobs,
                generation: row.generation,
                median_us: row.median_us,
                speedup: row.speedup,
                speedup_lower: row.speedup_lower,
                speedup_upper: row.speedup_upper,
                status,
                kernels,
                fitness,
            }
        })
        .collect();
    // Scored first, best score first; then the rest in speedup order (a stable sort keeps it).
    let key = |f: &EvoFinalist| f.fitness.map_or(f64::NEG_INFINITY, |s| s.score);
    ranked.sort_by(|a, b| key(b).total_cmp(&key(a)));
    for (i, finalist) in ranked.iter_mut().enumerate() {
        finalist.rank = i + 1;
    }
    EvoFinalists {
        kind: EvoFinalists::KIND,
        run: run.into(),
        formula: attn_ncu::formula(&composite.weights),
        weights: composite.weights,
        syncs_per_tile: composite.syncs_per_tile,
        syncs_per_tile_source: SYNCS_PER_TILE_SOURCE.into(),
        profiling,
        finalists: ranked,
        provenance,
    }
}

/// The composite winner of `finalists` (ranked by [`rank_finalists`]) as its row of `rows`, with
/// `best.json`'s `fitness` section; the fastest finalist when none could be scored. `None` when
/// there is no finalist.
pub fn composite_winner<'r>(
    spec: &SearchSpec,
    finalists: &EvoFinalists,
    rows: &'r [EvoCandidate],
) -> Option<(&'r EvoCandidate, EvoFitness)> {
    let winner = finalists.finalists.first()?;
    let row = rows.iter().find(|r| {
        let config = split_row(spec, r);
        r.generation == winner.generation
            && config.implementation == winner.implementation
            && config.knobs == winner.config
    })?;
    let fitness = EvoFitness {
        method: "composite".into(),
        formula: finalists.formula.clone(),
        finalists: finalists.finalists.len(),
        scored: finalists
            .finalists
            .iter()
            .filter(|f| f.fitness.is_some())
            .count(),
        winner: winner.fitness,
        speedup_rank: winner.speedup_rank,
        details: "finalists.json".into(),
    };
    Some((row, fitness))
}

/// `best.json`'s `ncu` line for a composite winner: how it was chosen.
pub fn composite_note(fitness: &EvoFitness) -> String {
    let (n, scored) = (fitness.finalists, fitness.scored);
    match &fitness.winner {
        Some(score) => format!(
            "--fitness composite: {n} finalists profiled with ncu, {scored} scored; the winner scores {:.1} (speedup rank {}); every term in {}",
            score.score, fitness.speedup_rank, fitness.details
        ),
        None => format!(
            "--fitness composite: {n} finalists, none could be scored with ncu (see {}): the winner is the fastest",
            fitness.details
        ),
    }
}

/// The finalists as a short table: rank, speedup and CI, the counters, penalty, score, config.
pub fn finalists_table(finalists: &EvoFinalists) -> String {
    let mut out = format!(
        "composite fitness = {}\n{:>4} {:>5} {:>24} {:>8} {:>6} {:>5} {:>7} {:>7} {:>8}  config\n",
        finalists.formula,
        "rank",
        "by x",
        "speedup [95% CI]",
        "tensor%",
        "SM%",
        "regs",
        "spill B",
        "penalty",
        "score"
    );
    for f in &finalists.finalists {
        let config = crate::summary::describe_parts(f.implementation.as_deref(), &f.config);
        let speedup = format!(
            "{:.3} [{:.3}, {:.3}]",
            f.speedup.unwrap_or(f64::NAN),
            f.speedup_lower.unwrap_or(f64::NAN),
            f.speedup_upper.unwrap_or(f64::NAN)
        );
        let terms = match &f.fitness {
            Some(s) => format!(
                "{:>8.1} {:>6.1} {:>5.0} {:>7.0} {:>7.1} {:>8.1}",
                s.inputs.tensor_pct,
                s.inputs.sm_busy_pct,
                s.inputs.registers_per_thread,
                s.inputs.spill_bytes,
                s.penalty,
                s.score
            ),
            None => format!("  {:<44}", f.status.to_string()),
        };
        out.push_str(&format!(
            "{:>4} {:>5} {speedup:>24} {terms}  {}\n",
            f.rank, f.speedup_rank, config
        ));
    }
    out
}
