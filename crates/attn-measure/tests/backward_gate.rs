//! GPU: the backward checks (`attn_measure::backward`) pass the registered backward kernels on
//! dense, grouped, causal, windowed, varlen and large (sampled-oracle) problems, and reject each
//! planted defect of `backward_naive.cu` for its own reason.
//!
//! A planted kernel is `kernels/backward_naive.cu` with one line replaced (each replacement must
//! find its line, so a change to the kernel fails here rather than plant nothing), written beside
//! copies of the kernels' headers and compiled through the `--src` path.

use std::path::Path;

use attn_evidence::CheckFailure;
use attn_kernels::backward::PreparedBackward;
use attn_kernels::{Config, Gpu};
use attn_measure::backward::run_backward_checks;
use attn_measure::Problem;

const KERNELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../kernels");

/// The first failing check's failure and reason, or `None` when every check passed.
fn judge(
    gpu: &Gpu,
    prepared: &PreparedBackward,
    text: &str,
    seed: u64,
) -> Option<(CheckFailure, String)> {
    let problem = Problem::parse(text).unwrap();
    let checks = run_backward_checks(gpu, prepared, &problem, seed, 3, None)
        .unwrap_or_else(|e| panic!("{text}: {e}"));
    assert_eq!(checks.len(), 3, "{text}");
    checks
        .into_iter()
        .find(|c| !c.passed)
        .map(|c| (c.failure.unwrap(), c.reason.unwrap_or_default()))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn honest_backward_kernels_pass_every_check() {
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let mut wrong = Vec::new();
    for name in ["backward-naive", "backward-mma"] {
        for (text, seed) in [
            ("2,8/2,300,64 causal bf16", 1u64),
            ("1,6/2,129,257,128 fp16", 2),
            ("2,4/1,200,64 window=30,5 fp16", 3),
            ("varlen=1:100,2:0,1:37,1:200 H=4/2 D=64 causal bf16", 4),
            // Large enough that the oracle takes sampled rows and the GPU reference the rest.
            ("1,4,4096,64 causal bf16", 5),
        ] {
            let problem = Problem::parse(text).unwrap();
            let d = problem.shape.head_dim;
            let prepared = PreparedBackward::new(&gpu, name, &Config::default(), problem.dtype, d)
                .unwrap_or_else(|e| panic!("{name} {text}: {e}"));
            if let Some((failure, reason)) = judge(&gpu, &prepared, text, seed) {
                wrong.push(format!("{name} {text}: {failure:?}: {reason}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "honest kernels rejected:\n{}",
        wrong.join("\n")
    );
}

/// `backward_naive.cu` with `from` replaced by `to`, beside the headers it includes, in `dir`.
fn planted(dir: &Path, name: &str, from: &str, to: &str) -> std::path::PathBuf {
    let source = std::fs::read_to_string(Path::new(KERNELS).join("backward_naive.cu")).unwrap();
    assert!(
        source.contains(from),
        "{name}: backward_naive.cu no longer holds {from:?}"
    );
    for entry in std::fs::read_dir(KERNELS).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "cuh") {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    let path = dir.join(format!("{name}.cu"));
    std::fs::write(&path, source.replacen(from, to, 1)).unwrap();
    path
}

const STORE_DV: &str = "store_row(dv + key_at, dv_acc, 1.0f, lane);";

/// The planted defects: (name, line replaced, its replacement, the failure it must be named by).
const PLANTS: [(&str, &str, &str, CheckFailure); 5] = [
    (
        "halves-dv",
        STORE_DV,
        "store_row(dv + key_at, dv_acc, 0.5f, lane);",
        CheckFailure::Incorrect,
    ),
    (
        "skips-the-last-key",
        "if (j >= first.seq_kv) return;",
        "if (j >= first.seq_kv - 1) return;",
        CheckFailure::Unwritten,
    ),
    (
        "writes-a-row-past-dv",
        STORE_DV,
        "store_row(dv + key_at, dv_acc, 1.0f, lane);\n    if (j == first.seq_kv - 1 && b == (int)gridDim.z - 1 && g == (int)gridDim.y - 1) store_row(dv + key_at + HEAD_DIM, dv_acc, 1.0f, lane);",
        CheckFailure::WroteOutside,
    ),
    (
        "reads-the-workspace-unwritten",
        "if (lane == 0) delta[bwd_common::row_index(view, i)] = d;",
        "(void)d;",
        CheckFailure::NonFinite,
    ),
    (
        "ignores-scale-in-dk-dv",
        "const float p = expf(dot_row(k_reg, q + at, lane) * scale - lse[r]);",
        "const float p = expf(dot_row(k_reg, q + at, lane) * rsqrtf((float)HEAD_DIM) - lse[r]);",
        CheckFailure::Incorrect,
    ),
];

/// backward-naive's registered geometry, as the README's --src defines.
const DEFINES: &str = "ROWS_PER_BLOCK=4,BLOCK_M=4,BLOCK_N=4,NUM_WARPS=4,VARIANTS=1,DETERMINISTIC=1";

#[test]
fn every_planted_backward_kernel_compiles_with_nvrtc() {
    // CPU only (NVRTC; `cargo xtask test` provides it): a plant that does not compile would be
    // "could not run" on the GPU, not the defect it plants.
    use attn_kernels::compile::{compile, Arch, CompileRequest};
    let dir = tempfile::tempdir().unwrap();
    let (group_name, group_from, group_to) = POWER_OF_TWO_GROUP;
    let plants = PLANTS.iter().map(|&(name, from, to, _)| (name, from, to));
    for (name, from, to) in plants.chain([(group_name, group_from, group_to)]) {
        let path = planted(dir.path(), name, from, to);
        let source = std::fs::read_to_string(&path).unwrap();
        let mut defines = CompileRequest::abi_defines(attn_oracle::DType::Bf16, 64).unwrap();
        defines.extend(DEFINES.split(',').map(String::from));
        let request = CompileRequest {
            name: name.into(),
            source: &source,
            include_dir: Some(dir.path()),
            defines,
            arch: Arch("compute_90a".into()),
        };
        compile(&request).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn planted_backward_defects_are_rejected_for_their_own_reason() {
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let dir = tempfile::tempdir().unwrap();
    let mut wrong = Vec::new();
    for (name, from, to, expected) in PLANTS {
        let path = planted(dir.path(), name, from, to);
        let prepared = PreparedBackward::from_source(
            &gpu,
            &path,
            &DEFINES.parse().unwrap(),
            attn_oracle::DType::Bf16,
            64,
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        match judge(&gpu, &prepared, "2,4/2,130,97,64 causal bf16", 11) {
            Some((failure, _)) if failure == expected => {}
            Some((failure, reason)) => wrong.push(format!(
                "{name}: expected {expected:?}, got {failure:?}: {reason}"
            )),
            None => wrong.push(format!("{name}: expected {expected:?}, passed every check")),
        }
    }
    assert!(
        wrong.is_empty(),
        "planted defects judged wrongly:\n{}",
        wrong.join("\n")
    );
}

/// Both sides' medians (µs) and the candidate's timed-output evidence, `candidate` against
/// `baseline` on `text` in interleaved blocks.
fn timed(
    gpu: &Gpu,
    candidate: &PreparedBackward,
    baseline: &PreparedBackward,
    text: &str,
    mode: attn_kernels::TimingMode,
) -> (f64, f64, attn_evidence::TimedOutputCheck) {
    use attn_measure::backward::{backward_set_count, BackwardSide};
    use attn_measure::timing::{interleave, Interleave};
    let problem = Problem::parse(text).unwrap();
    let info = gpu.info();
    let sets = backward_set_count(&problem, info.l2_bytes as usize, info.total_memory);
    let timing = attn_kernels::TimingOptions {
        warmup: 2,
        samples: 20,
        mode,
        ..attn_kernels::TimingOptions::default()
    };
    let mut a = BackwardSide::new(gpu, candidate, &problem, sets, 21, true).unwrap();
    let mut b = BackwardSide::new(gpu, baseline, &problem, sets, 22, false).unwrap();
    let plan = Interleave::new(timing, info.max_sm_mhz);
    let both = interleave(gpu, &mut a, &mut b, &plan, |_| {}).unwrap();
    let median = |xs: &[f64]| {
        let mut xs = xs.to_vec();
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let outputs = a.timed_outputs(&timing).unwrap().unwrap();
    (
        median(&both.a.samples_us),
        median(&both.b.samples_us),
        outputs,
    )
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_timed_backward_side_verifies_every_timed_launch() {
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let text = "2,8/2,1024,64 causal bf16";
    let problem = Problem::parse(text).unwrap();
    let d = problem.shape.head_dim;
    let naive = PreparedBackward::new(&gpu, "backward-naive", &Config::default(), problem.dtype, d)
        .unwrap();
    let mma =
        PreparedBackward::new(&gpu, "backward-mma", &Config::default(), problem.dtype, d).unwrap();
    for mode in [
        attn_kernels::TimingMode::Graph,
        attn_kernels::TimingMode::Batch,
    ] {
        let (mma_us, naive_us, outputs) = timed(&gpu, &mma, &naive, text, mode);
        println!(
            "{mode:?}: backward-mma {mma_us:.1} µs, backward-naive {naive_us:.1} µs; {outputs:?}"
        );
        assert!(outputs.samples_checked >= 20, "{outputs:?}");
        assert_eq!(outputs.samples_bad, 0, "{outputs:?}");
        assert!(
            outputs.outside.is_empty() && outputs.inputs_written.is_empty(),
            "{outputs:?}"
        );
        assert!(
            mma_us < naive_us,
            "{mode:?}: mma {mma_us} µs, naive {naive_us} µs"
        );
    }
    // A kernel whose every dV is wrong: every verified sample is bad, and named.
    let dir = tempfile::tempdir().unwrap();
    let (name, from, to, _) = PLANTS[0];
    let path = planted(dir.path(), name, from, to);
    let halves =
        PreparedBackward::from_source(&gpu, &path, &DEFINES.parse().unwrap(), problem.dtype, d)
            .unwrap();
    let (_, _, outputs) = timed(&gpu, &halves, &naive, text, attn_kernels::TimingMode::Graph);
    assert!(outputs.samples_checked > 0, "{outputs:?}");
    assert_eq!(outputs.samples_bad, outputs.samples_checked, "{outputs:?}");
    assert!(
        outputs
            .first_bad
            .as_deref()
            .is_some_and(|f| f.contains("dV")),
        "{outputs:?}"
    );
}

/// A gate plan of `samples` a side in blocks of 5, in graph mode, as `cargo xtask gate` makes it.
fn gate_plan(gpu: &Gpu, samples: usize) -> attn_measure::gate::GatePlan {
    use attn_measure::timing::Interleave;
    let timing = attn_kernels::TimingOptions {
        warmup: 2,
        samples,
        mode: attn_kernels::TimingMode::Graph,
        ..attn_kernels::TimingOptions::default()
    };
    attn_measure::gate::GatePlan {
        checks: 2,
        interleave: Interleave {
            block: 5,
            ..Interleave::new(timing, gpu.info().max_sm_mhz)
        },
        compare: attn_stats::CompareOptions {
            gate_threshold: 0.95,
            ..attn_stats::CompareOptions::default()
        },
        rule: attn_evidence::GateRule::default(),
        hang_floor: std::time::Duration::from_secs(10),
        hang_factor: 100.0,
        peak_tflops: attn_measure::provenance::peak_tflops(gpu),
    }
}

/// A kernel right only for groups of a power of two: the K/V head's query heads taken as the
/// largest power of two within the group.
const POWER_OF_TWO_GROUP: (&str, &str, &str) = (
    "power-of-two-group",
    "const int group = heads / kv_heads;",
    "const int group = 1 << (31 - __clz(heads / kv_heads));",
);

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_backward_gate_passes_mma_over_naive_and_its_battery_finds_a_group_size_bug() {
    use attn_measure::backward::{BackwardBaseline, BackwardCandidate, BackwardGate};
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let plan = gate_plan(&gpu, 20);
    let baseline =
        BackwardBaseline::from_name("backward-naive", attn_measure::sdpa::Backend::Default)
            .unwrap();
    let problem = Problem::parse("2,8/2,1024,64 causal bf16").unwrap();
    let mma = BackwardCandidate::registered("backward-mma", Config::default()).unwrap();
    let case = BackwardGate::new(&gpu, &mma, &baseline, &plan, None).case(&problem, 31);
    println!("backward-mma: {}", case.reason);
    assert!(case.passed, "{}", case.reason);
    let record = case.backward.as_ref().expect("a backward record");
    assert!(!record.deterministic && record.oracle_full, "{record:?}");
    let battery = case.battery.as_ref().unwrap();
    assert!(battery.checks.len() > 10 && battery.checks.iter().all(|c| c.passed));
    // Groups other than the case's own (3, 5, 7, 1) are in the battery.
    assert!(
        battery.shapes.iter().any(|s| s.contains("6/2")),
        "{:?}",
        battery.shapes
    );
    let outputs = case.timed_outputs.as_ref().unwrap();
    assert!(
        outputs.samples_checked >= 20 && outputs.samples_bad == 0,
        "{outputs:?}"
    );
    let comparison = case.comparison.as_ref().unwrap();
    let tflops = problem.spec.backward_flops() / (comparison.candidate.median * 1e-6) / 1e12;
    assert!((case.candidate_tflops.unwrap() - tflops).abs() < 1e-9 * tflops);
    assert!(case
        .memory_floor_us
        .is_some_and(|f| f < comparison.candidate.median));

    // Right at the case's group of 4, wrong at a group of 3: the battery names it (K/V heads
    // never written, or written wrong).
    let dir = tempfile::tempdir().unwrap();
    let (name, from, to) = POWER_OF_TWO_GROUP;
    let path = planted(dir.path(), name, from, to);
    let source = BackwardCandidate::Source {
        path,
        defines: DEFINES.parse().unwrap(),
    };
    let case = BackwardGate::new(&gpu, &source, &baseline, &plan, None).case(&problem, 32);
    println!("{name}: {}", case.reason);
    assert!(!case.passed, "{}", case.reason);
    assert!(case.correctness.iter().all(|c| c.passed), "{}", case.reason);
    let failed = case
        .battery
        .as_ref()
        .unwrap()
        .checks
        .iter()
        .find(|c| !c.passed)
        .unwrap();
    assert!(
        matches!(
            failed.failure,
            Some(CheckFailure::Incorrect | CheckFailure::Unwritten)
        ),
        "{failed:?}"
    );
    let at: Problem = Problem::parse(failed.shape.as_deref().unwrap()).unwrap();
    assert!(!at.shape.group().is_power_of_two(), "{failed:?}");
    assert!(case.comparison.is_none());
}

#[test]
#[ignore = "needs a CUDA GPU, PyTorch, JAX and FlashAttention-3's library in ATTN_FA3_LIB"]
fn fa3s_backward_matches_the_oracle_and_is_timed_in_batch_mode() {
    use attn_measure::backward::sdpa::{check_sdpa_gradients, SdpaBackwardSide};
    use attn_measure::sdpa::{Backend, Sdpa};
    use attn_measure::timing::TimedSide;
    assert!(
        std::env::var_os("ATTN_FA3_LIB").is_some(),
        "set ATTN_FA3_LIB to FlashAttention-3's library"
    );
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let sdpa = Sdpa::detect().expect("the PyTorch helper");
    let opts = attn_kernels::TimingOptions {
        warmup: 2,
        samples: 5,
        mode: attn_kernels::TimingMode::Batch,
        ..attn_kernels::TimingOptions::default()
    };
    for text in [
        "2,8/2,1024,64 causal bf16",
        "1,16,2048,128",
        "1,8,1024,128 causal window=256,-1 bf16",
    ] {
        let problem = Problem::parse(text).unwrap();
        // Every gradient element against the f64 oracle (sampled rows past its size).
        check_sdpa_gradients(&gpu, &sdpa, Backend::Fa3, &problem, 41)
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        let timings = SdpaBackwardSide::new(&gpu, &sdpa, Backend::Fa3, &problem, 2, 43)
            .block(&opts)
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        let median = attn_measure::baseline::median(&timings.samples_us);
        let tflops = problem.spec.backward_flops() / (median * 1e-6) / 1e12;
        println!("fa3 backward {text}: {median:.1} µs, {tflops:.0} TFLOP/s");
        assert!(
            timings.samples_us.len() == 5 && tflops > 1.0 && tflops < 1500.0,
            "{text}: {timings:?}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU and PyTorch"]
fn the_backward_bench_times_each_side_and_a_training_step() {
    use attn_measure::bench::{run_backward_bench, BackwardBenchRequest};
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let request = BackwardBenchRequest {
        problems: vec![Problem::parse("2,8/2,1024,64 causal bf16").unwrap()],
        implementations: ["backward-mma", "backward-naive"]
            .map(|n| (n.to_string(), Config::default()))
            .to_vec(),
        backends: vec![attn_measure::sdpa::Backend::Default],
        step_forwards: vec![attn_kernels::Candidate::registered("mma", Config::default()).unwrap()],
        timing: attn_kernels::TimingOptions {
            warmup: 2,
            samples: 10,
            ..attn_kernels::TimingOptions::default()
        },
        seed: 5,
        suite: None,
        git: ("test".into(), false),
    };
    let run = run_backward_bench(&gpu, &request, &mut |e| println!("{e:?}"), &mut || None).unwrap();
    let names: Vec<String> = run
        .entries
        .iter()
        .map(|e| e.implementation.label())
        .collect();
    assert_eq!(
        names,
        [
            "backward-mma",
            "backward-naive",
            "sdpa:default",
            "mma",
            "sdpa:default"
        ],
        "{names:?}"
    );
    for e in &run.entries[..3] {
        let record = e.backward.as_ref().expect("a backward entry");
        assert!(
            record.flops > 0.0 && e.tflops > 0.0 && e.decode.is_none(),
            "{e:?}"
        );
    }
    // The tiled kernel beats the one-thread-per-row yardstick.
    assert!(run.entries[0].summary.median < run.entries[1].summary.median);
    // The training step's forwards: ours with each of our backwards, SDPA's with its own.
    assert!(run.entries[3..].iter().all(|e| e.backward.is_none()));
    let steps = attn_measure::bench::training_steps(&run);
    let labels: Vec<&str> = steps.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "mma + backward-mma",
            "mma + backward-naive",
            "sdpa:default + sdpa:default"
        ]
    );
}
