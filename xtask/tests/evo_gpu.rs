//! GPU tests of `cargo xtask evo`: a search over `tiled` does at least as well as its default
//! config, planted faulting and hanging candidates are survived, a search over `cublas`,
//! `hybrid-pv` and `mma` measures each, a decode search over `decode-hopper` and `decode` checks
//! every candidate through the block table and beats `decode-naive`, and a composite-fitness
//! search profiles its finalists with ncu. Run on a GPU
//! machine with `--include-ignored`.

mod common;
use common::{output_text, xtask};

use std::path::Path;
use std::process::Command;

use attn_evidence::{CandidateStatus, EvoBest, EvoFinalists};

fn evo(args: &[&str], evidence: &Path) -> String {
    let out = Command::new(xtask())
        .arg("evo")
        .args(args)
        .args(["--run", "t", "--evidence"])
        .arg(evidence)
        .output()
        .expect("xtask runs");
    let text = output_text(&out);
    println!("{text}");
    assert!(out.status.success(), "{text}");
    text
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_search_over_tiled_beats_its_default_config() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
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
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
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
            .find(|r| r.config.knobs["MODE"].to_string() == mode)
            .map(|r| r.status.clone())
    };
    assert_eq!(status("0"), Some(CandidateStatus::Ok), "{rows:?}");
    let illegal = CandidateStatus::invalid("illegal address");
    assert_eq!(status("1"), Some(illegal), "{rows:?}");
    let timeout = CandidateStatus::invalid("timeout after 10 s");
    assert_eq!(status("2"), Some(timeout), "{rows:?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_search_over_cublas_a_hybrid_and_mma_measures_each_and_gates_the_winner() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--impl",
        "cublas,hybrid-pv,mma",
        "--baseline",
        "mma",
        "--shape",
        "1,4,256,64",
        "--population",
        "4",
        "--generations",
        "2",
        "--budget",
        "6",
        "--samples",
        "20",
        "--seed",
        "2",
    ];
    evo(&args, dir.path());
    let rows = attn_evidence::read_evo_log(&dir.path().join("evo/t/log.csv")).unwrap();
    let measured = |name: &str| {
        rows.iter()
            .any(|r| r.config.implementation.as_deref() == Some(name) && r.status.is_ok())
    };
    let all = ["cublas", "hybrid-pv", "mma"];
    assert!(all.iter().all(|name| measured(name)), "{rows:?}");
    let best = EvoBest::read(&dir.path().join("evo/t/best.json")).unwrap();
    let name = best.implementation.clone().unwrap();
    let gate = format!("cargo xtask gate --impl {name}");
    assert!(best.reproduce.starts_with(&gate), "{best:?}");
}

#[test]
#[ignore = "needs a CUDA GPU (Hopper, sm_90, for decode-hopper)"]
fn a_decode_search_checks_each_candidate_and_beats_the_naive_decode() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let dir = tempfile::tempdir().unwrap();
    let batch = "decode B=8 q=4 kv=4096 H=32/8 D=128 page=16 bf16";
    let args = [
        "--impl",
        "decode-hopper,decode",
        "--knob",
        "SPLITS=0,2,4",
        "--baseline",
        "decode-naive",
        "--shape",
        batch,
        "--population",
        "4",
        "--generations",
        "2",
        "--budget",
        "6",
        "--samples",
        "20",
        "--timeout",
        "120",
        "--seed",
        "3",
    ];
    evo(&args, dir.path());
    let rows = attn_evidence::read_evo_log(&dir.path().join("evo/t/log.csv")).unwrap();
    assert_eq!(rows.len(), 6, "{rows:?}");
    // Every candidate passes its checks against the oracle and is timed.
    assert!(rows.iter().all(|r| r.status.is_ok()), "{rows:?}");
    let best = EvoBest::read(&dir.path().join("evo/t/best.json")).unwrap();
    // decode-naive reads the cache once per query head: the tuned kernels read it once per group.
    let speedup = best.speedup.unwrap();
    assert!(
        speedup > 1.5,
        "best speedup {speedup} over decode-naive: {best:?}"
    );
    let name = best.implementation.clone().unwrap();
    assert!(
        best.reproduce
            .starts_with(&format!("cargo xtask gate --impl {name} --config "))
            && best.reproduce.contains(&format!("--shape \"{batch}\"")),
        "{best:?}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_composite_search_profiles_its_finalists_with_ncu() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--impl",
        "mma",
        "--baseline",
        "mma",
        "--shape",
        "1,4,256,64",
        "--population",
        "3",
        "--generations",
        "1",
        "--budget",
        "3",
        "--samples",
        "20",
        "--seed",
        "4",
        "--fitness",
        "composite",
        "--finalists",
        "2",
    ];
    let text = evo(&args, dir.path());
    let finalists = EvoFinalists::read(&dir.path().join("evo/t/finalists.json")).unwrap();
    assert_eq!(finalists.finalists.len(), 2, "{text}");
    for f in &finalists.finalists {
        assert_eq!(f.status, CandidateStatus::Ok, "{f:?}");
        assert!(
            f.kernels.iter().all(|k| k.kernel.contains("attn_fwd")),
            "{f:?}"
        );
        let score = f.fitness.unwrap();
        let inputs = score.inputs;
        assert!(
            inputs.tensor_pct > 0.0 && inputs.sm_busy_pct > 0.0,
            "{inputs:?}"
        );
        assert!(inputs.registers_per_thread > 0.0, "{inputs:?}");
        assert_eq!(Some(inputs.speedup), f.speedup);
    }
    let best = EvoBest::read(&dir.path().join("evo/t/best.json")).unwrap();
    let fitness = best.fitness.unwrap();
    assert_eq!(fitness.winner, finalists.finalists[0].fitness);
    assert_eq!(best.config, finalists.finalists[0].config);
}
