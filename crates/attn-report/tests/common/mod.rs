//! Helpers shared by the report's integration tests.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use attn_evidence::{read, Evidence, GateRun};
use attn_report::{Report, ReportOptions};

pub fn fixtures() -> PathBuf {
    Path::new(".").join("tests/fixtures/evidence")
}

pub fn build(dir: &Path, ceiling: Option<f64>) -> Report {
    Report::build(
        dir,
        &ReportOptions {
            matmul_tflops: ceiling,
            gate_charts: true,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

pub fn latest_gate() -> GateRun {
    let path = fixtures().join("gate/2025-11-22T14-19-00Z-nvidia-h100-80gb-hbm3-bbbbbbb.json");
    match read(&path).unwrap() {
        Evidence::Gate(gate) => gate,
        Evidence::Bench(_) => panic!("fixture is not a gate run"),
    }
}

/// The text of an SVG's `<text>` elements, joined by spaces (legend lines wrap).
pub fn svg_text(svg: &str) -> String {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn copy_dir(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            fs::create_dir_all(&target).unwrap();
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}
