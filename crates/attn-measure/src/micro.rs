//! The GPU side of the `clock64()` micro-benchmark (`cargo xtask micro`).
//!
//! `kernels/micro.cu` streams tiles of BLOCK_M × BLOCK_K elements through a STAGES-deep cp.async
//! ring with VEC_WIDTH-byte copies and does BLOCK_M × BLOCK_K FMAs per tile, one block per SM; each
//! block times its loop with `clock64()` and writes its cycles as the first 8 bytes of its output.
//! It predicts the load/pipeline throughput of tile shapes, not the softmax, register pressure or
//! occupancy of a full attention kernel.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use attn_kernels::compile::compile;
use attn_kernels::{Candidate, Config, Gpu, Prepared};
use attn_oracle::{generate, CaseSpec, DType, Distribution, Params, Shape};

use crate::{MeasureError, Result};

/// The micro-benchmark kernel.
const MICRO_SOURCE: &str = include_str!("../../../kernels/micro.cu");

/// One tile config measured.
#[derive(Debug)]
pub struct MicroMeasured {
    /// The median over blocks of its loop's cycles, or why there is none.
    pub cycles: Result<f64>,
    /// Seconds its compile took.
    pub compile_s: f64,
    /// Seconds its measurement took.
    pub run_s: f64,
}

/// Every config (with `TILES` = `tiles`) compiled on CPU threads, then measured in order on
/// `blocks` blocks. `path` is where `kernels/micro.cu` lives (its folder holds its header).
pub fn measure_tile_configs(
    gpu: &Gpu,
    configs: &[BTreeMap<String, i64>],
    tiles: usize,
    blocks: usize,
    seed: u64,
    path: &Path,
) -> Vec<MicroMeasured> {
    let candidates: Vec<Candidate> = configs
        .iter()
        .map(|c| {
            let mut defines = Config(c.clone());
            defines.0.insert("TILES".into(), tiles as i64);
            Candidate::Source {
                path: path.to_path_buf(),
                source: MICRO_SOURCE.to_string(),
                entry: "attn_fwd".into(),
                defines,
            }
        })
        .collect();
    let compile_s = compile_all(gpu, &candidates);
    let measured = configs.iter().zip(&candidates).zip(compile_s);
    measured
        .map(|((config, candidate), compile_s)| {
            let started = Instant::now();
            let block_m = config.get("BLOCK_M").copied().unwrap_or(64) as usize;
            let cycles = measure(gpu, candidate, block_m, blocks, seed);
            let run_s = started.elapsed().as_secs_f64();
            MicroMeasured {
                cycles,
                compile_s,
                run_s,
            }
        })
        .collect()
}

/// Compiles every config on CPU threads (NVRTC's disk cache makes the loads instant); seconds each.
fn compile_all(gpu: &Gpu, candidates: &[Candidate]) -> Vec<f64> {
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
    seconds
}

/// The median over blocks of one config's loop cycles (after a warm-up launch).
fn measure(
    gpu: &Gpu,
    candidate: &Candidate,
    block_m: usize,
    blocks: usize,
    seed: u64,
) -> Result<f64> {
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
    let out = out.ok_or_else(|| MeasureError::Invalid("no run".into()))?;
    let cycles: Vec<f64> = out
        .as_bytes()
        .chunks_exact(8)
        .take(blocks)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as f64)
        .collect();
    if cycles.iter().any(|c| *c <= 0.0) {
        let why = "a block reported no cycles (the kernel did not run as expected)";
        return Err(MeasureError::Invalid(why.into()));
    }
    Ok(crate::baseline::median(&cycles))
}
