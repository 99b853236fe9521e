//! `cargo xtask micro`: a `clock64()` micro-benchmark of tile configurations, ranked into
//! `evidence/micro/{log.csv,best.json}` for `cargo xtask evo --seed-from-micro` to start from.
//!
//! `kernels/micro.cu` streams tiles of BLOCK_M × BLOCK_K elements through a STAGES-deep cp.async
//! ring with VEC_WIDTH-byte copies and does BLOCK_M × BLOCK_K FMAs per tile, one block per SM; each
//! block times its loop with `clock64()`. Configs are ranked by tile FLOPs per cycle (the inverse of
//! cycles per tile-FLOP). It predicts the load/pipeline throughput of tile shapes, not the softmax,
//! register pressure or occupancy effects of a full attention kernel: a starting point for the
//! search, not a verdict.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use attn_evidence::{CandidateStatus, EvoCandidate, MicroBest};
use attn_evo::{micro_knobs, micro_ranked, micro_tile_configs, Knobs, MICRO_SCOPE};
use attn_kernels::compile::compile;
use attn_kernels::{Candidate, Config, Gpu, Prepared};
use attn_oracle::{generate, CaseSpec, DType, Distribution, Params, Shape};

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
    let source = include_str!("../../kernels/micro.cu");
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
    let candidates: Vec<Candidate> = configs
        .iter()
        .map(|c| {
            let mut defines = Config(c.clone());
            defines.0.insert("TILES".into(), tiles as i64);
            Candidate::Source {
                path: path.clone(),
                source: source.to_string(),
                entry: "attn_fwd".into(),
                defines,
            }
        })
        .collect();
    let compile_s = compile_all(&gpu, &candidates)?;

    let mut rows = Vec::new();
    let mut ranked = Vec::new();
    for ((config, candidate), compile_s) in configs.iter().zip(&candidates).zip(compile_s) {
        let started = Instant::now();
        let measured = measure(&gpu, candidate, config, blocks, args.seed);
        let mut row = EvoCandidate {
            generation: 0,
            config: attn_evo::knobs_to_strings(&micro_knobs(config)),
            status: CandidateStatus::Ok,
            median_us: None,
            speedup: None,
            speedup_lower: None,
            speedup_upper: None,
            score: None,
            compile_s: Some(compile_s),
            run_s: None,
        };
        match measured {
            Ok(cycles) => {
                let entry = micro_ranked(config, cycles, tiles);
                row.median_us = Some(cycles / f64::from(info.max_sm_mhz.max(1)));
                row.score = Some(entry.flops_per_cycle);
                ranked.push(entry);
            }
            Err(err) => row.status = CandidateStatus::invalid(crate::one_line(&err)),
        }
        row.run_s = Some(started.elapsed().as_secs_f64());
        rows.push(row);
    }
    ranked.sort_by(|a, b| b.flops_per_cycle.total_cmp(&a.flops_per_cycle));
    ranked.truncate(args.top.max(1));
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

/// Compiles every config on CPU threads (NVRTC's disk cache makes the loads instant); seconds each.
fn compile_all(gpu: &Gpu, candidates: &[Candidate]) -> anyhow::Result<Vec<f64>> {
    let (arch, limits) = (gpu.arch(), gpu.limits());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let chunk = candidates.len().div_ceil(threads).max(1);
    let mut seconds = vec![0.0; candidates.len()];
    std::thread::scope(|scope| {
        for (cands, out) in candidates.chunks(chunk).zip(seconds.chunks_mut(chunk)) {
            let (arch, limits) = (&arch, &limits);
            scope.spawn(move || {
                for (candidate, out) in cands.iter().zip(out) {
                    let started = Instant::now();
                    // A failure is reported again, per config, when it is loaded.
                    if let Ok(variant) = candidate.variant(DType::F16, 64, arch, limits) {
                        let _ = compile(&variant.request);
                    }
                    *out = started.elapsed().as_secs_f64();
                }
            });
        }
    });
    Ok(seconds)
}

/// The median over blocks of one config's loop cycles (after a warm-up launch).
fn measure(
    gpu: &Gpu,
    candidate: &Candidate,
    config: &Knobs,
    blocks: usize,
    seed: u64,
) -> anyhow::Result<f64> {
    let block_m = config.get("BLOCK_M").copied().unwrap_or(64) as usize;
    let shape = Shape::new(1, 1, block_m * blocks, 65_536, 64)?;
    let inputs = generate(&CaseSpec {
        shape,
        dtype: DType::F16,
        distribution: Distribution::Normal,
        seed,
    });
    let prepared = Prepared::new(gpu, candidate, DType::F16, 64)?;
    let params = Params::new(64, false);
    let mut out = None;
    for _ in 0..2 {
        out = Some(prepared.run(gpu, &inputs.q, &inputs.k, &inputs.v, &params)?);
    }
    let out = out.context("no run")?;
    let cycles: Vec<f64> = out
        .as_bytes()
        .chunks_exact(8)
        .take(blocks)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as f64)
        .collect();
    if cycles.iter().any(|c| *c <= 0.0) {
        anyhow::bail!("a block reported no cycles (the kernel did not run as expected)");
    }
    Ok(attn_measure::baseline::median(&cycles))
}
