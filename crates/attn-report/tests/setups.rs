//! The report's two rules of comparison, on made-up evidence: a ratio, a table row or a curve only
//! ever combines numbers of one GPU model in one timing mode, and a throughput curve joins only
//! points of one problem (every dimension but the sequence length fixed).

use std::fs;
use std::path::Path;

use attn_evidence::{read, BenchEntry, BenchRun, Evidence, TimingMode};
use attn_report::{Report, ReportOptions};

const FIXTURE: &str =
    "tests/fixtures/evidence/bench/2025-11-21T10-30-00Z-nvidia-h100-80gb-hbm3-ccccccc.json";

fn fixture_bench() -> BenchRun {
    match read(Path::new(FIXTURE)).unwrap() {
        Evidence::Bench(bench) => bench,
        Evidence::Gate(_) => panic!("fixture is not a bench run"),
    }
}

/// An entry of `implementation` (`sdpa:cudnn` for a backend) on `shape` at `tflops`.
fn entry(template: &BenchEntry, implementation: &str, shape: &str, tflops: f64) -> BenchEntry {
    let mut entry = template.clone();
    let (name, backend) = match implementation.split_once(':') {
        Some((name, backend)) => (name, Some(backend.to_string())),
        None => (implementation, None),
    };
    entry.implementation.name = name.into();
    entry.implementation.backend = backend;
    entry.shape = shape.parse().unwrap();
    entry.tflops = tflops;
    entry.summary.median = entry.shape.flops() / (tflops * 1e6);
    entry
}

fn write(dir: &Path, name: &str, bench: &BenchRun) {
    fs::create_dir_all(dir.join("bench")).unwrap();
    attn_evidence::write_json_atomic(&dir.join("bench").join(name), bench).unwrap();
}

fn build(dir: &Path) -> Report {
    Report::build(dir, &ReportOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// The markdown section under `## heading`, up to the next section.
fn section<'a>(markdown: &'a str, heading: &str) -> &'a str {
    let start = markdown
        .find(&format!("## {heading}\n"))
        .unwrap_or_else(|| panic!("no section {heading}"));
    let rest = &markdown[start + heading.len() + 4..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

#[test]
fn runs_on_two_gpus_never_meet_in_one_ratio() {
    let dir = tempfile::tempdir().unwrap();
    let template = fixture_bench().entries[0].clone();
    let shape = "2,16,4096,128";
    // Ours timed only on the H100, SDPA only on the H200: no ratio can be formed.
    let mut h100 = fixture_bench();
    h100.suite = Some("large".into());
    h100.entries = vec![entry(&template, "hopper", shape, 600.0)];
    write(
        dir.path(),
        "2025-11-21T10-30-00Z-nvidia-h100-80gb-hbm3-ccccccc.json",
        &h100,
    );
    let mut h200 = h100.clone();
    h200.provenance.gpu = "NVIDIA H200".into();
    h200.provenance.date = "2025-11-22T10:30:00Z".into();
    h200.entries = vec![
        entry(&template, "sdpa:default", shape, 500.0),
        entry(&template, "sdpa:flash", shape, 400.0),
        entry(&template, "fa3", shape, 550.0),
    ];
    write(
        dir.path(),
        "2025-11-22T10-30-00Z-nvidia-h200-ddddddd.json",
        &h200,
    );
    let report = build(dir.path());
    let markdown = &report.files()["report.md"];
    let matrix = section(markdown, "Implementations against SDPA's backends");
    // One table per GPU, each named, and no ratio of 600 over 500 or 400.
    assert!(
        matrix.contains("### NVIDIA H100 80GB HBM3, batch timing"),
        "{matrix}"
    );
    assert!(matrix.contains("### NVIDIA H200, batch timing"), "{matrix}");
    for ratio in ["1.20×", "1.50×", "1.09×"] {
        assert!(
            !matrix.contains(ratio),
            "a cross-GPU ratio {ratio}: {matrix}"
        );
    }
    // The suite's headline is drawn from one GPU: the latest run's, which has no kernel of ours.
    let glance = section(markdown, "At a glance");
    assert!(glance.contains("### large on NVIDIA H200"), "{glance}");
    assert!(!glance.contains("H100"), "{glance}");
    assert!(
        !glance.contains("1.09×") && !glance.contains("1.20×"),
        "{glance}"
    );
    // With ours on the H200 too, the ratio is the H200's own.
    h200.entries.push(entry(&template, "hopper", shape, 660.0));
    write(
        dir.path(),
        "2025-11-22T10-30-00Z-nvidia-h200-ddddddd.json",
        &h200,
    );
    let markdown = build(dir.path()).files()["report.md"].clone();
    let matrix = section(&markdown, "Implementations against SDPA's backends");
    let h200_table = &matrix[matrix.find("### NVIDIA H200").unwrap()..];
    assert!(h200_table.contains("| 1.32× | 1.65× |"), "{h200_table}");
    let h100_table =
        &matrix[matrix.find("### NVIDIA H100").unwrap()..matrix.find("### NVIDIA H200").unwrap()];
    assert!(!h100_table.contains('×'), "{h100_table}");
    let chart = build(dir.path())
        .files()
        .iter()
        .find(|(name, _)| name.starts_with("charts/glance-large-"))
        .map(|(name, svg)| (name.clone(), svg.clone()))
        .expect("a glance chart");
    assert!(chart.0.contains("nvidia-h200-batch"), "{}", chart.0);
    assert!(
        chart.1.contains("(H200, batch timing)"),
        "the chart's title names its GPU and mode"
    );
}

#[test]
fn a_throughput_curve_joins_one_problem_in_one_timing_mode() {
    let dir = tempfile::tempdir().unwrap();
    let template = fixture_bench().entries[0].clone();
    let mut bench = fixture_bench();
    bench.suite = Some("mixed".into());
    // Grouped-query at two lengths, multi-query at a third, dense and windowed at a fourth: only
    // the grouped-query pair is one problem at two lengths.
    bench.entries = vec![
        entry(&template, "hopper", "2,32/8,2048,128", 560.0),
        entry(&template, "hopper", "2,32/8,8192,128", 610.0),
        entry(&template, "hopper", "2,32/1,4096,128", 590.0),
        entry(&template, "hopper", "2,32,1024,128", 450.0),
        entry(&template, "hopper", "2,32,16384,128 window=256,0", 300.0),
    ];
    // The grouped-query pair again, timed in graph mode: a chart of its own.
    for i in 0..2 {
        let mut graph = bench.entries[i].clone();
        graph.timing.mode = TimingMode::Graph;
        graph.tflops += 5.0;
        bench.entries.push(graph);
    }
    write(
        dir.path(),
        "2025-11-21T10-30-00Z-nvidia-h100-80gb-hbm3-ccccccc.json",
        &bench,
    );
    let report = build(dir.path());
    let charts: Vec<&String> = report
        .files()
        .keys()
        .filter(|name| name.starts_with("charts/throughput-"))
        .collect();
    assert_eq!(
        charts,
        [
            "charts/throughput-nvidia-h100-80gb-hbm3-b-2-h-32-8-d-128-fp16-batch.svg",
            "charts/throughput-nvidia-h100-80gb-hbm3-b-2-h-32-8-d-128-fp16-graph.svg",
        ]
    );
    for (chart, mode) in [(charts[0], "batch"), (charts[1], "graph")] {
        let svg = &report.files()[chart.as_str()];
        let doc = roxmltree::Document::parse(svg).unwrap();
        // Each measured point is a dot; physical lines and the legend have none.
        let points = doc
            .descendants()
            .filter(|n| n.has_tag_name("circle"))
            .count();
        assert_eq!(points, 2, "{chart}: one curve of two points");
        let text: String = doc
            .descendants()
            .filter_map(|n| n.text())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            text.contains(&format!("B=2, H=32/8, D=128, fp16 (H100, {mode} timing)")),
            "{chart}: {text}"
        );
    }
    // The glance shows both modes of the suite, each chart naming its own.
    let glance: Vec<&String> = report
        .files()
        .keys()
        .filter(|name| name.starts_with("charts/glance-mixed-"))
        .collect();
    assert_eq!(glance.len(), 2, "{glance:?}");
}
