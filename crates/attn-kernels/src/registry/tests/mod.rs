//! The registry's CPU tests: variants, per-shape rules, constraints.

use super::*;
use crate::config::names::{
    BLOCK_M, BLOCK_N, CLUSTER, KV_SPLIT, LAZY_RESCALE, NUM_WARPS, PINGPONG, Q_REGS, Q_STAGES,
    SCHEDULE, STAGES, STREAM_K, WARP_M,
};
use crate::config::KnobName;

/// The per-shape rules: the values a shape runs some knobs with, without a mask (tuned or the
/// defaults; empty: no tuning at all), and that the result is a valid config for the H100.
fn check(implementation: &str, shape: (usize, usize, usize, usize), expected: &[(KnobName, i64)]) {
    check_masked(implementation, shape, false, expected);
}

/// `implementation`'s tuned knobs for a square `(b, h, s, d)` problem, causal or not.
pub(super) fn tuned_at(
    implementation: &str,
    (b, h, s, d): (usize, usize, usize, usize),
    causal: bool,
) -> Config {
    find(implementation).unwrap().tuned_for(
        &Shape::new(b, h, s, s, d).unwrap(),
        &Params::new(d, causal),
        &Limits::H100,
    )
}

/// [`check`] with or without the causal mask.
fn check_masked(
    implementation: &str,
    (b, h, s, d): (usize, usize, usize, usize),
    causal: bool,
    expected: &[(KnobName, i64)],
) {
    let imp = find(implementation).unwrap();
    let tuned = tuned_at(implementation, (b, h, s, d), causal);
    // A knob's value as the shape runs it: tuned, else the default.
    let effective = imp.default_config(d).merged(&tuned);
    for (name, value) in expected {
        assert_eq!(
            effective.get(name),
            Some(*value),
            "{implementation} {b},{h},{s},{d} causal={causal}: {name} in {tuned:?}"
        );
    }
    if expected.is_empty() {
        assert_eq!(tuned, Config::default(), "{implementation} {b},{h},{s},{d}");
    }
    imp.resolve(&tuned, d, &Limits::H100)
        .unwrap_or_else(|e| panic!("{implementation} {b},{h},{s},{d}: {e}"));
}

#[test]
fn variants_are_declared_and_the_rest_refused_by_name() {
    let gqa: Shape = "2,32/8,512,128".parse().unwrap();
    let plain = Params::new(128, true);
    let window = plain.with_window(attn_oracle::Window {
        left: Some(64),
        right: None,
    });
    for name in ["naive", "tiled", "mma", "hopper"] {
        let v = find(name).unwrap().variants;
        assert_eq!(v.missing(&gqa, &window, false), None, "{name}");
    }
    let cublas = find("cublas").unwrap().variants;
    assert_eq!(cublas.missing(&Shape::single(128), &plain, false), None);
    assert_eq!(
        cublas.missing(&gqa, &plain, false),
        Some("grouped-query / multi-query heads")
    );
    assert_eq!(
        cublas.missing(&Shape::single(128), &window, false),
        Some("sliding windows")
    );
    assert!(cublas
        .missing(&Shape::single(128), &plain, true)
        .unwrap()
        .contains("varlen"));
    assert_eq!(Variants::ALL.missing(&gqa, &window, true), None);
    assert_eq!(Variants::DENSE.describe(), "gqa, window");
    assert_eq!(Variants::NONE.describe(), "none");
}

#[test]
fn small_grids_get_their_own_knobs_and_large_ones_the_defaults() {
    // mma: 16-row blocks with 4-way split keys while 2 blocks/SM still hold the grid, then
    // 32-row blocks with a 2-way split; D=128 and full grids keep the defaults.
    check("mma", (1, 8, 512, 64), &[(BLOCK_M, 16), (KV_SPLIT, 4)]);
    check("mma", (2, 8, 512, 64), &[(BLOCK_M, 32), (KV_SPLIT, 2)]);
    check("mma", (2, 16, 8192, 64), &[]);
    check("mma", (1, 8, 512, 128), &[]);
    // hopper: one 64-row warpgroup under one wave of default blocks, at either head dim.
    check(
        "hopper",
        (1, 8, 512, 64),
        &[(BLOCK_M, 64), (NUM_WARPS, 4), (PINGPONG, 0)],
    );
    check("hopper", (2, 8, 512, 64), &[(BLOCK_M, 64), (NUM_WARPS, 4)]);
    check(
        "hopper",
        (1, 8, 1024, 128),
        &[(BLOCK_M, 64), (NUM_WARPS, 4)],
    );
    // At D=128 the 64-row grid of (2,16,512,128) needs two waves: the defaults' one wave.
    for causal in [false, true] {
        let tuned = tuned_at("hopper", (2, 16, 512, 128), causal);
        assert_eq!(tuned.get(BLOCK_M), None, "{tuned:?}");
    }
    // Full grids: two Q tiles in the persistent loop (D=128: in a 2-stage ring) at D=64, and
    // at D=128 at every length, without a mask (the stream-K tail cut) and under a causal one;
    // conditional rescaling from 4096 keys.
    let two_q = [(SCHEDULE, 1), (Q_REGS, 0), (Q_STAGES, 2), (CLUSTER, 2)];
    let two_q_128 = [two_q.as_slice(), &[(STAGES, 2)]].concat();
    let lazy = [(LAZY_RESCALE, 1)];
    // The stream-K tail: the static order of an unmasked problem only, from 2048 keys at D=64
    // and 4096 at D=128.
    let cut = |causal: bool| [(STREAM_K, i64::from(!causal))];
    let whole = [(STREAM_K, 0)];
    for causal in [false, true] {
        for (b, h, s) in [(2, 32, 1024), (2, 16, 2048), (2, 16, 8192), (2, 16, 16384)] {
            let lazy: &[_] = if s >= 4096 {
                &lazy
            } else {
                &[(LAZY_RESCALE, 0)]
            };
            let tail: &[_] = if s >= 2048 { &cut(causal) } else { &whole };
            check_masked(
                "hopper",
                (b, h, s, 64),
                causal,
                &[two_q.as_slice(), lazy, tail].concat(),
            );
        }
    }
    // From 2048 keys a row on average (causal: from 4096 rows) with 160-key tiles.
    let keys = |n| [(BLOCK_N, n)];
    for (s, causal, knobs) in [
        (
            1024,
            false,
            [two_q_128.as_slice(), &keys(128), &whole].concat(),
        ),
        (
            2048,
            false,
            [two_q_128.as_slice(), &keys(160), &whole].concat(),
        ),
        (
            4096,
            false,
            [two_q_128.as_slice(), &keys(160), &lazy, &cut(false)].concat(),
        ),
        (
            8192,
            false,
            [two_q_128.as_slice(), &keys(160), &lazy, &cut(false)].concat(),
        ),
        (
            16384,
            false,
            [two_q_128.as_slice(), &keys(160), &lazy, &cut(false)].concat(),
        ),
        (
            2048,
            true,
            [two_q_128.as_slice(), &keys(128), &cut(true)].concat(),
        ),
        (
            4096,
            true,
            [two_q_128.as_slice(), &keys(160), &lazy].concat(),
        ),
        (
            8192,
            true,
            [two_q_128.as_slice(), &keys(160), &lazy].concat(),
        ),
        (
            16384,
            true,
            [two_q_128.as_slice(), &keys(160), &lazy].concat(),
        ),
    ] {
        check_masked("hopper", (2, 16, s, 128), causal, &knobs);
    }
    // A causal window takes two Q tiles at any length, with 160-key tiles from 2048 keys a
    // row; a window both ways takes them only from there, else keeps the grid.
    let long = Shape::new(2, 16, 16384, 16384, 128).unwrap();
    let hopper = find("hopper").unwrap();
    let bounded = |(left, causal), right| {
        Params::new(128, causal).with_window(attn_oracle::Window {
            left: Some(left),
            right,
        })
    };
    let knobs_under = |left, right| {
        let cfg = hopper.tuned_for(&long, &bounded(left, right), &Limits::H100);
        (cfg.get(Q_STAGES), cfg.get(BLOCK_N))
    };
    assert_eq!(knobs_under((4096, true), None), (Some(2), Some(160)));
    assert_eq!(knobs_under((1024, true), None), (Some(2), None));
    assert_eq!(knobs_under((2048, false), Some(2048)), (Some(2), Some(160)));
    let narrow = hopper.tuned_for(&long, &bounded((512, false), Some(512)), &Limits::H100);
    assert_eq!(narrow, Config::from_pairs(&lazy), "{narrow:?}");
    check_masked(
        "hopper",
        (1, 8, 512, 64),
        true,
        &[(BLOCK_M, 64), (NUM_WARPS, 4)],
    );
    let small = find("hopper").unwrap().tuned_for(
        &Shape::new(1, 8, 512, 512, 64).unwrap(),
        &Params::new(64, true),
        &Limits::H100,
    );
    assert_eq!(small.get(SCHEDULE), None, "{small:?}");
    check_masked("mma", (2, 16, 8192, 64), true, &[]);
}

#[test]
fn mma_rejects_tiles_that_do_not_split_over_the_threads() {
    let mma = find("mma").unwrap();
    // 8 warps, BLOCK_N 48 at D=64: 48 rows × 8 chunks = 384 chunks over 256 threads.
    let overrides =
        Config::from_pairs(&[(NUM_WARPS, 8), (WARP_M, 16), (BLOCK_M, 128), (BLOCK_N, 48)]);
    let err = mma
        .resolve(&overrides, 64, &Limits::H100)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("does not split evenly over 256 threads"),
        "{err}"
    );
    // The same tile with 4 warps (128 threads) is fine.
    let ok = Config::from_pairs(&[(NUM_WARPS, 4), (WARP_M, 32), (BLOCK_M, 128), (BLOCK_N, 48)]);
    mma.resolve(&ok, 64, &Limits::H100).unwrap();
}

mod hopper;

#[test]
fn the_tuning_sizes_grids_by_the_devices_sms() {
    let shape = Shape::new(2, 16, 2048, 2048, 64).unwrap();
    let params = Params::new(64, false);
    let wide = DeviceLimits {
        sm_count: 1024,
        ..DeviceLimits::H100
    };
    // 512 blocks of 128 rows: a full grid on 132 SMs, under one wave on 1024.
    let mma = find("mma").unwrap();
    assert_eq!(
        mma.tuned_for(&shape, &params, &DeviceLimits::H100),
        Config::default()
    );
    assert_eq!(mma.tuned_for(&shape, &params, &wide).get(KV_SPLIT), Some(2));
    let hopper = find("hopper").unwrap();
    assert_eq!(
        hopper
            .tuned_for(&shape, &params, &DeviceLimits::H100)
            .get(Q_STAGES),
        Some(2)
    );
    assert_eq!(
        hopper.tuned_for(&shape, &params, &wide).get(NUM_WARPS),
        Some(4)
    );
    // The H200 has the H100's SMs and shared memory: the same tuning everywhere.
    for imp in registry() {
        for (b, h, s, d) in [(1, 8, 512, 64), (2, 16, 1024, 64), (2, 16, 8192, 128)] {
            for causal in [false, true] {
                let shape = Shape::new(b, h, s, s, d).unwrap();
                let params = Params::new(d, causal);
                assert_eq!(
                    imp.tuned_for(&shape, &params, &DeviceLimits::H100),
                    imp.tuned_for(&shape, &params, &DeviceLimits::H200),
                    "{} {b},{h},{s},{d}",
                    imp.name
                );
            }
        }
    }
}

#[test]
fn the_device_picks_the_best_implementation_that_runs_on_it() {
    let best = |capability, name| best_for(capability, name).unwrap();
    let h200 = best((9, 0), "NVIDIA H200");
    assert_eq!(h200.implementation.name, "hopper");
    assert_eq!(
        h200.reason,
        "best registered implementation for sm_90 (NVIDIA H200): hopper (sm_90a TMA + wgmma; mma elsewhere)"
    );
    for (capability, name) in [
        ((8, 0), "NVIDIA A100-SXM4-80GB"),
        ((8, 9), "NVIDIA L40S"),
        ((10, 0), "NVIDIA B200"),
    ] {
        let chosen = best(capability, name);
        assert_eq!(chosen.implementation.name, "mma", "{name}");
        assert!(
            chosen.reason.contains(name) && chosen.reason.contains("hopper needs sm_90"),
            "{}",
            chosen.reason
        );
    }
    let err = best_for((7, 5), "Tesla T4").unwrap_err().to_string();
    assert!(
        err.contains("sm_75 (Tesla T4)") && err.contains("mma needs sm_80 or newer"),
        "{err}"
    );
    // Every implementation bound to one architecture runs on that capability alone.
    for imp in registry() {
        if imp.arch.is_some() {
            assert!(matches!(imp.gpus, Gpus::Only(_)), "{}", imp.name);
        }
    }
}

#[test]
fn a_named_implementation_wins_over_the_device_and_an_unknown_name_is_an_error() {
    let chosen = select(Some("mma"), (9, 0), "NVIDIA H200").unwrap();
    assert_eq!(chosen.implementation.name, "mma");
    assert_eq!(chosen.reason, "implementation mma: named by --impl");
    let named = named(Some("hopper")).unwrap().unwrap();
    assert_eq!(named.implementation.name, "hopper");
    let err = select(Some("nope"), (9, 0), "NVIDIA H200")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown implementation `nope`") && err.contains("hopper"),
        "{err}"
    );
}
