//! GPU tests: each implementation against the f64 oracle on fresh random inputs over the issue's
//! matrix of shapes, both dtypes, causal on and off; unwritten outputs detected; two runs on the
//! same inputs bit-identical (no races). Run on a GPU machine with `--include-ignored`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use attn_kernels::{Candidate, Config, Gpu, Prepared};
use attn_oracle::{
    compare, generate, reference, tolerance, CaseSpec, DType, Distribution, Params, RowSelection,
    Shape, Verdict,
};

/// A fresh seed per run (printed, so a failure can be replayed with ATTN_TEST_SEED).
fn base_seed() -> u64 {
    std::env::var("ATTN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}

struct Case {
    batch: usize,
    heads: usize,
    seq: usize,
    head_dim: usize,
    causal: bool,
    dtype: DType,
}

/// The shapes every implementation runs, plus `ragged` (a [`Run`]'s lengths ragged at its tile).
fn matrix(head_dims: &[usize], ragged: &[usize]) -> Vec<Case> {
    let mut cases = Vec::new();
    for dtype in [DType::F16, DType::Bf16] {
        for &head_dim in head_dims {
            for causal in [false, true] {
                for &seq in [1, 17, 64, 100, 512, 1000, 2048].iter().chain(ragged) {
                    for (batch, heads) in [(1, 1), (1, 5), (3, 1), (3, 5)] {
                        cases.push(Case {
                            batch,
                            heads,
                            seq,
                            head_dim,
                            causal,
                            dtype,
                        });
                    }
                }
            }
        }
    }
    cases
}

/// What one run against the oracle found.
struct Outcome {
    verdict: Verdict,
    /// Two runs on the same inputs gave the same bits.
    repeatable: bool,
}

/// Runs `prepared` twice on fresh inputs of `shape` (seeded) and compares the first output with
/// the f64 oracle: every row, or `rows_per_head` sampled rows per head.
fn run_against_oracle(
    gpu: &Gpu,
    prepared: &Prepared,
    shape: Shape,
    dtype: DType,
    causal: bool,
    seed: u64,
    rows_per_head: Option<usize>,
) -> Result<Outcome, String> {
    let params = Params::new(shape.head_dim, causal);
    let normal = Distribution::Normal;
    run_with_params(
        gpu,
        prepared,
        shape,
        dtype,
        &params,
        normal,
        seed,
        rows_per_head,
    )
}

/// [`run_against_oracle`] with any parameters (windows, scale) and inputs drawn from any
/// distribution.
#[allow(clippy::too_many_arguments)]
fn run_with_params(
    gpu: &Gpu,
    prepared: &Prepared,
    shape: Shape,
    dtype: DType,
    params: &Params,
    distribution: Distribution,
    seed: u64,
    rows_per_head: Option<usize>,
) -> Result<Outcome, String> {
    let params = *params;
    let inputs = generate(&CaseSpec {
        shape,
        dtype,
        distribution,
        seed,
    });
    let run = || {
        prepared
            .run(gpu, &inputs.q, &inputs.k, &inputs.v, &params)
            .map_err(|e| e.to_string())
    };
    let first = run()?;
    let second = run()?;
    let rows = match rows_per_head {
        Some(rows_per_head) => RowSelection::Sampled {
            rows_per_head,
            seed,
        },
        None => RowSelection::All,
    };
    let reference =
        reference(&inputs.q, &inputs.k, &inputs.v, &params, &rows).map_err(|e| e.to_string())?;
    Ok(Outcome {
        verdict: compare(&first, &reference, &tolerance(dtype, distribution)),
        repeatable: first.as_bytes() == second.as_bytes(),
    })
}

/// Runs one case; returns a one-line failure, or the max abs error.
fn check(gpu: &Gpu, prepared: &Prepared, case: &Case, seed: u64) -> Result<f64, String> {
    let shape = Shape::new(case.batch, case.heads, case.seq, case.seq, case.head_dim)
        .map_err(|e| e.to_string())?;
    let label = format!(
        "{} {shape:?} causal={} {} seed={seed}",
        prepared.label(),
        case.causal,
        case.dtype
    );
    let sampled = (case.seq >= 512).then_some(48);
    judged(
        &label,
        run_against_oracle(gpu, prepared, shape, case.dtype, case.causal, seed, sampled),
    )
}

/// One run's outcome as a one-line failure naming `label` (an error, two runs that differ, a
/// failed comparison), or the max abs error.
fn judged(label: &str, outcome: Result<Outcome, String>) -> Result<f64, String> {
    let outcome = outcome.map_err(|e| format!("{label}: {e}"))?;
    if !outcome.repeatable {
        return Err(format!(
            "{label}: two runs on the same inputs differ (a race?)"
        ));
    }
    if !outcome.verdict.passed {
        return Err(format!(
            "{label}: {}",
            outcome.verdict.reason.unwrap_or_else(|| "failed".into())
        ));
    }
    Ok(outcome.verdict.max_abs)
}

/// Whether `run` must refuse a problem of `heads` query heads over `kv_heads`: its clusters take
/// two query heads of one K/V head together (CLUSTER_HEADS=1), and these are odd per K/V head.
fn must_refuse(run: &Run, heads: usize, kv_heads: usize) -> bool {
    run.overrides.get("CLUSTER_HEADS") == Some(1) && (heads / kv_heads) % 2 == 1
}

/// A case [`must_refuse`]: refused at launch for that reason, or a one-line failure.
fn refused(label: &str, outcome: Result<f64, String>) -> Result<f64, String> {
    match outcome {
        Err(e) if e.contains("are not a multiple") => Ok(0.0),
        Err(e) => Err(e),
        Ok(_) => Err(format!(
            "{label}: ran with an odd number of query heads per K/V head; it must refuse"
        )),
    }
}

/// The knob overrides every matrix runs an implementation with, on top of its defaults and
/// per-shape tuning: each value of its work-order knob SCHEDULE (hopper: the grid, then the
/// persistent scheduler), so that both paths run on every shape whichever one a shape's tuning
/// picks; none for an implementation without it.
fn schedules(name: &str) -> Vec<Config> {
    let implementation = attn_kernels::registry::find(name).unwrap();
    match implementation.knobs.iter().find(|k| k.name == "SCHEDULE") {
        Some(knob) => knob
            .domain
            .iter()
            .map(|&value| Config::from_pairs(&[(knob.name, value)]))
            .collect(),
        None => vec![Config::default()],
    }
}

/// Opt-in configs (which the matrices' shapes get from neither the defaults nor their tuning) that
/// the matrices run too, each at its head dims and with extra lengths ragged at its tile:
/// (implementation, config, head dims, lengths). hopper's FlashAttention-3 tile (#25): 128 x 176 in
/// 2 stages at D=128, with two consumer warpgroups (overlap, ping-pong) and with one (neither); the
/// lengths end 1 short of, 1 past and 35 into a 176-key tile (4099 = 23 · 176 + 51). And hopper's
/// N=64 P·V per panel at D=128 (PV_N=64, the default before N = 128), on the defaults and per-shape
/// tunings and on the 176-key tile. And Q from shared memory at D=128 (Q_REGS=0, the default before
/// Q in registers), on the defaults and tunings; Q in registers on D=128's default tile forced onto
/// every shape with each schedule (the tunings of small grids yield Q_REGS to 0, those with two Q
/// tiles set it to 0), and at D=64 with two overlapped consumer warpgroups (its three have no
/// registers for it). And conditional rescaling (LAZY_RESCALE=1, the tuning at D=128 from 4096
/// keys: a row keeps its max while a tile raises it by at most 8 in the log2 domain, and O's
/// rescale is skipped) forced onto every shape at both head dims; the checks' peaky and large-logit
/// inputs take its rescale path, the others mostly skip it. And two Q tiles in the persistent loop
/// with Q in shared memory (Q_STAGES=2, the tuning of grids that fill the GPU, which few of the
/// matrices' shapes do) at both head dims (3 × 5 heads of 2048 rows: 240 items, two for most
/// blocks), and beside them at D=128 160-key tiles (the widest whose 2-stage ring fits; lengths 1
/// short of, 1 past and 67 into a tile). And clusters of two blocks sharing each K/V tile
/// (CLUSTER=2): on the grid's defaults at both head dims and its 176-key tile with conditional
/// rescaling (D=128's tuning past two Q tiles until the copy warp), where 4099 rows make an odd
/// count of row blocks (the padding block stores nothing); in the persistent loop (work items are then pairs of row
/// blocks, one ticket per cluster) with two Q tiles at both head dims, at D=128 of 160 keys. And
/// the persistent loop's one Q tile released after an item's last Q·Kᵀ (Q_RELEASE=1, O stored from
/// registers) at D=64, and at D=128 on the 176-key tile with and without clusters. And persistent
/// clusters over two query heads of one K/V head (CLUSTER_HEADS=1) with two Q tiles at both head
/// dims, at D=128 of 160 keys: grouped shapes run, those of odd query heads per K/V head (every
/// multi-head one) must be refused at launch. And D=64's two Q tiles in 128-row blocks without
/// clusters (the tuning of D=64 grids whose 192-row blocks end in a thin wave). A config that
/// names SCHEDULE runs with that schedule only.
const OPT_IN: &[(&str, &str, &[usize], &[usize])] = &[
    ("hopper", "SCHEDULE=1,Q_REGS=0,Q_RELEASE=1", &[64], &[]),
    (
        "hopper",
        "SCHEDULE=1,Q_REGS=0,Q_RELEASE=1,BLOCK_N=176,STAGES=2,LAZY_RESCALE=1",
        &[128],
        &[175, 177, 387],
    ),
    (
        "hopper",
        "CLUSTER=2,SCHEDULE=1,Q_REGS=0,Q_RELEASE=1,BLOCK_N=176,STAGES=2,LAZY_RESCALE=1",
        &[128],
        &[175, 177, 387, 4099],
    ),
    ("hopper", "CLUSTER=2,SCHEDULE=0", &[64, 128], &[]),
    (
        "hopper",
        "CLUSTER=2,CLUSTER_HEADS=1,SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2",
        &[64],
        &[],
    ),
    (
        "hopper",
        "CLUSTER=2,CLUSTER_HEADS=1,SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2,BLOCK_N=160,LAZY_RESCALE=1",
        &[128],
        &[159, 161, 387],
    ),
    (
        "hopper",
        "CLUSTER=2,SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2",
        &[64],
        &[],
    ),
    (
        "hopper",
        "CLUSTER=2,SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2,BLOCK_N=160,LAZY_RESCALE=1",
        &[128],
        &[159, 161, 387],
    ),
    (
        "hopper",
        "CLUSTER=2,SCHEDULE=0,BLOCK_M=128,NUM_WARPS=8,BLOCK_N=176,STAGES=2,Q_REGS=0,LAZY_RESCALE=1",
        &[128],
        &[175, 177, 387, 4099],
    ),
    (
        "hopper",
        "BLOCK_M=128,NUM_WARPS=8,SCHEDULE=1,Q_REGS=0,Q_STAGES=2,CLUSTER=1",
        &[64],
        &[],
    ),
    ("hopper", "LAZY_RESCALE=1", &[64, 128], &[]),
    (
        "hopper",
        "SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2",
        &[64, 128],
        &[],
    ),
    (
        "hopper",
        "SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2,BLOCK_N=160",
        &[128],
        &[159, 161, 387],
    ),
    ("hopper", "PV_N=64", &[128], &[]),
    ("hopper", "Q_REGS=0", &[128], &[]),
    (
        "hopper",
        "BLOCK_M=128,NUM_WARPS=8,STAGES=3,OVERLAP=1,PINGPONG=1,Q_REGS=1",
        &[128],
        &[],
    ),
    (
        "hopper",
        "BLOCK_M=128,NUM_WARPS=8,OVERLAP=1,Q_REGS=1",
        &[64],
        &[],
    ),
    (
        "hopper",
        "BLOCK_M=128,NUM_WARPS=8,BLOCK_N=176,STAGES=2,OVERLAP=1,PINGPONG=1,PV_N=64",
        &[128],
        &[175, 4099],
    ),
    (
        "hopper",
        "BLOCK_M=128,NUM_WARPS=8,BLOCK_N=176,STAGES=2,OVERLAP=1,PINGPONG=1",
        &[128],
        &[175, 177, 387, 4099],
    ),
    (
        "hopper",
        "BLOCK_M=64,NUM_WARPS=4,BLOCK_N=176,STAGES=2,OVERLAP=0,PINGPONG=0",
        &[128],
        &[175, 177, 387, 4099],
    ),
];

/// One run of a matrix: knob overrides, the head dims to run at, extra lengths.
struct Run {
    overrides: Config,
    /// The implementation's first run, which also checks what does not depend on its config (the
    /// gate's GPU reference against the oracle).
    first: bool,
    head_dims: Vec<usize>,
    ragged: &'static [usize],
}

/// Every run of `name`'s matrices: each of its [`schedules`] over its head dims, then each of its
/// [`OPT_IN`] configs with each schedule on top; with `ATTN_TEST_RUNS=TEXT`, only the runs whose
/// knobs (as `K=V,...`) contain TEXT, to check one config's matrices in less device time.
fn runs(name: &str) -> Vec<Run> {
    let implementation = attn_kernels::registry::find(name).unwrap();
    let head_dims = implementation.head_dims.unwrap_or(&[64, 128]).to_vec();
    let mut runs: Vec<Run> = schedules(name)
        .into_iter()
        .enumerate()
        .map(|(i, overrides)| Run {
            overrides,
            first: i == 0,
            head_dims: head_dims.clone(),
            ragged: &[],
        })
        .collect();
    for (_, config, dims, ragged) in OPT_IN.iter().filter(|(n, ..)| *n == name) {
        let config: Config = config.parse().unwrap();
        let schedules = match config.get("SCHEDULE") {
            Some(_) => vec![Config::default()],
            None => schedules(name),
        };
        for schedule in schedules {
            runs.push(Run {
                overrides: config.merged(&schedule),
                first: false,
                head_dims: dims.to_vec(),
                ragged,
            });
        }
    }
    if let Ok(text) = std::env::var("ATTN_TEST_RUNS") {
        runs.retain(|run| run.overrides.to_string().contains(&text));
        println!("ATTN_TEST_RUNS={text}: {} runs of {name}", runs.len());
    }
    runs
}

/// `name` and its overrides, for labels: `hopper` or `hopper [SCHEDULE=1]`.
fn labelled(name: &str, overrides: &Config) -> String {
    if overrides.0.is_empty() {
        name.to_string()
    } else {
        format!("{name} [{overrides}]")
    }
}

/// Runs `matrix` (returning its failures) for `name` in each of its [`runs`] (every schedule, and
/// its opt-in configs); fails listing every failing case. With `ATTN_TEST_JOBS=N`, N runs at a
/// time, each on its own thread and stream: the runs' NVRTC compiles, most of a matrix's time,
/// then overlap (no timing is taken here). A kernel fault ends every run's context: replay with
/// the default, one at a time, to see whose it was.
fn check_every_schedule(name: &str, matrix: fn(&str, &Run) -> Vec<String>) {
    let runs = runs(name);
    let jobs = std::env::var("ATTN_TEST_JOBS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(1)
        .clamp(1, runs.len().max(1));
    let next = AtomicUsize::new(0);
    let failures: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| {
                    let mut failures = Vec::new();
                    while let Some(run) = runs.get(next.fetch_add(1, Ordering::Relaxed)) {
                        failures.extend(matrix(name, run));
                    }
                    failures
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The matrix of shapes for `name` in `run`; returns the failures (printing the count).
fn check_implementation_with(name: &str, run: &Run) -> Vec<String> {
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    let overrides = &run.overrides;
    let label = labelled(name, overrides);
    println!("{label}: base seed {seed} (ATTN_TEST_SEED={seed} to replay)");
    let mut failures = Vec::new();
    let mut worst = 0.0f64;
    let mut count = 0;
    for dtype in [DType::F16, DType::Bf16] {
        for &head_dim in &run.head_dims {
            let candidate = Candidate::registered(name, overrides.clone()).unwrap();
            for (i, case) in matrix(&[head_dim], run.ragged)
                .iter()
                .filter(|c| c.dtype == dtype)
                .enumerate()
            {
                // The config the implementation tunes for this shape (compiles are cached).
                let shape =
                    Shape::new(case.batch, case.heads, case.seq, case.seq, head_dim).unwrap();
                let params = Params::new(head_dim, case.causal);
                // Multi-head only: a run that must refuse it does so at launch (the short rows
                // suffice).
                let refuses = must_refuse(run, case.heads, case.heads);
                if refuses && case.seq > 100 {
                    continue;
                }
                let prepared = Prepared::new(
                    &gpu,
                    &candidate.for_problem(&shape, &params, &gpu.limits()),
                    dtype,
                    head_dim,
                )
                .unwrap_or_else(|e| panic!("{e}"));
                count += 1;
                let outcome = check(&gpu, &prepared, case, seed.wrapping_add(i as u64));
                let outcome = if refuses {
                    refused(prepared.label(), outcome)
                } else {
                    outcome
                };
                match outcome {
                    Ok(max_abs) => worst = worst.max(max_abs),
                    Err(msg) => failures.push(msg),
                }
            }
        }
    }
    println!(
        "{label}: {count} cases, {} failed, worst max abs error {worst:.3e}",
        failures.len()
    );
    failures
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn naive_matches_the_oracle() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    check_every_schedule("naive", check_implementation_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tiled_matches_the_oracle() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    check_every_schedule("tiled", check_implementation_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn mma_matches_the_oracle() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    check_every_schedule("mma", check_implementation_with);
}

#[test]
#[ignore = "needs a CUDA GPU (Hopper, sm_90)"]
fn hopper_matches_the_oracle() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    check_every_schedule("hopper", check_implementation_with);
}

/// hopper with conditional rescaling (LAZY_RESCALE=1: a row keeps its max while a key tile raises
/// it by at most 8 in the log2 domain, and a warp whose rows all kept theirs skips O's rescale) on
/// inputs whose row maxima jump after the first tile, so that both its paths run where normal
/// inputs almost only skip: peaky rows (one key at logit 20, anywhere in the row) and large logits
/// (≈ 150 ± 5), ragged lengths, both schedules (and at D=128 the two Q tiles of 160-key tiles),
/// both masks, dtypes and head dims.
#[test]
#[ignore = "needs a CUDA GPU (Hopper, sm_90)"]
fn hopper_lazy_rescale_matches_the_oracle_when_row_maxima_jump() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    println!("base seed {seed} (ATTN_TEST_SEED={seed} to replay)");
    let mut failures = Vec::new();
    let mut count = 0u64;
    // The full grids' two Q tiles of 160-key tiles (tuned from 2048 keys a row at D=128) too,
    // their 128-row blocks named: these small grids would be tuned to 64-row ones.
    let two_q_160 = "LAZY_RESCALE=1,SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2,BLOCK_N=160,\
                     BLOCK_M=128,NUM_WARPS=8,OVERLAP=1,PINGPONG=1";
    for (overrides, head_dims) in [
        ("LAZY_RESCALE=1,SCHEDULE=0", [64, 128].as_slice()),
        ("LAZY_RESCALE=1,SCHEDULE=1", &[64, 128]),
        (two_q_160, &[128]),
    ] {
        let candidate = Candidate::registered("hopper", overrides.parse().unwrap()).unwrap();
        for dtype in [DType::F16, DType::Bf16] {
            for &head_dim in head_dims {
                for causal in [false, true] {
                    for (batch, heads, seq) in [(1, 3, 1000), (2, 2, 4099)] {
                        for distribution in [Distribution::Peaky, Distribution::LargeMagnitude] {
                            let shape = Shape::new(batch, heads, seq, seq, head_dim).unwrap();
                            let params = Params::new(head_dim, causal);
                            let candidate = candidate.for_problem(&shape, &params, &gpu.limits());
                            let prepared = Prepared::new(&gpu, &candidate, dtype, head_dim)
                                .unwrap_or_else(|e| panic!("{e}"));
                            count += 1;
                            let case_seed = seed.wrapping_add(count);
                            let label = format!(
                                "{} {shape:?} causal={causal} {dtype} {distribution:?} seed={case_seed}",
                                prepared.label()
                            );
                            let outcome = run_with_params(
                                &gpu,
                                &prepared,
                                shape,
                                dtype,
                                &params,
                                distribution,
                                case_seed,
                                Some(48),
                            );
                            if let Err(msg) = judged(&label, outcome) {
                                failures.push(msg);
                            }
                        }
                    }
                }
            }
        }
    }
    println!(
        "hopper LAZY_RESCALE=1: {count} cases, {} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cublas_matches_the_oracle() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    check_every_schedule("cublas", check_implementation_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn hybrid_qk_matches_the_oracle() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    check_every_schedule("hybrid-qk", check_implementation_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn hybrid_pv_matches_the_oracle() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    check_every_schedule("hybrid-pv", check_implementation_with);
}

/// The variants' matrix for `head_dim`: grouped and multi-query heads, sliding windows (one-sided,
/// two-sided, zero-width, wider than S, narrower than a tile, with and without causal), S_q ≠ S_kv
/// both ways, ragged lengths and S = 1. `(shape, causal, window)`.
/// `ragged` (a [`Run`]'s lengths) adds grouped-head shapes of each length, and S_q = 1000 under
/// each as S_kv.
fn variant_matrix(head_dim: usize, ragged: &[usize]) -> Vec<(String, bool, &'static str)> {
    let mut cases = Vec::new();
    let mut shapes: Vec<(&str, String)> = [
        ("4/2", "1"),
        ("4/2", "100"),
        ("6/1", "257"),
        ("8/4", "1000"),
        ("4/1", "2048"),
        ("2/1", "300,77"),
        ("4/2", "77,300"),
        ("5", "515"),
    ]
    .into_iter()
    .map(|(heads, seqs)| (heads, seqs.to_string()))
    .collect();
    for &seq in ragged {
        shapes.push(("8/2", seq.to_string()));
        shapes.push(("4/1", format!("1000,{seq}")));
    }
    for (heads, seqs) in shapes {
        let shape = format!("2,{heads},{seqs},{head_dim}");
        for (causal, window) in [
            (false, "-1,-1"),
            (true, "-1,-1"),
            (true, "64,-1"),
            (true, "1,-1"),
            (false, "100,100"),
            (false, "0,0"),
            (false, "300,17"),
            (false, "-1,5"),
            (true, "5000,-1"),
        ] {
            cases.push((shape.clone(), causal, window));
        }
    }
    cases
}

/// `name` in `run` over [`variant_matrix`] in both dtypes and the run's head dims; returns the
/// failures.
fn check_variants_with(name: &str, run: &Run) -> Vec<String> {
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    let implementation = attn_kernels::registry::find(name).unwrap();
    let overrides = &run.overrides;
    let name = &labelled(name, overrides);
    println!("{name} variants: base seed {seed} (ATTN_TEST_SEED={seed} to replay)");
    let candidate = Candidate::registered(implementation.name, overrides.clone()).unwrap();
    let (mut failures, mut worst, mut count) = (Vec::new(), 0.0f64, 0);
    for dtype in [DType::F16, DType::Bf16] {
        for &head_dim in &run.head_dims {
            for (i, (shape, causal, window)) in
                variant_matrix(head_dim, run.ragged).into_iter().enumerate()
            {
                let shape: Shape = shape.parse().unwrap();
                let params = Params::new(head_dim, causal).with_window(window.parse().unwrap());
                let case_seed = seed.wrapping_add(i as u64);
                let label = format!(
                    "{name} {shape} causal={causal} window={window} {dtype} seed={case_seed}"
                );
                let prepared = Prepared::new(
                    &gpu,
                    &candidate.for_problem(&shape, &params, &gpu.limits()),
                    dtype,
                    head_dim,
                )
                .unwrap_or_else(|e| panic!("{label}: {e}"));
                let sampled = (shape.seq_q >= 1000).then_some(48);
                count += 1;
                let normal = Distribution::Normal;
                let outcome = run_with_params(
                    &gpu, &prepared, shape, dtype, &params, normal, case_seed, sampled,
                );
                let outcome = judged(&label, outcome);
                let outcome = if must_refuse(run, shape.heads, shape.kv_heads) {
                    refused(&label, outcome)
                } else {
                    outcome
                };
                match outcome {
                    Ok(max_abs) => worst = worst.max(max_abs),
                    Err(msg) => failures.push(msg),
                }
            }
        }
    }
    println!(
        "{name} variants: {count} cases, {} failed, worst max abs error {worst:.3e}",
        failures.len()
    );
    failures
}

/// One varlen case: query lengths, key lengths, heads (`"HQ/HKV"`), causal, window (`"L,R"`).
type VarlenCase = (Vec<usize>, Vec<usize>, &'static str, bool, &'static str);

/// Packed varlen batches: empty sequences on either side, single rows, lengths around the tiles,
/// S_q ≠ S_kv, grouped heads, with and without causal and windows. `ragged` (a [`Run`]'s lengths)
/// adds a batch of them, and one with the key lengths reversed.
fn varlen_matrix(ragged: &[usize]) -> Vec<VarlenCase> {
    let mixed = vec![300, 1, 0, 64, 129, 1000, 17];
    let mut batches = vec![
        (mixed.clone(), mixed.clone()),
        (vec![5, 77, 0, 260], vec![9, 0, 40, 260]),
        (vec![2048, 512, 1536], vec![2048, 512, 1536]),
    ];
    if !ragged.is_empty() {
        let reversed: Vec<usize> = ragged.iter().rev().copied().collect();
        batches.push((ragged.to_vec(), ragged.to_vec()));
        batches.push((ragged.to_vec(), reversed));
    }
    let mut cases = Vec::new();
    for (q, kv) in batches {
        for heads in ["4/2", "3"] {
            for (causal, window) in [
                (false, "-1,-1"),
                (true, "-1,-1"),
                (true, "50,-1"),
                (false, "8,8"),
            ] {
                cases.push((q.clone(), kv.clone(), heads, causal, window));
            }
        }
    }
    cases
}

/// `name` with `overrides` over [`varlen_matrix`]: the packed output, launched twice (bitwise
/// equal), against each sequence's f64 oracle; and the GPU reference (the gate's) against the same
/// oracle (the shared batches in the implementation's first run, a run's own ragged ones in that
/// run). Returns the failures.
fn check_varlen_with(name: &str, run: &Run) -> Vec<String> {
    use attn_oracle::{compare_varlen, generate_varlen, Varlen};
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    let implementation = attn_kernels::registry::find(name).unwrap();
    let overrides = &run.overrides;
    let name = &labelled(name, overrides);
    println!("{name} varlen: base seed {seed} (ATTN_TEST_SEED={seed} to replay)");
    let candidate = Candidate::registered(implementation.name, overrides.clone()).unwrap();
    let (mut failures, mut worst, mut count) = (Vec::new(), 0.0f64, 0);
    // varlen_matrix lists the batches every run shares first.
    let common_cases = varlen_matrix(&[]).len();
    for dtype in [DType::F16, DType::Bf16] {
        for &head_dim in &run.head_dims {
            let gpu_reference = attn_kernels::GpuReference::new(&gpu, dtype, head_dim).unwrap();
            for (i, (lens_q, lens_kv, heads, causal, window)) in
                varlen_matrix(run.ragged).into_iter().enumerate()
            {
                let varlen = Varlen::new(lens_q.clone(), lens_kv.clone()).unwrap();
                let per_head: Shape = format!("1,{heads},1,{head_dim}").parse().unwrap();
                let params = Params::new(head_dim, causal).with_window(window.parse().unwrap());
                let case_seed = seed.wrapping_add(i as u64);
                let label = format!("{name} varlen q={lens_q:?} kv={lens_kv:?} H={heads} D={head_dim} causal={causal} window={window} {dtype} seed={case_seed}");
                let inputs = generate_varlen(
                    &CaseSpec {
                        shape: per_head,
                        dtype,
                        distribution: Distribution::Normal,
                        seed: case_seed,
                    },
                    &varlen,
                );
                let bounding = varlen.bounding_shape(&per_head).unwrap();
                let prepared = Prepared::new(
                    &gpu,
                    &candidate.for_problem(&bounding, &params, &gpu.limits()),
                    dtype,
                    head_dim,
                )
                .unwrap_or_else(|e| panic!("{label}: {e}"));
                count += 1;
                let outcome = (|| -> Result<(attn_oracle::HostTensor, attn_oracle::HostTensor, Vec<f32>), String> {
                    let e = |e: attn_kernels::KernelError| e.to_string();
                    let (q, k, v) = (gpu.upload(&inputs.q).map_err(e)?, gpu.upload(&inputs.k).map_err(e)?, gpu.upload(&inputs.v).map_err(e)?);
                    let offsets = gpu.upload_offsets(&varlen).map_err(e)?;
                    let mut outs = Vec::new();
                    for _ in 0..2 {
                        let mut o = gpu.alloc_poisoned(q.dims, dtype).map_err(e)?;
                        prepared.launch_batch(&gpu, &q, &k, &v, &mut o, &params, Some(&offsets)).map_err(e)?;
                        gpu.synchronize().map_err(e)?;
                        outs.push(gpu.download(&o).map_err(e)?);
                    }
                    let reference = gpu_reference.compute(&gpu, &q, &k, &v, &params, Some(&offsets)).map_err(e)?;
                    let reference = reference.download(&gpu).map_err(e)?;
                    let second = outs.pop().unwrap();
                    Ok((outs.pop().unwrap(), second, reference))
                })();
                if must_refuse(run, per_head.heads, per_head.kv_heads) {
                    let outcome = outcome.map(|_| 0.0).map_err(|e| format!("{label}: {e}"));
                    if let Err(msg) = refused(&label, outcome) {
                        failures.push(msg);
                    }
                    continue;
                }
                let (first, second, gpu_ref) = match outcome {
                    Ok(x) => x,
                    Err(err) => {
                        failures.push(format!("{label}: {err}"));
                        continue;
                    }
                };
                if first.as_bytes() != second.as_bytes() {
                    failures.push(format!("{label}: two runs differ (a race?)"));
                }
                let tol = tolerance(dtype, Distribution::Normal);
                match compare_varlen(
                    &first, &inputs.q, &inputs.k, &inputs.v, &params, &varlen, &tol,
                ) {
                    Ok(v) if v.passed => worst = worst.max(v.max_abs),
                    Ok(v) => failures.push(format!("{label}: {v}")),
                    Err(err) => failures.push(format!("{label}: {err}")),
                }
                // The gate's f32 reference must itself be right on packed batches: on the common
                // batches once per implementation (the same inputs every run; its f64 oracle of
                // every row is most of a run's time), on a run's own ragged ones each time.
                if !run.first && i < common_cases {
                    continue;
                }
                let exact = attn_oracle::reference_varlen(
                    &inputs.q, &inputs.k, &inputs.v, &params, &varlen,
                )
                .unwrap()
                .to_f64();
                let ref_err = gpu_ref
                    .iter()
                    .zip(&exact)
                    .map(|(g, x)| (f64::from(*g) - x).abs())
                    .fold(0.0, f64::max);
                // NaN fails too (its ordering is None).
                if ref_err.partial_cmp(&1e-4) != Some(std::cmp::Ordering::Less) {
                    failures.push(format!(
                        "{label}: the GPU reference is off the oracle by {ref_err:.3e}"
                    ));
                }
            }
        }
    }
    println!(
        "{name} varlen: {count} cases, {} failed, worst max abs error {worst:.3e}",
        failures.len()
    );
    failures
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn naive_varlen_matches_the_oracle() {
    check_every_schedule("naive", check_varlen_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tiled_varlen_matches_the_oracle() {
    check_every_schedule("tiled", check_varlen_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn mma_varlen_matches_the_oracle() {
    check_every_schedule("mma", check_varlen_with);
}

#[test]
#[ignore = "needs a CUDA GPU (Hopper, sm_90)"]
fn hopper_varlen_matches_the_oracle() {
    check_every_schedule("hopper", check_varlen_with);
}

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

#[test]
#[ignore = "needs a CUDA GPU"]
fn naive_variants_match_the_oracle() {
    check_every_schedule("naive", check_variants_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tiled_variants_match_the_oracle() {
    check_every_schedule("tiled", check_variants_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn mma_variants_match_the_oracle() {
    check_every_schedule("mma", check_variants_with);
}

#[test]
#[ignore = "needs a CUDA GPU (Hopper, sm_90)"]
fn hopper_variants_match_the_oracle() {
    check_every_schedule("hopper", check_variants_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn naive_handles_other_head_dims_and_unequal_lengths() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    for (head_dim, seq_q, seq_kv, causal) in [
        (96, 33, 70, true),
        (32, 70, 33, true),
        (200, 5, 9, false),
        (64, 100, 37, true),
    ] {
        let prepared = Prepared::new(
            &gpu,
            &Candidate::registered("naive", Config::default()).unwrap(),
            DType::F16,
            head_dim,
        )
        .unwrap();
        let shape = Shape::new(2, 3, seq_q, seq_kv, head_dim).unwrap();
        let verdict = run_against_oracle(&gpu, &prepared, shape, DType::F16, causal, seed, None)
            .unwrap()
            .verdict;
        assert!(
            verdict.passed,
            "naive D={head_dim} Sq={seq_q} Skv={seq_kv} causal={causal} seed={seed}: {:?}",
            verdict.reason
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_kernel_that_writes_nothing_is_caught_by_the_poison() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let dir = tempfile_dir();
    let path = dir.join("lazy.cu");
    std::fs::write(&path, "#include \"attn_common.cuh\"\nextern \"C\" __global__ void attn_fwd(const elem_t* q, const elem_t* k, const elem_t* v, elem_t* o, int b, int h, int sq, int skv, float s, int c) {}\n").unwrap();
    let candidate = Candidate::from_file(&path, None, Config::default()).unwrap();
    let prepared = Prepared::new(&gpu, &candidate, DType::F16, 64).unwrap();
    let shape = Shape::new(1, 2, 64, 64, 64).unwrap();
    let verdict = run_against_oracle(&gpu, &prepared, shape, DType::F16, false, base_seed(), None)
        .unwrap()
        .verdict;
    assert!(!verdict.passed);
    assert_eq!(
        verdict.poison_count,
        shape.q_len(),
        "every element still holds the poison"
    );
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("attn-gpu-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
