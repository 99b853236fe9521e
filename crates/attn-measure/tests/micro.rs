//! The micro-benchmark's kernels: every config of every target compiles with NVRTC for sm_90a
//! (CPU; needs NVRTC, which `cargo xtask test` provides) and assembles with ptxas without spills
//! where ptxas is found; on a GPU, the hopper micro reports sane cycles.

use std::path::Path;

use attn_evidence::MicroTarget;
use attn_kernels::compile::{self, Arch};
use attn_kernels::registry::Limits;
use attn_kernels::Config;
use attn_measure::micro::{micro_candidate, micro_configs};
use attn_oracle::DType;

fn kernels_dir() -> &'static Path {
    Path::new("../../kernels")
}

#[test]
fn every_micro_config_compiles_for_sm_90a_without_spills() {
    let arch = Arch("compute_90a".into());
    let ptxas = attn_kernels::toolkit::ptxas_path();
    let mut compiled = 0;
    for target in MicroTarget::ALL {
        for head_dim in [64, 128] {
            let configs = micro_configs(target, head_dim, &Limits::H100).unwrap();
            assert!(
                configs.len() >= 12,
                "{target} D={head_dim}: {} configs",
                configs.len()
            );
            for config in configs {
                let candidate = micro_candidate(target, &config, 64, kernels_dir());
                let what = format!("{target} D={head_dim} [{config}]");
                let variant = candidate
                    .variant(DType::F16, head_dim, &arch, &Limits::H100)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let ptx = compile::compile(&variant.request)
                    .unwrap_or_else(|e| panic!("{what}: {e}"))
                    .ptx;
                assert!(ptx.contains(".entry attn_fwd"), "{what}: no entry");
                if ptxas.is_some() {
                    let res = compile::ptxas_resources(&ptx, &arch, variant.entry)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert!(!res.uses_local_memory(), "{what}: spills {res:?}");
                }
                compiled += 1;
            }
        }
    }
    assert!(compiled >= 100, "only {compiled} micro configs compiled");
}

/// The configs of each target: ranked knobs with the implementations' names, geometry defines
/// that fit the device, and the head dims each target refuses.
#[test]
fn micro_configs_fit_the_device_and_carry_their_launch_defines() {
    for target in MicroTarget::ALL {
        for head_dim in [64usize, 128] {
            let configs = micro_configs(target, head_dim, &Limits::H100).unwrap();
            for config in &configs {
                for knob in target.knobs() {
                    assert!(
                        config.get(knob).is_some(),
                        "{target}: {knob} missing in {config}"
                    );
                }
                let shared = config.get("SHARED_BYTES").unwrap();
                assert!((1..=232_448).contains(&shared), "{target}: {config}");
                let stages = config.get("STAGES").unwrap();
                assert!((1..=4).contains(&stages), "{target}: {config}");
            }
            // The unpipelined reference and a deep ring are both there.
            for stages in [1, 3] {
                assert!(
                    configs.iter().any(|c| c.get("STAGES") == Some(stages)),
                    "{target}"
                );
            }
        }
    }
    let hopper = micro_configs(MicroTarget::Hopper, 64, &Limits::H100).unwrap();
    for config in &hopper {
        let (m, w) = (
            config.get("BLOCK_M").unwrap(),
            config.get("NUM_WARPS").unwrap(),
        );
        assert_eq!(m, 16 * w, "hopper's BLOCK_M = 16 x NUM_WARPS: {config}");
        assert_eq!(config.get("PRODUCER_WARPS"), Some(4));
        assert_eq!(config.get("TENSOR_MAPS"), Some(1));
    }
    assert!(hopper.iter().any(|c| c.get("NUM_WARPS") == Some(12)));
    let d128 = micro_configs(MicroTarget::Hopper, 128, &Limits::H100).unwrap();
    assert!(
        d128.iter().all(|c| c.get("NUM_WARPS") != Some(12)),
        "12 warps need D = 64"
    );
    // A smaller device keeps only the rings that fit it.
    let small = Limits {
        max_threads_per_block: 1024,
        max_shared_per_block: 48 * 1024,
        ..Limits::H100
    };
    let fitting = micro_configs(MicroTarget::CpAsync, 128, &small).unwrap();
    assert!(!fitting.is_empty());
    assert!(fitting
        .iter()
        .all(|c| c.get("SHARED_BYTES").unwrap() <= 48 * 1024));
    for (target, head_dim) in [(MicroTarget::Hopper, 96), (MicroTarget::CpAsync, 12)] {
        let err = micro_configs(target, head_dim, &Limits::H100).unwrap_err();
        assert!(err.to_string().contains("head dim"), "{err}");
    }
}

/// On the GPU: the hopper micro at D = 128 with two consumer warpgroups (one block per SM: their
/// registers fill it), BLOCK_N 64 and 128, each at STAGES 1 (load, then compute, in turn) and 3.
/// Every config reports positive cycles per tile within a plausible range, and the 3-deep ring is
/// not slower than no ring beyond noise (three times the spread of its launches plus 5%): at equal
/// blocks per SM, a ring that overlaps loads with compute cannot lose to one that serialises them
/// unless something is broken. (One warpgroup is left out: its unpipelined config fits twice on an
/// SM where the ring fits once, and two interleaved blocks hide latency as a ring does.) Seen on an
/// H100: 3696 against 2597 cycles a tile at BLOCK_N 128.
#[test]
#[ignore = "needs a CUDA GPU"]
fn hopper_micro_cycles_are_sane_and_a_ring_is_not_slower_than_none() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let gpu = attn_kernels::Gpu::open(0).unwrap();
    if gpu.arch().0 != "compute_90a" {
        eprintln!("skipped: the hopper micro needs an sm_90 GPU");
        return;
    }
    let seed = attn_measure::provenance::fresh_seed();
    eprintln!("seed {seed}");
    let all = micro_configs(MicroTarget::Hopper, 128, &gpu.limits()).unwrap();
    let pick = |block_n: i64, stages: i64| -> Config {
        all.iter()
            .find(|c| {
                c.get("NUM_WARPS") == Some(8)
                    && c.get("BLOCK_N") == Some(block_n)
                    && c.get("STAGES") == Some(stages)
            })
            .cloned()
            .unwrap()
    };
    let configs = [pick(64, 1), pick(64, 3), pick(128, 1), pick(128, 3)];
    let tiles = 64;
    let measured = attn_measure::micro::measure_tile_configs(
        &gpu,
        MicroTarget::Hopper,
        &configs,
        128,
        tiles,
        seed,
        kernels_dir(),
    );
    let mut per_tile = Vec::new();
    for (config, m) in configs.iter().zip(&measured) {
        let cycles = *m
            .cycles
            .as_ref()
            .unwrap_or_else(|e| panic!("[{config}]: {e}"));
        let tile = cycles / tiles as f64;
        eprintln!(
            "[{config}] {tile:.0} cycles/tile, {} blocks/SM, launches {:?}",
            m.blocks_per_sm, m.launch_medians
        );
        // A 128 × 128 × 128 tile is 8.4 MFLOP of wgmma: at least ~2000 cycles at the H100's dense
        // peak per SM, and far under a million unless the pipeline stalls.
        assert!(
            (500.0..1e6).contains(&tile),
            "[{config}]: {tile} cycles per tile"
        );
        let spread = {
            let (lo, hi) = m
                .launch_medians
                .iter()
                .fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
            (hi - lo) / cycles
        };
        per_tile.push((tile, spread, m.blocks_per_sm));
    }
    for (unpipelined, ring) in [(0, 1), (2, 3)] {
        let ((none, _, none_blocks), (deep, spread, deep_blocks)) =
            (per_tile[unpipelined], per_tile[ring]);
        assert_eq!(
            none_blocks, deep_blocks,
            "[{}] and [{}] must share an SM alike to compare",
            configs[unpipelined], configs[ring]
        );
        let tolerance = 0.05 + 3.0 * spread;
        assert!(
            deep <= none * (1.0 + tolerance),
            "[{}] {deep:.0} cycles/tile is slower than [{}] {none:.0} beyond {tolerance:.3}",
            configs[ring],
            configs[unpipelined]
        );
    }
}
