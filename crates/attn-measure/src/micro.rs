//! The GPU side of the `clock64()` micro-benchmark (`cargo xtask micro`): its two kernels, the
//! tile configs each one is measured at, and the measurement.
//!
//! - [`MicroTarget::Hopper`] (`kernels/micro_hopper.cu`): `hopper`'s pipeline (TMA producer warp,
//!   STAGES-deep mbarrier ring of BLOCK_N × HEAD_DIM K and V tiles, NUM_WARPS / 4 wgmma consumer
//!   warpgroups doing S = Q·Kᵀ, the online softmax and O += P·V per tile), launched as a `--src`
//!   kernel with `TENSOR_MAPS=1` and `PRODUCER_WARPS=4`, as many blocks per SM as fit.
//! - [`MicroTarget::CpAsync`] (`kernels/micro.cu`): the cp.async ring of BLOCK_N × HEAD_DIM K and
//!   V tiles that `mma` and `tiled` use, one FMA per loaded element, one block per SM.
//!
//! Each block streams `TILES` tiles and writes the cycles of its loop as the first 8 bytes × blocks
//! of the output; a config's result is the median over blocks of a few launches.

use std::path::Path;
use std::time::Instant;

use attn_evidence::MicroTarget;
use attn_kernels::compile::compile;
use attn_kernels::registry::{hopper_dynamic_shared, hopper_static_shared, Limits};
use attn_kernels::{Candidate, Config, Gpu, Prepared};
use attn_oracle::{generate, CaseSpec, DType, Distribution, Params, Shape};

use crate::baseline::median;
use crate::{MeasureError, Result};

/// Keys of the K and V every block streams its tiles from (a multiple of every BLOCK_N): 2 MiB
/// each at D = 128, resident in L2 as one head's K and V are for its row blocks in attention.
pub const MICRO_KEYS: usize = 8192;

/// Launches per config after a warm-up one; the result is the median of their block medians.
pub const MICRO_LAUNCHES: usize = 3;

/// The kernel of a target: its file name under `kernels/` and its source.
pub fn micro_kernel(target: MicroTarget) -> (&'static str, &'static str) {
    match target {
        MicroTarget::CpAsync => ("micro.cu", include_str!("../../../kernels/micro.cu")),
        MicroTarget::Hopper => (
            "micro_hopper.cu",
            include_str!("../../../kernels/micro_hopper.cu"),
        ),
    }
}

/// Every tile config of `target` at `head_dim` that fits `limits`, as the defines its kernel is
/// compiled with (without `TILES`): the ranked knobs ([`MicroTarget::knobs`], hopper's and mma's
/// names and domains, plus STAGES = 1 as the unpipelined reference) and what the launch needs.
///
/// ```
/// use attn_evidence::MicroTarget;
/// use attn_kernels::registry::{hopper_dynamic_shared, Limits};
/// let configs = attn_measure::micro::micro_configs(MicroTarget::Hopper, 128, &Limits::H100)?;
/// // 1 or 2 consumer warpgroups (3 need D = 64) × BLOCK_N 64, 128 × STAGES 1-4, less the two
/// // 4-deep rings of 128-key tiles, over 227 KiB.
/// assert_eq!(configs.len(), 14);
/// assert!(configs.iter().all(|c| c.get("TENSOR_MAPS") == Some(1)));
/// # Ok::<(), attn_measure::MeasureError>(())
/// ```
pub fn micro_configs(target: MicroTarget, head_dim: usize, limits: &Limits) -> Result<Vec<Config>> {
    let d = head_dim as i64;
    let max_shared = i64::from(limits.max_shared_per_block);
    let mut out = Vec::new();
    match target {
        MicroTarget::Hopper => {
            if head_dim != 64 && head_dim != 128 {
                return Err(MeasureError::Invalid(format!(
                    "the hopper micro-benchmark needs head dim 64 or 128 (hopper's), not {head_dim}"
                )));
            }
            for warps in [4, 8, 12] {
                if warps == 12 && head_dim != 64 {
                    continue; // 160 registers per consumer thread hold D = 64 only (hopper.cu)
                }
                for block_n in [64, 128] {
                    for stages in [1, 2, 3, 4] {
                        // hopper's own formula: the micro lays out Q and the ring as hopper does.
                        let tiles = Config::from_pairs(&[
                            ("BLOCK_M", 16 * warps),
                            ("BLOCK_N", block_n),
                            ("STAGES", stages),
                        ]);
                        let shared = i64::from(hopper_dynamic_shared(&tiles, head_dim as u32));
                        // The mbarriers' static shared memory sits beside the tiles.
                        if shared + i64::from(hopper_static_shared(&tiles)) > max_shared {
                            continue;
                        }
                        out.push(Config::from_pairs(&[
                            ("BLOCK_M", 16 * warps),
                            ("BLOCK_N", block_n),
                            ("NUM_WARPS", warps),
                            ("STAGES", stages),
                            ("PRODUCER_WARPS", 4),
                            ("TENSOR_MAPS", 1),
                            ("SHARED_BYTES", shared),
                        ]));
                    }
                }
            }
        }
        MicroTarget::CpAsync => {
            if head_dim == 0 || head_dim % 8 != 0 || head_dim > 256 {
                return Err(MeasureError::Invalid(format!(
                    "the cp-async micro-benchmark needs a head dim that is a multiple of 8 up to 256, not {head_dim}"
                )));
            }
            for block_n in [32, 48, 64, 96, 128] {
                for warps in [1, 2, 4, 8] {
                    for stages in [1, 2, 3, 4] {
                        let shared = stages * 2 * block_n * d * 2;
                        if shared > max_shared {
                            continue;
                        }
                        out.push(Config::from_pairs(&[
                            ("BLOCK_N", block_n),
                            ("NUM_WARPS", warps),
                            ("STAGES", stages),
                            ("VEC_WIDTH", 16),
                            ("SHARED_BYTES", shared),
                        ]));
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The `--src` candidate that runs `config` of `target` with `TILES` = `tiles`; `kernels_dir` is
/// the folder of the kernels (their headers are embedded, so any folder works).
pub fn micro_candidate(
    target: MicroTarget,
    config: &Config,
    tiles: usize,
    kernels_dir: &Path,
) -> Candidate {
    let (file, source) = micro_kernel(target);
    let mut defines = config.clone();
    defines.0.insert("TILES".into(), tiles as i64);
    Candidate::Source {
        path: kernels_dir.join(file),
        source: source.to_string(),
        entry: "attn_fwd".into(),
        defines,
    }
}

/// One tile config measured.
#[derive(Debug)]
pub struct MicroMeasured {
    /// The median of the launches' block medians of the loop's cycles, or why there is none.
    pub cycles: Result<f64>,
    /// Each timed launch's median over blocks.
    pub launch_medians: Vec<f64>,
    /// Blocks of the config one SM ran at once.
    pub blocks_per_sm: u32,
    /// Seconds its compile took.
    pub compile_s: f64,
    /// Seconds its measurement took.
    pub run_s: f64,
}

/// Every config of `target` (with `TILES` = `tiles`) at `head_dim` compiled on CPU threads, then
/// measured in order on `sms` × blocks per SM blocks (one per SM for cp-async, as many as fit for
/// hopper), on inputs drawn from `seed`.
pub fn measure_tile_configs(
    gpu: &Gpu,
    target: MicroTarget,
    configs: &[Config],
    head_dim: usize,
    tiles: usize,
    seed: u64,
    kernels_dir: &Path,
) -> Vec<MicroMeasured> {
    let candidates: Vec<Candidate> = configs
        .iter()
        .map(|c| micro_candidate(target, c, tiles, kernels_dir))
        .collect();
    let compile_s = compile_all(gpu, &candidates, head_dim);
    let sms = gpu.info().sm_count.max(1) as usize;
    candidates
        .iter()
        .zip(compile_s)
        .map(|(candidate, compile_s)| {
            let started = Instant::now();
            let measured = measure(gpu, target, candidate, head_dim, sms, seed);
            let (cycles, launch_medians, blocks_per_sm) = match measured {
                Ok((medians, resident)) => (Ok(median(&medians)), medians, resident),
                Err(e) => (Err(e), Vec::new(), 0),
            };
            MicroMeasured {
                cycles,
                launch_medians,
                blocks_per_sm,
                compile_s,
                run_s: started.elapsed().as_secs_f64(),
            }
        })
        .collect()
}

/// Compiles every config on CPU threads (NVRTC's disk cache makes the loads instant); seconds each.
fn compile_all(gpu: &Gpu, candidates: &[Candidate], head_dim: usize) -> Vec<f64> {
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
                    if let Ok(variant) = candidate.variant(DType::F16, head_dim, arch, limits) {
                        let _ = compile(&variant.request);
                    }
                    *out = started.elapsed().as_secs_f64();
                }
            });
        }
    });
    seconds
}

/// A plausible cycle count: positive, and under 2^40 (ten minutes at 2 GHz), which the poison
/// pattern of an unwritten output word is not.
fn plausible(cycles: i64) -> bool {
    cycles > 0 && cycles < 1 << 40
}

/// Each timed launch's median over blocks of one config's loop cycles (after a warm-up launch),
/// and the blocks per SM it ran with.
fn measure(
    gpu: &Gpu,
    target: MicroTarget,
    candidate: &Candidate,
    head_dim: usize,
    sms: usize,
    seed: u64,
) -> Result<(Vec<f64>, u32)> {
    let prepared = Prepared::new(gpu, candidate, DType::F16, head_dim)?;
    let block_m = candidate.knobs().get("BLOCK_M").unwrap_or(64) as usize;
    let resident = match target {
        MicroTarget::Hopper => {
            let probe = Shape::new(1, 1, block_m, MICRO_KEYS, head_dim)?;
            prepared.resident_blocks_per_sm(&probe)?.max(1)
        }
        MicroTarget::CpAsync => 1,
    };
    let blocks = sms * resident as usize;
    let shape = Shape::new(1, 1, block_m * blocks, MICRO_KEYS, head_dim)?;
    let inputs = generate(&CaseSpec {
        shape,
        dtype: DType::F16,
        distribution: Distribution::Normal,
        seed,
    });
    let (q, k, v) = (
        gpu.upload(&inputs.q)?,
        gpu.upload(&inputs.k)?,
        gpu.upload(&inputs.v)?,
    );
    let mut o = gpu.alloc_poisoned(q.dims, q.dtype)?;
    let params = Params::new(head_dim, false);
    let mut medians = Vec::new();
    for launch in 0..=MICRO_LAUNCHES {
        gpu.poison(&mut o)?;
        prepared.launch(gpu, &q, &k, &v, &mut o, &params)?;
        gpu.synchronize()?;
        if launch == 0 {
            continue; // the warm-up: instruction cache, TLBs, L2
        }
        let out = gpu.download(&o)?;
        let cycles: Vec<i64> = out
            .as_bytes()
            .chunks_exact(8)
            .take(blocks)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            .collect();
        if cycles.len() < blocks || !cycles.iter().all(|&c| plausible(c)) {
            let why = "a block reported no cycles (the kernel did not run as expected)";
            return Err(MeasureError::Invalid(why.into()));
        }
        let cycles: Vec<f64> = cycles.into_iter().map(|c| c as f64).collect();
        medians.push(median(&cycles));
    }
    Ok((medians, resident))
}
