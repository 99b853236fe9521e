//! Replay: committed gate evidence reproduces its stored verdicts, and a file whose candidate
//! samples were edited to be 20× faster is rejected as implausible. Paths are relative to this
//! crate's folder, where test runners start (the bundle's script enters it too).
//!
//! Replaying a file re-decides every case, bootstraps included, which is slow: so that a run's
//! cost does not grow with the evidence, every run reads every committed file (cheap) but replays
//! a fixed selection, [`LANDMARKS`] and the [`NEWEST`] newest files; the whole evidence replays
//! with `--ignored` (minutes), which a change to the decision should run.

use std::path::{Path, PathBuf};

use attn_evidence::{CaseStatus, Evidence};
use attn_measure::replay::replay;

/// Committed gate files that, with the newest ones, hold every stored format (files without a
/// rule or statuses, comparisons with and without blocks, flags as plain text), case status
/// (passed, not faster, inconclusive, could not run, no regression), rule mode (faster, the
/// ratchet), baseline (SDPA's default, flash, cuDNN and varlen backends, FlashAttention-3, a
/// kernel), timing mode (graph, batch), clock guard outcome (complete or not, blocks dropped),
/// battery (run or carried over), GPU (H100, H200) and problem (dense, varlen, window; fp16,
/// bf16) found in the committed evidence when the list was made, each at the least replay cost.
const LANDMARKS: [&str; 8] = [
    "2026-11-22T15-26-27Z-nvidia-h100-80gb-hbm3-5c06395.json",
    "2026-11-22T16-51-22Z-nvidia-h100-80gb-hbm3-a2756d0.json",
    "2026-11-22T17-14-44Z-nvidia-h100-80gb-hbm3-a2756d0.json",
    "2026-11-22T22-49-39Z-nvidia-h100-80gb-hbm3-5651f00.json",
    "2026-11-27T09-46-00Z-nvidia-h100-80gb-hbm3-f37263c.json",
    "2026-11-27T10-57-33Z-nvidia-h200-d5a5e33.json",
    "2026-11-27T12-33-38Z-nvidia-h100-80gb-hbm3-755db5d.json",
    "2026-11-27T16-02-09Z-nvidia-h100-80gb-hbm3-54a2c8e.json",
];

/// The newest committed gate files (names sort by time) replayed in every run too.
const NEWEST: usize = 3;

fn gate_dir() -> &'static Path {
    Path::new("../../evidence/gate")
}

fn gate_files() -> Vec<PathBuf> {
    let dir = gate_dir();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e} (run from crates/attn-measure)", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

/// [`LANDMARKS`] and the [`NEWEST`] newest files, each once, in name order.
fn replayed_files() -> Vec<PathBuf> {
    let all = gate_files();
    let newest = all[all.len().saturating_sub(NEWEST)..].iter().cloned();
    let mut files: Vec<PathBuf> = LANDMARKS.iter().map(|n| gate_dir().join(n)).collect();
    files.extend(newest);
    files.sort();
    files.dedup();
    files
}

fn read(path: &Path) -> attn_evidence::GateRun {
    match attn_evidence::read(path).unwrap() {
        Evidence::Gate(run) => run,
        _ => panic!("{} is not gate evidence", path.display()),
    }
}

/// Replays `path` and asserts that every case and the run decide as stored.
fn replays_to_its_stored_verdict(path: &Path) {
    let stored = read(path);
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

#[test]
fn every_committed_gate_file_reads_as_gate_evidence() {
    let files = gate_files();
    assert!(!files.is_empty(), "no committed gate evidence");
    for path in files {
        read(&path);
    }
}

#[test]
fn the_landmark_and_newest_gate_files_replay_to_their_stored_verdicts() {
    let files = replayed_files();
    assert!(files.len() >= LANDMARKS.len(), "{files:?}");
    for path in files {
        assert!(path.exists(), "{}: a landmark is gone", path.display());
        replays_to_its_stored_verdict(&path);
    }
}

#[test]
#[ignore = "replays every committed gate file (minutes): run after changing the decision"]
fn every_committed_gate_file_replays_to_its_stored_verdict() {
    let files = gate_files();
    assert!(!files.is_empty(), "no committed gate evidence");
    for path in files {
        replays_to_its_stored_verdict(&path);
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
    // By name first (the GPU is slugged into it): the other GPUs' files are not read.
    let h100 = gate_files().into_iter().filter(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().contains("-h100-"))
    });
    for path in h100 {
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
