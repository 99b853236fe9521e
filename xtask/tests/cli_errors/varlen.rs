//! Packed variable-length batches: refused requests, and `run` taking one.

use std::path::Path;

use crate::{inputs, one_error_line, run_args, xtask, QKV};

#[test]
fn varlen_requests_are_checked_before_the_gpu_probe() {
    let dir = inputs();
    let d = dir.path();
    let shape = "varlen=512,0,3000 H=16/4 D=128 causal";
    // Bad text: one line naming what is wrong.
    one_error_line(
        d,
        &[
            "gate",
            "--impl",
            "mma",
            "--shape",
            "varlen=512,-5 H=16 D=128",
        ],
        &["\"-5\" is not a non-negative integer"],
    );
    one_error_line(
        d,
        &["bench", "--impl", "mma", "--shape", "varlen= H=16 D=128"],
        &["lists no sequence lengths"],
    );
    // A candidate or a baseline without varlen: refused before anything runs.
    one_error_line(
        d,
        &["gate", "--impl", "cublas", "--shape", shape],
        &["cublas", "packed variable-length (varlen) batches"],
    );
    one_error_line(
        d,
        &[
            "gate",
            "--impl",
            "mma",
            "--baseline",
            "cublas",
            "--shape",
            shape,
        ],
        &["cublas", "packed variable-length (varlen) batches"],
    );
    one_error_line(
        d,
        &[
            &["run", "--varlen", "512,3000"][..],
            &QKV,
            &["--out", "o.npy"],
        ]
        .concat(),
        &[
            "--q",
            "has dims [1, 2, 16, 64]",
            "packed batch of 3512 queries and 3512 keys needs [1, 3512, 16, 64]",
        ],
    );
}

/// `run --impl IMPLEMENTATION --varlen LENGTHS` on q.npy, k.npy and v.npy, writing `out`.
fn run_varlen(d: &Path, implementation: &str, lengths: &str, out: &str) -> (i32, String, String) {
    let mut args = run_args(&["--impl", implementation, "--varlen", lengths]);
    args.extend(QKV);
    args.extend(["--out", out]);
    xtask(d, &args)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn run_takes_a_packed_varlen_batch_on_the_gpu() {
    // The same packed files through mma and hopper: each output checked against the f64 oracle
    // per sequence ("-> pass"), as one batch of two tokens and as two of one.
    let dir = inputs();
    let d = dir.path();
    for implementation in ["mma", "hopper"] {
        for lengths in ["2", "1,1", "2:1,0:1"] {
            let (code, stdout, stderr) = run_varlen(d, implementation, lengths, "o.npy");
            assert_eq!(
                code, 0,
                "{implementation} --varlen {lengths}: {stdout}{stderr}"
            );
            assert!(
                stdout.contains("-> pass"),
                "{implementation} --varlen {lengths}: {stdout}"
            );
        }
    }
}

#[test]
fn run_reference_takes_a_packed_varlen_batch() {
    // q.npy, k.npy and v.npy read as [1, tokens, heads, D]: two tokens of 16 heads. As two
    // sequences of one token each, every query sees its own key alone, so O is exactly V.
    let dir = inputs();
    let d = dir.path();
    let (code, stdout, stderr) = run_varlen(d, "reference", "1,1", "o.npy");
    assert_eq!(code, 0, "{stdout}{stderr}");
    let data = |name: &str| {
        let bytes = std::fs::read(d.join(name)).unwrap();
        bytes[bytes.len() - 2 * 2 * 16 * 64..].to_vec()
    };
    assert_eq!(data("o.npy"), data("v.npy"));
    // As one sequence of two tokens, the second query also sees the first key: O differs.
    let (code, stdout, stderr) = run_varlen(d, "reference", "2", "o2.npy");
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_ne!(data("o2.npy"), data("v.npy"));
}
