use attn_oracle::{BlockTable, DType, DecodeSpec};

use super::*;
use crate::registry::DeviceLimits;

fn spec(text: &str) -> DecodeSpec {
    text.parse().unwrap()
}

fn decode() -> &'static DecodeImplementation {
    find_decode("decode").unwrap()
}

#[test]
fn the_registry_names_every_kernel_and_refuses_others_in_one_line() {
    let names: Vec<&str> = decode_registry().iter().map(|i| i.name).collect();
    assert_eq!(names, ["decode-naive", "decode", "decode-hopper"]);
    let err = find_decode("decode-fast").unwrap_err().to_string();
    assert!(err.contains("decode-naive, decode, decode-hopper"), "{err}");
    for imp in decode_registry() {
        for d in [64, 128] {
            let cfg = imp
                .resolve(&Config::default(), d, &DeviceLimits::H100)
                .unwrap();
            assert_eq!(cfg, imp.default_config(d));
        }
        assert!(imp.gpus.include((9, 0)));
        // Only the wgmma kernel is Hopper's alone.
        assert_eq!(imp.gpus.include((8, 0)), imp.kernel != DecodeKernel::Wgmma);
    }
}

#[test]
fn the_wgmma_kernel_takes_64_rows_a_block_and_its_tiles_of_keys() {
    let hopper = find_decode("decode-hopper").unwrap();
    let limits = DeviceLimits::H100;
    let cfg = hopper.resolve(&Config::default(), 128, &limits).unwrap();
    // 16 tokens × 8 query heads a K/V head = 128 rows: two row tiles; one warpgroup a block.
    let plan = hopper
        .plan(
            &cfg,
            &spec("decode B=8 q=16 kv=65536 H=64/8 D=128 page=256"),
            264,
        )
        .unwrap();
    assert_eq!((plan.grid.0, plan.grid.1, plan.block), (16, 8, 128));
    // Its header's formula: alignment slack, the 64-row Q tile, three stages of 64-key K and V.
    assert_eq!(plan.shared_bytes, 1024 + 64 * 256 + 2 * 3 * 64 * 256);
    // Two blocks of the defaults fit an SM's 228 KiB, with the driver's 1 KiB each.
    assert!(2 * (plan.shared_bytes + 1024) <= 233_472);
    // A sequence of 100 keys has two 64-key tiles, so at most two splits.
    let short = hopper
        .plan(&cfg, &spec("decode B=1 q=4 kv=100 H=8/1 D=128 page=7"), 264)
        .unwrap();
    assert_eq!(short.splits, 2);
    let err = hopper
        .resolve(&"NUM_WARPS=8".parse().unwrap(), 128, &limits)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown knob NUM_WARPS"), "{err}");
    let wide = hopper
        .resolve(&"BLOCK_N=128,STAGES=4".parse().unwrap(), 128, &limits)
        .unwrap_err()
        .to_string();
    assert!(wide.contains("bytes of shared memory"), "{wide}");
}

#[test]
fn bad_configs_are_refused_with_their_reason() {
    let limits = DeviceLimits::H100;
    let err = |cfg: &str, d| {
        decode()
            .resolve(&cfg.parse().unwrap(), d, &limits)
            .unwrap_err()
            .to_string()
    };
    assert!(err("BLOCK_N=48", 128).contains("outside its domain"));
    assert!(err("WARP_M=16", 128).contains("unknown knob WARP_M"));
    assert!(err("BLOCK_N=64,NUM_WARPS=8,STAGES=4", 128).contains("bytes of shared memory"));
    assert!(err("", 96).contains("head dim 96"));
    assert!(err("BLOCK_M=32", 128).contains("BLOCK_M=32 is for head dim 64"));
    assert!(err("ROW_WARPS=4,NUM_WARPS=2", 128).contains("ROW_WARPS=4 needs NUM_WARPS >= 4"));
    let two = decode()
        .resolve(&"NUM_WARPS=2,ROW_WARPS=2".parse().unwrap(), 128, &limits)
        .unwrap();
    assert_eq!(two.get("ROW_WARPS"), Some(2));
    // Fewer warps than the default row split: the default shrinks to them, a named one is refused.
    for (warps, rows) in [
        ("NUM_WARPS=1,STAGES=1", 1),
        ("NUM_WARPS=2", 2),
        ("NUM_WARPS=8", 4),
    ] {
        let cfg = decode()
            .resolve(&warps.parse().unwrap(), 128, &limits)
            .unwrap();
        assert_eq!(cfg.get("ROW_WARPS"), Some(rows), "{warps}");
    }
    // SPLITS=auto reads as 0, and SPLITS is no define.
    let auto = decode()
        .resolve(&"SPLITS=auto".parse().unwrap(), 64, &limits)
        .unwrap();
    assert_eq!(auto.get("SPLITS"), Some(0));
    assert!(!decode()
        .defines(&auto)
        .iter()
        .any(|d| d.starts_with("SPLITS")));
    let naive = find_decode("decode-naive").unwrap();
    assert!(naive.resolve(&Config::default(), 96, &limits).is_ok());
    assert!(naive.resolve(&Config::default(), 80, &limits).is_err());
}

#[test]
fn splits_fill_the_gpu_in_whole_waves_and_stop_at_the_tiles() {
    let cfg = decode().default_config(128);
    // 132 SMs holding two blocks each (the defaults' ~110 KiB of shared memory).
    let slots = 264;
    // B=1, H_kv=8, one row tile: 32 splits keep 256 of the 264 slots busy (33 would fill them
    // all; 32 is the fewest within 5% of that), within the 32k keys' 512 tiles.
    let one = decode()
        .plan(
            &cfg,
            &spec("decode B=1 q=1 kv=32768 H=32/8 D=128 page=16"),
            slots,
        )
        .unwrap();
    assert_eq!((one.splits, one.grid), (32, (8, 1, 32)));
    assert_eq!(one.workspace_bytes, 32 * 32 * 129 * 4);
    assert_eq!(one.combine_grid, Some(8));
    // B=64: 512 blocks fill 97% of two waves by themselves: one split, no workspace, no combine.
    let many = decode()
        .plan(
            &cfg,
            &spec("decode B=64 q=4 kv=4096 H=32/8 D=128 page=64"),
            slots,
        )
        .unwrap();
    assert_eq!(
        (many.splits, many.workspace_bytes, many.combine_grid),
        (1, 0, None)
    );
    // q=4 new tokens × 4 query heads = 16 rows: one tile of 16.
    assert_eq!(many.grid, (8, 64, 1));
    // A short sequence caps the splits at its key tiles (64 keys a tile at D=128).
    let short = decode()
        .plan(
            &cfg,
            &spec("decode B=1 q=1 kv=100 H=8/1 D=128 page=7"),
            slots,
        )
        .unwrap();
    assert_eq!(short.splits, 2);
    // MQA, 16 tokens × 7 heads = 112 rows: two row tiles of 4 warps × 16 rows (the default),
    // seven when every warp takes the same 16 rows (ROW_WARPS=1).
    let mqa_spec = spec("decode B=2 q=16 kv=4000 H=7/1 D=128 page=256");
    let same_rows = cfg.merged(&"ROW_WARPS=1".parse().unwrap());
    let narrow = decode().plan(&same_rows, &mqa_spec, slots).unwrap();
    assert_eq!(narrow.grid.0, 7);
    let mqa = decode().plan(&cfg, &mqa_spec, slots).unwrap();
    assert_eq!(mqa.grid.0, 2);
    // The Q tile grows with the row tile: 64 rows instead of 16, 48 rows × 256 bytes more.
    assert_eq!(mqa.shared_bytes - narrow.shared_bytes, 48 * 256);
    // A named count is taken as it is.
    let fixed = cfg.merged(&"SPLITS=4".parse().unwrap());
    let four = decode()
        .plan(
            &fixed,
            &spec("decode B=64 q=1 kv=4096 H=32/8 D=128 page=16"),
            slots,
        )
        .unwrap();
    assert_eq!(four.splits, 4);
    // B=16 at 128 blocks: three splits would leave a last wave half empty (384 blocks over 264
    // slots), two fill one wave to 97%; B=8 takes four, likewise.
    let wave = |text: &str| decode().plan(&cfg, &spec(text), slots).unwrap().splits;
    assert_eq!(wave("decode B=16 q=1 kv=8192 H=32/8 D=128 page=16"), 2);
    assert_eq!(wave("decode B=8 q=1 kv=131072 H=32/8 D=128 page=64"), 4);
    // Four waves of blocks or more take one split.
    assert_eq!(wave("decode B=256 q=1 kv=4096 H=32/8 D=128 page=64"), 1);
    let naive = find_decode("decode-naive").unwrap();
    let plan = naive
        .plan(
            &naive.default_config(128),
            &spec("decode q=1,4,0 kv=10,20,0 H=8/2 D=128"),
            slots,
        )
        .unwrap();
    assert_eq!((plan.grid, plan.block, plan.splits), ((10, 1, 1), 128, 1));
}

#[test]
fn the_table_is_padded_with_a_value_that_is_no_page() {
    let table = BlockTable::new(16, 8, vec![vec![3, 1], vec![], vec![5]]).unwrap();
    let (entries, stride) = padded_table(&table);
    assert_eq!(stride, 2);
    assert_eq!(
        entries,
        [3, 1, TABLE_PADDING, TABLE_PADDING, 5, TABLE_PADDING]
    );
}

#[test]
fn every_dim_is_checked_against_the_spec_in_one_line() {
    let s = spec("decode q=1,4 kv=20,40 H=8/2 D=64 page=16");
    let good = BatchDims {
        q: [1, 5, 8, 64],
        k: [9, 16, 2, 64],
        v: [9, 16, 2, 64],
        o: [1, 5, 8, 64],
        cu_seqlens_q: 3,
        seqlens_kv: 2,
        table: Some((2, 3, 16, 9, 6)),
    };
    check_batch(&s, &good, DType::F16, 64).unwrap();
    let bad = |dims: BatchDims, dtype, d, expected: &str| {
        let message = check_batch(&s, &dims, dtype, d).unwrap_err().to_string();
        assert!(message.contains(expected), "{message:?} lacks {expected:?}");
        assert!(!message.contains('\n'), "{message:?}");
    };
    bad(good, DType::Bf16, 64, "compiled for bf16");
    bad(good, DType::F16, 128, "D=128");
    bad(
        BatchDims {
            o: [1, 4, 8, 64],
            ..good
        },
        DType::F16,
        64,
        "decode O",
    );
    bad(
        BatchDims {
            q: [1, 5, 2, 64],
            ..good
        },
        DType::F16,
        64,
        "decode Q",
    );
    bad(
        BatchDims {
            seqlens_kv: 3,
            ..good
        },
        DType::F16,
        64,
        "seqlens_kv",
    );
    bad(
        BatchDims {
            k: [9, 16, 8, 64],
            ..good
        },
        DType::F16,
        64,
        "decode K cache",
    );
    bad(
        BatchDims {
            table: Some((2, 2, 16, 9, 4)),
            ..good
        },
        DType::F16,
        64,
        "sequence 1 needs 3",
    );
    bad(
        BatchDims {
            table: Some((2, 3, 8, 9, 6)),
            ..good
        },
        DType::F16,
        64,
        "pages of 8",
    );
    bad(
        BatchDims {
            table: None,
            ..good
        },
        DType::F16,
        64,
        "needs its block table",
    );
    let contiguous = spec("decode q=1,4 kv=20,40 H=8/2 D=64");
    let dims = BatchDims {
        k: [2, 2, 40, 64],
        v: [2, 2, 40, 64],
        table: None,
        ..good
    };
    check_batch(&contiguous, &dims, DType::F16, 64).unwrap();
    let message = check_batch(&contiguous, &good, DType::F16, 64)
        .unwrap_err()
        .to_string();
    assert!(message.contains("takes no block table"), "{message}");
}
