//! Replay: every committed gate evidence file reproduces its stored verdicts, and a file whose
//! candidate samples were edited to be 20× faster is rejected as implausible. Paths are relative
//! to this crate's folder, where test runners start (the bundle's script enters it too).

use std::path::Path;

use attn_evidence::{CaseStatus, Evidence};
use attn_measure::replay::replay;

fn gate_files() -> Vec<std::path::PathBuf> {
    let dir = Path::new("../../evidence/gate");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e} (run from crates/attn-measure)", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

fn read(path: &Path) -> attn_evidence::GateRun {
    match attn_evidence::read(path).unwrap() {
        Evidence::Gate(run) => run,
        _ => panic!("{} is not gate evidence", path.display()),
    }
}

#[test]
fn every_committed_gate_file_replays_to_its_stored_verdict() {
    let files = gate_files();
    assert!(!files.is_empty(), "no committed gate evidence");
    for path in files {
        let stored = read(&path);
        let replayed = replay(&stored).unwrap();
        for (a, b) in replayed.run.cases.iter().zip(&stored.cases) {
            assert_eq!(
                a.passed,
                b.passed,
                "{}: {} ({})",
                path.display(),
                a.shape,
                a.reason
            );
        }
        assert_eq!(replayed.run.passed, stored.passed, "{}", path.display());
    }
}

#[test]
fn samples_edited_to_be_twenty_times_faster_are_implausible() {
    let path = gate_files()
        .into_iter()
        .find(|p| read(p).cases.iter().any(|c| c.candidate.is_some()))
        .expect("a timed gate file");
    let mut edited = read(&path);
    for case in &mut edited.cases {
        if let Some(t) = &mut case.candidate {
            for s in &mut t.samples {
                *s /= 20.0;
            }
        }
    }
    let replayed = replay(&edited).unwrap();
    assert!(!replayed.same, "an edited file must not replay as stored");
    assert!(!replayed.run.passed);
    let timed = replayed.run.cases.iter().filter(|c| c.candidate.is_some());
    for case in timed {
        assert_eq!(
            case.status,
            Some(CaseStatus::Implausible),
            "{}",
            case.reason
        );
        assert!(case.reason.contains("implausible"), "{}", case.reason);
    }
}

#[test]
fn a_ratchet_file_replays_under_its_no_regression_rule() {
    use attn_evidence::{GateMode, GateRule};
    let path = Path::new("tests/fixtures/ratchet-gate.json");
    let stored = read(path);
    assert_eq!(stored.rule.mode, GateMode::NoRegression { tolerance: 0.02 });
    assert_eq!(stored.baseline.label(), "hopper@a1f0eac");
    let replayed = replay(&stored).unwrap();
    assert!(replayed.same, "the ratchet fixture must replay as stored");
    let statuses: Vec<_> = replayed.run.cases.iter().map(|c| c.status).collect();
    assert_eq!(
        statuses,
        [
            Some(CaseStatus::Regression),
            Some(CaseStatus::Passed),
            Some(CaseStatus::Passed),
            Some(CaseStatus::Passed)
        ]
    );
    assert!(!replayed.run.passed);
    // The same samples under the usual rule: the level case is not faster, and the file's
    // stored decisions no longer replay.
    let mut faster = stored.clone();
    faster.rule = GateRule {
        mode: GateMode::Faster,
        ..stored.rule.clone()
    };
    let usual = replay(&faster).unwrap();
    assert!(!usual.same);
    assert_eq!(usual.run.cases[1].status, Some(CaseStatus::NotFaster));
    assert_eq!(usual.run.cases[0].status, Some(CaseStatus::NotFaster));
}

#[test]
fn every_committed_h100_result_is_above_the_memory_floor() {
    // The floor rejects nothing honest: every timed median ever committed on an H100 (fused
    // kernels, library plans and SDPA alike) sits above the bytes it must move at the H100's
    // peak bandwidth, as the gate computes it now.
    let peak = attn_measure::provenance::memory_peak_of(
        "NVIDIA H100 80GB HBM3",
        2_619_000,
        5120,
        50 << 20,
    )
    .expect("the H100's peak");
    let mut checked = 0;
    for path in gate_files() {
        let run = read(&path);
        if !run.provenance.gpu.contains("H100") {
            continue;
        }
        for case in &run.cases {
            let problem = attn_measure::Problem::new(case.shape.clone()).unwrap();
            let floor = attn_measure::gate::memory_floor_for(&problem, &peak);
            for (side, timing) in [("candidate", &case.candidate), ("baseline", &case.baseline)] {
                let Some(timing) = timing else { continue };
                let mut samples = timing.samples.clone();
                samples.sort_by(f64::total_cmp);
                let fastest = samples[0];
                assert!(
                    fastest > 1.2 * floor,
                    "{}: {} {side} sample {fastest} µs vs floor {floor:.2} µs",
                    path.display(),
                    case.shape
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 20, "{checked}");
}
