//! CPU: `cargo xtask evo` end to end with synthetic workers (no GPU): crashed and hung candidates
//! are logged invalid and the search goes on; a search killed mid-way and resumed loses nothing and
//! ends where an uninterrupted one does. Also: the planted kernels compile (NVRTC; the micro
//! kernels' compile test is attn-measure's `tests/micro.rs`).

mod common;
use common::xtask;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use attn_evidence::{read_evo_log, CandidateStatus, EvoBest, EvoCandidate};

/// A synthetic search's arguments: MODE=1 crashes like an illegal address, MODE=2 hangs.
fn evo_args(evidence: &Path, run: &str, budget: usize) -> Vec<String> {
    [
        "evo",
        "--synthetic",
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
        "--baseline",
        "synthetic",
        "--run",
        run,
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        "--budget".into(),
        budget.to_string(),
        "--evidence".into(),
        evidence.display().to_string(),
    ])
    .collect()
}

fn run_to_end(args: &[String]) -> String {
    let out = Command::new(xtask())
        .args(args)
        .output()
        .expect("xtask runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
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
        let expected = match row.config["MODE"].as_str() {
            "1" => CandidateStatus::invalid("illegal address"),
            "2" => CandidateStatus::invalid("timeout after 1 s"),
            _ => CandidateStatus::Ok,
        };
        assert_eq!(row.score.is_some(), expected.is_ok());
        assert_eq!(row.status, expected, "{row:?}");
    }
    // Synthetic time falls with A + B: the best valid config is A=4, B=8, MODE=0 (speedup 1.6).
    let best = EvoBest::read(&dir.path().join("evo/r/best.json")).unwrap();
    assert_eq!(best.config["A"], "4", "{best:?}");
    assert_eq!(best.config["B"], "8", "{best:?}");
    assert_eq!(best.reproduce, "cargo xtask gate (synthetic search: nothing to gate) --shape 2,8,1024,64 --dtype fp16 --baseline synthetic");
    assert!(text.contains("confirm it:"), "{text}");
}

#[test]
fn a_killed_search_resumes_without_losing_or_repeating_anything() {
    let dir = tempfile::tempdir().unwrap();
    let budget = 20;
    let whole = tempfile::tempdir().unwrap();
    run_to_end(&evo_args(whole.path(), "w", budget));
    let expected = read_evo_log(&whole.path().join("evo/w/log.csv")).unwrap();

    // Slow candidates down, wait for a few rows, then kill the search (SIGKILL: no clean-up).
    let log = dir.path().join("evo/k/log.csv");
    let mut child = Command::new(xtask())
        .args(evo_args(dir.path(), "k", budget))
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

    let mut resume = evo_args(dir.path(), "k", budget);
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
