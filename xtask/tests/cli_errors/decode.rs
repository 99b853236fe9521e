//! Decode batches: accepted by gate's parser, refused in one line where they cannot run, all
//! before any GPU probe.

use crate::{inputs, one_error_line};

const DECODE: &str = "decode B=64 q=1 kv=8192 H=32/8 D=128 page=16 bf16";

#[test]
fn decode_problems_are_checked_before_the_gpu_probe() {
    let dir = inputs();
    let d = dir.path();
    // A bad decode batch is the problem's own line.
    one_error_line(
        d,
        &[
            "gate",
            "--shape",
            "decode B=2 q=17 kv=100 H=8 D=64",
            "--baseline",
            "decode-naive",
        ],
        &["--shape decode B=2 q=17", "1 to 16"],
    );
    one_error_line(
        d,
        &["gate", "--suite", "decode-seed", "--shape", DECODE],
        &["--shape or --suite, not both"],
    );
    one_error_line(
        d,
        &[
            "gate",
            "--shape",
            DECODE,
            "--shape",
            "1,8,512,64",
            "--baseline",
            "decode-naive",
        ],
        &["decode and prefill shapes in one run"],
    );
    // The default baseline, SDPA, takes equal lengths without a window: said before the GPU.
    one_error_line(
        d,
        &["gate", "--shape", "decode B=2 q=1,2 kv=100,512 H=8/2 D=64"],
        &[
            "SDPA takes equal lengths",
            "q=1,2 kv=100,512",
            "--baseline decode-naive",
        ],
    );
    one_error_line(
        d,
        &[
            "gate",
            "--shape",
            "decode B=2 q=1 kv=512 H=8/2 D=64 window=128,0",
        ],
        &["sliding-window", "--baseline decode-naive"],
    );
    one_error_line(
        d,
        &["gate", "--shape", DECODE, "--sdpa-backend", "varlen"],
        &["--sdpa-backend varlen", "decode-naive"],
    );
    // FlashInfer takes what SDPA cannot (a ragged paged batch), but not a contiguous cache or a
    // head dim it is not built for; a prefill problem not at all.
    one_error_line(
        d,
        &[
            "gate",
            "--shape",
            "decode B=2 q=1,2 kv=100,512 H=8/2 D=64 page=16",
        ],
        &[
            "SDPA takes equal lengths",
            "--sdpa-backend flashinfer or --baseline decode-naive",
        ],
    );
    one_error_line(
        d,
        &[
            "gate",
            "--shape",
            "decode B=2 q=1,2 kv=100,512 H=8/2 D=64",
            "--sdpa-backend",
            "flashinfer",
        ],
        &["flashinfer reads a paged KV cache", "page=16"],
    );
    one_error_line(
        d,
        &[
            "gate",
            "--shape",
            "decode B=2 q=1 kv=512 H=8/2 D=96 page=16",
            "--sdpa-backend",
            "flashinfer",
        ],
        &["flashinfer", "not D=96", "decode-naive"],
    );
    one_error_line(
        d,
        &[
            "gate",
            "--impl",
            "mma",
            "--shape",
            "1,8,512,64",
            "--sdpa-backend",
            "flashinfer",
        ],
        &["flashinfer times decode batches only", "decode"],
    );
    one_error_line(
        d,
        &[
            "gate",
            "--suite",
            "decode-llama3-8b",
            "--baseline",
            "rev:HEAD",
        ],
        &["--baseline rev:HEAD", "decode"],
    );
    // A prefill implementation for a decode batch, or an unknown one.
    one_error_line(
        d,
        &[
            "gate",
            "--shape",
            DECODE,
            "--impl",
            "mma",
            "--baseline",
            "decode-naive",
        ],
        &["--impl mma is a prefill implementation", "decode-naive"],
    );
    one_error_line(
        d,
        &[
            "gate",
            "--shape",
            DECODE,
            "--impl",
            "decode-fast",
            "--baseline",
            "decode-naive",
        ],
        &["decode-fast", "decode-naive, decode"],
    );
    one_error_line(
        d,
        &["gate", "--shape", DECODE, "--baseline", "mma"],
        &["mma", "decode"],
    );
    one_error_line(
        d,
        &[
            "gate",
            "--shape",
            DECODE,
            "--src",
            "empty.cu",
            "--baseline",
            "decode-naive",
        ],
        &["--src empty.cu", "decode"],
    );
    // A decode implementation for a prefill problem.
    one_error_line(
        d,
        &["gate", "--impl", "decode", "--shape", "1,8,512,64"],
        &["--impl decode is a decode implementation"],
    );
    one_error_line(
        d,
        &[
            "gate",
            "--impl",
            "mma",
            "--shape",
            "1,8,512,64",
            "--baseline",
            "decode-naive",
        ],
        &["--baseline decode-naive is a decode implementation"],
    );
}

#[test]
fn bench_checks_decode_before_the_gpu_probe() {
    let dir = inputs();
    let d = dir.path();
    // bench times decode; what it cannot run is said before the GPU.
    one_error_line(
        d,
        &["bench", "--shape", DECODE, "--impl", "mma"],
        &["--impl mma is a prefill implementation", "decode-naive"],
    );
    one_error_line(
        d,
        &[
            "bench",
            "--suite",
            "decode-llama3-70b",
            "--impl",
            "decode,decode-fast",
        ],
        &["decode-fast", "decode-naive, decode"],
    );
    one_error_line(
        d,
        &["bench", "--shape", DECODE, "--sdpa-backends", "default,fa3"],
        &["--sdpa-backends fa3", "decode", "flashinfer"],
    );
    one_error_line(
        d,
        &["bench", "--shape", DECODE, "--sdpa-backends", "flashinfr"],
        &["unknown SDPA backend `flashinfr`", "flashinfer"],
    );
    // FlashInfer is a decode baseline only: a prefill bench refuses it before the GPU.
    one_error_line(
        d,
        &[
            "bench",
            "--impl",
            "mma",
            "--shape",
            "1,8,512,64",
            "--sdpa-backends",
            "default,flashinfer",
        ],
        &["--sdpa-backends flashinfer times decode batches only"],
    );
}

#[test]
fn commands_without_decode_refuse_it_in_one_line() {
    let dir = inputs();
    let d = dir.path();
    one_error_line(
        d,
        &["ncu", "--impl", "mma", "--shape", DECODE],
        &["xtask ncu", "cannot take decode yet"],
    );
    // evo takes decode, but only the decode registry's implementations.
    one_error_line(
        d,
        &[
            "evo",
            "--impl",
            "mma",
            "--baseline",
            "decode-naive",
            "--shape",
            DECODE,
        ],
        &["--impl mma", "not a decode implementation"],
    );
    one_error_line(
        d,
        &["sanitize", "--suite", "decode-seed"],
        &["xtask sanitize", "cannot take decode yet"],
    );
}
