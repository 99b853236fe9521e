//! CPU: bad input to the CLI gets one clear line (`error: ...`, exit 2) before any GPU probe: no
//! panic, no "no CUDA driver", the cause said once. Runs the built xtask binary; needs no GPU and
//! no CUDA toolkit (these machines have none, which is the point).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs xtask with `args` in `dir`; returns (exit code, stdout, stderr).
fn xtask(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(common::xtask())
        .args(args)
        .current_dir(dir)
        .env_remove("IMPL")
        // Outside a repository for real: no git environment pointing elsewhere.
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .expect("xtask runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts one `error:` line on stderr containing every one of `expected`, exit 2, and none of
/// the signs of a late check or a doubled cause.
fn one_error_line(dir: &Path, args: &[&str], expected: &[&str]) -> String {
    let (code, stdout, stderr) = xtask(dir, args);
    let context = format!("xtask {args:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(code, 2, "{context}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{context}");
    let line = lines[0];
    assert!(line.starts_with("error: "), "{context}");
    assert!(!line.contains("panicked"), "{context}");
    assert!(!line.contains("no CUDA driver"), "{context}");
    assert!(
        !line.contains(".tmp-"),
        "a temporary file's name: {context}"
    );
    for want in expected {
        assert!(line.contains(want), "missing {want:?}: {context}");
    }
    // The cause is not said twice: no ": X: X" repetition of any part.
    let parts: Vec<&str> = line["error: ".len()..].split(": ").collect();
    for pair in parts.windows(2) {
        assert_ne!(pair[0], pair[1], "repeated cause: {context}");
    }
    line.to_string()
}

/// A `.npy` file of `descr` (`<f2`, `<u2`, `<f4`) with `shape`, holding `values` (as f32, narrowed
/// by the caller's choice of descr).
fn npy(dir: &Path, name: &str, descr: &str, shape: &[usize], values: &[f32]) -> PathBuf {
    let dims: Vec<String> = shape.iter().map(ToString::to_string).collect();
    let mut header = format!(
        "{{'descr': '{descr}', 'fortran_order': False, 'shape': ({}{}), }}",
        dims.join(", "),
        if shape.len() == 1 { "," } else { "" }
    );
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&u16::try_from(header.len()).unwrap().to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for &v in values {
        match descr {
            "<f4" => bytes.extend_from_slice(&v.to_le_bytes()),
            "<f2" => bytes.extend_from_slice(&f16_bits(v).to_le_bytes()),
            "<u2" => bytes.extend_from_slice(&((v.to_bits() >> 16) as u16).to_le_bytes()),
            other => panic!("descr {other}"),
        }
    }
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// fp16 bits of small normal values and NaN (enough for these inputs).
fn f16_bits(v: f32) -> u16 {
    if v.is_nan() {
        return 0x7e00;
    }
    if v == 0.0 {
        return 0;
    }
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    let mantissa = ((bits >> 13) & 0x3ff) as u16;
    sign | ((exp.clamp(1, 30) as u16) << 10) | mantissa
}

/// q, k, v of [1, 2, 16, 64] fp16 and the other files the tests need, in a fresh folder.
fn inputs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let values: Vec<f32> = (0..2 * 16 * 64).map(|i| (i as f32 * 0.37).sin()).collect();
    for name in ["q.npy", "k.npy", "v.npy"] {
        npy(d, name, "<f2", &[1, 2, 16, 64], &values);
    }
    npy(d, "q3.npy", "<f2", &[2, 16, 64], &values);
    npy(d, "kb.npy", "<u2", &[1, 2, 16, 64], &values);
    npy(d, "k32.npy", "<f4", &[1, 2, 16, 64], &values);
    let mut with_nan = values.clone();
    with_nan[70] = f32::NAN;
    npy(d, "qnan.npy", "<f2", &[1, 2, 16, 64], &with_nan);
    let d96: Vec<f32> = vec![0.1; 2 * 16 * 96];
    for name in ["q96.npy", "k96.npy", "v96.npy"] {
        npy(d, name, "<f2", &[1, 2, 16, 96], &d96);
    }
    let whole = std::fs::read(d.join("q.npy")).unwrap();
    std::fs::write(d.join("truncated.npy"), &whole[..300]).unwrap();
    std::fs::write(d.join("empty.cu"), "").unwrap();
    dir
}

const QKV: [&str; 6] = ["--q", "q.npy", "--k", "k.npy", "--v", "v.npy"];

fn run_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run"];
    args.extend(extra);
    args
}

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
fn run_refuses_bad_requests_before_the_gpu_probe() {
    let dir = inputs();
    let d = dir.path();
    let out = ["--out", "o.npy"];
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            [
                &[
                    "--impl", "hopper", "--q", "q96.npy", "--k", "k96.npy", "--v", "v96.npy",
                ][..],
                &out,
            ]
            .concat(),
            vec!["hopper", "head dim 96"],
        ),
        (
            [&["--impl", "mma", "--config", "BLOCK_M=7"][..], &QKV, &out].concat(),
            vec!["BLOCK_M=7", "domain"],
        ),
        (
            [&["--impl", "nope"][..], &QKV, &out].concat(),
            vec!["unknown implementation `nope`"],
        ),
        (
            [
                &[
                    "--impl", "mma", "--q", "q3.npy", "--k", "k.npy", "--v", "v.npy",
                ][..],
                &out,
            ]
            .concat(),
            vec!["--q q3.npy", "3-D"],
        ),
        (
            [
                &[
                    "--impl", "mma", "--q", "q.npy", "--k", "kb.npy", "--v", "v.npy",
                ][..],
                &out,
            ]
            .concat(),
            vec!["q.npy holds fp16", "kb.npy holds bf16"],
        ),
        (
            [
                &[
                    "--impl", "mma", "--q", "q.npy", "--k", "k32.npy", "--v", "v.npy",
                ][..],
                &out,
            ]
            .concat(),
            vec!["k32.npy holds f32"],
        ),
        (
            [
                &[
                    "--impl", "mma", "--q", "qnan.npy", "--k", "k.npy", "--v", "v.npy",
                ][..],
                &out,
            ]
            .concat(),
            vec!["qnan.npy", "NaN", "--allow-nan"],
        ),
        (
            [&["--impl", "mma", "--bf16"][..], &QKV, &out].concat(),
            vec!["q.npy holds fp16", "--bf16"],
        ),
        (
            [
                &["--impl", "mma"][..],
                &QKV,
                &["--out", "no/such/folder/o.npy"],
            ]
            .concat(),
            vec!["--out", "no/such/folder", "does not exist"],
        ),
        (
            [
                &[
                    "--impl",
                    "mma",
                    "--q",
                    "missing.npy",
                    "--k",
                    "k.npy",
                    "--v",
                    "v.npy",
                ][..],
                &out,
            ]
            .concat(),
            vec!["--q missing.npy", "No such file"],
        ),
        (
            [
                &[
                    "--impl",
                    "mma",
                    "--q",
                    "truncated.npy",
                    "--k",
                    "k.npy",
                    "--v",
                    "v.npy",
                ][..],
                &out,
            ]
            .concat(),
            vec!["--q truncated.npy", "truncated"],
        ),
    ];
    for (args, expected) in cases {
        one_error_line(d, &run_args(&args), &expected);
    }
    assert!(!d.join("o.npy").exists(), "nothing written for bad input");
}

#[test]
fn run_reference_writes_and_reports_nan_when_allowed() {
    let dir = inputs();
    let d = dir.path();
    let args = run_args(&[
        "--impl",
        "reference",
        "--allow-nan",
        "--q",
        "qnan.npy",
        "--k",
        "k.npy",
        "--v",
        "v.npy",
        "--out",
        "o.npy",
    ]);
    let (code, stdout, stderr) = xtask(d, &args);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("NaN"),
        "the NaN output is reported: {stdout}"
    );
    assert!(d.join("o.npy").is_file());
    // The reference writes to an existing folder with no temporary file left behind.
    let leftovers: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn stats_compare_names_the_file_and_line_and_what_failed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("a.txt"), "1\n2\n3\n").unwrap();
    std::fs::write(d.join("neg.txt"), "1\n-2\n3\n").unwrap();
    one_error_line(
        d,
        &[
            "stats",
            "compare",
            "--baseline",
            "a.txt",
            "--candidate",
            "neg.txt",
        ],
        &[
            "candidate",
            "neg.txt",
            "line 2",
            "-2 is not a positive timing",
        ],
    );
    one_error_line(
        d,
        &[
            "stats",
            "compare",
            "--baseline",
            "missing.txt",
            "--candidate",
            "a.txt",
        ],
        &["baseline", "missing.txt", "cannot read"],
    );
    let (code, stdout, stderr) = xtask(
        d,
        &[
            "stats",
            "compare",
            "--baseline",
            "a.txt",
            "--candidate",
            "a.txt",
            "--resamples",
            "200",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let gate = stdout
        .lines()
        .find(|l| l.starts_with("gate "))
        .unwrap_or_else(|| panic!("no gate line: {stdout}"));
    assert!(
        gate.contains("failed: candidate median 2.0000 > 0.95 x baseline median"),
        "{gate}"
    );
    assert!(gate.contains("not entirely below 0"), "{gate}");
}

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
fn run_refuses_an_output_that_is_one_of_its_inputs() {
    let dir = inputs();
    let d = dir.path();
    let before = std::fs::read(d.join("k.npy")).unwrap();
    let spellings = ["q.npy", "./q.npy", "../{dir}/v.npy", "k.npy"];
    let name = d.file_name().unwrap().to_string_lossy().into_owned();
    for out in spellings.map(|s| s.replace("{dir}", &name)) {
        let args = [&["run", "--impl", "reference"][..], &QKV, &["--out", &out]].concat();
        one_error_line(d, &args, &["--out", "would overwrite an input"]);
    }
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(d.join("k.npy"), d.join("link.npy")).unwrap();
        std::fs::hard_link(d.join("v.npy"), d.join("hard.npy")).unwrap();
        for out in ["link.npy", "hard.npy"] {
            let args = [&["run", "--impl", "reference"][..], &QKV, &["--out", out]].concat();
            one_error_line(d, &args, &["would overwrite an input"]);
        }
    }
    assert_eq!(
        std::fs::read(d.join("k.npy")).unwrap(),
        before,
        "k.npy untouched"
    );
    // Another file is fine.
    let args = [
        &["run", "--impl", "reference"][..],
        &QKV,
        &["--out", "o.npy"],
    ]
    .concat();
    let (code, stdout, stderr) = xtask(d, &args);
    assert_eq!(code, 0, "{stdout}{stderr}");
}

#[test]
fn version_says_the_crate_version_and_the_revision() {
    for flag in ["--version", "-V"] {
        let (code, stdout, stderr) = xtask(Path::new("."), &[flag]);
        assert_eq!(code, 0, "{stderr}");
        let line = stdout.trim_end();
        let want = format!("cargo xtask {} (", env!("CARGO_PKG_VERSION"));
        assert!(line.starts_with(&want), "{line}");
        assert!(line.contains("git "), "{line}");
        assert_eq!(line.lines().count(), 1, "{line}");
    }
}

#[test]
#[cfg(unix)]
fn a_reader_that_closes_the_pipe_early_ends_xtask_quietly() {
    // `cargo xtask kernels --configs hopper | head -1`, made certain: the pipe's read end is
    // closed before xtask starts, so its first write fails (a real reader may close while its
    // output still fits the pipe's buffer). A panic in println! prints "panicked" and a backtrace.
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fds[0] is the read end just opened and owned by no one else.
    unsafe { libc::close(fds[0]) };
    // SAFETY: fds[1] is the write end just opened; the Stdio takes sole ownership of it.
    let write_end = unsafe { std::process::Stdio::from_raw_fd(fds[1]) };
    let out = Command::new(common::xtask())
        .args(["kernels", "--configs", "hopper"])
        .env("RUST_BACKTRACE", "1")
        .stdout(write_end)
        .output()
        .expect("xtask runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
    assert!(!out.status.success(), "xtask cannot have written its lines");
}

#[test]
fn kernels_prints_the_nvrtc_flags_the_host_compiles_with() {
    // What kernels/tools' scripts compile with: exactly the host's list, one per line.
    let (code, stdout, stderr) = xtask(Path::new("."), &["kernels", "--nvrtc-flags"]);
    assert_eq!(code, 0, "{stderr}");
    let printed: Vec<&str> = stdout.lines().collect();
    assert_eq!(printed, attn_kernels::compile::LANGUAGE_FLAGS, "{stdout}");
    // clap's own usage error: its first line names both.
    let (code, _, stderr) = xtask(
        Path::new("."),
        &["kernels", "--nvrtc-flags", "--configs", "hopper"],
    );
    assert_eq!(code, 2, "{stderr}");
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error: ")
            && first.contains("--nvrtc-flags")
            && first.contains("--configs"),
        "{stderr}"
    );
}

#[test]
fn a_report_from_no_evidence_is_refused_and_leaves_the_report_alone() {
    let dir = tempfile::tempdir().unwrap();
    let charts = dir.path().join("reports/charts");
    std::fs::create_dir_all(&charts).unwrap();
    std::fs::write(dir.path().join("reports/index.html"), "the real report").unwrap();
    std::fs::write(charts.join("glance.svg"), "<svg/>").unwrap();
    std::fs::create_dir_all(dir.path().join("empty")).unwrap();
    for (evidence, reason) in [
        ("evidnce", "does not exist"),
        ("empty", "no gate, bench, ncu or search results"),
    ] {
        for check in [&[][..], &["--check"][..]] {
            let mut args = vec!["report", "--evidence", evidence, "--out", "reports"];
            args.extend(check);
            one_error_line(dir.path(), &args, &[evidence, reason]);
        }
        let page = std::fs::read_to_string(dir.path().join("reports/index.html")).unwrap();
        assert_eq!(page, "the real report", "{evidence}: the page was replaced");
        assert!(
            charts.join("glance.svg").is_file(),
            "{evidence}: a chart was deleted"
        );
    }
}

#[test]
fn kernels_ptxas_src_refuses_a_file_it_cannot_compile_before_compiling() {
    let dir = inputs();
    let d = dir.path();
    one_error_line(
        d,
        &["kernels", "--ptxas", "--src", "missing.cu"],
        &["missing.cu", "No such file"],
    );
    one_error_line(
        d,
        &["kernels", "--ptxas", "--src", "empty.cu"],
        &["--src empty.cu: the file is empty"],
    );
    one_error_line(
        d,
        &[
            "kernels", "--ptxas", "--src", "empty.cu", "--define", "BLOCK_M",
        ],
        &["--define"],
    );
    // --src is a --ptxas report; clap's usage error names what is missing.
    let (code, _, stderr) = xtask(d, &["kernels", "--src", "empty.cu"]);
    assert_eq!(code, 2, "{stderr}");
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error: ") && stderr.contains("--ptxas"),
        "{stderr}"
    );
}
