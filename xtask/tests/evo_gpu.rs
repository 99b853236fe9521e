//! GPU tests of `cargo xtask evo`: a search over `tiled` does at least as well as its default
//! config, and planted faulting and hanging candidates are survived. Run on a GPU machine with
//! `--include-ignored`.

mod common;
use common::xtask;

use std::path::Path;
use std::process::Command;

use attn_evidence::CandidateStatus;

fn evo(args: &[&str], evidence: &Path) -> String {
    let out = Command::new(xtask())
        .arg("evo")
        .args(args)
        .args(["--run", "t", "--evidence"])
        .arg(evidence)
        .output()
        .expect("xtask runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "{text}");
    text
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_search_over_tiled_beats_its_default_config() {
    let dir = tempfile::tempdir().unwrap();
    evo(
        &[
            "--impl",
            "tiled",
            "--baseline",
            "tiled",
            "--shape",
            "2,8,1024,64",
            "--population",
            "6",
            "--generations",
            "4",
            "--budget",
            "16",
            "--samples",
            "40",
            "--seed",
            "1",
        ],
        dir.path(),
    );
    let rows = attn_evidence::read_evo_log(&dir.path().join("evo/t/log.csv")).unwrap();
    assert!(rows.len() >= 10, "{rows:?}");
    let best: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("evo/t/best.json")).unwrap())
            .unwrap();
    // The baseline is tiled's default config, itself candidate 0: the best is at least as fast.
    let speedup = best["speedup"].as_f64().unwrap();
    assert!(
        speedup >= 1.0,
        "best speedup {speedup} over the default config: {best}"
    );
    assert!(best["reproduce"]
        .as_str()
        .unwrap()
        .starts_with("cargo xtask gate --impl tiled --config"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn planted_faulting_and_hanging_candidates_are_survived() {
    let dir = tempfile::tempdir().unwrap();
    evo(
        &[
            "--src",
            "tests/bad_kernels/planted.cu",
            "--knob",
            "MODE=0,1,2",
            "--shape",
            "1,4,256,64",
            "--baseline",
            "naive",
            "--population",
            "3",
            "--generations",
            "1",
            "--budget",
            "3",
            "--timeout",
            "10",
        ],
        dir.path(),
    );
    let rows = attn_evidence::read_evo_log(&dir.path().join("evo/t/log.csv")).unwrap();
    let status = |mode: &str| {
        rows.iter()
            .find(|r| r.config["MODE"] == mode)
            .map(|r| r.status.clone())
    };
    assert_eq!(status("0"), Some(CandidateStatus::Ok), "{rows:?}");
    let illegal = CandidateStatus::invalid("illegal address");
    assert_eq!(status("1"), Some(illegal), "{rows:?}");
    let timeout = CandidateStatus::invalid("timeout after 10 s");
    assert_eq!(status("2"), Some(timeout), "{rows:?}");
}
