//! hopper's persistent scheduler: relaunches and graph replays that write every row, and the
//! static order's stream-K tail and chained items.

use attn_kernels::{Candidate, Config, Gpu, Prepared};
use attn_oracle::{generate, CaseSpec, DType, Distribution, Params, Shape};

use crate::oracle::{base_seed, judged, run_with_params};

/// hopper's persistent scheduler keeps its work counter in device memory and resets it itself (and
/// the stream-K tail its flags): one prepared kernel (with one Q tile, in clusters of two that share
/// each ticket, and with STREAM_K=1 where the static order cuts its last items, with and without
/// chained items) launched again
/// and again (dynamic and static orders, dense and varlen, plain launches and replays of one
/// captured CUDA graph, the output poisoned before each) must write every row each time, the same
/// bits as its first launch.
#[test]
#[ignore = "needs a CUDA GPU (Hopper, sm_90)"]
fn hopper_persistent_relaunches_and_graph_replays_write_every_row() {
    use attn_oracle::{generate_varlen, Varlen};
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    println!("hopper persistent relaunches: base seed {seed}");
    let spec = |shape: Shape| CaseSpec {
        shape,
        dtype: DType::F16,
        distribution: Distribution::Normal,
        seed,
    };
    // Enough row blocks that the static order cuts its last items with STREAM_K=1 (2 · 16 pairs of
    // heads × 9 row blocks on 66 clusters of an H100 or H200).
    let dense = generate(&spec("2,32/8,1100,128".parse().unwrap()));
    let varlen = Varlen::new(vec![300, 0, 129, 1000], vec![300, 0, 129, 1000]).unwrap();
    let packed = generate_varlen(&spec("1,4/2,1,128".parse().unwrap()), &varlen);
    let offsets = gpu.upload_offsets(&varlen).unwrap();
    let mut checked = 0;
    // One Q tile, clusters of two (one ticket per cluster, a counter the clusters count off), over
    // two heads of one K/V head too, and one Q tile released after an item's last Q·Kᵀ in clusters.
    for config in [
        "SCHEDULE=persistent",
        "SCHEDULE=persistent,CLUSTER=2,Q_REGS=0,Q_STAGES=2,STAGES=2",
        "SCHEDULE=persistent,CLUSTER=2,CLUSTER_HEADS=1,Q_REGS=0,Q_STAGES=2,STAGES=2",
        "SCHEDULE=persistent,CLUSTER=2,Q_REGS=0,Q_RELEASE=1,BLOCK_N=176,STAGES=2",
        "SCHEDULE=persistent,CLUSTER=2,CLUSTER_HEADS=1,Q_REGS=0,Q_STAGES=2,STAGES=2,STREAM_K=1",
        "SCHEDULE=persistent,CLUSTER=2,CLUSTER_HEADS=1,Q_REGS=0,Q_STAGES=2,STAGES=2,CHAIN=1",
    ] {
        let candidate = Candidate::registered("hopper", config.parse().unwrap()).unwrap();
        let prepared = Prepared::new(&gpu, &candidate, DType::F16, 128).unwrap();
        for (inputs, offsets) in [(&dense, None), (&packed, Some(&offsets))] {
            let (q, k, v) = (
                gpu.upload(&inputs.q).unwrap(),
                gpu.upload(&inputs.k).unwrap(),
                gpu.upload(&inputs.v).unwrap(),
            );
            // Causal (dynamic order), plain (static for a dense batch), a window (dynamic).
            for params in [
                Params::new(128, true),
                Params::new(128, false),
                Params::new(128, false).with_window("64,64".parse().unwrap()),
            ] {
                let mut o = gpu.alloc_poisoned(q.dims, DType::F16).unwrap();
                let launch = |o: &mut attn_kernels::DeviceTensor| {
                    prepared
                        .launch_batch(&gpu, &q, &k, &v, o, &params, offsets)
                        .unwrap()
                };
                launch(&mut o);
                let first = gpu.download(&o).unwrap();
                for _ in 0..5 {
                    gpu.poison(&mut o).unwrap();
                    launch(&mut o);
                    assert_eq!(
                        gpu.download(&o).unwrap().as_bytes(),
                        first.as_bytes(),
                        "relaunch"
                    );
                    checked += 1;
                }
                let stream = gpu.stream().clone();
                stream
                    .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                    .unwrap();
                launch(&mut o);
                let graph = stream
                    .end_capture(CUgraphInstantiate_flags(0))
                    .unwrap()
                    .expect("a captured launch");
                for _ in 0..5 {
                    gpu.poison(&mut o).unwrap();
                    graph.launch().unwrap();
                    assert_eq!(
                        gpu.download(&o).unwrap().as_bytes(),
                        first.as_bytes(),
                        "graph replay"
                    );
                    checked += 1;
                }
            }
        }
    }
    println!("hopper persistent relaunches: {checked} relaunches and replays, all equal");
}

/// hopper's static persistent order (no mask, dense batch) with its two knobs: the stream-K tail
/// (STREAM_K=1) and chained items (CHAIN=1).
/// - Stream-K: shapes with more work items than clusters and a thin last wave, so that the last
///   items are cut between two clusters' runs of key tiles and each cut item's two partial results
///   are merged (whichever finishes first leaves its partial in the workspace). Every such case is
///   checked to cut on this GPU.
/// - Chained: shapes with more items than clusters, so that blocks take several items in a row and
///   each item's last turn begins the next; with row blocks past the sequence's end (an item that
///   does not chain, between ones that do; in clusters over row blocks, one block of a cluster
///   chaining and the other not), keys shorter than a tile (the next item's tile 0 masked), and
///   with the stream-K tail at D=64 (chaining stops where the cut items begin; at D=128 the
///   registry refuses the pair: it spills).
/// - Whole items in 160-key tiles (neither knob): the narrow tail (2048 and 1024 keys: 128 and 64
///   keys in the last tile), which CHAIN=1 does not take.
///
/// Clusters over two heads (the tuning of grouped shapes), over two row blocks, alone, at D=64 with
/// two and three consumer warpgroups, key lengths ragged at the tile and S_q ≠ S_kv, fp16 and bf16,
/// and a causal case of each (a dynamic order: whole items, none chained). Two runs must give the
/// same bits (a merge must not depend on which segment finishes first).
#[test]
#[ignore = "needs a CUDA GPU (Hopper, sm_90)"]
fn hopper_static_order_cuts_and_chains_items_and_matches_the_oracle() {
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    println!("hopper static order: base seed {seed} (ATTN_TEST_SEED={seed} to replay)");
    let two_q = "SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2";
    // (config on top of two_q, head dim, shapes)
    let cases: [(&str, usize, &[&str]); 12] = [
        (
            "STREAM_K=1,CLUSTER=2,CLUSTER_HEADS=1,BLOCK_N=160,LAZY_RESCALE=1",
            128,
            &["1,32/8,1024,128", "2,16/2,1100,128", "1,32/8,700,1300,128"],
        ),
        (
            "STREAM_K=1,CLUSTER=2,BLOCK_N=160",
            128,
            &["3,5,2048,128", "3,5,1100,128"],
        ),
        (
            "STREAM_K=1,CLUSTER=1",
            128,
            &["3,5,2048,128", "2,9,1000,1500,128"],
        ),
        (
            "STREAM_K=1,BLOCK_M=128,NUM_WARPS=8,CLUSTER=1",
            64,
            &["3,5,2048,64"],
        ),
        (
            "STREAM_K=1,CLUSTER=2,CLUSTER_HEADS=1",
            64,
            &["2,16/4,1500,64"],
        ),
        (
            "CHAIN=1,CLUSTER=2,CLUSTER_HEADS=1,BLOCK_N=160,LAZY_RESCALE=1",
            128,
            &[
                "2,32/8,2048,128",
                "1,32/8,700,1300,128",
                "2,16/2,1024,100,128",
            ],
        ),
        (
            "CLUSTER=2,CLUSTER_HEADS=1,BLOCK_N=160",
            128,
            &["2,32/8,2048,128", "1,32/8,1024,128"],
        ),
        ("CHAIN=1,CLUSTER=2,BLOCK_N=160", 128, &["3,5,1212,128"]),
        (
            "CHAIN=1,CLUSTER=1",
            128,
            &["3,5,2048,128", "2,9,1000,1500,128"],
        ),
        ("CHAIN=1,CLUSTER=1,PINGPONG=0", 128, &["3,5,2048,128"]),
        (
            "CHAIN=1,BLOCK_M=128,NUM_WARPS=8,CLUSTER=1",
            64,
            &["3,5,2048,64"],
        ),
        (
            "CHAIN=1,STREAM_K=1,CLUSTER=2,CLUSTER_HEADS=1",
            64,
            &["2,16/4,1500,64"],
        ),
    ];
    let sms = gpu.info().sm_count as usize;
    let hopper = attn_kernels::registry::find("hopper").unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    for (config, head_dim, shapes) in cases {
        let overrides: Config = format!("{two_q},{config}").parse().unwrap();
        let candidate = Candidate::registered("hopper", overrides.clone()).unwrap();
        for shape in shapes {
            let shape: Shape = shape.parse().unwrap();
            for (dtype, causal) in [
                (DType::F16, false),
                (DType::Bf16, false),
                (DType::F16, true),
            ] {
                let params = Params::new(head_dim, causal);
                let tuned = candidate.for_problem(&shape, &params, &gpu.limits());
                let prepared = Prepared::new(&gpu, &tuned, dtype, head_dim).unwrap();
                // The items of the static order (the geometry's row blocks, a cluster's pair of
                // them or of heads being one) against the clusters (one block per SM).
                let cfg = prepared.config();
                let (x, y, z) = hopper.geometry(cfg, &shape).unwrap().grid;
                let cluster = cfg.get("CLUSTER").unwrap() as usize;
                let items = (x * y * z) as usize / cluster;
                let clusters = sms / cluster;
                let cuts = items > clusters && items % clusters != 0;
                // The knobs asked for are taken (the tuning may add the tail at D=64).
                for knob in ["STREAM_K", "CHAIN"] {
                    if let Some(asked) = overrides.get(knob) {
                        assert_eq!(cfg.get(knob), Some(asked), "{shape} [{cfg}]: {knob}");
                    }
                }
                if overrides.get("STREAM_K") == Some(1) {
                    assert!(
                        cuts,
                        "{shape} [{cfg}]: {items} items on {clusters} clusters do not cut"
                    );
                } else {
                    assert!(
                        items > clusters,
                        "{shape} [{cfg}]: {items} items on {clusters} clusters do not chain"
                    );
                }
                let label = format!("hopper [{cfg}] {shape} causal={causal} {dtype} seed={seed}");
                let normal = Distribution::Normal;
                let outcome = run_with_params(
                    &gpu,
                    &prepared,
                    shape,
                    dtype,
                    &params,
                    normal,
                    seed,
                    Some(48),
                );
                checked += 1;
                if let Err(e) = judged(&label, outcome) {
                    println!("{e}");
                    failures.push(e);
                }
            }
        }
    }
    println!(
        "hopper static order: {checked} cases, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
