//! The decode section from made-up evidence (a fixture bench run's entry, edited into decode
//! batches): newest entry per implementation, knobs and batch, each against its own run's copy
//! bandwidth; experiments in the tables only; absent without decode entries.

mod common;

use std::fs;
use std::path::Path;

use attn_evidence::{
    decode_shape, read, BenchEntry, BenchRun, DecodeRecord, DecodeSpec, Evidence, TimingMode,
};
use common::{build, copy_dir, fixtures, svg_text};

const BATCH: &str = "decode B=16 q=1 kv=8192 H=32/8 D=128 page=16 bf16";
const RAGGED: &str = "decode q=1,4 kv=1000,3000 H=32/8 D=128 page=16 bf16";
const CHART: &str = "charts/decode-bandwidth-nvidia-h100-80gb-hbm3-graph.svg";

fn fixture_bench() -> BenchRun {
    let path = fixtures().join("bench/2025-11-21T10-30-00Z-nvidia-h100-80gb-hbm3-ccccccc.json");
    let Evidence::Bench(bench) = read(&path).unwrap() else {
        panic!("fixture is not a bench run")
    };
    bench
}

/// A decode entry of `name` (`sdpa:default` for SDPA) on `batch` at `median_us`, in a run whose
/// copy measured `copy_gbs`.
fn entry(template: &BenchEntry, name: &str, batch: &str, median_us: f64, copy: f64) -> BenchEntry {
    let spec: DecodeSpec = batch.parse().unwrap();
    let mut entry = template.clone();
    let (name, backend) = match name.split_once(':') {
        Some((name, backend)) => (name, Some(backend.to_string())),
        None => (name, None),
    };
    entry.implementation.name = name.into();
    entry.implementation.backend = backend;
    entry.shape = decode_shape(&spec);
    entry.timing.mode = TimingMode::Graph;
    entry.summary.median = median_us;
    entry.dense_at_mean = None;
    entry.decode = Some(DecodeRecord {
        copy_gbs: Some(copy),
        ..DecodeRecord::new(&spec)
    });
    entry
}

/// Writes a bench run of `entries` dated `date` (`2025-11-23T08-00-00Z`), its command with `args`.
fn write_run(dir: &Path, template: &BenchRun, date: &str, args: &[&str], entries: Vec<BenchEntry>) {
    let mut run = template.clone();
    run.suite = None;
    run.provenance.date = format!("{}:{}:{}", &date[..13], &date[14..16], &date[17..]);
    run.provenance.command = ["xtask", "bench"]
        .iter()
        .chain(args)
        .map(|a| a.to_string())
        .collect();
    run.entries = entries;
    let path = dir.join(format!("bench/{date}-nvidia-h100-80gb-hbm3-ddddddd.json"));
    attn_evidence::write_json_atomic(&path, &run).unwrap();
}

fn decode_evidence(dir: &Path) {
    copy_dir(&fixtures(), dir);
    let bench = fixture_bench();
    let t = &bench.entries[0];
    // Older run: decode and SDPA on both batches, copy at 4000 GB/s.
    write_run(
        dir,
        &bench,
        "2025-11-23T08-00-00Z",
        &[],
        vec![
            entry(t, "decode", BATCH, 400.0, 4000.0),
            entry(t, "sdpa:default", BATCH, 150.0, 4000.0),
            entry(t, "decode", RAGGED, 20.0, 4000.0),
        ],
    );
    // Newer run of decode alone as tuned: its B=16 entry replaces the older one.
    write_run(
        dir,
        &bench,
        "2025-11-23T09-00-00Z",
        &[],
        vec![entry(t, "decode", BATCH, 200.0, 3000.0)],
    );
    // Newest: an experiment with overridden knobs, its own row and not the tuned one's.
    write_run(
        dir,
        &bench,
        "2025-11-23T10-00-00Z",
        &["--config", "SPLITS=2"],
        vec![entry(t, "decode", BATCH, 100.0, 3500.0)],
    );
}

/// The markdown table rows after the `` `batch` `` line.
fn batch_rows(markdown: &str, batch: &str) -> Vec<String> {
    markdown
        .split(&format!("`{batch}`\n"))
        .nth(1)
        .expect("batch table")
        .lines()
        .skip(3)
        .take_while(|l| l.starts_with('|'))
        .map(str::to_string)
        .collect()
}

#[test]
fn each_row_is_the_newest_entry_against_its_own_runs_copy() {
    let dir = tempfile::tempdir().unwrap();
    decode_evidence(dir.path());
    let report = build(dir.path(), None);
    let markdown = &report.files()["report.md"];
    assert!(markdown.contains("\n## Decode\n"), "no decode section");
    assert!(markdown.contains("### NVIDIA H100 80GB HBM3, graph timing\n\n![Decode bandwidth"));
    let bytes = DecodeRecord::new(&BATCH.parse().unwrap()).bytes as f64;
    let gbs = |us: f64| bytes / (us * 1e-6) / 1e9;
    let rows = batch_rows(markdown, BATCH);
    assert_eq!(rows.len(), 3, "{rows:?}");
    // Tuned decode from the newer run, divided by that run's copy (3000), not the older one's.
    let tuned = format!(
        "| decode | 200 | {:.0} | {:.1}% | 3000 | graph | `bench/2025-11-23T09-00-00Z-nvidia-h100-80gb-hbm3-ddddddd.json` |",
        gbs(200.0),
        100.0 * gbs(200.0) / 3000.0
    );
    assert_eq!(rows[0], tuned);
    assert!(
        rows[1].starts_with("| decode [SPLITS=2] | 100 |"),
        "{rows:?}"
    );
    assert!(rows[1].contains("| 3500 | graph |"), "{rows:?}");
    assert!(rows[2].starts_with("| sdpa:default | 150 |"), "{rows:?}");
    assert!(rows[2].contains("2025-11-23T08-00-00Z"), "{rows:?}");
    // The caption names the files behind each series.
    assert!(
        markdown.contains(
            "From decode: 1 batch(es) from `bench/2025-11-23T08-00-00Z-nvidia-h100-80gb-hbm3-ddddddd.json`, \
             1 batch(es) from `bench/2025-11-23T09-00-00Z-nvidia-h100-80gb-hbm3-ddddddd.json`; \
             sdpa:default: 1 batch(es) from `bench/2025-11-23T08-00-00Z"
        ),
        "{markdown}"
    );
    // Decode batches are not prefill shapes: no TFLOP/s rows for them elsewhere.
    let shape = decode_shape(&BATCH.parse().unwrap()).to_string();
    assert!(
        !markdown.contains(&shape),
        "decode batch shown as a prefill shape"
    );
    assert!(report.files()["index.html"].contains("decode [SPLITS=2]"));
}

#[test]
fn the_chart_draws_the_tuned_implementations_and_each_runs_copy() {
    let dir = tempfile::tempdir().unwrap();
    decode_evidence(dir.path());
    let report = build(dir.path(), None);
    let svg = &report.files()[CHART];
    let text = svg_text(svg);
    assert!(text.contains("bandwidth (GB/s)"), "{text}");
    assert!(text.contains("new tokens per sequence"), "{text}");
    assert!(
        text.contains("decode") && text.contains("sdpa:default"),
        "{text}"
    );
    assert!(
        !text.contains("SPLITS"),
        "an experiment in the chart: {text}"
    );
    // The two runs behind the tuned points, each its own copy line; not the experiment's 3500.
    assert!(
        text.contains("device-to-device copy, same run: 4000 GB/s"),
        "{text}"
    );
    assert!(
        text.contains("device-to-device copy, same run: 3000 GB/s"),
        "{text}"
    );
    assert!(!text.contains("3500 GB/s"), "{text}");
    // The ragged batch (1 and 4 new tokens) sits at its mean, between the whole ticks.
    let doc = roxmltree::Document::parse(svg).unwrap();
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    assert!(!text.contains("2.50"), "a ragged mean got a tick: {text}");
}

#[test]
fn no_decode_entries_no_section_and_no_chart() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixtures(), dir.path());
    let report = build(dir.path(), None);
    assert!(!report.files()["report.md"].contains("## Decode"));
    assert!(!report.files()["index.html"].contains("Decode bandwidth"));
    assert!(
        !report
            .files()
            .keys()
            .any(|f| f.contains("decode-bandwidth")),
        "{:?}",
        report.files().keys()
    );
    // A directory of decode runs only still renders, the section its one table.
    let only = tempfile::tempdir().unwrap();
    fs::create_dir_all(only.path().join("bench")).unwrap();
    let bench = fixture_bench();
    write_run(
        only.path(),
        &bench,
        "2025-11-23T08-00-00Z",
        &[],
        vec![entry(&bench.entries[0], "decode", BATCH, 400.0, 4000.0)],
    );
    let report = build(only.path(), None);
    assert!(report.files()["report.md"].contains("## Decode"));
    assert!(!report.files()["report.md"].contains("## Latest benchmark"));
    assert!(report.files().contains_key(CHART));
}
