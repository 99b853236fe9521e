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
    let shape = ["--shape", "1,8,512,64"];
    // SDPA's backward is not a baseline yet: the default is refused, naming what is.
    one_error_line(
        d,
        &gate(&shape),
        &["--baseline sdpa", "backward pass", "backward-naive"],
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
