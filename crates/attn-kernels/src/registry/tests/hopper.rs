//! hopper's constraints, yielding knobs and per-shape rules.

use super::tuned_at;
use crate::config::names::{
    BLOCK_M, BLOCK_N, CLUSTER, CLUSTER_HEADS, NUM_WARPS, Q_REGS, Q_STAGES, SCHEDULE, STAGES,
};
use crate::registry::*;
use crate::Config;
use attn_oracle::{Params, Shape};

/// hopper's config for `config` (`K=V,...`) at `head_dim`, or the reason it is invalid.
fn resolve(config: &str, head_dim: usize) -> std::result::Result<Config, String> {
    find("hopper")
        .unwrap()
        .resolve(&config.parse().unwrap(), head_dim, &Limits::H100)
        .map_err(|e| e.to_string())
}

#[test]
fn q_in_registers_yields_where_other_knobs_rule_it_out_unless_asked_for() {
    let hopper = find("hopper").unwrap();
    let q_regs = |config: &str, head_dim: usize| resolve(config, head_dim).unwrap().get(Q_REGS);
    assert_eq!(q_regs("", 128), Some(1));
    assert_eq!(q_regs("", 64), Some(0));
    // The persistent schedule keeps Q in registers; 176-key tiles and the unoverlapped loop
    // take Q from shared memory.
    assert_eq!(q_regs("SCHEDULE=1", 128), Some(1));
    assert_eq!(q_regs("BLOCK_N=176,STAGES=2", 128), Some(0));
    assert_eq!(q_regs("OVERLAP=0,PINGPONG=0", 128), Some(0));
    let small = hopper.tuned_for(
        &Shape::new(1, 8, 512, 512, 128).unwrap(),
        &Params::new(128, false),
        &Limits::H100,
    );
    let small = hopper.resolve(&small, 128, &Limits::H100).unwrap();
    assert_eq!(
        (small.get(NUM_WARPS), small.get(Q_REGS)),
        (Some(4), Some(0))
    );
    // Named, it does not yield: the reason says what to change.
    let err = resolve("Q_REGS=1,OVERLAP=0,PINGPONG=0", 128).unwrap_err();
    assert!(
        err.contains("OVERLAP=1") && err.contains("Q_REGS=0"),
        "{err}"
    );
    // Causal tunings keep what was measured: the persistent loop, Q in shared memory.
    let causal = hopper.tuned_for(
        &Shape::new(2, 16, 2048, 2048, 128).unwrap(),
        &Params::new(128, true),
        &Limits::H100,
    );
    assert_eq!(
        (causal.get(SCHEDULE), causal.get(Q_REGS)),
        (Some(1), Some(0))
    );
    // A reason that yielding does not remove is the one reported.
    let err = resolve("BLOCK_N=176", 128).unwrap_err();
    assert!(err.contains("shared memory"), "{err}");
}

#[test]
fn hopper_clusters_over_heads_pair_heads_not_row_blocks() {
    let hopper = find("hopper").unwrap();
    let shape = Shape {
        kv_heads: 4,
        ..Shape::new(2, 8, 300, 300, 128).unwrap()
    };
    let geometry = |config: &str| {
        let cfg = resolve(config, 128).unwrap();
        hopper.geometry(&cfg, &shape).unwrap()
    };
    let two_q = "CLUSTER=2,SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2";
    // Row pairs: 3 row blocks of 128 rounded up to 4; head pairs: 3, two heads together.
    let rows = geometry(two_q);
    assert_eq!((rows.grid, rows.heads_together), ((4, 8, 2), 1));
    let heads = geometry(&format!("{two_q},CLUSTER_HEADS=1"));
    assert_eq!((heads.grid, heads.heads_together), ((3, 8, 2), 2));
    assert!(heads.persistent);
    // Only in the persistent loop's clusters.
    for config in ["CLUSTER_HEADS=1,CLUSTER=2", "CLUSTER_HEADS=1,SCHEDULE=1"] {
        let err = resolve(config, 128).unwrap_err();
        assert!(
            err.contains("CLUSTER_HEADS=1 needs CLUSTER=2 and SCHEDULE=1"),
            "{err}"
        );
    }
}

#[test]
fn hopper_stream_k_takes_a_workspace_and_two_q_tiles() {
    let hopper = find("hopper").unwrap();
    let shape = Shape::new(2, 8, 300, 300, 128).unwrap();
    let workspace = |config: &str, head_dim: usize| {
        let cfg = resolve(config, head_dim).unwrap();
        let shape = Shape { head_dim, ..shape };
        hopper.geometry(&cfg, &shape).unwrap().workspace_per_block
    };
    let two_q = "SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2";
    assert_eq!(workspace(two_q, 128), 0);
    // Per block: a flag per consumer warp, a partial per consumer thread (D/2 accumulators,
    // two maxima, two sums), 256 bytes of alignment.
    assert_eq!(
        workspace(&format!("{two_q},STREAM_K=1"), 128),
        4 * (8 + 256 * 68) + 256
    );
    assert_eq!(
        workspace(&format!("{two_q},STREAM_K=1"), 64),
        4 * (12 + 384 * 36) + 256
    );
    for config in [
        "STREAM_K=1",
        "STREAM_K=1,SCHEDULE=1",
        "STREAM_K=1,SCHEDULE=1,Q_REGS=0",
    ] {
        let err = resolve(config, 128).unwrap_err();
        assert!(
            err.contains("STREAM_K=1 needs SCHEDULE=1 and Q_STAGES=2"),
            "{config}: {err}"
        );
    }
}

#[test]
fn hopper_chains_items_only_with_two_q_tiles_and_overlap() {
    let two_q = "SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2";
    assert!(resolve(&format!("{two_q},CHAIN=1"), 128).is_ok());
    assert!(resolve(&format!("{two_q},CHAIN=1,STREAM_K=1,PINGPONG=0"), 64).is_ok());
    let err = resolve(&format!("{two_q},CHAIN=1,STREAM_K=1"), 128).unwrap_err();
    assert!(err.contains("CHAIN=1 with STREAM_K=1 spills"), "{err}");
    for config in [
        "CHAIN=1".to_string(),
        "CHAIN=1,SCHEDULE=1,Q_REGS=0".to_string(),
        format!("{two_q},CHAIN=1,OVERLAP=0,PINGPONG=0"),
    ] {
        let err = resolve(&config, 128).unwrap_err();
        assert!(
            err.contains("CHAIN=1 needs SCHEDULE=1, Q_STAGES=2 and OVERLAP=1"),
            "{config}: {err}"
        );
    }
}

#[test]
fn hopper_tunes_head_pairs_where_the_query_heads_per_kv_head_are_even() {
    let hopper = find("hopper").unwrap();
    let causal = Params::new(128, true);
    let tuned = |heads: usize, kv_heads: usize, user: &str| {
        let shape = Shape {
            kv_heads,
            ..Shape::new(2, heads, 4096, 4096, 128).unwrap()
        };
        let merged = hopper.tuned_under(&shape, &causal, &user.parse().unwrap(), &Limits::H100);
        let cfg = hopper.resolve(&merged, 128, &Limits::H100);
        let cfg = cfg.unwrap_or_else(|e| panic!("{heads}/{kv_heads} {user}: {e}"));
        (cfg.get(CLUSTER_HEADS), cfg.get(CLUSTER))
    };
    for (heads, kv_heads, pairs) in [(32, 8, 1), (32, 1, 1), (16, 16, 0), (24, 8, 0)] {
        assert_eq!(
            tuned(heads, kv_heads, ""),
            (Some(pairs), Some(2)),
            "{heads}/{kv_heads}"
        );
    }
    // A user's knobs that rule the pairs out (no clusters) take the rest of the tuning.
    assert_eq!(tuned(32, 8, "CLUSTER=1"), (Some(0), Some(1)));
}

#[test]
fn hopper_takes_a_second_q_tile_only_in_the_persistent_loop_with_q_in_shared_memory() {
    // Q in registers yields to it; at D=128 its 32 KiB need the 2-stage ring.
    let two = resolve("SCHEDULE=1,Q_STAGES=2,STAGES=2", 128).unwrap();
    assert_eq!(two.get(Q_REGS), Some(0));
    assert_eq!(
        hopper_dynamic_shared(&two, 128),
        1024 + 2 * 32_768 + 2 * 2 * 32_768
    );
    // q_full and q_empty per Q tile, the ring's four per stage, the item words per Q tile, the
    // copy warp's o_full and o_whole per Q tile.
    assert_eq!(hopper_static_shared(&two), 8 * (2 + 4 * 2) + 40 + 24);
    for (config, reason) in [
        ("Q_STAGES=2", "SCHEDULE=1"),
        ("SCHEDULE=1,Q_REGS=1,Q_STAGES=2,STAGES=2", "Q_REGS=0"),
        ("SCHEDULE=1,Q_STAGES=2", "shared memory"),
    ] {
        let err = resolve(config, 128).unwrap_err();
        assert!(err.contains(reason), "{config}: {err}");
    }
    // At D=64 the default ring fits beside two Q tiles.
    assert!(resolve("SCHEDULE=1,Q_STAGES=2", 64).is_ok());
}

#[test]
fn a_users_knobs_that_rule_out_two_q_tiles_take_one_where_the_tuning_had_two() {
    let hopper = find("hopper").unwrap();
    let shape = Shape::new(4, 16, 2048, 2048, 128).unwrap();
    let params = Params::new(128, true);
    let tuned = |user: &str| {
        let merged = hopper.tuned_under(&shape, &params, &user.parse().unwrap(), &Limits::H100);
        hopper.resolve(&merged, 128, &Limits::H100)
    };
    assert_eq!(tuned("").unwrap().get(Q_STAGES), Some(2));
    for (user, knob, value) in [
        ("SCHEDULE=0", SCHEDULE, 0),
        ("Q_REGS=1", Q_REGS, 1),
        ("STAGES=3", STAGES, 3),
        ("BLOCK_N=176", Q_REGS, 0),
    ] {
        let cfg = tuned(user).unwrap_or_else(|e| panic!("{user}: {e}"));
        assert_eq!(
            (cfg.get(Q_STAGES), cfg.get(knob)),
            (Some(1), Some(value)),
            "{user}"
        );
    }
    // Knobs that leave two Q tiles possible keep them; the user's own Q_STAGES=2 never yields.
    assert_eq!(tuned("LAZY_RESCALE=1").unwrap().get(Q_STAGES), Some(2));
    let err = tuned("SCHEDULE=0,Q_STAGES=2").unwrap_err().to_string();
    assert!(err.contains("SCHEDULE=1"), "{err}");
    // Where the tuning's 160-key tile rules the user's knobs out, the whole tuning yields.
    let long = Shape::new(2, 16, 4096, 4096, 128).unwrap();
    let tuned_long = |user: &str| {
        let merged = hopper.tuned_under(&long, &params, &user.parse().unwrap(), &Limits::H100);
        let cfg = hopper.resolve(&merged, 128, &Limits::H100);
        let cfg = cfg.unwrap_or_else(|e| panic!("{user}: {e}"));
        (cfg.get(BLOCK_N), cfg.get(Q_STAGES))
    };
    assert_eq!(tuned_long(""), (Some(160), Some(2)));
    assert_eq!(tuned_long("Q_REGS=1"), (Some(128), Some(1)));
    assert_eq!(tuned_long("STAGES=3"), (Some(128), Some(1)));
    assert_eq!(tuned_long("SCHEDULE=0"), (Some(160), Some(1)));
}

#[test]
fn hopper_takes_wide_key_tiles_only_where_they_fit_and_where_measured() {
    let hopper = find("hopper").unwrap();
    // FlashAttention-3's D=128 tile: 128 x 176, 2 stages; 214016 bytes of dynamic shared memory.
    let fa3 = resolve("BLOCK_N=176,STAGES=2", 128).unwrap();
    assert_eq!(fa3.get(NUM_WARPS), Some(8));
    // Q yields to shared memory: the 176-key tile leaves no registers for it.
    assert_eq!(fa3.get(Q_REGS), Some(0));
    assert_eq!(hopper_dynamic_shared(&fa3, 128), 214_016);
    // The default 3 stages do not fit at D=128; the reason says what to do.
    let err = resolve("BLOCK_N=176", 128).unwrap_err();
    assert!(
        err.contains("shared memory") && err.contains("STAGES=2"),
        "{err}"
    );
    // 3 consumer warpgroups (D=64's default) have 160 registers per thread: refused.
    let err = resolve("BLOCK_N=176", 64).unwrap_err();
    assert!(err.contains("NUM_WARPS <= 8"), "{err}");
    resolve("BLOCK_N=176,NUM_WARPS=8,BLOCK_M=128", 64).unwrap();
    assert!(resolve("BLOCK_N=160", 64)
        .unwrap_err()
        .contains("NUM_WARPS <= 8"));
    // Two Q tiles leave room for a 2-stage ring of 160-key tiles at D=128, not of 176.
    let two_q = "SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2";
    let n160 = resolve(&format!("{two_q},BLOCK_N=160"), 128).unwrap();
    assert_eq!(
        hopper_dynamic_shared(&n160, 128),
        1024 + 2 * 32_768 + 2 * 2 * 40_960
    );
    let err = resolve(&format!("{two_q},BLOCK_N=176"), 128).unwrap_err();
    assert!(err.contains("shared memory"), "{err}");
    // Neither the defaults nor any shape's tuning (since two Q tiles take every length at D=128):
    // opt-in.
    for d in [64, 128] {
        assert_eq!(hopper.default_config(d).get(BLOCK_N), Some(128));
        for (shape, causal) in [
            ((1, 8, 512), false),
            ((2, 16, 8192), false),
            ((2, 16, 8192), true),
            ((2, 16, 16384), true),
        ] {
            let (b, h, s) = shape;
            let tuned = tuned_at("hopper", (b, h, s, d), causal);
            assert_ne!(tuned.get(BLOCK_N), Some(176), "{shape:?} D={d} {causal}");
            // Clusters on every full grid; the seed suite's (1,8,512) is none.
            assert_eq!(
                tuned.get(CLUSTER) == Some(2),
                shape != (1, 8, 512),
                "{shape:?} D={d} {causal}"
            );
        }
    }
}

#[test]
fn hopper_takes_128_row_blocks_at_d64_only_where_192_row_blocks_end_in_a_thin_wave() {
    let hopper = find("hopper").unwrap();
    for ((b, h, s), rows) in [
        ((2, 16, 1024), 128),
        ((1, 32, 1024), 128),
        ((4, 16, 1024), 192),
        ((2, 16, 2048), 192),
        ((2, 16, 8192), 192),
    ] {
        for causal in [false, true] {
            let tuned = tuned_at("hopper", (b, h, s, 64), causal);
            let cfg = hopper.resolve(&tuned, 64, &Limits::H100).unwrap();
            let got = (cfg.get(BLOCK_M), cfg.get(NUM_WARPS), cfg.get(CLUSTER));
            let want = if rows == 128 {
                (128, 8, 1)
            } else {
                (192, 12, 2)
            };
            let want = (Some(want.0), Some(want.1), Some(want.2));
            assert_eq!(got, want, "{b},{h},{s},64 causal={causal}");
        }
    }
    // Grouped heads too: blocks alone take no head pairs (CLUSTER_HEADS needs CLUSTER=2).
    let grouped = Shape {
        kv_heads: 8,
        ..Shape::new(1, 32, 1024, 1024, 64).unwrap()
    };
    let tuned = hopper.tuned_for(&grouped, &Params::new(64, false), &Limits::H100);
    let cfg = hopper.resolve(&tuned, 64, &Limits::H100).unwrap();
    let got = (cfg.get(BLOCK_M), cfg.get(CLUSTER), cfg.get(CLUSTER_HEADS));
    assert_eq!(got, (Some(128), Some(1), Some(0)));
    // A user's warps win over the tuning's rows (it yields rather than clash).
    let shape = Shape::new(2, 16, 1024, 1024, 64).unwrap();
    let params = Params::new(64, false);
    let user = hopper.tuned_under(
        &shape,
        &params,
        &"NUM_WARPS=12".parse().unwrap(),
        &Limits::H100,
    );
    let cfg = hopper.resolve(&user, 64, &Limits::H100).unwrap();
    assert_eq!(cfg.get(BLOCK_M), Some(192));
    // Never at D=128, whose blocks have 128 rows anyway (in clusters).
    let d128 = tuned_at("hopper", (2, 16, 1024, 128), false);
    assert_eq!(d128.get(CLUSTER), Some(2));
}
