//! The adversarial suite: planted kernels (`tests/planted/planted.cu`, one defect each, and the
//! Triton ones of `tests/planted/planted_triton.py`) judged by the real gate pipeline on the GPU,
//! each of which must be rejected for its own reason. Each
//! case runs in a child process of this test executable: a fault loses the CUDA context and a
//! hang ends the process (that is how the gate bounds it), so neither may take the others down.
//!
//! Run on a GPU machine with `--include-ignored`.

use std::process::Command;
use std::time::{Duration, Instant};

use attn_evidence::{CaseStatus, GateRule};
use attn_kernels::{Candidate, Config, Gpu, TimingMode, TimingOptions};
use attn_measure::gate::{GatePlan, GateSession};
use attn_measure::sdpa::Backend;
use attn_measure::supervise::Watchdog;
use attn_measure::timing::Interleave;
use attn_measure::{Baseline, Problem};
use attn_stats::CompareOptions;

const SOURCE: &str = include_str!("planted/planted.cu");
/// The planted Triton kernels (`PLANT` chooses the defect; 0 is the honest starter).
const TRITON_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/planted/planted_triton.py"
);
/// The hang bound the children use (the gate's default is 10 s).
const HANG_BOUND: Duration = Duration::from_secs(3);

/// One planted kernel: its PLANT number, the shape it runs on, and the verdict it must get.
#[derive(Clone, Copy)]
struct Planted {
    name: &'static str,
    plant: i64,
    shape: &'static str,
    side_stream: bool,
    /// A registered implementation to run instead of planted.cu (for planted work around it).
    registered: Option<&'static str>,
    expect: CaseStatus,
    /// Words the verdict must contain (the named reason), beyond its status.
    reason: Option<&'static str>,
    /// Timing mode (graph unless said).
    mode: TimingMode,
    /// Planted around the candidate by the session: see [`Around`].
    around: Around,
    /// The baseline (`sdpa` unless said: a varlen batch needs a registered one).
    baseline: &'static str,
    /// Whether the planted kernel reads the variant parameters (`VARIANTS=1`).
    variants: bool,
    /// Whether the plant is a Triton kernel of `planted_triton.py` (through `--triton`).
    triton: bool,
}

/// Work the session plants around the candidate's launches (not in its kernel).
#[derive(Clone, Copy, PartialEq)]
enum Around {
    Nothing,
    /// After each timed sample, the sample's outputs are overwritten with the verifier's own
    /// references as they sit in device memory: a kernel that found the answer and copied it.
    CopiesReference,
}

const fn planted(
    name: &'static str,
    plant: i64,
    shape: &'static str,
    expect: CaseStatus,
) -> Planted {
    Planted {
        name,
        plant,
        shape,
        side_stream: false,
        registered: None,
        expect,
        reason: None,
        mode: TimingMode::Graph,
        around: Around::Nothing,
        baseline: "sdpa",
        variants: false,
        triton: false,
    }
}

impl Planted {
    const fn because(self, reason: &'static str) -> Planted {
        Planted {
            reason: Some(reason),
            ..self
        }
    }
    const fn in_mode(self, mode: TimingMode) -> Planted {
        Planted { mode, ..self }
    }
    const fn around(self, around: Around) -> Planted {
        Planted { around, ..self }
    }
    /// Against `baseline` (a registered implementation: SDPA is no varlen baseline).
    const fn against(self, baseline: &'static str) -> Planted {
        Planted { baseline, ..self }
    }
    /// A Triton kernel of `planted_triton.py` rather than planted.cu.
    const fn in_triton(self) -> Planted {
        Planted {
            triton: true,
            ..self
        }
    }
    /// A planted kernel that reads the variant parameters (grouped heads, windows, varlen).
    const fn with_variants(self) -> Planted {
        Planted {
            variants: true,
            ..self
        }
    }
}

/// A packed varlen batch for the varlen cases: an empty sequence, lengths off every tile,
/// grouped heads, causal.
const VARLEN_SHAPE: &str = "varlen=300,0,77,129,1 H=4/2 D=64 causal";

const PLANTED: &[Planted] = &[
    planted("writes-nothing", 1, "1,4,256,64", CaseStatus::Unwritten),
    planted("stale-output", 2, "1,4,256,64", CaseStatus::StaleOutput),
    planted(
        "first-16-launches",
        3,
        "1,4,256,64",
        CaseStatus::TimedOutputDiffers,
    ),
    planted(
        "one-bad-row-large",
        4,
        "2,16,8192,64",
        CaseStatus::Incorrect,
    ),
    planted("no-running-max", 5, "1,4,256,64", CaseStatus::NonFinite),
    planted(
        "ignores-causal",
        6,
        "1,4,256,64 causal",
        CaseStatus::Incorrect,
    ),
    planted(
        "causal-top-left",
        7,
        "1,4,100,300,64 causal",
        CaseStatus::Incorrect,
    ),
    planted(
        "bf16-read-as-fp16",
        8,
        "1,4,256,64 bf16",
        CaseStatus::Incorrect,
    ),
    Planted {
        side_stream: true,
        // Hidden work only escapes if it outlasts the timed work: a fast kernel's does.
        registered: Some("mma"),
        ..planted("side-stream", 0, "1,8,512,64", CaseStatus::EscapedStream)
    },
    planted("hang", 9, "1,4,256,64", CaseStatus::Hang),
    planted("fault", 10, "1,4,256,64", CaseStatus::Fault),
    // Remembers outputs by input content: 1.6× faster than SDPA here when the timed inputs
    // repeat. Inputs turned before every timed sample leave it nothing to remember.
    planted(
        "memoises-outputs",
        11,
        "1,8,2048,128",
        CaseStatus::NotFaster,
    ),
    planted("correct-but-slow", 0, "1,4,256,64", CaseStatus::NotFaster),
    // #23: arguments never varied. The checks draw the scale per check.
    planted("ignores-scale", 12, "1,4,256,64", CaseStatus::Incorrect).because("scale "),
    // #23: writes outside the output, or into the inputs.
    planted(
        "writes-64-after-o",
        13,
        "1,4,256,64",
        CaseStatus::WroteOutside,
    )
    .because("wrote outside its output (128 bytes after O)"),
    planted(
        "writes-2-bytes-before-o",
        14,
        "1,4,256,64 bf16",
        CaseStatus::WroteOutside,
    )
    .because("wrote outside its output (2 bytes before O)"),
    planted("zeroes-q", 15, "1,4,256,64", CaseStatus::WroteInputs)
        .because("wrote into its inputs (Q changed"),
    planted("writes-after-k", 16, "1,4,256,64", CaseStatus::WroteOutside)
        .because("wrote outside its output (2 bytes after K)"),
    // #23: non-determinism.
    planted(
        "flips-a-bit-every-other-launch",
        17,
        "1,4,256,64",
        CaseStatus::NonDeterministic,
    )
    .because("non-deterministic output"),
    // #23: repeated launches inside one timed sample. Every launch of a batch sample now has its
    // own poisoned output: the reuse that would show as a garbled output (18; "timed output
    // differs" when a set ran twice in a sample) or pass for speed (19) never happens, and the
    // slow kernel is judged as what it is.
    planted(
        "garbles-a-reused-output",
        18,
        "1,8,1024,64",
        CaseStatus::NotFaster,
    )
    .in_mode(TimingMode::Batch),
    planted(
        "skips-written-rows",
        19,
        "1,8,1024,64",
        CaseStatus::NotFaster,
    )
    .in_mode(TimingMode::Batch),
    // #23: the answer in the clear. Correct for its first launches, then writes nothing, and the
    // verifier's reference is copied into its outputs before they are checked: masked, it is noise.
    planted(
        "copies-the-reference",
        3,
        "1,4,256,64",
        CaseStatus::TimedOutputDiffers,
    )
    .around(Around::CopiesReference),
    // The edge battery beyond the case's own group and window: each is right on its case (a group
    // of 4, a window of 128), and rejected at the first battery shape it gets wrong, which the
    // reason names (`battery_plants_are_named_at_their_first_wrong_shape` finds it on the CPU).
    // At 6/2 the last batch's heads 4 and 5 take K/V head 2, past the end of K and V: that read is
    // the verdict (NaN guards), named at the shape.
    planted(
        "gqa-head-shift",
        21,
        "2,32/8,256,64",
        CaseStatus::ReadOutside,
    )
    .with_variants()
    .because("edge shape 2,6/2,97,129,64,"),
    planted(
        "gqa-group-of-four",
        22,
        "2,32/8,256,64",
        CaseStatus::Incorrect,
    )
    .with_variants()
    .because("edge shape 2,6/2,97,129,64,"),
    planted(
        "window-left-in-64s",
        23,
        "1,8/2,700,64 causal window=128,0",
        CaseStatus::Incorrect,
    )
    .with_variants()
    .against("tiled")
    // The first dense edge with one query over 37 keys: the ABI clips the window to
    // S_q + S_kv = 38 keys, which the kernel rounds down to 0.
    .because("edge shape 3,20/5,1,37,64 causal window=128,0,"),
    planted(
        "window-right-ignored",
        24,
        "2,32/8,256,64",
        CaseStatus::Incorrect,
    )
    .with_variants()
    .because("edge shape 1,4/1,200,161,64 window=0,0,"),
    // Reads outside the inputs, named before the wrong values they cause. Query head h reads K/V
    // head h >> 2 at a group of 7: heads 16 to 27 read K/V heads 4 to 6, past the end of K and V
    // (found on an H200 as "non-deterministic output" when what lay there changed).
    planted(
        "kv-head-past-the-end",
        25,
        "1,28/4,1024,64",
        CaseStatus::ReadOutside,
    )
    .with_variants()
    .because("read outside its inputs (past K, past V);"),
    // One key row past each head, masked by arithmetic: only the last head's lies past K, and
    // only a NaN there changes the output.
    planted("one-key-past-k", 26, "1,4,256,64", CaseStatus::ReadOutside)
        .because("read outside its inputs (past K);"),
    // A halo row before each head's first query row, weighted by 0 (bf16's NaN guards).
    planted(
        "halo-row-before-q",
        28,
        "1,4,256,64 bf16",
        CaseStatus::ReadOutside,
    )
    .because("read outside its inputs (before Q);"),
    // Wrong and unstable: the wrong value is the verdict, the instability appended to it.
    planted(
        "wrong-and-non-deterministic",
        27,
        "1,4,256,64",
        CaseStatus::Incorrect,
    )
    .because("; also non-deterministic: two launches on the same inputs differ in"),
];

/// Honest kernels: every defence must let them through (passed or not faster, never a rejection,
/// never untimed), in both timing modes, at shapes that exercise the new checks (a memory-bound
/// decode shape for the physical floor, S_q > S_kv causal, bf16, D = 128).
/// Every registered implementation; each is judged in both timing modes (graph and batch).
const HONEST: &[Planted] = &[
    honest("honest-mma", "mma", "1,8,512,64"),
    honest("honest-mma-causal-bf16", "mma", "2,4,1000,128 causal bf16"),
    honest("honest-mma-decode", "mma", "1,16,1,8192,128"),
    honest("honest-mma-more-queries", "mma", "1,4,300,100,64 causal"),
    // SDPA has no window kernel: a window is judged against another implementation.
    Planted {
        baseline: "tiled",
        ..honest(
            "honest-mma-gqa-window",
            "mma",
            "1,8/2,700,64 causal window=128,0",
        )
    },
    honest("honest-hopper", "hopper", "2,16,2048,128"),
    honest(
        "honest-hopper-gqa-causal-bf16",
        "hopper",
        "1,16/4,1500,128 causal bf16",
    ),
    honest("honest-tiled", "tiled", "1,4,256,64 causal"),
    honest("honest-naive", "naive", "1,2,200,64"),
    honest("honest-cublas", "cublas", "1,8,512,64"),
    honest("honest-hybrid-qk", "hybrid-qk", "1,8,512,128 bf16"),
    honest("honest-hybrid-pv", "hybrid-pv", "1,8,512,64 causal"),
];

/// The timing modes an honest kernel is judged in.
const MODES: [TimingMode; 2] = [TimingMode::Graph, TimingMode::Batch];

/// #24: varlen batches through the whole gate (checks with offsets, the varlen edge battery, timed
/// outputs verified against packed references), against mma (SDPA is no varlen baseline): honest
/// kernels pass or are not faster, a planted wrong one is rejected for its reason.
const VARLEN: &[Planted] = &[
    honest("honest-mma-varlen", "mma", VARLEN_SHAPE).against("mma"),
    honest(
        "honest-mma-varlen-prefill",
        "mma",
        "varlen=2048,128,0,4096,1024,3000 H=32/8 D=128 causal bf16",
    )
    .against("mma"),
    honest(
        "honest-hopper-varlen-prefill",
        "hopper",
        "varlen=2048,128,0,4096,1024,3000 H=32/8 D=128 causal bf16",
    )
    .against("mma"),
    honest(
        "honest-hopper-varlen",
        "hopper",
        "varlen=1000,1,0,513,257:100 H=16 D=128",
    )
    .against("mma"),
    Planted {
        mode: TimingMode::Batch,
        ..honest(
            "honest-hopper-varlen-batch",
            "hopper",
            "varlen=4096,0,2048,1024 H=16/4 D=128",
        )
        .against("mma")
    },
    // A varlen kernel that treats the packed batch as one dense sequence for its keys
    // (cu_seqlens_kv ignored): every row written, rows of later sequences see earlier ones' keys.
    planted(
        "ignores-cu-seqlens",
        20,
        VARLEN_SHAPE,
        CaseStatus::Incorrect,
    )
    .with_variants()
    .against("mma")
    .because("against the f64 oracle"),
];

/// #60: Triton kernels through the same gate: the honest starter passes (or is not faster) in
/// both timing modes, and each planted defect of planted.cu, written in Triton, is rejected by
/// the same defence for the same reason.
const TRITON: &[Planted] = &[
    planted("triton-honest", 0, "1,8,512,64", CaseStatus::Passed).in_triton(),
    planted(
        "triton-honest-causal-bf16",
        0,
        "2,4,1000,128 causal bf16",
        CaseStatus::Passed,
    )
    .in_triton(),
    planted(
        "triton-writes-nothing",
        1,
        "1,4,256,64",
        CaseStatus::Unwritten,
    )
    .in_triton(),
    planted(
        "triton-no-running-max",
        2,
        "1,4,256,64",
        CaseStatus::NonFinite,
    )
    .in_triton(),
    planted(
        "triton-ignores-causal",
        3,
        "1,4,256,64 causal",
        CaseStatus::Incorrect,
    )
    .in_triton(),
    planted(
        "triton-ignores-scale",
        4,
        "1,4,256,64",
        CaseStatus::Incorrect,
    )
    .in_triton()
    .because("scale "),
];

/// A planted case's candidate: its registered implementation, its Triton plant, or its
/// planted.cu kernel with `defines`.
fn candidate_of(p: &Planted, mut defines: Config) -> Candidate {
    if let Some(name) = p.registered {
        return Candidate::registered(name, Config::default()).unwrap();
    }
    if p.triton {
        defines.0.insert("BLOCK_M".into(), 64);
        defines.0.insert("BLOCK_N".into(), 64);
        defines.0.insert("PLANT".into(), p.plant);
        return Candidate::from_triton(std::path::Path::new(TRITON_FILE), "attn_fwd", defines)
            .unwrap();
    }
    Candidate::Source {
        path: "planted.cu".into(),
        source: SOURCE.into(),
        entry: "attn_fwd".into(),
        defines,
    }
}

const fn honest(name: &'static str, implementation: &'static str, shape: &'static str) -> Planted {
    Planted {
        registered: Some(implementation),
        ..planted(name, 0, shape, CaseStatus::Passed)
    }
}

/// In a child: judges one planted kernel and prints `STATUS <status> | <reason>`.
fn judge(p: &Planted) {
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let mut defines = Config::default();
    defines.0.insert("PLANT".into(), p.plant);
    defines.0.insert("BLOCK_M".into(), 4);
    defines.0.insert("NUM_WARPS".into(), 4);
    if p.variants {
        defines.0.insert("VARIANTS".into(), 1);
    }
    if p.triton {
        defines = Config::default();
    }
    let candidate = candidate_of(p, defines);
    let (baseline, note) = Baseline::from_name(p.baseline, Backend::Default).unwrap();
    if let Some(note) = note {
        println!("{note}");
    }
    let info = gpu.info();
    let plan = GatePlan {
        checks: 5,
        interleave: Interleave::new(
            TimingOptions {
                samples: 20,
                warmup: 3,
                mode: p.mode,
                ..TimingOptions::default()
            },
            info.max_sm_mhz,
        ),
        compare: CompareOptions::default(),
        rule: GateRule::default(),
        hang_floor: HANG_BOUND,
        hang_factor: 100.0,
        peak_tflops: attn_measure::provenance::peak_tflops(&gpu),
    };
    let watchdog = Watchdog::start(Box::new(|what, bound| {
        println!(
            "STATUS hang | {what} did not finish within {:.1} s",
            bound.as_secs_f64()
        );
    }));
    let mut session = GateSession::new(&gpu, &candidate, &baseline, &plan, Some(&watchdog));
    if p.side_stream {
        session.plant_side_stream_work().unwrap();
    }
    if p.around == Around::CopiesReference {
        session.plant_reference_copy();
    }
    let problem = Problem::parse(p.shape).unwrap();
    let case = session.case(&problem, 0x9a7e ^ p.plant as u64);
    // What the defences saw, for the log.
    let battery = case.battery.as_ref().map_or(0, |b| b.checks.len());
    let scales: Vec<String> = case
        .correctness
        .iter()
        .filter_map(|c| c.scale.map(|s| format!("{s:.4}")))
        .collect();
    let clocks: Vec<String> = case
        .clock_guard
        .iter()
        .flat_map(|g| g.blocks.iter())
        .map(|b| {
            format!(
                "{}{:.0}",
                match (b.warmup, b.kept) {
                    (true, _) => "warm-up ",
                    (false, true) => "",
                    (false, false) => "dropped ",
                },
                b.mhz.unwrap_or(0.0)
            )
        })
        .collect();
    println!(
        "DETAIL scales [{}], battery {battery} shapes, memory floor {:?} µs, candidate median {:?} µs, block clocks [{}]",
        scales.join(", "),
        case.memory_floor_us,
        case.comparison.as_ref().map(|c| c.candidate.median),
        clocks.join(", ")
    );
    println!(
        "STATUS {} | {}",
        case.status.map(|s| s.as_str()).unwrap_or("none"),
        case.reason
    );
    // Leave without tearing CUDA down: a faulted context may not survive its destructors.
    std::process::exit(0);
}

#[test]
fn every_planted_kernel_compiles_with_nvrtc() {
    // CPU only (NVRTC; `cargo xtask test` provides it): a planted kernel that does not compile
    // would be "could not run" on the GPU, not the defect it plants.
    use attn_kernels::compile::{compile, Arch};
    let arch = Arch("compute_90a".into());
    for p in PLANTED
        .iter()
        .chain(VARLEN)
        .filter(|p| p.registered.is_none())
    {
        let problem = Problem::parse(p.shape).unwrap();
        let mut defines = Config::default();
        defines.0.insert("PLANT".into(), p.plant);
        if p.variants {
            defines.0.insert("VARIANTS".into(), 1);
        }
        let candidate = Candidate::Source {
            path: "planted.cu".into(),
            source: SOURCE.into(),
            entry: "attn_fwd".into(),
            defines,
        };
        let variant = candidate
            .variant(
                problem.dtype,
                problem.shape.head_dim,
                &arch,
                &attn_kernels::Limits::H100,
            )
            .unwrap();
        assert!(
            variant.request.include_dir.is_none(),
            "no empty include folder"
        );
        compile(&variant.request).unwrap_or_else(|e| panic!("{}: {e}", p.name));
    }
}

#[test]
fn battery_plants_are_named_at_their_first_wrong_shape() {
    // CPU: the battery a planted kernel of PLANT 21-24 gets (its own BLOCK_M of 4 adds no tile),
    // and the first of its shapes where the defect changes the output; the verdict must name it.
    use attn_measure::battery::{battery_problems, tile_sizes};
    let wrong = |plant: i64, p: &Problem| {
        let (group, window) = (p.shape.group(), p.params.window);
        match plant {
            // h >> floor(log2 group) differs from h / group somewhere unless group is 2^k.
            21 => !group.is_power_of_two(),
            // h / 4 differs from h / group somewhere once there are 2 heads, unless group is 4.
            22 => group != 4 && p.shape.heads > 1,
            // The window as the ABI passes it (clipped to S_q + S_kv), rounded down to a multiple
            // of 64, hides a key from the last row (whose diagonal is S_kv − 1).
            23 => {
                let (left, _) = p.params.abi_window(p.shape.seq_q, p.shape.seq_kv);
                let rounded = left / 64 * 64;
                left >= 0 && rounded != left && p.shape.seq_kv as i32 - 1 > rounded
            }
            // A right bound short of the last key for row 0 (its diagonal is S_kv − S_q),
            // through the window alone.
            24 => !p.params.causal && window.right.is_some_and(|r| r + 1 < p.shape.seq_q),
            _ => unreachable!(),
        }
    };
    let mut named = 0;
    for p in PLANTED.iter().filter(|p| (21..=24).contains(&p.plant)) {
        let case = Problem::parse(p.shape).unwrap();
        let candidate = Candidate::Source {
            path: "planted.cu".into(),
            source: SOURCE.into(),
            entry: "attn_fwd".into(),
            defines: Config::from_pairs(&[("PLANT", p.plant), ("VARIANTS", 1)]),
        };
        assert!(!wrong(p.plant, &case), "{}: right on its own case", p.name);
        let battery = battery_problems(&case, &tile_sizes(&[4]), candidate.variants()).unwrap();
        let first = battery
            .iter()
            .find(|edge| wrong(p.plant, edge))
            .unwrap_or_else(|| panic!("{}: the battery never shows it", p.name));
        let reason = format!("edge shape {first},");
        assert_eq!(p.reason, Some(reason.as_str()), "{}", p.name);
        named += 1;
    }
    assert_eq!(named, 4);
}

/// ATTN_PLANTED_ONLY=name,name runs those cases alone (a quicker look at a few).
fn chosen(p: &&Planted) -> bool {
    std::env::var("ATTN_PLANTED_ONLY")
        .ok()
        .is_none_or(|only| only.split(',').any(|n| n == p.name))
}

/// A concurrent GPU job: a child of this executable launching an honest kernel in a loop until
/// it is dropped (killed).
struct Neighbour(std::process::Child);

impl Neighbour {
    fn start() -> Neighbour {
        let child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "neighbour_child",
                "--include-ignored",
                "--test-threads=1",
            ])
            .env("ATTN_NEIGHBOUR", "1")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        Neighbour(child)
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn neighbour_child() {
    // Runs only as the child of `Neighbour::start` (ATTN_NEIGHBOUR set), until killed.
    if std::env::var("ATTN_NEIGHBOUR").is_err() {
        return;
    }
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let problem = Problem::parse("2,8,2048,64").unwrap();
    let candidate = Candidate::registered("mma", Config::default()).unwrap();
    let prepared = attn_kernels::Prepared::new(&gpu, &candidate, problem.dtype, 64).unwrap();
    let x = attn_oracle::generate(&attn_oracle::CaseSpec {
        shape: problem.shape,
        dtype: problem.dtype,
        distribution: attn_oracle::Distribution::Normal,
        seed: 7,
    });
    let (q, k, v) = (
        gpu.upload(&x.q).unwrap(),
        gpu.upload(&x.k).unwrap(),
        gpu.upload(&x.v).unwrap(),
    );
    let mut o = gpu.upload(&x.q).unwrap();
    loop {
        for _ in 0..50 {
            prepared
                .launch(&gpu, &q, &k, &v, &mut o, &problem.params)
                .unwrap();
        }
        gpu.synchronize().unwrap();
    }
}

#[test]
fn every_case_is_a_problem_its_kernel_and_baseline_support() {
    // CPU: a case whose shape the candidate or baseline refuses would be "could not run" on the
    // GPU, not the verdict it is there for.
    for p in PLANTED.iter().chain(HONEST).chain(VARLEN).chain(TRITON) {
        let problem = Problem::parse(p.shape).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        let mut defines = Config::default();
        if p.variants {
            defines.0.insert("VARIANTS".into(), 1);
        }
        let candidate = candidate_of(p, defines);
        problem
            .check_supported_by(&candidate)
            .unwrap_or_else(|e| panic!("{}: {e}", p.name));
        if p.baseline != "sdpa" {
            let baseline = Candidate::registered(p.baseline, Config::default()).unwrap();
            problem
                .check_supported_by(&baseline)
                .unwrap_or_else(|e| panic!("{}: baseline {e}", p.name));
        } else {
            assert!(
                problem.varlen.is_none() && !problem.params.window.is_bounded(),
                "{}: SDPA is no varlen or window baseline",
                p.name
            );
        }
    }
    assert!(VARLEN
        .iter()
        .all(|p| Problem::parse(p.shape).unwrap().varlen.is_some()));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn planted_case_child() {
    // Runs only as a child of the test below (it names the case in ATTN_PLANTED).
    if let Ok(name) = std::env::var("ATTN_PLANTED") {
        let p = PLANTED
            .iter()
            .chain(HONEST)
            .chain(VARLEN)
            .chain(TRITON)
            .find(|p| p.name == name)
            .expect("a planted case");
        let mode = match std::env::var("ATTN_PLANTED_MODE").as_deref() {
            Ok("batch") => TimingMode::Batch,
            Ok("graph") => TimingMode::Graph,
            _ => p.mode,
        };
        judge(&Planted { mode, ..*p });
    }
}

/// Runs `p` in a child of this executable: its `STATUS` line, its `DETAIL` line, how long it
/// took, and how it ended.
fn run_child(p: &Planted) -> (String, String, Duration, std::process::Output) {
    let started = Instant::now();
    let mode = match p.mode {
        TimingMode::Batch => "batch",
        _ => "graph",
    };
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "planted_case_child",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ATTN_PLANTED", p.name)
        .env("ATTN_PLANTED_MODE", mode)
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // libtest may print "test planted_case_child ... " before the child's own line.
    let find = |tag: &str, missing: &str| {
        stdout
            .lines()
            .find_map(|l| l.find(tag).map(|at| l[at..].to_string()))
            .unwrap_or_else(|| missing.to_string())
    };
    let line = find("STATUS ", "STATUS none | no verdict printed");
    let detail = find("DETAIL ", "DETAIL none");
    (line, detail, elapsed, out)
}

/// What is wrong with the verdict `line` (`STATUS <status> | <reason>`) of `p`, if anything: an
/// honest kernel must pass or be not faster (never rejected, never untimed); a planted one must
/// get its own status, for its own reason when one is named.
fn misjudged(p: &Planted, line: &str) -> Option<String> {
    let got = line["STATUS ".len()..].split(" | ").next().unwrap_or("");
    if p.expect == CaseStatus::Passed {
        return (got != CaseStatus::Passed.as_str() && got != CaseStatus::NotFaster.as_str())
            .then(|| format!("{}: rejected or not timed: {line}", p.name));
    }
    if got != p.expect.as_str() {
        return Some(format!("{}: expected {}, got {line}", p.name, p.expect));
    }
    p.reason.filter(|r| !line.contains(r)).map(|reason| {
        format!(
            "{}: expected {} because of \"{reason}\", got {line}",
            p.name, p.expect
        )
    })
}

/// Judges every case in a child of its own, one line each; what was misjudged (a hang must also
/// end its process with a failure, within its bound).
fn judge_all(cases: impl Iterator<Item = Planted>) -> Vec<String> {
    let mut wrong = Vec::new();
    for p in cases {
        let (line, detail, elapsed, out) = run_child(&p);
        let name = format!("{} ({:?})", p.name, p.mode);
        println!(
            "{name:<40} expected {:<24} {line} ({:.1} s)\n{:<40} {detail}",
            p.expect.as_str(),
            elapsed.as_secs_f64(),
            ""
        );
        wrong.extend(misjudged(&p, &line).map(|m| format!("{m} ({:?})", p.mode)));
        if p.expect == CaseStatus::Hang {
            // Compile and checks before the hung launch take a few seconds; the hang itself is
            // bounded by HANG_BOUND.
            assert!(
                elapsed < HANG_BOUND + Duration::from_secs(60),
                "the hang took {elapsed:?}"
            );
            assert!(
                !out.status.success(),
                "a hang must end the process with a failure code"
            );
        }
    }
    wrong
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn honest_kernels_pass_every_defence() {
    let _device = attn_kernels::device_lock(0);
    // Another process keeps the GPU busy the whole time: a kernel must never be rejected for a
    // neighbour's work (the escaped-work guard once was).
    let _neighbour = Neighbour::start();
    let every_mode = HONEST
        .iter()
        .filter(chosen)
        .flat_map(|p| MODES.map(|mode| Planted { mode, ..*p }));
    let wrong = judge_all(every_mode);
    assert!(
        wrong.is_empty(),
        "honest kernels rejected or not timed:\n{}",
        wrong.join("\n")
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_planted_kernel_is_rejected_for_its_own_reason() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let wrong = judge_all(PLANTED.iter().filter(chosen).copied());
    assert!(
        wrong.is_empty(),
        "planted kernels judged wrongly:\n{}",
        wrong.join("\n")
    );
}

#[test]
#[ignore = "needs a CUDA GPU (Hopper, sm_90, for hopper's cases)"]
fn varlen_batches_are_judged_through_the_gate() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let wrong = judge_all(VARLEN.iter().copied());
    assert!(
        wrong.is_empty(),
        "varlen cases judged wrongly:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_planted_triton_kernel_compiles() {
    // CPU (Triton, which `cargo xtask test` installs and requires): a plant that does not build
    // would be "could not run" on the GPU, not the defect it plants.
    if !attn_kernels::triton::importable() {
        assert!(
            std::env::var("ATTN_TRITON_TEST").as_deref() != Ok("required"),
            "ATTN_TRITON_TEST=required but python3 cannot import triton"
        );
        println!("skipped: python3 cannot import triton");
        return;
    }
    for p in TRITON {
        let problem = Problem::parse(p.shape).unwrap();
        let Candidate::Triton {
            path,
            kernel,
            defines,
            ..
        } = candidate_of(p, Config::default())
        else {
            unreachable!("{}: a Triton plant", p.name)
        };
        attn_kernels::triton::compile(&attn_kernels::triton::TritonRequest {
            path: &path,
            kernel: &kernel,
            dtype: problem.dtype,
            head_dim: problem.shape.head_dim,
            defines: &defines,
            arch: 90,
        })
        .unwrap_or_else(|e| panic!("{}: {e}", p.name));
    }
}

#[test]
#[ignore = "needs a CUDA GPU and Triton"]
fn triton_kernels_are_judged_as_cuda_kernels_are() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    // The honest ones in both timing modes, the planted ones in their own.
    let cases = TRITON.iter().filter(chosen).flat_map(|p| {
        let modes: Vec<TimingMode> = if p.expect == CaseStatus::Passed {
            MODES.to_vec()
        } else {
            vec![p.mode]
        };
        modes.into_iter().map(|mode| Planted { mode, ..*p })
    });
    let wrong = judge_all(cases);
    assert!(
        wrong.is_empty(),
        "Triton kernels judged wrongly:\n{}",
        wrong.join("\n")
    );
}
