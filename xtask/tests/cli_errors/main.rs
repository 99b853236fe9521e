//! CPU: bad input to the CLI gets one clear line (`error: ...`, exit 2) before any GPU probe: no
//! panic, no "no CUDA driver", the cause said once. Runs the built xtask binary; needs no GPU and
//! no CUDA toolkit (these machines have none, which is the point).

#[path = "../common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

mod backward;
mod bench_ncu_evo;
mod decode;
mod gate;
mod kernels;
mod report;
mod run;
mod stats;
mod tools;
mod varlen;
mod version;

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
