//! The micro-benchmark's side of a search (`cargo xtask micro`): its ranking and log rows, the
//! seeds it gives a search (its configs projected onto the target's space), and how well its
//! ranking predicted the one a search measured (rank correlation over the configs both measured).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use attn_evidence::{
    read_evo_log, utc_now_rfc3339, CandidateStatus, EvoCandidate, ImplConfig, MicroBest,
    MicroCorrelation, MicroPair, MicroRanked, MicroTarget, SearchSpec,
};
use attn_stats::{average_ranks, kendall, spearman};

use crate::error::{EvoError, Result};
use crate::plan::format_knobs;
use crate::space::{Knobs, Space};

/// What the ranking of `target` can and cannot predict (stored in its `best.json` and
/// `correlation.json`, printed with both).
pub fn micro_scope(target: MicroTarget) -> &'static str {
    match target {
        MicroTarget::Hopper => "micro (hopper) times hopper's K/V pipeline alone: a TMA producer warp, a STAGES-deep mbarrier ring of BLOCK_N-key K and V tiles, and NUM_WARPS/4 wgmma consumer warpgroups doing S = Q·Kᵀ, the online softmax and P·V per tile, as many blocks per SM as fit, on L2-resident K and V. It cannot predict OVERLAP and PINGPONG (not modelled: seeds take them from hopper's defaults or the nearest valid values), causal masking and skipping, the output epilogue, the tail and waves of a real grid, HBM traffic when K and V outgrow L2, or clocks under a long full load. Its ranking seeds `cargo xtask evo --impl hopper --seed-from-micro`; it is not a verdict, and `cargo xtask micro --compare-evo <run>` measures how well it predicted.",
        MicroTarget::CpAsync => "micro (cp-async) times the cp.async K/V ring of mma and tiled alone: BLOCK_N-key K and V tiles through a STAGES-deep ring by NUM_WARPS warps, one FMA per loaded element, one block per SM, on L2-resident K and V. It cannot predict tensor-core GEMMs, softmax cost, register pressure, occupancy (real blocks share SMs), the knobs it does not vary (mma's BLOCK_M, WARP_M, KV_SPLIT, Q_IN_REGS, MIN_BLOCKS: seeds take them from the defaults or the nearest valid values), or the waves of a real grid. Its ranking seeds `cargo xtask evo --seed-from-micro` for mma and tiled; it is not a verdict, and `cargo xtask micro --compare-evo <run>` measures how well it predicted.",
    }
}

/// What the score (`flops_per_cycle`) of `target` counts.
pub fn micro_metric(target: MicroTarget) -> &'static str {
    match target {
        MicroTarget::Hopper => "attention FLOPs per cycle per SM: 4·BLOCK_M·BLOCK_N·HEAD_DIM per tile (Q·Kᵀ and P·V) × tiles × blocks per SM / cycles",
        MicroTarget::CpAsync => "tile FLOPs per cycle per SM: one FMA per loaded element, 4·BLOCK_N·HEAD_DIM per tile (K and V) × tiles / cycles, one block per SM",
    }
}

/// The knobs of `config` that `target`'s ranking varies ([`MicroTarget::knobs`]).
pub fn micro_knobs(target: MicroTarget, config: &Knobs) -> Knobs {
    config
        .iter()
        .filter(|(k, _)| target.knobs().contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// The FLOPs one block counts for one tile of `config` ([`micro_metric`]).
pub fn micro_flops_per_tile(target: MicroTarget, config: &Knobs, head_dim: usize) -> f64 {
    let get = |name: &str| config.get(name).copied().unwrap_or(1) as f64;
    let d = head_dim as f64;
    match target {
        MicroTarget::Hopper => 4.0 * get("BLOCK_M") * get("BLOCK_N") * d,
        MicroTarget::CpAsync => 4.0 * get("BLOCK_N") * d,
    }
}

/// One config as the GPU side measured it.
#[derive(Debug, Clone, PartialEq)]
pub struct MicroOutcome {
    /// The loop's cycles (median over blocks and launches), or why there are none.
    pub cycles: std::result::Result<f64, String>,
    /// Blocks of the config one SM ran at once.
    pub blocks_per_sm: u32,
    /// Seconds its compile took.
    pub compile_s: f64,
    /// Seconds its measurement took.
    pub run_s: f64,
}

/// A config's ranking entry from its loop's `cycles` for `tiles` tiles with `blocks_per_sm`
/// blocks on each SM: [`micro_metric`]'s FLOPs per cycle per SM.
///
/// ```
/// use attn_evidence::MicroTarget;
/// let config = [("BLOCK_M", 128), ("BLOCK_N", 128), ("NUM_WARPS", 8), ("STAGES", 2), ("SHARED_BYTES", 1)]
///     .map(|(k, v)| (k.to_string(), v)).into();
/// let ranked = attn_evo::micro_ranked(MicroTarget::Hopper, &config, 128, 64_000.0, 64, 1);
/// assert_eq!(ranked.cycles_per_tile, 1000.0);
/// assert_eq!(ranked.flops_per_cycle, 4.0 * 128.0 * 128.0 * 128.0 / 1000.0);
/// assert_eq!(ranked.config.len(), 4); // the ranked knobs only
/// ```
pub fn micro_ranked(
    target: MicroTarget,
    config: &Knobs,
    head_dim: usize,
    cycles: f64,
    tiles: usize,
    blocks_per_sm: u32,
) -> MicroRanked {
    let tiles = tiles.max(1) as f64;
    let flops = micro_flops_per_tile(target, config, head_dim) * tiles * f64::from(blocks_per_sm);
    MicroRanked {
        config: micro_knobs(target, config),
        cycles_per_tile: cycles / tiles,
        flops_per_cycle: flops / cycles,
        blocks_per_sm,
    }
}

/// The micro log's rows (one per config, in order, scored by FLOPs per cycle per SM; the block's
/// loop time in µs at `max_sm_mhz`) and the `top` best of the ranking, best first.
pub fn micro_results(
    target: MicroTarget,
    head_dim: usize,
    configs: &[Knobs],
    outcomes: impl IntoIterator<Item = MicroOutcome>,
    tiles: usize,
    max_sm_mhz: u32,
    top: usize,
) -> (Vec<EvoCandidate>, Vec<MicroRanked>) {
    let mut rows = Vec::new();
    let mut ranked = Vec::new();
    for (config, outcome) in configs.iter().zip(outcomes) {
        let mut row = EvoCandidate {
            generation: 0,
            config: ImplConfig {
                implementation: None,
                knobs: micro_knobs(target, config),
            },
            status: CandidateStatus::Ok,
            median_us: None,
            speedup: None,
            speedup_lower: None,
            speedup_upper: None,
            score: None,
            compile_s: Some(outcome.compile_s),
            run_s: Some(outcome.run_s),
        };
        match outcome.cycles {
            Ok(cycles) => {
                let entry = micro_ranked(
                    target,
                    config,
                    head_dim,
                    cycles,
                    tiles,
                    outcome.blocks_per_sm,
                );
                row.median_us = Some(cycles / f64::from(max_sm_mhz.max(1)));
                row.score = Some(entry.flops_per_cycle);
                ranked.push(entry);
            }
            Err(why) => row.status = CandidateStatus::invalid(why),
        }
        rows.push(row);
    }
    ranked.sort_by(|a, b| b.flops_per_cycle.total_cmp(&a.flops_per_cycle));
    ranked.truncate(top.max(1));
    (rows, ranked)
}

/// `micro`'s knobs completed into a valid config of `space`: the knobs micro does not vary take
/// their `fill` values (the target's defaults) where that is valid, else the valid values
/// nearest to them (fewest knobs changed, then domain order); `None` when no completion is valid
/// (a micro value outside the space's domain, say STAGES = 1 for hopper). Knobs of `micro` the
/// space lacks are ignored.
///
/// ```
/// use attn_evo::{project_micro, KnobDomain, Knobs, Space};
/// let space = Space::new(
///     vec![KnobDomain::new("NUM_WARPS", vec![4, 8])?, KnobDomain::new("PINGPONG", vec![0, 1])?],
///     |k| if k["PINGPONG"] == 1 && k["NUM_WARPS"] < 8 { Err("ping-pong needs 8 warps".into()) } else { Ok(()) },
/// )?;
/// let fill: Knobs = [("NUM_WARPS".into(), 8), ("PINGPONG".into(), 1)].into();
/// let micro: Knobs = [("NUM_WARPS".into(), 4), ("TILES".into(), 64)].into();
/// // The default PINGPONG=1 is invalid with 4 warps: the nearest valid completion turns it off.
/// assert_eq!(project_micro(&space, &micro, &fill), Some([("NUM_WARPS".into(), 4), ("PINGPONG".into(), 0)].into()));
/// # Ok::<(), attn_evo::EvoError>(())
/// ```
pub fn project_micro(space: &Space, micro: &Knobs, fill: &Knobs) -> Option<Knobs> {
    let mut base = Knobs::new();
    let mut free = Vec::new();
    for knob in space.knobs() {
        match micro.get(&knob.name) {
            Some(v) => {
                base.insert(knob.name.clone(), *v);
            }
            None => {
                let start = fill
                    .get(&knob.name)
                    .copied()
                    .filter(|v| knob.values.contains(v))
                    .unwrap_or(knob.values[0]);
                base.insert(knob.name.clone(), start);
                let others: Vec<i64> = knob
                    .values
                    .iter()
                    .copied()
                    .filter(|v| *v != start)
                    .collect();
                free.push((knob.name.as_str(), others));
            }
        }
    }
    // Completions with exactly `changed` free knobs moved off their fill values, for growing
    // `changed`: the first valid one is the nearest.
    (0..=free.len()).find_map(|changed| nearest(space, &mut base.clone(), &free, changed))
}

/// The first valid config (in domain order) that moves exactly `changed` of `free[..]` off the
/// values in `knobs`.
fn nearest(
    space: &Space,
    knobs: &mut Knobs,
    free: &[(&str, Vec<i64>)],
    changed: usize,
) -> Option<Knobs> {
    if changed == 0 {
        return space.check(knobs).is_ok().then(|| knobs.clone());
    }
    if free.len() < changed {
        return None;
    }
    let (name, others) = &free[0];
    // Move this knob, or leave it and move `changed` of the rest.
    let kept = knobs[*name];
    for value in others {
        knobs.insert(name.to_string(), *value);
        if let Some(found) = nearest(space, knobs, &free[1..], changed - 1) {
            return Some(found);
        }
    }
    knobs.insert(name.to_string(), kept);
    nearest(space, knobs, &free[1..], changed)
}

/// What seeding from a micro log did ([`seed_from_micro`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MicroSeeds {
    /// Configs the micro log ranked.
    pub ranked: usize,
    /// Distinct valid seeds added.
    pub added: usize,
    /// Ranked configs with no valid completion in the space.
    pub unplaced: usize,
}

/// Adds to `seeds` the configs of `rows` (a micro log) best score first, each completed into the
/// space by [`project_micro`].
pub fn seed_from_micro(
    seeds: &mut Vec<Knobs>,
    rows: &[EvoCandidate],
    space: &Space,
    fill: &Knobs,
) -> MicroSeeds {
    let mut ranked: Vec<&EvoCandidate> = rows
        .iter()
        .filter(|r| r.status.is_ok() && r.score.is_some())
        .collect();
    ranked.sort_by(|a, b| b.score.unwrap_or(0.0).total_cmp(&a.score.unwrap_or(0.0)));
    let mut result = MicroSeeds {
        ranked: ranked.len(),
        added: 0,
        unplaced: 0,
    };
    for row in ranked {
        match project_micro(space, &row.config.knobs, fill) {
            Some(knobs) if !seeds.contains(&knobs) => {
                seeds.push(knobs);
                result.added += 1;
            }
            Some(_) => {}
            None => result.unplaced += 1,
        }
    }
    result
}

/// Fewest configs measured by both sides for a rank correlation.
pub const MIN_PAIRS: usize = 3;

/// The knobs `names` of a log row's config, if it has them all.
fn key_of(row: &EvoCandidate, names: &[&str]) -> Option<Knobs> {
    let knobs = &row.config.knobs;
    names
        .iter()
        .map(|n| knobs.get(*n).map(|v| (n.to_string(), *v)))
        .collect()
}

/// Where the two logs of a correlation come from.
#[derive(Debug, Clone, Copy)]
pub struct CorrelationInputs<'a> {
    /// The micro target.
    pub target: MicroTarget,
    /// Its log's rows and path.
    pub micro_rows: &'a [EvoCandidate],
    /// The micro log's path (recorded).
    pub micro_log: &'a Path,
    /// The head dim micro measured at, when its `best.json` says.
    pub micro_head_dim: Option<usize>,
    /// The search's `search.json`.
    pub spec: &'a SearchSpec,
    /// The search's log rows.
    pub evo_rows: &'a [EvoCandidate],
    /// The search's folder (recorded).
    pub evo_run: &'a Path,
}

/// How well micro's ranking predicted the search's: over the configs both measured (a search's
/// configs matched to micro's by the knobs micro varies, the best measured speedup of those that
/// share them), Spearman's ρ with its 95% interval and Kendall's τ-b, with p-values.
pub fn micro_correlation(inputs: &CorrelationInputs<'_>) -> Result<MicroCorrelation> {
    let CorrelationInputs {
        target,
        micro_rows,
        micro_log,
        micro_head_dim,
        spec,
        evo_rows,
        evo_run,
    } = *inputs;
    if let Some(d) = micro_head_dim.filter(|d| *d != spec.shape.head_dim) {
        return Err(EvoError::Correlation(format!(
            "micro ({target}) measured head dim {d} but {} searched {}: run `cargo xtask micro --target {target} --head-dim {}` first",
            evo_run.display(),
            spec.shape,
            spec.shape.head_dim
        )));
    }
    let names = target.knobs();
    // Best measured speedup (and how many configs) per micro key.
    let mut measured: BTreeMap<Knobs, (f64, usize)> = BTreeMap::new();
    for row in evo_rows.iter().filter(|r| r.status.is_ok()) {
        if let (Some(key), Some(speedup)) = (key_of(row, names), row.speedup) {
            let entry = measured.entry(key).or_insert((f64::NEG_INFINITY, 0));
            entry.0 = entry.0.max(speedup);
            entry.1 += 1;
        }
    }
    let mut scored: Vec<(Knobs, f64)> = micro_rows
        .iter()
        .filter(|r| r.status.is_ok())
        .filter_map(|r| Some((key_of(r, names)?, r.score?)))
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    let micro_configs = scored.len();
    let matched: Vec<(Knobs, f64, f64, usize)> = scored
        .into_iter()
        .filter_map(|(key, score)| {
            let (speedup, count) = *measured.get(&key)?;
            Some((key, score, speedup, count))
        })
        .collect();
    if matched.len() < MIN_PAIRS {
        return Err(EvoError::Correlation(format!(
            "only {} config(s) were measured by both micro ({target}: {micro_configs} ranked) and {} ({} distinct {}); a rank correlation needs {MIN_PAIRS}: search with --seed-from-micro and a larger --budget",
            matched.len(),
            evo_run.display(),
            measured.len(),
            names.join("/")
        )));
    }
    let scores: Vec<f64> = matched.iter().map(|m| m.1).collect();
    let speedups: Vec<f64> = matched.iter().map(|m| m.2).collect();
    let rho = spearman(&scores, &speedups)?;
    let tau = kendall(&scores, &speedups)?;
    // Rank 1 = best on both sides.
    let negated = |v: &[f64]| v.iter().map(|x| -x).collect::<Vec<f64>>();
    let (micro_ranks, evo_ranks) = (
        average_ranks(&negated(&scores)),
        average_ranks(&negated(&speedups)),
    );
    let pairs = matched
        .into_iter()
        .zip(micro_ranks.into_iter().zip(evo_ranks))
        .map(
            |((config, micro_score, evo_speedup, evo_configs), (micro_rank, evo_rank))| MicroPair {
                config,
                micro_score,
                evo_speedup,
                evo_configs,
                micro_rank,
                evo_rank,
            },
        )
        .collect();
    let ci = rho.interval(0.95).map(|(lo, hi)| [lo, hi]);
    let verdict = match (rho.p_value < 0.05, rho.rho > 0.0) {
        (true, true) => "predicted",
        (true, false) => "inverted",
        (false, _) => "did not measurably predict",
    };
    let interval = ci.map_or(String::new(), |[lo, hi]| {
        format!(", 95% CI {lo:.2} to {hi:.2}")
    });
    let reading = format!(
        "micro's ranking {verdict} the measured one: Spearman's ρ = {:.2}{interval}, p = {:.2e}; Kendall's τ-b = {:.2}, p = {:.2e} ({}); n = {} configs",
        rho.rho,
        rho.p_value,
        tau.tau,
        tau.p_value,
        if tau.exact { "exact" } else { "normal approximation" },
        rho.n
    );
    Ok(MicroCorrelation {
        kind: MicroCorrelation::KIND,
        target,
        date: utc_now_rfc3339(),
        micro_log: micro_log.to_path_buf(),
        evo_run: evo_run.to_path_buf(),
        evo_target: spec.target.clone(),
        shape: spec.shape.clone(),
        knobs: names.iter().map(|n| n.to_string()).collect(),
        micro_configs,
        evo_configs: measured.len(),
        pairs,
        spearman: rho,
        spearman_ci95: ci,
        kendall: tau,
        reading,
        scope: micro_scope(target).into(),
    })
}

/// Micro's ranking of `target` (default: the one that seeds the search's implementation,
/// [`MicroTarget::for_implementation`]) under `evidence` against the search in `run_dir`
/// ([`micro_correlation`] of their logs), written to `<evidence>/micro/<target>/correlation.json`,
/// whose path comes back with it.
pub fn correlate_with_search(
    evidence: &Path,
    run_dir: &Path,
    target: Option<MicroTarget>,
) -> Result<(MicroCorrelation, PathBuf)> {
    let spec = SearchSpec::read(&run_dir.join("search.json"))?;
    let target =
        target.unwrap_or_else(|| MicroTarget::for_implementation(spec.implementation.as_deref()));
    let dir = target.dir(evidence);
    let micro_log = dir.join("log.csv");
    let micro_rows = read_evo_log(&micro_log).map_err(|e| {
        EvoError::Correlation(format!(
            "{e}: run `cargo xtask micro --target {target} --head-dim {}` first",
            spec.shape.head_dim
        ))
    })?;
    let micro_head_dim = MicroBest::read(&dir.join("best.json"))
        .ok()
        .and_then(|b| b.head_dim);
    let evo_rows = read_evo_log(&run_dir.join("log.csv"))?;
    let correlation = micro_correlation(&CorrelationInputs {
        target,
        micro_rows: &micro_rows,
        micro_log: &micro_log,
        micro_head_dim,
        spec: &spec,
        evo_rows: &evo_rows,
        evo_run: run_dir,
    })?;
    let path = dir.join("correlation.json");
    correlation.write(&path)?;
    Ok((correlation, path))
}

/// The lines `cargo xtask micro --compare-evo` prints: the pairs, both ranks, the statistics and
/// what micro cannot predict.
pub fn correlation_lines(c: &MicroCorrelation) -> Vec<String> {
    let mut lines = vec![
        format!(
            "micro ({}) vs {} ({} on {}): {} configs measured by both (micro ranked {}, the search measured {} distinct {})",
            c.target,
            c.evo_run.display(),
            c.evo_target,
            c.shape,
            c.pairs.len(),
            c.micro_configs,
            c.evo_configs,
            c.knobs.join("/")
        ),
        format!(
            "  {:>10} {:>9} {:>14} {:>8}  config",
            "micro rank", "evo rank", "micro FLOP/cyc", "speedup"
        ),
    ];
    for p in &c.pairs {
        lines.push(format!(
            "  {:>10} {:>9} {:>14.1} {:>7.3}x  {}",
            p.micro_rank,
            p.evo_rank,
            p.micro_score,
            p.evo_speedup,
            format_knobs(&p.config)
        ));
    }
    lines.push(c.reading.clone());
    lines.push(format!("what micro cannot predict: {}", c.scope));
    lines
}
