//! Said before any tool runs: a missing compute-sanitizer, a bad micro-benchmark, a `--src`
//! without its kernel.

use crate::{inputs, one_error_line, xtask};

#[test]
fn a_missing_compute_sanitizer_is_one_line_before_anything_runs() {
    let dir = inputs();
    let d = dir.path();
    let missing = "--compute-sanitizer=/no/such/compute-sanitizer";
    one_error_line(
        d,
        &["sanitize", "--impl", "naive", missing],
        &[
            "compute-sanitizer not found at /no/such/compute-sanitizer",
            "CUDA toolkit",
        ],
    );
    one_error_line(
        d,
        &[
            "gate",
            "--impl",
            "naive",
            "--sanitize=/no/such/compute-sanitizer",
        ],
        &["compute-sanitizer not found at /no/such/compute-sanitizer"],
    );
    // The request is checked first, the sanitizer looked for after.
    one_error_line(
        d,
        &[
            "sanitize",
            "--impl",
            "hopper",
            "--shape",
            "1,8,512,96",
            missing,
        ],
        &["hopper", "head dim 96"],
    );
    one_error_line(
        d,
        &[
            "gate",
            "--impl",
            "hopper",
            "--shape",
            "1,8,512,96",
            "--sanitize=/no/such/compute-sanitizer",
        ],
        &["hopper", "head dim 96"],
    );
}

#[test]
fn every_argument_is_checked_before_a_tool_or_the_gpu_is_probed() {
    let dir = inputs();
    let d = dir.path();
    one_error_line(
        d,
        &["micro", "--head-dim", "96"],
        &["hopper micro-benchmark needs head dim 64 or 128"],
    );
    one_error_line(
        d,
        &["micro", "--target", "cp-async", "--head-dim", "12"],
        &["multiple of 8"],
    );
    // A file that is no kernel, or names no entry point.
    std::fs::write(d.join("garbage.cu"), "this is not a kernel\n").unwrap();
    let line = one_error_line(
        d,
        &["gate", "--src", "garbage.cu", "--shape", "1,8,512,64"],
        &["--src garbage.cu", "no kernel `attn_fwd`", "--entry"],
    );
    assert!(!line.contains("cublas"), "{line}");
    one_error_line(
        d,
        &[
            "gate",
            "--src",
            "garbage.cu",
            "--entry",
            "my_fwd",
            "--shape",
            "1,8,512,64",
        ],
        &["no kernel `my_fwd`"],
    );
    one_error_line(
        d,
        &[
            "evo",
            "--src",
            "garbage.cu",
            "--knob",
            "BLOCK_M=64,128",
            "--evidence",
            "ev",
        ],
        &["--src garbage.cu", "no kernel `attn_fwd`"],
    );
    one_error_line(
        d,
        &[
            "evo",
            "--src",
            "missing.cu",
            "--knob",
            "BLOCK_M=64",
            "--evidence",
            "ev",
        ],
        &["missing.cu"],
    );
    // An entry point in a header beside the file, or spelled as a longer name, is not refused
    // for that: the first is a kernel, the second is not.
    std::fs::write(
        d.join("fwd.cuh"),
        "extern \"C\" __global__ void attn_fwd() {}\n",
    )
    .unwrap();
    std::fs::write(d.join("via_header.cu"), "#include \"fwd.cuh\"\n").unwrap();
    std::fs::write(d.join("longer.cu"), "__global__ void attn_fwd_v2() {}\n").unwrap();
    let (_, stdout, stderr) = xtask(
        d,
        &["gate", "--src", "via_header.cu", "--shape", "1,8,512,64"],
    );
    assert!(!stderr.contains("no kernel"), "{stdout}{stderr}");
    one_error_line(
        d,
        &["gate", "--src", "longer.cu", "--shape", "1,8,512,64"],
        &["no kernel `attn_fwd`"],
    );
    assert!(!d.join("ev").exists(), "nothing was searched");
}
