//! CPU: the committed `reports/` is what `cargo xtask report` makes from the committed `evidence/`
//! (run `cargo xtask report` and commit after adding evidence).

mod common;
use common::{output_text, xtask};

#[test]
fn committed_report_matches_the_evidence() {
    let output = std::process::Command::new(xtask())
        .current_dir("..")
        .args(["report", "--check"])
        .output()
        .expect("xtask runs");
    let text = output_text(&output);
    assert!(
        output.status.success(),
        "reports/ is stale; run `cargo xtask report`:\n{text}"
    );
}

/// The committed report stays small enough to clone and review: the page links its charts, and
/// the per-gate charts are built only on request (`--gate-charts`).
const MAX_REPORT_BYTES: u64 = 3_100_000;

#[test]
fn committed_report_stays_under_its_size_bound() {
    fn size(path: &std::path::Path) -> u64 {
        match std::fs::read_dir(path) {
            Ok(entries) => entries
                .filter_map(|e| e.ok())
                .map(|e| size(&e.path()))
                .sum(),
            Err(_) => std::fs::metadata(path).map_or(0, |m| m.len()),
        }
    }
    let bytes = size(std::path::Path::new("../reports"));
    assert!(
        bytes < MAX_REPORT_BYTES,
        "reports/ holds {bytes} bytes, over {MAX_REPORT_BYTES}: fold or drop what nobody reads"
    );
}
