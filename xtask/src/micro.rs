//! `cargo xtask micro`: a `clock64()` micro-benchmark of tile configurations of one pipeline
//! (`--target hopper`: TMA + wgmma; `cp-async`: mma's and tiled's), ranked by FLOPs per cycle per
//! SM into `evidence/micro/<target>/{log.csv,best.json}` for `cargo xtask evo --seed-from-micro`
//! to start from; `--compare-evo RUN` says how well that ranking predicted a search's
//! (`correlation.json`). The kernels and configs are `attn_measure::micro`; ranking, seeds and
//! the correlation are `attn_evo`.

use std::path::PathBuf;

use anyhow::bail;
use attn_evidence::{MicroBest, MicroTarget};
use attn_evo::{micro_results, micro_scope, Knobs, MicroOutcome};
use attn_kernels::Gpu;

/// Arguments of `cargo xtask micro`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pipeline: hopper (TMA producer, mbarrier ring, wgmma consumers; sm_90) or cp-async
    /// (mma's and tiled's). Default: hopper, or with --compare-evo the one that seeds the run's
    /// implementation.
    #[arg(long)]
    pub target: Option<MicroTarget>,
    /// Head dim of the tiles (64 or 128 for hopper).
    #[arg(long, default_value_t = 128)]
    pub head_dim: usize,
    /// How many of the best configs `best.json` keeps.
    #[arg(long, default_value_t = 8)]
    pub top: usize,
    /// Tiles each block streams.
    #[arg(long, default_value_t = 64)]
    pub tiles: usize,
    /// Seed of the streamed data (recorded).
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Evidence folder (results go to <DIR>/micro/<target>/).
    #[arg(long, default_value = "evidence")]
    pub evidence: PathBuf,
    /// Measure nothing: compare micro's ranking with the one measured by this search
    /// (`evidence/evo/<run>`) and write `correlation.json` (no GPU needed).
    #[arg(long, value_name = "RUN_DIR")]
    pub compare_evo: Option<PathBuf>,
}

/// Runs the subcommand; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    if let Some(run_dir) = &args.compare_evo {
        let (correlation, path) =
            attn_evo::correlate_with_search(&args.evidence, run_dir, args.target)?;
        for line in attn_evo::correlation_lines(&correlation) {
            println!("{line}");
        }
        println!("evidence: {}", path.display());
        return Ok(0);
    }
    let target = args.target.unwrap_or(MicroTarget::Hopper);
    // The head dim is checked before the GPU is opened; its limits then choose the configs.
    attn_measure::micro::micro_configs(target, args.head_dim, &attn_kernels::Limits::H100)?;
    let gpu = Gpu::open(0)?;
    if target == MicroTarget::Hopper && gpu.arch().0 != "compute_90a" {
        bail!(
            "the hopper micro-benchmark needs an sm_90 GPU (TMA, wgmma), not {}: use --target cp-async",
            gpu.arch().sm()
        );
    }
    let info = gpu.info().clone();
    let configs = attn_measure::micro::micro_configs(target, args.head_dim, &gpu.limits())?;
    let tiles = args.tiles.max(1);
    println!(
        "micro ({target}): {} tile configs at head dim {} on {} ({} SMs, {tiles} tiles a block, seed {})\n{}",
        configs.len(),
        args.head_dim,
        info.name,
        info.sm_count,
        args.seed,
        micro_scope(target)
    );
    let kernels = crate::workspace_root().join("kernels");
    let measured = attn_measure::micro::measure_tile_configs(
        &gpu,
        target,
        &configs,
        args.head_dim,
        tiles,
        args.seed,
        &kernels,
    );
    let outcomes = measured.into_iter().map(|m| MicroOutcome {
        cycles: m.cycles.map_err(|e| crate::one_line(&e.into())),
        blocks_per_sm: m.blocks_per_sm,
        compile_s: m.compile_s,
        run_s: m.run_s,
    });
    let knobs: Vec<Knobs> = configs.into_iter().map(|c| c.0).collect();
    let (rows, ranked) = micro_results(
        target,
        args.head_dim,
        &knobs,
        outcomes,
        tiles,
        info.max_sm_mhz,
        args.top,
    );
    let dir = target.dir(&args.evidence);
    attn_evidence::write_evo_log(&dir.join("log.csv"), &rows)?;
    for row in rows.iter().filter(|r| !r.status.is_ok()) {
        println!("{}", attn_evo::row_line(row));
    }
    for (i, r) in ranked.iter().enumerate() {
        println!(
            "{:>2}. {:<45} {:>8.1} cycles/tile  {} block(s)/SM  {:>7.1} FLOP/cycle/SM",
            i + 1,
            attn_evo::format_knobs(&r.config),
            r.cycles_per_tile,
            r.blocks_per_sm,
            r.flops_per_cycle
        );
    }
    if ranked.is_empty() {
        println!("micro: no config ran; no best.json");
        return Ok(crate::EXIT_FAILED);
    }
    let best = MicroBest {
        kind: MicroBest::KIND,
        target,
        gpu: info.name.clone(),
        head_dim: Some(args.head_dim),
        seed: args.seed,
        tiles,
        blocks: info.sm_count.max(1) as usize,
        configs: rows.len(),
        metric: attn_evo::micro_metric(target).into(),
        top: ranked,
        scope: micro_scope(target).into(),
        provenance: crate::provenance::collect(&gpu, None, None, None),
    };
    best.write(&dir.join("best.json"))?;
    println!("evidence: {}", dir.display());
    Ok(0)
}
