//! `gate`: a bad shape, config, source, replay, revision or window said before the GPU probe.

use std::path::Path;
use std::process::Command;

use crate::{inputs, one_error_line};

#[test]
fn gate_checks_before_the_gpu_probe() {
    let dir = inputs();
    let d = dir.path();
    one_error_line(
        d,
        &["gate", "--impl", "hopper", "--shape", "1,8,512,96"],
        &["hopper", "head dim 96"],
    );
    one_error_line(
        d,
        &[
            "gate",
            "--impl",
            "mma",
            "--config",
            "BLOCK_M=7",
            "--shape",
            "1,8,512,64",
        ],
        &["BLOCK_M=7", "domain"],
    );
    one_error_line(
        d,
        &["gate", "--src", "empty.cu", "--shape", "1,8,512,64"],
        &["empty.cu", "empty"],
    );
    // Blocks that leave a side too few of them for the interval to see the clock move.
    one_error_line(
        d,
        &[
            "gate",
            "--impl",
            "mma",
            "--samples",
            "20",
            "--block",
            "10",
            "--shape",
            "1,8,512,64",
        ],
        &["--block 10", "2 block(s)", "at least 4"],
    );
    one_error_line(
        d,
        &["gate", "--src", "missing.cu", "--shape", "1,8,512,64"],
        &["missing.cu"],
    );
    let truncated = d.join("truncated-gate.json");
    std::fs::write(
        &truncated,
        "{\"schema\": 1, \"kind\": \"gate\", \"cases\": [",
    )
    .unwrap();
    one_error_line(
        d,
        &["gate", "--replay", "truncated-gate.json"],
        &["truncated-gate.json"],
    );
}

#[test]
fn a_ratchet_revision_that_cannot_be_read_is_one_line_before_the_gpu() {
    let dir = inputs();
    let shape = ["--shape", "1,8,512,64"];
    let gate = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut args = vec!["gate"];
        args.extend(extra);
        args.extend(shape);
        args
    };
    one_error_line(
        dir.path(),
        &gate(&["--impl", "naive", "--baseline", "rev:HEAD~1"]),
        &["no git repository here"],
    );
    // This repository (tests run in the crate's folder); skipped in a copy without `.git`.
    let here = Path::new(".");
    let git = Command::new("git").args(["rev-parse", "HEAD"]).output();
    if !git.is_ok_and(|o| o.status.success()) {
        return;
    }
    one_error_line(
        here,
        &gate(&["--impl", "naive", "--baseline", "rev:no-such-ref-3f9a"]),
        &["revision no-such-ref-3f9a: not a commit of this repository"],
    );
    one_error_line(
        here,
        &gate(&[
            "--impl",
            "naive",
            "--baseline",
            "rev:HEAD",
            "--regression-tolerance",
            "1.5",
        ]),
        &["regression tolerance must be in [0, 1), got 1.5"],
    );
}

#[test]
fn a_window_against_sdpa_says_which_baselines_have_a_window_kernel() {
    // With or without PyTorch (these machines have none): the same refusal, before any probe,
    // not the cuBLAS fallback's.
    let dir = inputs();
    let d = dir.path();
    let window = ["--shape", "1,8,512,64 window=64,64"];
    for extra in [
        &[][..],
        &["--baseline", "sdpa"][..],
        &["--sdpa-backend", "flash"][..],
    ] {
        let args = [&["gate", "--impl", "mma"][..], &window, extra].concat();
        let line = one_error_line(
            d,
            &args,
            &[
                "SDPA has no sliding-window kernel",
                "--sdpa-backend varlen",
                "fa3",
            ],
        );
        assert!(!line.contains("cublas"), "{line}");
    }
    one_error_line(
        d,
        &[&["evo", "--impl", "mma"][..], &window].concat(),
        &["SDPA has no sliding-window kernel"],
    );
    // FA3 is timed in batch mode only: said before its library is looked for.
    one_error_line(
        d,
        &[&["gate", "--impl", "mma", "--baseline", "fa3"][..], &window].concat(),
        &["--mode batch"],
    );
    // A registered baseline outside its variants, before a sanitizer is looked for.
    one_error_line(
        d,
        &[
            &["gate", "--impl", "mma", "--baseline", "cublas"][..],
            &window,
            &["--sanitize=/no/such/compute-sanitizer"],
        ]
        .concat(),
        &["cublas", "sliding windows"],
    );
}

#[test]
fn triton_kernels_and_python_callables_are_checked_before_the_gpu_probe() {
    let dir = inputs();
    let d = dir.path();
    std::fs::write(
        d.join("mine.py"),
        "def attend(q, k, v, scale, causal):\n    return q\n",
    )
    .unwrap();
    for (args, expected) in [
        (
            vec![
                "gate",
                "--triton",
                "missing.py:attn_fwd",
                "--shape",
                "1,8,512,64",
            ],
            vec!["--triton missing.py:attn_fwd", "no file missing.py"],
        ),
        (
            vec![
                "gate",
                "--triton",
                "mine.py:not-a-name",
                "--shape",
                "1,8,512,64",
            ],
            vec!["not-a-name", "not a Python function name"],
        ),
        (
            vec![
                "gate",
                "--triton",
                "mine.py:attend",
                "--define",
                "SHARED_BYTES=1024",
                "--shape",
                "1,8,512,64",
            ],
            vec!["SHARED_BYTES", "Triton sizes"],
        ),
        (
            vec![
                "gate",
                "--impl",
                "mma",
                "--define",
                "BLOCK_M=64",
                "--shape",
                "1,8,512,64",
            ],
            vec!["--define", "--config"],
        ),
        (
            vec![
                "gate",
                "--impl",
                "mma",
                "--baseline",
                "py:missing.py:attend",
                "--shape",
                "1,8,512,64",
            ],
            vec!["py:missing.py:attend", "missing.py"],
        ),
        (
            vec![
                "gate",
                "--impl",
                "mma",
                "--baseline",
                "py:mine.py",
                "--shape",
                "1,8,512,64",
            ],
            vec!["py:mine.py", "FILE.py:FUNCTION"],
        ),
        (
            vec![
                "gate",
                "--impl",
                "mma",
                "--baseline",
                "py:mine.py:attend",
                "--shape",
                "1,8/2,700,64 causal window=128,0",
            ],
            vec!["py callable", "no window"],
        ),
        (
            vec!["gate", "--py", "missing.py:attend", "--shape", "1,8,512,64"],
            vec!["--py missing.py:attend", "missing.py"],
        ),
        (
            vec![
                "gate",
                "--py",
                "mine.py:not-a-name",
                "--shape",
                "1,8,512,64",
            ],
            vec!["--py mine.py:not-a-name", "not a Python function name"],
        ),
        (
            vec![
                "gate",
                "--py",
                "mine.py:attend",
                "--define",
                "BLOCK_M=64",
                "--shape",
                "1,8,512,64",
            ],
            vec!["--py mine.py:attend", "no --define or --config"],
        ),
        (
            vec![
                "gate",
                "--py",
                "mine.py:attend",
                "--shape",
                "1,8/2,700,64 causal window=128,0",
            ],
            vec!["--py", "no window"],
        ),
        (
            vec![
                "gate",
                "--py",
                "mine.py:attend",
                "--shape",
                "decode B=2 q=1 kv=512 H=8/2 D=64",
            ],
            vec!["--py mine.py:attend", "prefill shapes"],
        ),
        (
            vec![
                "gate",
                "--py",
                "mine.py:attend",
                "--baseline",
                "rev:HEAD",
                "--shape",
                "1,8,512,64",
            ],
            vec!["rev:REF", "its own history"],
        ),
    ] {
        one_error_line(d, &args, &expected);
    }
}
