//! GPU tests of the gate itself: deliberately bad candidates are rejected for the right reason, and
//! a correct candidate against itself is "no-change" (and passes a ratchet against its own
//! revision). Run on a GPU machine with `--include-ignored`.

mod common;
use common::{output_text, xtask};

use std::process::Command;

fn gate(args: &[&str]) -> (i32, String) {
    let output = Command::new(xtask())
        .arg("gate")
        .args(args)
        .args(["--no-evidence"])
        .output()
        .expect("xtask runs");
    let text = output_text(&output);
    println!("{text}");
    (output.status.code().unwrap_or(-1), text)
}

/// Runs `xtask COMMAND ARGS --evidence DIR` into a fresh DIR: its exit code, stdout and stderr,
/// and the evidence file it wrote under DIR/COMMAND/.
fn run_with_evidence(command: &str, args: &[&str]) -> (Option<i32>, String, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(xtask())
        .arg(command)
        .args(args)
        .arg("--evidence")
        .arg(dir.path())
        .output()
        .expect("xtask runs");
    let text = output_text(&output);
    let code = output.status.code();
    let Some(file) = std::fs::read_dir(dir.path().join(command))
        .ok()
        .and_then(|dir| {
            dir.flatten()
                .find(|e| e.path().extension().is_some_and(|x| x == "json"))
        })
    else {
        panic!("no {command} evidence written (exit {code:?}):\n{text}");
    };
    let run = serde_json::from_slice(&std::fs::read(file.path()).unwrap()).unwrap();
    (code, text, run)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bad_kernels_are_rejected_for_the_right_reason() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    struct Case {
        file: &'static str,
        reason: &'static str,
    }
    let cases = [
        Case {
            file: "writes_nothing.cu",
            reason: "never written (still poison)",
        },
        Case {
            file: "writes_half.cu",
            reason: "never written (still poison)",
        },
        Case {
            file: "stale_output.cu",
            reason: "stale output",
        },
    ];
    for case in cases {
        let path = format!("tests/bad_kernels/{}", case.file);
        let (code, text) = gate(&[
            "--src",
            &path,
            "--shape",
            "1,4,256,64",
            "--baseline",
            "cublas",
            "--checks",
            "3",
        ]);
        assert_eq!(code, 1, "{}: the gate must fail (exit 1)", case.file);
        assert!(
            text.contains(case.reason),
            "{}: expected `{}` in:\n{text}",
            case.file,
            case.reason
        );
        assert!(
            text.contains("not timed"),
            "{}: an incorrect candidate is never timed",
            case.file
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn hidden_work_on_another_stream_is_caught() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let (code, text) = gate(&[
        "--impl",
        "mma",
        "--plant",
        "side-stream",
        "--baseline",
        "mma",
        "--shape",
        "1,8,512,64",
        "--samples",
        "30",
    ]);
    assert_eq!(code, 1);
    assert!(text.contains("escapes the timed stream"), "{text}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_correct_candidate_against_itself_is_no_change() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let (code, text) = gate(&[
        "--impl",
        "mma",
        "--baseline",
        "mma",
        "--shape",
        "2,16,2048,64",
        "--samples",
        "200",
    ]);
    assert_eq!(code, 1, "a kernel is not 5% faster than itself");
    assert!(text.contains("no-change"), "{text}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_ratchet_against_the_kernel_at_head_does_not_regress() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    // The same source read with git, compiled as a revision: passes the no-regression rule where
    // the usual gate (above) fails. Skipped in a copy without `.git`.
    let git = Command::new("git").args(["rev-parse", "HEAD"]).output();
    if !git.is_ok_and(|o| o.status.success()) {
        return;
    }
    let (code, text) = gate(&[
        "--impl",
        "mma",
        "--baseline",
        "rev:HEAD",
        "--shape",
        "2,16,2048,64",
        "--samples",
        "200",
    ]);
    assert!(text.contains("`mma` vs `mma@"), "{text}");
    assert!(text.contains("does not regress"), "{text}");
    assert_eq!(code, 0, "a kernel does not regress against itself:\n{text}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn hopper_is_judged_against_flash_attention_3_in_batch_mode() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    assert!(
        std::env::var_os("ATTN_FA3_LIB").is_some(),
        "set ATTN_FA3_LIB to FlashAttention-3's library to run this test"
    );
    // JAX has no CUDA events: any other mode is refused in one line, before the GPU is opened.
    let (code, text) = gate(&[
        "--impl",
        "hopper",
        "--baseline",
        "fa3",
        "--shape",
        "1,4,512,64",
    ]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("--mode batch"), "{text}");
    // A dense and a windowed GQA shape: both sides run and the gate gives a verdict, with FA3
    // checked against the reference on sampled rows and within a plausible ratio of hopper.
    let (code, text) = gate(&[
        "--impl",
        "hopper",
        "--baseline",
        "fa3",
        "--mode",
        "batch",
        "--shape",
        "2,16,4096,128",
        "--shape",
        "2,32/8,8192,128 causal window=1024,-1",
        "--samples",
        "30",
    ]);
    assert!(code == 0 || code == 1, "a verdict, not an error:\n{text}");
    assert!(text.contains("`hopper` vs `fa3`"), "{text}");
    let speedups: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("| 2,"))
        .filter_map(|l| l.split('|').nth(4))
        .filter_map(|cell| cell.trim().split('×').next()?.parse().ok())
        .collect();
    assert_eq!(speedups.len(), 2, "{text}");
    for s in speedups {
        assert!(
            (0.5..2.0).contains(&s),
            "hopper vs FA3 {s}× is not plausible:\n{text}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn pytorch_varlen_attn_is_the_baseline_of_varlen_batches_and_windows() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    // SDPA has no kernel for either: refused in one line naming varlen_attn, before any GPU work.
    for shape in [
        "varlen=300,0,1000 H=8/2 D=64 causal",
        "2,8,1024,64 causal window=128,-1",
    ] {
        let (code, text) = gate(&["--impl", "mma", "--shape", shape]);
        assert_eq!(code, 2, "{text}");
        assert!(text.contains("--sdpa-backend varlen"), "{text}");
    }
    // A varlen batch with an empty sequence and a windowed GQA batch: varlen_attn is checked on
    // sampled rows, timed, and is PyTorch's second reference on every check.
    let (code, text, run) = run_with_evidence(
        "gate",
        &[
            "--impl",
            "hopper",
            "--baseline",
            "sdpa",
            "--sdpa-backend",
            "varlen",
            "--shape",
            "varlen=1000,0,3000,517 H=32/8 D=128 causal",
            "--shape",
            "2,32/8,4096,128 causal window=1024,-1",
            "--samples",
            "20",
            "--checks",
            "2",
        ],
    );
    assert!(
        matches!(code, Some(0 | 1)),
        "a verdict, not an error:\n{text}"
    );
    assert_eq!(run["baseline"]["name"], "sdpa", "{run}");
    assert_eq!(run["baseline"]["backend"], "varlen", "{run}");
    let cases = run["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 2, "{run}");
    for case in cases {
        let speedup = case["comparison"]["speedup"]["point"].as_f64();
        assert!(
            speedup.is_some_and(|s| (0.2..20.0).contains(&s)),
            "{}: {speedup:?}\n{text}",
            case["shape"]
        );
        for check in case["correctness"].as_array().expect("checks") {
            let diff = check["sdpa_max_abs"].as_f64();
            assert!(
                diff.is_some_and(|d| d < 0.05),
                "{}: varlen_attn as the second reference: {diff:?}\n{text}",
                case["shape"]
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn pytorch_window_kernels_are_timed_as_bench_baselines() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    // FlexAttention (compiled, a block mask of the window) and varlen_attn on a windowed GQA batch
    // and a causal one: each checked on sampled rows against float64 in the helper, then timed.
    let shapes = [
        "2,32/8,4096,128 causal window=1024,-1",
        "1,16,2048,64 causal",
    ];
    let (code, text, run) = run_with_evidence(
        "bench",
        &[
            "--impl",
            "hopper",
            "--sdpa-backends",
            "flex,varlen",
            "--shape",
            shapes[0],
            "--shape",
            shapes[1],
            "--samples",
            "5",
        ],
    );
    assert_eq!(code, Some(0), "{text}");
    let entries = run["entries"].as_array().expect("entries");
    for shape in shapes {
        let spec: attn_evidence::ShapeSpec = shape.parse().unwrap();
        for label in ["hopper", "sdpa:flex", "sdpa:varlen"] {
            let (name, backend) = label.split_once(':').unwrap_or((label, ""));
            let entry = entries.iter().find(|e| {
                e["implementation"]["name"] == name
                    && e["implementation"]["backend"].as_str().unwrap_or("") == backend
                    && serde_json::from_value::<attn_evidence::ShapeSpec>(e["shape"].clone())
                        .is_ok_and(|s| s == spec)
            });
            let tflops = entry.and_then(|e| e["tflops"].as_f64());
            assert!(
                tflops.is_some_and(|t| (20.0..1000.0).contains(&t)),
                "{label} on {shape}: {tflops:?}\n{text}"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_block_of_a_helper_baseline_times_the_baseline_alone() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    // SDPA runs in the helper's own process: a block of it that overlapped work this process
    // left queued (the timing set-up's references) measured about twice its time. Every block
    // must agree with the others within what clocks and heat explain.
    let (code, text, run) = run_with_evidence(
        "gate",
        &[
            "--impl",
            "mma",
            "--baseline",
            "sdpa",
            "--mode",
            "batch",
            "--shape",
            "2,16,4096,128",
            "--samples",
            "40",
            "--checks",
            "2",
        ],
    );
    assert!(matches!(code, Some(0 | 1)), "{text}");
    let samples: Vec<f64> = run["cases"][0]["baseline"]["samples"]
        .as_array()
        .expect("baseline samples")
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    // Both sides rotate over the same input sets: on fewer, the baseline would find more of its
    // inputs in L2 (FA3 measured 238 µs on 2 sets and 280 on 50 at 4,16,2048,128).
    let sets = |side: &str| run["cases"][0][side]["input_sets"].as_u64();
    assert!(sets("candidate").is_some_and(|n| n > 2), "{run}");
    assert_eq!(sets("candidate"), sets("baseline"), "input sets per side");
    let median = attn_measure::baseline::median;
    let all = median(&samples);
    let per_block = run["cases"][0]["clock_guard"]["block_samples"]
        .as_u64()
        .expect("block_samples") as usize;
    for (i, block) in samples.chunks(per_block).enumerate() {
        let ratio = median(block) / all;
        assert!(
            (0.75..1.33).contains(&ratio),
            "baseline block {i} at {ratio:.2}× the median of all blocks: {samples:?}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_bench_times_every_side_on_as_many_input_sets() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    // bench times each side alone: SDPA in the helper took 2 to 8 sets where the kernel took one
    // per launch of a sample, which favoured SDPA and FA3 by up to 18% in batch mode.
    let (code, text, run) = run_with_evidence(
        "bench",
        &[
            "--impl",
            "mma",
            "--sdpa-backends",
            "default",
            "--mode",
            "batch",
            "--shape",
            "2,8,1024,64",
            "--samples",
            "5",
            "--batch-launches",
            "20",
        ],
    );
    assert_eq!(code, Some(0), "{text}");
    let sets: Vec<Option<u64>> = run["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["timing"]["input_sets"].as_u64())
        .collect();
    assert_eq!(sets, vec![Some(20), Some(20)], "mma then SDPA: {run}");
    // Each entry, the helper's too, carries the SM clock the device probe measured over it.
    let entries = run["entries"].as_array().expect("entries");
    assert!(
        entries.iter().all(|e| e["sm_mhz"]
            .as_f64()
            .is_some_and(|mhz| (300.0..2500.0).contains(&mhz))),
        "SM clocks: {run}"
    );
}
