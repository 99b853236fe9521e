//! `gate --pass backward`: a candidate, baseline, head dim or problem it cannot judge said in
//! one line before the GPU probe.

use crate::{inputs, one_error_line};

#[test]
fn the_backward_gate_checks_before_the_gpu_probe() {
    let dir = inputs();
    let d = dir.path();
    let gate = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut args = vec!["gate", "--pass", "backward"];
        args.extend(extra);
        args
    };
    // SDPA's backward (the default baseline) has no window kernel and takes dense batches:
    // refused in one line before the helper or the GPU is probed.
    let window = ["--shape", "1,8,512,64 causal window=128,-1"];
    one_error_line(d, &gate(&window), &["sliding-window", "backward-naive"]);
    one_error_line(
        d,
        &gate(&[
            "--baseline",
            "sdpa:cudnn",
            "--shape",
            "1,8,512,64 window=64,64",
        ]),
        &["sliding-window", "its backward is no baseline"],
    );
    one_error_line(
        d,
        &gate(&[
            "--baseline",
            "sdpa:flash",
            "--shape",
            "varlen=512,300 H=8/2 D=64 causal",
        ]),
        &["packed varlen batch", "backward-naive"],
    );
    one_error_line(
        d,
        &gate(&["--baseline", "sdpa:fast", "--shape", "1,8,512,64"]),
        &["unknown SDPA backend `fast`"],
    );
    // FlashAttention-3's backward is timed through JAX: batch mode only, said first.
    one_error_line(
        d,
        &gate(&["--baseline", "fa3", "--shape", "1,8,512,64"]),
        &["FlashAttention-3", "--mode batch"],
    );
    for (baseline, backend) in [("sdpa", "flex"), ("sdpa:varlen", "default")] {
        one_error_line(
            d,
            &gate(&[
                "--baseline",
                baseline,
                "--sdpa-backend",
                backend,
                "--shape",
                "1,8,512,64",
            ]),
            &["cannot time a backward pass", "backward-naive"],
        );
    }
    one_error_line(
        d,
        &gate(&[
            "--baseline",
            "sdpa:cudnn",
            "--sdpa-backend",
            "flash",
            "--shape",
            "1,8,512,64",
        ]),
        &["two SDPA backends"],
    );
    one_error_line(
        d,
        &gate(&[
            "--impl",
            "hopper",
            "--baseline",
            "backward-naive",
            "--shape",
            "1,8,512,64",
        ]),
        &["hopper", "forward implementation"],
    );
    one_error_line(
        d,
        &gate(&[
            "--impl",
            "nothing",
            "--baseline",
            "backward-naive",
            "--shape",
            "1,8,512,64",
        ]),
        &["nothing"],
    );
    one_error_line(
        d,
        &gate(&["--baseline", "backward-naive", "--shape", "1,8,512,96"]),
        &["backward-mma", "head dim 96"],
    );
    one_error_line(
        d,
        &gate(&[
            "--impl",
            "backward-mma",
            "--config",
            "BLOCK_M=7",
            "--baseline",
            "backward-naive",
            "--shape",
            "1,8,512,64",
        ]),
        &["BLOCK_M=7"],
    );
    one_error_line(
        d,
        &gate(&[
            "--src",
            "missing.cu",
            "--baseline",
            "backward-naive",
            "--shape",
            "1,8,512,64",
        ]),
        &["missing.cu"],
    );
    one_error_line(
        d,
        &gate(&["--baseline", "backward-naive", "--suite", "decode-seed"]),
        &["decode", "no backward"],
    );
    one_error_line(
        d,
        &gate(&["--baseline", "hopper", "--shape", "1,8,512,64"]),
        &["hopper", "backward pass"],
    );
}

#[test]
fn sdpa_backward_is_accepted_and_needs_pytorch_before_the_gpu_probe() {
    // Past every refusal, the helper is started before the GPU is opened: without a Python it
    // is one line about PyTorch, not a CUDA error (no cublas fallback for the backward).
    let dir = inputs();
    for baseline in ["sdpa", "sdpa:cudnn", "sdpa:flash", "sdpa:efficient"] {
        let out = std::process::Command::new(crate::common::xtask())
            .args(["gate", "--pass", "backward", "--impl", "backward-mma"])
            .args([
                "--baseline",
                baseline,
                "--shape",
                "2,8/2,512,64 causal",
                "--no-evidence",
            ])
            .current_dir(dir.path())
            .env("ATTN_PYTHON", "/nonexistent/python3")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .output()
            .expect("xtask runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{baseline}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{baseline}: {stderr}");
        assert!(
            lines[0].contains("no Python to run PyTorch SDPA") && !lines[0].contains("CUDA"),
            "{baseline}: {stderr}"
        );
    }
}

#[test]
fn the_backward_bench_checks_before_the_gpu_probe() {
    let dir = inputs();
    let d = dir.path();
    let bench = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut args = vec!["bench", "--pass", "backward", "--shape", "1,8,512,64"];
        args.extend(extra);
        args
    };
    for (extra, says) in [
        (
            &["--impl", "mma"][..],
            &["--impl mma", "forward implementation"][..],
        ),
        (
            &["--sdpa-backends", "flex"],
            &["flex times no backward pass"],
        ),
        (
            &["--sdpa-backends", "fa3"],
            &["FlashAttention-3", "--mode batch"],
        ),
        (&["--py", "f.py:g"], &["--py callables"]),
        (
            &["--step", "backward-mma"],
            &["--step backward-mma", "backward implementation"],
        ),
        (
            &["--step", "nothing"],
            &["unknown implementation `nothing`"],
        ),
    ] {
        one_error_line(d, &bench(extra), says);
    }
    one_error_line(
        d,
        &[
            "bench",
            "--pass",
            "backward",
            "--shape",
            "decode B=4 q=1 kv=512 H=8/2 D=64 page=16",
        ],
        &["no backward pass here"],
    );
    one_error_line(
        d,
        &["bench", "--step", "hopper", "--shape", "1,8,512,64"],
        &["--step", "--pass backward"],
    );
}
