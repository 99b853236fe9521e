//! `run`: bad inputs and outputs refused before the GPU probe; the reference's NaN output.

use crate::{inputs, one_error_line, run_args, xtask, QKV};

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
fn run_takes_dense_grouped_head_inputs() {
    let dir = inputs();
    let d = dir.path();
    let head = 16 * 64;
    let q: Vec<f32> = (0..4 * head).map(|i| (i as f32 * 0.11).cos()).collect();
    let kv: Vec<f32> = (0..2 * head).map(|i| (i as f32 * 0.37).sin()).collect();
    crate::npy(d, "q4.npy", "<f2", &[1, 4, 16, 64], &q);
    crate::npy(d, "k2.npy", "<f2", &[1, 2, 16, 64], &kv);
    crate::npy(d, "v2.npy", "<f2", &[1, 2, 16, 64], &kv);
    // The same problem as multi-head attention: each K/V head repeated for its two query heads.
    let repeated: Vec<f32> = [0, 0, 1, 1]
        .iter()
        .flat_map(|&h| kv[h * head..(h + 1) * head].to_vec())
        .collect();
    crate::npy(d, "k4.npy", "<f2", &[1, 4, 16, 64], &repeated);
    crate::npy(d, "v4.npy", "<f2", &[1, 4, 16, 64], &repeated);
    for (k, v, out) in [
        ("k2.npy", "v2.npy", "gqa.npy"),
        ("k4.npy", "v4.npy", "mha.npy"),
    ] {
        let args = run_args(&[
            "--impl",
            "reference",
            "--q",
            "q4.npy",
            "--k",
            k,
            "--v",
            v,
            "--out",
            out,
        ]);
        let (code, stdout, stderr) = xtask(d, &args);
        assert_eq!(code, 0, "{k}: {stdout}{stderr}");
    }
    let (gqa, mha) = (
        std::fs::read(d.join("gqa.npy")).unwrap(),
        std::fs::read(d.join("mha.npy")).unwrap(),
    );
    assert_eq!(gqa.len(), mha.len());
    assert!(
        gqa == mha,
        "grouped heads must read the K/V head h / (H / H_kv)"
    );
    // A K/V head count that does not divide the query heads is refused in one line.
    crate::npy(d, "k3.npy", "<f2", &[1, 3, 16, 64], &q[..3 * head]);
    crate::npy(d, "v3.npy", "<f2", &[1, 3, 16, 64], &q[..3 * head]);
    one_error_line(
        d,
        &run_args(&[
            "--impl",
            "reference",
            "--q",
            "q4.npy",
            "--k",
            "k3.npy",
            "--v",
            "v3.npy",
            "--out",
            "o3.npy",
        ]),
        &["3 heads for 4 query heads"],
    );
    assert!(!d.join("o3.npy").exists(), "nothing written for bad input");
}
