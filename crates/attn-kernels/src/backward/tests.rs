use attn_oracle::{Shape, Varlen};

use super::*;
use crate::registry::DeviceLimits;

fn mma() -> &'static BackwardImplementation {
    find_backward("backward-mma").unwrap()
}

fn naive() -> &'static BackwardImplementation {
    find_backward("backward-naive").unwrap()
}

fn shape(text: &str) -> Shape {
    text.parse().unwrap()
}

#[test]
fn the_registry_names_both_declares_determinism_and_refuses_others_in_one_line() {
    let names: Vec<&str> = backward_registry().iter().map(|i| i.name).collect();
    assert_eq!(names, ["backward-naive", "backward-mma"]);
    let err = find_backward("backward-fast").unwrap_err().to_string();
    assert!(err.contains("backward-naive, backward-mma"), "{err}");
    assert!(naive().deterministic && !mma().deterministic);
    for imp in backward_registry() {
        for d in [64, 128] {
            let cfg = imp
                .resolve(&Config::default(), d, &DeviceLimits::H100)
                .unwrap();
            assert_eq!(cfg, imp.default_config(d));
            assert_eq!(imp.defines(&cfg).len(), imp.knobs.len());
        }
        assert!(imp.gpus.include((8, 0)) && imp.gpus.include((9, 0)));
        assert!(!imp.gpus.include((7, 5)));
        assert_eq!(imp.variants, Variants::ALL);
    }
    for d in [32, 96, 160, 256] {
        naive().check_head_dim(d).unwrap();
    }
    assert!(naive().check_head_dim(80).is_err());
    let message = mma().check_head_dim(96).unwrap_err().to_string();
    assert!(
        message.contains("head dim 96 (supported: [64, 128])"),
        "{message}"
    );
}

#[test]
fn bad_configs_are_refused_with_their_reason() {
    let limits = DeviceLimits::H100;
    let err = |imp: &BackwardImplementation, cfg: &str, d| {
        let message = imp
            .resolve(&cfg.parse().unwrap(), d, &limits)
            .unwrap_err()
            .to_string();
        assert!(!message.contains('\n'), "{message:?}");
        message
    };
    assert!(err(mma(), "BLOCK_M=48", 64).contains("outside its domain"));
    assert!(err(mma(), "WARP_M=16", 64).contains("unknown knob WARP_M"));
    assert!(err(mma(), "NUM_WARPS=4,BLOCK_N=32", 64).contains("16 or 32 keys per warp"));
    assert!(err(mma(), "NUM_WARPS=8,BLOCK_N=64", 64).contains("128 or 256"));
    assert!(err(mma(), "BLOCK_N=128", 128).contains("more than 255 registers"));
    assert!(err(mma(), "NUM_WARPS=8,BLOCK_M=16", 64).contains("8 dQ columns per warp"));
    assert!(err(mma(), "", 96).contains("head dim 96"));
    assert!(err(naive(), "ROWS_PER_BLOCK=3", 64).contains("outside its domain"));
    assert!(err(naive(), "BLOCK_M=64", 64).contains("unknown knob BLOCK_M"));
    // A smaller device: the D=128 defaults' 106 KiB of shared memory do not fit 48 KiB.
    let small = DeviceLimits {
        max_shared_per_block: 48 * 1024,
        ..limits
    };
    let message = mma()
        .resolve(&Config::default(), 128, &small)
        .unwrap_err()
        .to_string();
    assert!(message.contains("bytes of shared memory"), "{message}");
    // NUM_WARPS alone takes 16 keys per warp; BLOCK_N=32·NUM_WARPS is D=64's.
    let eight = mma()
        .resolve(&"NUM_WARPS=8".parse().unwrap(), 128, &limits)
        .unwrap();
    assert_eq!(eight.get("BLOCK_N"), Some(128));
    let wide = mma()
        .resolve(&"NUM_WARPS=2,BLOCK_N=64".parse().unwrap(), 64, &limits)
        .unwrap();
    assert_eq!(wide.get("BLOCK_N"), Some(64));
}

#[test]
fn shared_memory_is_the_headers_formula() {
    let cfg = mma().default_config(128);
    // K, V: 2·64·128·2; Q, dO rings: 2·2·64·128·2; dSᵀ: 64·72·2; LSE, D_i: 2·2·64·4.
    let expected = 32_768 + 65_536 + 9_216 + 1_024;
    assert_eq!(mma().geometry(&cfg, 128).main_shared, expected);
    assert_eq!(
        mma().geometry(&cfg, 64).main_shared,
        16_384 + 32_768 + 9_216 + 1_024
    );
    let naive_geometry = naive().geometry(&naive().default_config(64), 64);
    assert_eq!((naive_geometry.block, naive_geometry.main_shared), (128, 0));
}

#[test]
fn plans_cover_every_row_and_key_and_size_the_workspace() {
    let cfg = mma().default_config(64);
    // Dense MHA: pre/post over 64-row blocks of S_q per (head, batch), attn_bwd over 64-key tiles.
    let dense = mma().plan(&cfg, &shape("2,8,1000,777,64"), None).unwrap();
    let side = StagePlan {
        grid: (16, 8, 2),
        block: 128,
        shared_bytes: 0,
    };
    assert_eq!((dense.pre, dense.post), (Some(side), Some(side)));
    assert_eq!(dense.main.grid, (13, 8, 2));
    assert_eq!(dense.main.block, 128);
    assert_eq!(dense.workspace_bytes, 4 * 2 * 1000 * 8 * 65);
    // GQA: attn_bwd runs over the K/V heads, the pre and post stages over the query heads.
    let gqa = mma().plan(&cfg, &shape("1,6/2,128,64"), None).unwrap();
    assert_eq!(gqa.main.grid, (2, 2, 1));
    assert_eq!(gqa.pre.unwrap().grid, (2, 6, 1));
    assert_eq!(gqa.workspace_bytes, 4 * 128 * 6 * 65);
    // Varlen: the bounding shape's grids, the workspace of the packed rows.
    let varlen = Varlen::new(vec![300, 0, 17], vec![5, 129, 0]).unwrap();
    let bounding = varlen.bounding_shape(&shape("1,4/1,1,1,128")).unwrap();
    let cfg128 = mma().default_config(128);
    let packed = mma().plan(&cfg128, &bounding, Some(&varlen)).unwrap();
    assert_eq!(packed.main.grid, (3, 1, 3));
    assert_eq!(packed.pre.unwrap().grid, (5, 4, 3));
    assert_eq!(packed.workspace_bytes, 4 * 317 * 4 * 129);
    // Deterministic dQ: one i32 ticket more per query row.
    let ordered = mma()
        .resolve(
            &"DETERMINISTIC=1".parse().unwrap(),
            128,
            &DeviceLimits::H100,
        )
        .unwrap();
    let plan = mma().plan(&ordered, &bounding, Some(&varlen)).unwrap();
    assert_eq!(plan.workspace_bytes, 4 * 317 * 4 * 130);
    assert!(mma().geometry(&ordered, 128).tickets && !mma().geometry(&cfg128, 128).tickets);
    assert_eq!(packed.main.shared_bytes, 108_544);
    // The naive kernel: a warp per row and per key.
    let naive_plan = naive()
        .plan(&naive().default_config(96), &shape("3,4/2,10,9,96"), None)
        .unwrap();
    assert_eq!(naive_plan.pre.unwrap().grid, (3, 4, 3));
    assert_eq!(naive_plan.main.grid, (3, 2, 3));
    assert_eq!(naive_plan.workspace_bytes, 4 * 30 * 4 * 97);
    // Grids CUDA cannot launch are one line.
    let many = Shape::new(70_000, 1, 1, 1, 64).unwrap();
    let message = mma().plan(&cfg, &many, None).unwrap_err().to_string();
    assert!(message.contains("65535"), "{message}");
}

fn dense_dims(s: &Shape) -> BackwardDims {
    let [b, h, sq, _] = s.q_dims();
    BackwardDims {
        q: s.q_dims(),
        k: s.kv_dims(),
        v: s.kv_dims(),
        o: s.q_dims(),
        d_o: s.q_dims(),
        lse: [b, h, sq, 1],
        dq: s.q_dims(),
        dk: s.kv_dims(),
        dv: s.kv_dims(),
        offsets: None,
    }
}

fn refused(s: &Shape, varlen: Option<&Varlen>, dims: BackwardDims, d: usize, expected: &str) {
    let message = check_backward(s, varlen, &dims, d).unwrap_err().to_string();
    assert!(message.contains(expected), "{message:?} lacks {expected:?}");
    assert!(!message.contains('\n'), "{message:?}");
}

#[test]
fn every_buffer_is_checked_against_the_problem_in_one_line() {
    let s = shape("2,8/2,100,70,64");
    let good = dense_dims(&s);
    check_backward(&s, None, &good, 64).unwrap();
    refused(&s, None, good, 128, "compiled for 128");
    refused(
        &s,
        None,
        BackwardDims {
            o: [2, 8, 99, 64],
            ..good
        },
        64,
        "backward O",
    );
    refused(
        &s,
        None,
        BackwardDims {
            d_o: [2, 2, 100, 64],
            ..good
        },
        64,
        "backward dO",
    );
    refused(
        &s,
        None,
        BackwardDims {
            dq: [2, 8, 70, 64],
            ..good
        },
        64,
        "backward dQ",
    );
    refused(
        &s,
        None,
        BackwardDims {
            k: [2, 8, 70, 64],
            ..good
        },
        64,
        "backward K",
    );
    refused(
        &s,
        None,
        BackwardDims {
            dv: [2, 8, 70, 64],
            ..good
        },
        64,
        "backward dV",
    );
    refused(
        &s,
        None,
        BackwardDims {
            lse: [2, 8, 100, 64],
            ..good
        },
        64,
        "backward LSE",
    );
    refused(
        &s,
        None,
        BackwardDims {
            offsets: Some((3, 3)),
            ..good
        },
        64,
        "no cu_seqlens",
    );
    let bad_heads = Shape { kv_heads: 3, ..s };
    refused(&bad_heads, None, good, 64, "must divide");

    let varlen = Varlen::new(vec![5, 0, 40], vec![7, 3, 0]).unwrap();
    let bounding = varlen.bounding_shape(&shape("1,4/2,1,1,128")).unwrap();
    let (q, kv) = ([1, 45, 4, 128], [1, 10, 2, 128]);
    let packed = BackwardDims {
        q,
        k: kv,
        v: kv,
        o: q,
        d_o: q,
        lse: [1, 45, 4, 1],
        dq: q,
        dk: kv,
        dv: kv,
        offsets: Some((4, 4)),
    };
    check_backward(&bounding, Some(&varlen), &packed, 128).unwrap();
    refused(
        &bounding,
        Some(&varlen),
        BackwardDims {
            offsets: None,
            ..packed
        },
        128,
        "cu_seqlens",
    );
    refused(
        &bounding,
        Some(&varlen),
        BackwardDims {
            lse: [1, 45, 4, 128],
            ..packed
        },
        128,
        "packed problem",
    );
    refused(
        &bounding,
        Some(&varlen),
        BackwardDims {
            dk: [1, 45, 2, 128],
            ..packed
        },
        128,
        "backward dK",
    );
    let wrong = Shape {
        seq_q: 41,
        ..bounding
    };
    refused(&wrong, Some(&varlen), packed, 128, "is the shape");
}

#[test]
fn a_source_kernel_declares_its_geometry_determinism_and_variants() {
    let limits = DeviceLimits::H100;
    let declared = SourceDeclarations::of(&Config::default(), "src:x.cu", &limits).unwrap();
    assert_eq!(
        declared.geometry,
        BackwardGeometry {
            rows_per_block: 64,
            keys_per_block: 64,
            block: 128,
            main_shared: 0,
            side_shared: 0,
            tickets: false,
        }
    );
    assert!(!declared.deterministic);
    assert_eq!(declared.variants, Variants::NONE);
    let defines: Config =
        "BLOCK_M=32,BLOCK_N=128,NUM_WARPS=8,SHARED_BYTES=4096,DETERMINISTIC=1,VARIANTS=1"
            .parse()
            .unwrap();
    let declared = SourceDeclarations::of(&defines, "src:x.cu", &limits).unwrap();
    assert!(declared.deterministic);
    assert_eq!(declared.variants, Variants::ALL);
    let plan = declared
        .geometry
        .plan(&shape("2,4/1,100,300,64"), None, false, true)
        .unwrap();
    assert_eq!(plan.pre, None);
    assert_eq!(plan.main.grid, (3, 1, 2));
    assert_eq!(
        plan.post,
        Some(StagePlan {
            grid: (4, 4, 2),
            block: 256,
            shared_bytes: 4096
        })
    );
    for (text, expected) in [
        ("DETERMINISTIC=2", "DETERMINISTIC=2 must be 0 or 1"),
        ("NUM_WARPS=64", "do not fit the device"),
        ("SHARED_BYTES=1000000", "do not fit the device"),
        ("BLOCK_N=0", "do not fit the device"),
    ] {
        let message = SourceDeclarations::of(&text.parse().unwrap(), "src:x.cu", &limits)
            .unwrap_err()
            .to_string();
        assert!(message.contains(expected), "{text}: {message}");
        assert!(message.contains("src:x.cu"), "{message}");
    }
}

#[test]
fn variants_a_kernel_does_not_declare_are_refused_in_one_line() {
    let params = attn_oracle::Params::new(64, true);
    for imp in backward_registry() {
        imp.check_supports(&shape("1,8/2,64,64"), &params, true)
            .unwrap();
    }
    // A --src kernel without VARIANTS=1 runs dense multi-head problems only.
    let declared =
        SourceDeclarations::of(&Config::default(), "src:x.cu", &DeviceLimits::H100).unwrap();
    let missing = declared
        .variants
        .missing(&shape("1,8/2,64,64"), &params, false);
    assert_eq!(missing, Some("grouped-query / multi-query heads"));
    assert!(declared
        .variants
        .missing(&shape("1,8,64,64"), &params, true)
        .is_some());
    assert_eq!(
        declared
            .variants
            .missing(&shape("1,8,64,64"), &params, false),
        None
    );
}
