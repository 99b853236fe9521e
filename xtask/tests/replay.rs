//! CPU: `cargo xtask gate --replay` recomputes every committed gate decision from its raw samples
//! and recorded seed, and reproduces it exactly (exit 0 for a passed run, 1 for a failed one).

mod common;
use common::xtask;

use std::path::PathBuf;
use std::process::Command;

#[test]
fn replay_reproduces_every_committed_gate_decision() {
    let dir = PathBuf::from("../evidence/gate");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("evidence/gate exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no gate evidence to replay");
    for file in files {
        let stored: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        let output = Command::new(xtask())
            .arg("gate")
            .arg("--replay")
            .arg(&file)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            text.contains("replay reproduces the stored decision exactly"),
            "{}:\n{text}",
            file.display()
        );
        let expected = if stored["passed"].as_bool().unwrap() {
            0
        } else {
            1
        };
        assert_eq!(output.status.code(), Some(expected), "{}", file.display());
    }
}

#[test]
fn replay_reproduces_a_ratchet_decision_with_its_regression() {
    let file = PathBuf::from("../crates/attn-measure/tests/fixtures/ratchet-gate.json");
    let output = Command::new(xtask())
        .args(["gate", "--replay"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("replay reproduces the stored decision exactly"),
        "{text}"
    );
    assert!(text.contains("`hopper` vs `hopper@a1f0eac`"), "{text}");
    assert!(text.contains("FAIL: regression"), "{text}");
    assert!(text.contains("does not regress"), "{text}");
    assert_eq!(output.status.code(), Some(1), "{text}");
}
