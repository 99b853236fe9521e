//! A backward gate against PyTorch SDPA's backward: its baseline label is the forward's
//! (`sdpa:cudnn`), so the report says "(backward)" wherever it names the pair, and its times join
//! no forward series.

mod common;

use attn_evidence::{BackwardRecord, Implementation};
use common::{build, copy_dir, fixtures, latest_gate};

#[test]
fn a_backward_gate_against_sdpa_is_named_backward_and_kept_apart() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixtures(), dir.path());
    let mut gate = latest_gate();
    gate.candidate = Implementation::named("backward-mma");
    let mut sdpa = Implementation::named("sdpa");
    sdpa.backend = Some("cudnn".into());
    gate.baseline = sdpa;
    gate.provenance.date = "2025-11-23T10:00:00Z".into();
    for case in &mut gate.cases {
        case.backward = Some(BackwardRecord::new(&case.shape, false, true));
    }
    let path = dir
        .path()
        .join("gate/2025-11-23T10-00-00Z-nvidia-h100-80gb-hbm3-ccccccc.json");
    attn_evidence::write_json_atomic(&path, &gate).unwrap();

    let markdown = attn_report::gate::markdown(&gate);
    assert!(
        markdown.contains("`backward-mma` vs `sdpa:cudnn` (backward)"),
        "{markdown}"
    );
    let report = build(dir.path(), None);
    let text = &report.files()["report.md"];
    assert!(
        text.contains("backward-mma vs sdpa:cudnn (backward)"),
        "the gate section's title"
    );
    assert!(
        !text.contains("backward-mma vs sdpa:cudnn,") && !text.contains("`sdpa:cudnn`,"),
        "a backward pair named without its pass"
    );
    // The forward gate of the fixtures still reads as it did.
    let forward = latest_gate();
    assert!(!attn_report::gate::markdown(&forward).contains("(backward)"));
}
