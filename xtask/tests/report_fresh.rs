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
