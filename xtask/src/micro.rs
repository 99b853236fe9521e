//! `cargo xtask micro`: a `clock64()` micro-benchmark of tile configurations
//! (`attn_measure::micro`), ranked by tile FLOPs per cycle into `evidence/micro/{log.csv,best.json}`
//! for `cargo xtask evo --seed-from-micro` to start from: a starting point, not a verdict.

use std::path::PathBuf;

use attn_evidence::MicroBest;
use attn_evo::{micro_results, micro_tile_configs, MICRO_SCOPE};
use attn_kernels::Gpu;

/// Arguments of `cargo xtask micro`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How many of the best configs `best.json` keeps.
    #[arg(long, default_value_t = 8)]
    pub top: usize,
    /// Tiles each block streams.
    #[arg(long, default_value_t = 64)]
    pub tiles: usize,
    /// Seed of the streamed data (recorded).
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Evidence folder (results go to <DIR>/micro/).
    #[arg(long, default_value = "evidence")]
    pub evidence: PathBuf,
}

/// Runs the subcommand; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let gpu = Gpu::open(0)?;
    let info = gpu.info().clone();
    let blocks = info.sm_count.max(1) as usize;
    let path = crate::workspace_root().join("kernels").join("micro.cu");
    let tiles = args.tiles.max(1);
    let configs = micro_tile_configs(gpu.limits().max_shared_per_block);
    println!(
        "micro: {} tile configs on {} ({} blocks, {} tiles each, seed {})\n{MICRO_SCOPE}",
        configs.len(),
        info.name,
        blocks,
        tiles,
        args.seed
    );
    let measured =
        attn_measure::micro::measure_tile_configs(&gpu, &configs, tiles, blocks, args.seed, &path);
    let measured = measured.into_iter().map(|m| {
        let cycles = m.cycles.map_err(|e| crate::one_line(&e.into()));
        (cycles, m.compile_s, m.run_s)
    });
    let (rows, ranked) = micro_results(&configs, measured, tiles, info.max_sm_mhz, args.top);
    let dir = args.evidence.join("micro");
    attn_evidence::write_evo_log(&dir.join("log.csv"), &rows)?;
    for (i, r) in ranked.iter().enumerate() {
        println!(
            "{:>2}. {:<50} {:>8.1} cycles/tile  {:>6.2} FLOP/cycle",
            i + 1,
            attn_evo::format_knobs(&r.config),
            r.cycles_per_tile,
            r.flops_per_cycle
        );
    }
    let best = MicroBest {
        kind: MicroBest::KIND.into(),
        gpu: info.name.clone(),
        seed: args.seed,
        tiles,
        blocks,
        configs: rows.len(),
        top: ranked,
        scope: MICRO_SCOPE.into(),
        provenance: crate::provenance::collect(&gpu, None, None, None),
    };
    best.write(&dir.join("best.json"))?;
    println!("evidence: {}", dir.display());
    Ok(0)
}
