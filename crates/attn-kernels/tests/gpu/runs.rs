//! The runs of an implementation's matrices: each value of its work-order knob, then its opt-in
//! configs, each run over a matrix of cases.

use std::sync::atomic::{AtomicUsize, Ordering};

use attn_kernels::Config;

/// Whether `run` must refuse a problem of `heads` query heads over `kv_heads`: its clusters take
/// two query heads of one K/V head together (CLUSTER_HEADS=1), and these are odd per K/V head.
pub(crate) fn must_refuse(run: &Run, heads: usize, kv_heads: usize) -> bool {
    run.overrides.get("CLUSTER_HEADS") == Some(1) && (heads / kv_heads) % 2 == 1
}

/// A case [`must_refuse`]: refused at launch for that reason, or a one-line failure.
pub(crate) fn refused(label: &str, outcome: Result<f64, String>) -> Result<f64, String> {
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
pub(crate) struct Run {
    pub(crate) overrides: Config,
    /// The implementation's first run, which also checks what does not depend on its config (the
    /// gate's GPU reference against the oracle).
    pub(crate) first: bool,
    pub(crate) head_dims: Vec<usize>,
    pub(crate) ragged: &'static [usize],
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
pub(crate) fn labelled(name: &str, overrides: &Config) -> String {
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
pub(crate) fn check_every_schedule(name: &str, matrix: fn(&str, &Run) -> Vec<String>) {
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
