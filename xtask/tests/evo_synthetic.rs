//! CPU: `cargo xtask evo` end to end with synthetic workers (no GPU): crashed and hung candidates
//! are logged invalid and the search goes on; a search killed mid-way and resumed loses nothing and
//! ends where an uninterrupted one does; a search over several registered implementations (their
//! real knobs, constraints and defaults; synthetic times) chooses among them, and resumes too;
//! `--fitness composite` ranks the finalists from a recorded ncu profile (a stand-in `ncu` that
//! prints it). Also: the planted kernels compile (NVRTC; the micro kernels' compile test is
//! attn-measure's `tests/micro.rs`).

mod common;
use common::{output_text, xtask};

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use attn_evidence::{
    read_evo_log, CandidateStatus, EvoBest, EvoCandidate, EvoFinalists, SearchSpec,
};

/// `xtask evo` with `options`, a synthetic baseline, run `run` in `evidence`, `budget` candidates.
fn search(options: &[&str], evidence: &Path, run: &str, budget: usize) -> Vec<String> {
    let mut args: Vec<String> = [
        "evo",
        "--synthetic",
        "--baseline",
        "synthetic",
        "--run",
        run,
    ]
    .iter()
    .chain(options)
    .map(|s| s.to_string())
    .collect();
    args.extend(["--budget".into(), budget.to_string()]);
    args.extend(["--evidence".into(), evidence.display().to_string()]);
    args
}

/// A synthetic search's arguments: MODE=1 crashes like an illegal address, MODE=2 hangs.
fn evo_args(evidence: &Path, run: &str, budget: usize) -> Vec<String> {
    let options = [
        "--knob",
        "A=1,2,3,4",
        "--knob",
        "B=1,2,4,8",
        "--knob",
        "MODE=0,1,2",
        "--timeout",
        "1",
        "--population",
        "4",
        "--generations",
        "8",
        "--seed",
        "11",
    ];
    search(&options, evidence, run, budget)
}

fn run_to_end(args: &[String]) -> String {
    let out = Command::new(xtask())
        .args(args)
        .output()
        .expect("xtask runs");
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    text
}

fn configs(rows: &[EvoCandidate]) -> Vec<String> {
    rows.iter().map(|r| format!("{:?}", r.config)).collect()
}

#[test]
fn bad_candidates_are_logged_invalid_and_the_search_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let text = run_to_end(&evo_args(dir.path(), "r", 24));
    let rows = read_evo_log(&dir.path().join("evo/r/log.csv")).unwrap();
    assert_eq!(rows.len(), 24, "{text}");
    for row in &rows {
        let expected = match row.config.knobs["MODE"] {
            1 => CandidateStatus::invalid("illegal address"),
            2 => CandidateStatus::invalid("timeout after 1 s"),
            _ => CandidateStatus::Ok,
        };
        assert_eq!(row.score.is_some(), expected.is_ok());
        assert_eq!(row.status, expected, "{row:?}");
    }
    // Synthetic time falls with A + B: the best valid config is A=4, B=8, MODE=0 (speedup 1.6).
    let best = EvoBest::read(&dir.path().join("evo/r/best.json")).unwrap();
    assert_eq!(best.config["A"], 4, "{best:?}");
    assert_eq!(best.config["B"], 8, "{best:?}");
    assert_eq!(best.reproduce, "cargo xtask gate (synthetic search: nothing to gate) --shape 2,8,1024,64 --dtype fp16 --baseline synthetic");
    assert!(text.contains("confirm it:"), "{text}");
}

/// A synthetic search over four registered implementations (`cublas` has no knobs; `hybrid-qk`
/// is cuBLAS and a kernel of ours), with `--knob BLOCK_M=64,128` narrowing the three that have
/// it.
fn choice_args(evidence: &Path, run: &str, budget: usize) -> Vec<String> {
    let options = [
        "--impl",
        "hopper,cublas,mma,hybrid-qk",
        "--knob",
        "BLOCK_M=64,128",
        "--timeout",
        "5",
        "--population",
        "6",
        "--generations",
        "6",
        "--seed",
        "5",
    ];
    search(&options, evidence, run, budget)
}

#[test]
fn a_killed_search_resumes_without_losing_or_repeating_anything() {
    check_resume(evo_args, 20);
}

#[test]
fn a_killed_search_over_several_implementations_resumes_too() {
    check_resume(choice_args, 16);
}

/// Kills the search `args` describe mid-way, resumes it, and compares with an uninterrupted one.
fn check_resume(args: fn(&Path, &str, usize) -> Vec<String>, budget: usize) {
    let dir = tempfile::tempdir().unwrap();
    let whole = tempfile::tempdir().unwrap();
    run_to_end(&args(whole.path(), "w", budget));
    let expected = read_evo_log(&whole.path().join("evo/w/log.csv")).unwrap();

    // Slow candidates down, wait for a few rows, then kill the search (SIGKILL: no clean-up).
    let log = dir.path().join("evo/k/log.csv");
    let mut child = Command::new(xtask())
        .args(args(dir.path(), "k", budget))
        .env("ATTN_EVO_SYNTHETIC_DELAY_MS", "150")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while read_evo_log(&log).map_or(0, |r| r.len()) < 5 {
        assert!(started.elapsed() < Duration::from_secs(60), "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = read_evo_log(&log).unwrap();
    assert!(
        before.len() >= 5 && before.len() < budget,
        "{}",
        before.len()
    );

    let mut resume = args(dir.path(), "k", budget);
    resume.extend([
        "--resume".into(),
        dir.path().join("evo/k").display().to_string(),
    ]);
    let text = run_to_end(&resume);
    assert!(
        text.contains(&format!("{} candidates already measured", before.len())),
        "{text}"
    );
    let after = read_evo_log(&log).unwrap();
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "rows measured before the kill are kept"
    );
    assert_eq!(after.len(), budget);
    let mut got = configs(&after);
    let mut want = configs(&expected);
    got.sort();
    want.sort();
    assert_eq!(
        got, want,
        "the resumed search measured what the uninterrupted one did"
    );
}

#[test]
fn a_search_over_several_implementations_chooses_among_them() {
    let dir = tempfile::tempdir().unwrap();
    let text = run_to_end(&choice_args(dir.path(), "c", 24));
    let run = dir.path().join("evo/c");
    let spec = SearchSpec::read(&run.join("search.json")).unwrap();
    let names: Vec<&str> = spec
        .implementations
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(names, ["hopper", "cublas", "mma", "hybrid-qk"]);
    assert_eq!(spec.target, "hopper,cublas,mma,hybrid-qk");
    assert!(spec.implementations[1].knobs.is_empty());
    for i in [0, 2, 3] {
        let narrowed = &spec.implementations[i];
        assert_eq!(narrowed.knobs["BLOCK_M"], [64, 128], "{narrowed:?}");
    }
    let rows = read_evo_log(&run.join("log.csv")).unwrap();
    assert_eq!(rows.len(), 24, "{text}");
    let header = std::fs::read_to_string(run.join("log.csv")).unwrap();
    assert!(header.starts_with("generation,impl,BLOCK_M,"), "{header}");
    // Generation 0 seeds each implementation's defaults, in order; cublas is measured once.
    let first: Vec<&str> = rows[..4]
        .iter()
        .map(|r| r.config.implementation.as_deref().unwrap())
        .collect();
    assert_eq!(first, names);
    let cublas: Vec<&EvoCandidate> = rows
        .iter()
        .filter(|r| r.config.implementation.as_deref() == Some("cublas"))
        .collect();
    assert_eq!(cublas.len(), 1);
    assert!(
        cublas[0].config.knobs.is_empty(),
        "no knobs: {:?}",
        cublas[0]
    );
    for row in &rows {
        assert_eq!(row.status, CandidateStatus::Ok, "{row:?}");
        let imp = &spec.implementations[names
            .iter()
            .position(|n| Some(*n) == row.config.implementation.as_deref())
            .unwrap()];
        let knobs: Vec<&String> = row.config.knobs.keys().collect();
        assert_eq!(
            knobs,
            imp.knobs.keys().collect::<Vec<_>>(),
            "exactly its knobs: {row:?}"
        );
        if let Some(m) = row.config.knobs.get("BLOCK_M") {
            assert!(*m == 64 || *m == 128, "{row:?}");
        }
    }
    // Synthetic time falls with the sum of the knobs: the best is the implementation and config
    // of the largest sum measured, whichever implementation that is (cublas, with no knob, never).
    let best = EvoBest::read(&run.join("best.json")).unwrap();
    let sum = |r: &EvoCandidate| r.config.knobs.values().sum::<i64>();
    let largest = rows.iter().max_by_key(|r| sum(r)).unwrap();
    assert_eq!(
        best.implementation, largest.config.implementation,
        "{best:?}"
    );
    assert_ne!(best.implementation.as_deref(), Some("cublas"));
    let fastest = rows
        .iter()
        .max_by(|a, b| a.speedup.unwrap().total_cmp(&b.speedup.unwrap()))
        .unwrap();
    assert_eq!(best.speedup, fastest.speedup);
    assert_eq!(sum(fastest), sum(largest));
    let config: Vec<String> = best
        .config
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let winner = best.implementation.as_deref().unwrap();
    let gate = format!(
        "cargo xtask gate --impl {winner} --config {} --shape",
        config.join(",")
    );
    assert!(best.reproduce.starts_with(&gate), "{}", best.reproduce);
    assert!(text.contains(&format!("best: {winner} BLOCK_M=")), "{text}");
}

/// The H100 profile of PyTorch's SDPA (a fill kernel and cuDNN's attention kernel), printed by a
/// stand-in for ncu whatever it is asked.
fn fake_ncu(dir: &Path) -> std::path::PathBuf {
    let csv = dir.join("profile.csv");
    std::fs::write(
        &csv,
        include_str!("../../crates/attn-ncu/tests/fixtures/h100_sdpa_cudnn_raw.csv"),
    )
    .unwrap();
    let ncu = dir.join("ncu");
    std::fs::write(&ncu, format!("#!/bin/sh\ncat '{}'\n", csv.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ncu, std::fs::Permissions::from_mode(0o755)).unwrap();
    ncu
}

#[test]
fn a_composite_search_ranks_its_finalists_and_records_every_term() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = choice_args(dir.path(), "f", 12);
    let ncu = fake_ncu(dir.path());
    args.extend(
        [
            "--fitness",
            "composite",
            "--finalists",
            "4",
            "--syncs-per-tile",
            "2",
        ]
        .map(String::from),
    );
    args.extend(["--ncu".to_string(), ncu.display().to_string()]);
    let text = run_to_end(&args);
    let run = dir.path().join("evo/f");
    let finalists = EvoFinalists::read(&run.join("finalists.json")).unwrap();
    assert_eq!(finalists.finalists.len(), 4, "{text}");
    for (i, f) in finalists.finalists.iter().enumerate() {
        assert_eq!(f.rank, i + 1);
        assert_eq!(f.status, CandidateStatus::Ok, "{f:?}");
        let score = f.fitness.unwrap();
        assert_eq!(score.inputs.syncs_per_tile, 2.0);
        assert_eq!(score.inputs.speedup, f.speedup.unwrap());
        assert!(score.inputs.tensor_pct > 0.0 && score.inputs.registers_per_thread == 168.0);
        assert_eq!(f.kernels.len(), 2, "the fill kernel and cuDNN's");
        assert!(f.kernels[0]
            .metrics
            .contains_key("launch__registers_per_thread"));
        assert!(!f.kernels[0]
            .metrics
            .contains_key("device__attribute_display_name"));
    }
    let best = EvoBest::read(&run.join("best.json")).unwrap();
    let fitness = best.fitness.as_ref().unwrap();
    assert_eq!(
        (fitness.method.as_str(), fitness.finalists, fitness.scored),
        ("composite", 4, 4)
    );
    let winner = &finalists.finalists[0];
    assert_eq!(fitness.winner, winner.fitness);
    assert_eq!(
        (&best.config, &best.implementation),
        (&winner.config, &winner.implementation)
    );
    assert!(text.contains("composite fitness = 1000·speedup"), "{text}");
    assert!(
        best.ncu.contains("4 finalists profiled with ncu, 4 scored"),
        "{}",
        best.ncu
    );
}

#[test]
fn planted_kernels_compile() {
    use attn_kernels::compile::{compile, Arch, CompileRequest};
    let planted = std::fs::read_to_string("tests/bad_kernels/planted.cu").unwrap();
    let cases = [
        (&planted, "tests/bad_kernels", vec!["MODE=0"]),
        (&planted, "tests/bad_kernels", vec!["MODE=1"]),
        (&planted, "tests/bad_kernels", vec!["MODE=2"]),
    ];
    for (source, dir, defines) in cases {
        let mut all = vec!["ATTN_DTYPE_F16".to_string(), "HEAD_DIM=64".to_string()];
        all.extend(defines.iter().map(|d| d.to_string()));
        let req = CompileRequest {
            name: "evo test kernel".into(),
            source,
            include_dir: Some(Path::new(dir)),
            defines: all,
            arch: Arch("compute_90".into()),
        };
        let ptx = compile(&req)
            .unwrap_or_else(|e| panic!("{defines:?}: {e}"))
            .ptx;
        assert!(ptx.contains(".entry attn_fwd"), "{defines:?}");
    }
}

#[test]
fn a_triton_kernels_knobs_are_searched_and_its_best_is_gated_through_triton() {
    let dir = tempfile::tempdir().unwrap();
    let starter =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/examples/starter_triton.py");
    let triton = format!("{}:attn_fwd", starter.display());
    let options = [
        "--triton",
        &triton,
        "--knob",
        "BLOCK_N=32,64",
        "--knob",
        "NUM_WARPS=4,8",
        "--population",
        "2",
        "--generations",
        "2",
        "--seed",
        "5",
    ];
    let text = run_to_end(&search(&options, dir.path(), "t", 4));
    let best: EvoBest =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("evo/t/best.json")).unwrap())
            .unwrap();
    assert_eq!(best.target, "triton:starter_triton.py", "{text}");
    assert!(
        best.reproduce.contains(&format!("--triton {triton}"))
            && best.reproduce.contains("--define BLOCK_N="),
        "{}",
        best.reproduce
    );
}

#[test]
fn a_decode_search_tunes_decode_knobs_and_gates_its_best_on_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let batch = "decode B=16 q=1 kv=8192 H=32/8 D=128 page=16 bf16";
    let options = [
        "--impl",
        "decode-hopper,decode",
        "--shape",
        batch,
        "--knob",
        "SPLITS=1,2,4",
        "--timeout",
        "5",
        "--population",
        "4",
        "--generations",
        "3",
        "--seed",
        "5",
    ];
    let text = run_to_end(&search(&options, dir.path(), "d", 10));
    let run = dir.path().join("evo/d");
    let spec = SearchSpec::read(&run.join("search.json")).unwrap();
    let decode: attn_evidence::DecodeSpec = batch.parse().unwrap();
    assert_eq!(spec.decode.as_ref(), Some(&decode));
    assert_eq!(spec.shape, attn_evidence::decode_shape(&decode));
    // The decode registry's knobs, SPLITS narrowed.
    let hopper = &spec.implementations[0];
    let knobs: Vec<&str> = hopper.knobs.keys().map(String::as_str).collect();
    assert_eq!(
        knobs,
        ["BLOCK_N", "PAGE_AHEAD", "SPLITS", "STAGES"],
        "{hopper:?}"
    );
    assert_eq!(hopper.knobs["SPLITS"], [1, 2, 4]);
    assert!(spec.implementations[1].knobs.contains_key("ROW_WARPS"));
    let rows = read_evo_log(&run.join("log.csv")).unwrap();
    assert_eq!(rows.len(), 10, "{text}");
    assert!(
        rows.iter().all(|r| r.status == CandidateStatus::Ok),
        "{text}"
    );
    let best = EvoBest::read(&run.join("best.json")).unwrap();
    assert_eq!(best.decode.as_ref(), Some(&decode));
    let winner = best.implementation.as_deref().unwrap();
    assert!(
        best.reproduce
            .starts_with(&format!("cargo xtask gate --impl {winner} --config ")),
        "{}",
        best.reproduce
    );
    assert!(
        best.reproduce
            .ends_with(&format!("--shape \"{batch}\" --baseline synthetic")),
        "{}",
        best.reproduce
    );
    assert!(text.contains(&format!("on {batch} vs synthetic")), "{text}");

    // A prefill implementation on a decode batch, a decode one on a prefill shape, and --causal
    // with a decode batch are each refused in one line before anything runs.
    for (impl_, shape, causal, says) in [
        ("mma", batch, false, "not a decode implementation"),
        ("decode", "2,8,1024,64", false, "is a decode implementation"),
        ("decode", batch, true, "decode is always causal"),
    ] {
        let mut args = search(&["--impl", impl_, "--shape", shape], dir.path(), "x", 2);
        if causal {
            args.push("--causal".into());
        }
        let out = Command::new(xtask()).args(&args).output().unwrap();
        let text = output_text(&out);
        assert!(
            !out.status.success() && text.contains(says),
            "{impl_} {shape}: {text}"
        );
    }
}
