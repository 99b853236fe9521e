//! `bench`, `ncu` and `evo`: a bad request or number said before the GPU probe or the search.

use crate::{inputs, one_error_line};

#[test]
fn bench_ncu_and_evo_check_before_the_gpu_probe() {
    let dir = inputs();
    let d = dir.path();
    let hopper_d96 = ["--impl", "hopper", "--shape", "1,8,512,96"];
    one_error_line(
        d,
        &[&["bench"][..], &hopper_d96].concat(),
        &["hopper", "head dim 96"],
    );
    one_error_line(
        d,
        &[&["ncu"][..], &hopper_d96].concat(),
        &["hopper", "head dim 96"],
    );
    one_error_line(
        d,
        &[
            "ncu",
            "--impl",
            "mma",
            "--config",
            "BLOCK_M=7",
            "--shape",
            "1,8,512,64",
        ],
        &["BLOCK_M=7", "domain"],
    );
    one_error_line(d, &["evo", "--budget", "0"], &["--budget"]);
    let several = [
        "evo",
        "--synthetic",
        "--impl",
        "mma,cublas",
        "--evidence",
        "ev",
    ];
    one_error_line(
        d,
        &[&several[..], &["--knob", "NOPE=1"]].concat(),
        &["knob NOPE: `mma,cublas` has no such knob"],
    );
    one_error_line(
        d,
        &[&several[..], &["--knob", "BLOCK_M=7"]].concat(),
        &["BLOCK_M: 7 is outside its domain"],
    );
    one_error_line(
        d,
        &[
            "evo",
            "--synthetic",
            "--impl",
            "naive,hopper",
            "--shape",
            "1,8,512,96",
        ],
        &["hopper", "head dim 96"],
    );
    // A missing ncu is said before the search starts, not after it.
    one_error_line(
        d,
        &[
            &several[..],
            &["--fitness", "composite", "--ncu", "/no/such/ncu"],
        ]
        .concat(),
        &["ncu not found at \"/no/such/ncu\""],
    );
    assert!(!d.join("ev").exists(), "nothing was searched");
}

#[test]
fn numbers_of_seconds_are_checked_when_parsed() {
    // Each would reach Duration::from_secs_f64 (a panic, exit 101) or a GPU probe.
    let dir = inputs();
    let d = dir.path();
    for bad in ["nan", "inf", "1e300", "0", "-1", "86401", "ten"] {
        let timeout = format!("--timeout={bad}");
        let line = one_error_line(d, &["evo", "--synthetic", &timeout], &["--timeout", bad]);
        assert!(line.contains("positive number of seconds"), "{line}");
        let hang = format!("--hang-bound={bad}");
        one_error_line(d, &["gate", "--impl", "naive", &hang], &["--hang-bound"]);
        let budget = format!("--time-budget={bad}");
        one_error_line(d, &["gate", "--impl", "naive", &budget], &["--time-budget"]);
        one_error_line(
            d,
            &["bench", "--impl", "naive", &budget],
            &["--time-budget"],
        );
    }
    for bad in ["nan", "inf", "-1"] {
        let syncs = format!("--syncs-per-tile={bad}");
        one_error_line(d, &["evo", "--synthetic", &syncs], &["--syncs-per-tile"]);
        one_error_line(
            d,
            &["ncu", "--impl", "naive", &syncs],
            &["--syncs-per-tile"],
        );
    }
    for bad in ["nan", "inf", "0", "-1"] {
        let speedup = format!("--speedup={bad}");
        one_error_line(d, &["ncu", "--impl", "naive", &speedup], &["--speedup"]);
    }
    // A day is allowed (the search then fails on its own missing --knob, not the number).
    one_error_line(
        d,
        &["evo", "--synthetic", "--timeout", "86400"],
        &["--synthetic needs --knob"],
    );
}

#[test]
fn bench_takes_triton_kernels_for_prefill_problems_only() {
    let dir = crate::inputs();
    let d = dir.path();
    crate::one_error_line(
        d,
        &[
            "bench",
            "--triton",
            "missing.py:attn_fwd",
            "--shape",
            "1,8,512,64",
        ],
        &["--triton missing.py:attn_fwd", "no file missing.py"],
    );
    crate::one_error_line(
        d,
        &[
            "bench",
            "--impl",
            "mma",
            "--define",
            "BLOCK_M=64",
            "--shape",
            "1,8,512,64",
        ],
        &["--define", "--config"],
    );
    let starter = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kernels/examples/starter_triton.py:attn_fwd")
        .display()
        .to_string();
    crate::one_error_line(
        d,
        &[
            "bench",
            "--triton",
            &starter,
            "--shape",
            "decode B=2 q=1 kv=512 H=8/2 D=64 page=16",
        ],
        &["--triton", "not decode batches"],
    );
}

#[test]
fn bench_and_evo_check_callables_and_ray_targets_before_any_probe() {
    let dir = crate::inputs();
    let d = dir.path();
    std::fs::write(
        d.join("mine.py"),
        "def attend(q, k, v, scale, causal):\n    return q\n",
    )
    .unwrap();
    crate::one_error_line(
        d,
        &[
            "bench",
            "--py",
            "missing.py:attend",
            "--shape",
            "1,8,512,64",
        ],
        &["--py missing.py:attend", "missing.py"],
    );
    crate::one_error_line(
        d,
        &[
            "bench",
            "--py",
            "mine.py:attend",
            "--shape",
            "decode B=2 q=1 kv=512 H=8/2 D=64 page=16",
        ],
        &["--py", "not decode batches"],
    );
    crate::one_error_line(
        d,
        &["evo", "--synthetic", "--knob", "A=1,2", "--on", "slurm"],
        &["--on slurm", "ray=ADDRESS"],
    );
    crate::one_error_line(
        d,
        &["evo", "--impl", "mma", "--define", "BLOCK_M=64"],
        &["--define", "--src or --triton"],
    );
    crate::one_error_line(
        d,
        &[
            "evo",
            "--triton",
            "missing.py:attn_fwd",
            "--knob",
            "BLOCK_N=32,64",
        ],
        &["--triton missing.py:attn_fwd", "no file missing.py"],
    );
}
