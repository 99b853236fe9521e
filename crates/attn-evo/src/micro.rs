//! The micro-benchmark's tile configs and their ranking (`cargo xtask micro`, which seeds a search).

use attn_evidence::{CandidateStatus, EvoCandidate, MicroRanked};

use crate::log::knobs_to_strings;
use crate::space::Knobs;

/// What the micro ranking can and cannot predict (stored in `micro/best.json`).
pub const MICRO_SCOPE: &str = "micro predicts the load/pipeline throughput of tile shapes (cp.async depth, copy width, tile size) on one block per SM; it cannot predict softmax cost, register pressure, tensor-core use or the occupancy of a full attention kernel. Use its ranking to seed `cargo xtask evo --seed-from-micro`, not as a verdict.";

/// The knobs the micro-benchmark varies (the others of a config are fixed or derived).
pub const MICRO_KNOBS: [&str; 4] = ["BLOCK_M", "BLOCK_K", "STAGES", "VEC_WIDTH"];

/// Every BLOCK_M × BLOCK_K × STAGES × VEC_WIDTH tile config whose `STAGES`-deep ring of fp16
/// tiles fits `max_shared_per_block`, with `NUM_WARPS` and `SHARED_BYTES` set.
pub fn micro_tile_configs(max_shared_per_block: u32) -> Vec<Knobs> {
    let mut out = Vec::new();
    for m in [16, 32, 64, 128] {
        for k in [32, 64, 128] {
            for s in [1, 2, 3, 4] {
                for w in [4, 8, 16] {
                    let shared = s * m * k * 2;
                    if shared <= i64::from(max_shared_per_block) {
                        let pairs = [
                            ("BLOCK_M", m),
                            ("BLOCK_K", k),
                            ("STAGES", s),
                            ("VEC_WIDTH", w),
                            ("NUM_WARPS", 4),
                            ("SHARED_BYTES", shared),
                        ];
                        out.push(pairs.iter().map(|(n, v)| (n.to_string(), *v)).collect());
                    }
                }
            }
        }
    }
    out
}

/// The knobs of `config` the micro-benchmark varies ([`MICRO_KNOBS`]).
pub fn micro_knobs(config: &Knobs) -> Knobs {
    config
        .iter()
        .filter(|(k, _)| MICRO_KNOBS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// A config's ranking entry from its loop's cycles (median over blocks) for `tiles` tiles: tile
/// FLOPs (2 × BLOCK_M × BLOCK_K) per cycle.
pub fn micro_ranked(config: &Knobs, cycles: f64, tiles: usize) -> MicroRanked {
    let per_tile = cycles / tiles.max(1) as f64;
    let get = |name: &str| config.get(name).copied().unwrap_or(1);
    let flops = 2.0 * (get("BLOCK_M") * get("BLOCK_K")) as f64;
    MicroRanked {
        config: micro_knobs(config),
        cycles_per_tile: per_tile,
        flops_per_cycle: flops / per_tile,
    }
}

/// The micro log's rows (one per config, in order, scored by FLOPs per cycle) and the `top` best
/// of the ranking, from each config's loop cycles (or why there are none), compile and run
/// seconds, on a GPU whose SM clock peaks at `max_sm_mhz`.
pub fn micro_results(
    configs: &[Knobs],
    measured: impl IntoIterator<Item = (Result<f64, String>, f64, f64)>,
    tiles: usize,
    max_sm_mhz: u32,
    top: usize,
) -> (Vec<EvoCandidate>, Vec<MicroRanked>) {
    let mut rows = Vec::new();
    let mut ranked = Vec::new();
    for (config, (cycles, compile_s, run_s)) in configs.iter().zip(measured) {
        let mut row = EvoCandidate {
            generation: 0,
            config: knobs_to_strings(&micro_knobs(config)),
            status: CandidateStatus::Ok,
            median_us: None,
            speedup: None,
            speedup_lower: None,
            speedup_upper: None,
            score: None,
            compile_s: Some(compile_s),
            run_s: Some(run_s),
        };
        match cycles {
            Ok(cycles) => {
                let entry = micro_ranked(config, cycles, tiles);
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
