//! Renders the fixture evidence (tests/fixtures/evidence: invented numbers, not real evidence) and
//! checks what a reviewer would rely on: files parse, numbers match the evidence, output is
//! deterministic, `--check` notices staleness, and empty evidence is refused.

mod common;

use std::fs;
use std::path::Path;

use attn_report::format::{micros, speedup_ci};
use attn_report::{Report, ReportOptions, Staleness};
use common::{build, copy_dir, fixtures, latest_gate, svg_text};

#[test]
fn every_chart_is_well_formed_svg_with_labelled_axes() {
    let report = build(&fixtures(), Some(891.0));
    let charts: Vec<_> = report
        .files()
        .iter()
        .filter(|(name, _)| name.starts_with("charts/"))
        .collect();
    let names: Vec<&str> = charts.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "charts/bootstrap-mma-vs-sdpa-flash-h100-small-h100-flushed.svg",
            "charts/bootstrap-tiled-vs-sdpa-flash-h100-small-h100-flushed.svg",
            "charts/convergence-evo-run1.svg",
            "charts/convergence-micro-cp-async.svg",
            "charts/glance-seq-sweep-causal-nvidia-h100-80gb-hbm3-batch.svg",
            "charts/glance-seq-sweep-nvidia-h100-80gb-hbm3-batch.svg",
            "charts/progression-4-16-1024-64-causal.svg",
            "charts/roofline.svg",
            "charts/speedup-mma-vs-sdpa-flash-h100-small-h100-flushed.svg",
            "charts/speedup-tiled-vs-sdpa-flash-h100-small-h100-flushed.svg",
            "charts/throughput-nvidia-h100-80gb-hbm3-b-4-h-16-d-64-causal-fp16-batch.svg",
        ]
    );
    for (name, svg) in charts {
        let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg", "{name}");
        let texts: String = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .collect::<Vec<_>>()
            .join("\n");
        let unit = ["µs", "TFLOP/s", "speedup", "fitness"]
            .iter()
            .any(|u| texts.contains(u));
        assert!(unit, "{name}: no axis label with a unit in {texts}");
    }
}

const THROUGHPUT: &str =
    "charts/throughput-nvidia-h100-80gb-hbm3-b-4-h-16-d-64-causal-fp16-batch.svg";

#[test]
fn throughput_lines_are_the_matmul_rate_and_the_device_peak_never_an_attention_rate() {
    // The fixture's cublas entry (attention through cuBLAS, 1762 TFLOP/s on an odd shape) must not
    // become a ceiling: the matmul line is the measured 891 of the table, or the option.
    let text = svg_text(&build(&fixtures(), None).files()[THROUGHPUT]);
    assert!(
        text.contains(
            "dense fp16 matmul 891 TFLOP/s (cuBLAS 8192³, measured on the development H100)"
        ),
        "{text}"
    );
    assert!(
        text.contains("device peak 1071 TFLOP/s (132 SMs × 1980 MHz × 4096 FLOP/clock/SM, sm_90)"),
        "{text}"
    );
    assert!(
        !text.contains("1762") && !text.contains("ceiling"),
        "{text}"
    );
    let given = svg_text(&build(&fixtures(), Some(800.0)).files()[THROUGHPUT]);
    assert!(
        given.contains("dense fp16 matmul 800 TFLOP/s (given with --matmul-tflops)"),
        "{given}"
    );
    // A GPU the report does not know gets no physical line at all.
    let evidence = tempfile::tempdir().unwrap();
    copy_dir(&fixtures(), evidence.path());
    let bench = evidence
        .path()
        .join("bench/2025-11-21T10-30-00Z-nvidia-h100-80gb-hbm3-ccccccc.json");
    let renamed = fs::read_to_string(&bench)
        .unwrap()
        .replace("NVIDIA H100 80GB HBM3", "Some Future GPU");
    fs::write(&bench, renamed).unwrap();
    let report = build(evidence.path(), None);
    let unknown = report
        .files()
        .iter()
        .find(|(name, _)| name.contains("throughput-some-future-gpu"))
        .map(|(_, svg)| svg_text(svg))
        .expect("chart of the renamed GPU");
    assert!(!unknown.contains("TFLOP/s ("), "{unknown}");
}

#[test]
fn a_sweep_gives_one_curve_per_implementation_and_family() {
    let sweep = Path::new(".").join("tests/fixtures/sweep");
    let report = build(&sweep, None);
    let charts: Vec<&String> = report
        .files()
        .keys()
        .filter(|name| name.starts_with("charts/throughput-"))
        .collect();
    // 2,16,S,128 at five lengths and causal at three; the lone 8,16,2048,64 gets no chart.
    assert_eq!(
        charts,
        [
            "charts/throughput-nvidia-h100-80gb-hbm3-b-2-h-16-d-128-causal-fp16-graph.svg",
            "charts/throughput-nvidia-h100-80gb-hbm3-b-2-h-16-d-128-fp16-graph.svg",
        ]
    );
    let svg = &report.files()[charts[1].as_str()];
    let doc = roxmltree::Document::parse(svg).unwrap();
    // Ours are solid polylines through the five points (references are dashed: many short segments).
    let curves: Vec<usize> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .map(|n| {
            n.attribute("points")
                .unwrap_or("")
                .split_whitespace()
                .count()
        })
        .filter(|points| *points == 5)
        .collect();
    assert_eq!(
        curves.len(),
        3,
        "a solid curve each for tiled, mma, hopper: {curves:?}"
    );
    let text = svg_text(svg);
    for tick in ["1024", "2048", "4096", "8192", "16384"] {
        assert!(text.contains(tick), "x tick {tick} missing: {text}");
    }
    // The headline compares the fastest of ours with SDPA's backends and the FA3 anchor.
    let markdown = &report.files()["report.md"];
    assert!(
        markdown.contains("Fastest of ours: **hopper** on 9/9 shapes"),
        "{markdown}"
    );
    assert!(
        markdown.contains("over fa3 0.90×–0.99× (geometric mean 0.95×)"),
        "{markdown}"
    );
    assert!(
        !markdown.contains("No FlashAttention-3 anchor"),
        "{markdown}"
    );
    assert!(
        markdown.contains("| vs sdpa:default (its TFLOP/s) |"),
        "{markdown}"
    );
}

#[test]
fn no_axis_repeats_a_tick_label() {
    let sweep = Path::new(".").join("tests/fixtures/sweep");
    let evidence = Path::new(".").join("../../evidence");
    for dir in [fixtures(), sweep, evidence] {
        let report = build(&dir, None);
        for (name, svg) in report
            .files()
            .iter()
            .filter(|(n, _)| n.starts_with("charts/"))
        {
            for axis in tick_rows(svg) {
                let mut seen = axis.clone();
                seen.sort();
                seen.dedup();
                assert_eq!(
                    seen.len(),
                    axis.len(),
                    "{name}: repeated tick labels {axis:?}"
                );
            }
        }
    }
}

/// Tick labels of an SVG's axes: non-empty texts that share a baseline (x axis: same `y`) or a right
/// edge (y axis: same `x`, anchored at the end), in groups of three or more.
fn tick_rows(svg: &str) -> Vec<Vec<String>> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let mut rows: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for node in doc.descendants().filter(|n| n.has_tag_name("text")) {
        let text = node.text().unwrap_or("").trim().to_owned();
        if text.is_empty() {
            continue;
        }
        let (x, y) = (
            node.attribute("x").unwrap_or(""),
            node.attribute("y").unwrap_or(""),
        );
        match node.attribute("text-anchor") {
            Some("end") => rows.entry(format!("x={x}")).or_default().push(text),
            Some("middle") => rows.entry(format!("y={y}")).or_default().push(text),
            _ => {}
        }
    }
    rows.into_values().filter(|row| row.len() >= 3).collect()
}

#[test]
fn gate_tables_show_the_evidence_numbers() {
    let report = build(&fixtures(), None);
    let gate = latest_gate();
    for file in ["report.md", "pr-comment.md", "index.html"] {
        // `<wbr>` (where a long cell may wrap) is markup, not text.
        let text = &report.files()[file].replace("<wbr>", "");
        assert!(text.contains("FAIL"), "{file}: verdict missing");
        assert!(text.contains("1/3 shapes passed"), "{file}");
        for case in &gate.cases {
            let c = case.comparison.as_ref().unwrap();
            let row = [
                case.shape.to_string(),
                micros(c.baseline.median),
                micros(c.candidate.median),
                speedup_ci(c.speedup.point, c.speedup.lower, c.speedup.upper),
            ];
            let joined = if file == "index.html" {
                format!("<td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>", row[0], row[1], row[2], row[3])
            } else {
                format!("| {} | {} | {} | {} |", row[0], row[1], row[2], row[3])
            };
            assert!(text.contains(&joined), "{file}: no row {joined}");
        }
    }
    let comment = &report.files()["pr-comment.md"];
    assert!(
        comment.contains("Gate rule:")
            && comment.contains("candidate median ≤ 0.95 × baseline median")
    );
    assert!(
        comment.contains("| mma 4,16,1024,64 causal | ccccccc | 29.1 | 73.8 | 8.3% | 6.9% | 61.4% | 78.2% | 24.0% | 168 | latency/occupancy | few warps are active (24.0%)"),
        "ncu metrics missing:\n{comment}"
    );
    assert!(comment.contains("SM clock changed 1980 -> 1755 MHz"));
}

#[test]
fn html_is_one_page_that_links_its_charts() {
    let report = build(&fixtures(), None);
    let html = &report.files()["index.html"];
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    assert!(!html.contains("<script") && !html.contains("<link"));
    assert!(!html.contains("http://") && !html.contains("https://"));
    assert!(!html.contains("<svg"), "charts are linked, not inlined");
    let charts: Vec<&String> = report
        .files()
        .keys()
        .filter(|n| n.starts_with("charts/"))
        .collect();
    for chart in &charts {
        assert_eq!(
            html.matches(&format!("<img src=\"{chart}\"")).count(),
            1,
            "{chart} is shown once"
        );
    }
    assert_eq!(html.matches("<img ").count(), charts.len());
    assert_eq!(
        html.matches("<table>").count(),
        html.matches("</table>").count()
    );
    assert_eq!(
        html.matches("<details").count(),
        html.matches("</details>").count()
    );
    let markdown = &report.files()["report.md"];
    assert_eq!(
        markdown.matches("](charts/").count(),
        charts.len(),
        "every chart is linked from report.md"
    );
    // A table of contents links every section's anchor, in both outputs.
    for (text, id) in [
        ("At a glance", "at-a-glance"),
        ("Latest gate verdicts", "latest-gate-verdicts"),
        ("Evidence files", "evidence-files"),
    ] {
        assert!(
            html.contains(&format!("<a href=\"#{id}\">{text}</a>")),
            "{id}"
        );
        assert!(
            html.contains(&format!("<h2 id=\"{id}\">{text}</h2>")),
            "{id}"
        );
        assert!(markdown.contains(&format!("- [{text}](#{id})")), "{id}");
    }
    // The first picture comes before any gate verdict, and every verdict is folded.
    let first_chart = html.find("<img ").expect("a chart");
    let verdicts = html.find("id=\"latest-gate-verdicts\"").expect("verdicts");
    assert!(first_chart < verdicts);
    let folded = html[verdicts..]
        .matches("<details class=\"fold\">\n<summary>✅ PASS")
        .count()
        + html[verdicts..]
            .matches("<details class=\"fold\">\n<summary>❌ FAIL")
            .count();
    assert_eq!(
        folded,
        html[verdicts..].matches("<p class=\"verdict ").count()
    );
    assert!(folded >= 2, "{folded}");
    // Headings in the same order in both outputs.
    let md_headings: Vec<&str> = markdown
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .collect();
    let html_headings: Vec<&str> = html
        .lines()
        .filter_map(|l| {
            l.strip_prefix("<h2 id=\"")?
                .split_once("\">")?
                .1
                .strip_suffix("</h2>")
        })
        .collect();
    assert_eq!(md_headings, html_headings);
    assert_eq!(
        md_headings,
        [
            "At a glance",
            "Throughput vs sequence length",
            "Progression per shape",
            "Latest gate verdicts",
            "Implementations against SDPA's backends",
            "Latest benchmark",
            "Nsight Compute",
            "Configuration search",
            "Evidence files"
        ]
    );
}

#[test]
fn progression_reads_each_run_against_its_own_baseline_in_time_order() {
    let report = build(&fixtures(), None);
    let whole = &report.files()["report.md"];
    let markdown = &whole[whole
        .find("## Progression per shape")
        .expect("progression section")..];
    assert!(markdown.contains("<summary>Every run on 4,16,1024,64 causal</summary>"));
    let positions: Vec<usize> = ["| minimal |", "| tiled |", "| mma |"]
        .iter()
        .map(|needle| {
            markdown
                .find(needle)
                .unwrap_or_else(|| panic!("{needle} missing"))
        })
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "minimal, tiled, mma should appear oldest first"
    );
    // Each row names the baseline of its own run: the bench of 11-21 had sdpa:cudnn, the gates
    // sdpa:flash.
    assert!(
        markdown
            .contains("| 2025-11-21 10:30 | ccccccc | NVIDIA H100 80GB HBM3, batch timing | mma |"),
        "{markdown}"
    );
    let svg = svg_text(&report.files()["charts/progression-4-16-1024-64-causal.svg"]);
    for series in [
        "minimal vs sdpa:flash",
        "tiled vs sdpa:flash",
        "mma vs sdpa:cudnn",
        "mma vs sdpa:flash",
    ] {
        assert!(svg.contains(series), "{series} missing: {svg}");
    }
    // x labels carry the time and differ from each other.
    assert!(
        svg.contains("11-18 08:00 0000000") && svg.contains("11-22 14:19 bbbbbbb"),
        "{svg}"
    );
}

#[test]
fn output_is_deterministic_and_check_detects_staleness() {
    let out = tempfile::tempdir().unwrap();
    let first = build(&fixtures(), None);
    assert_eq!(first, build(&fixtures(), None), "same evidence, same bytes");
    assert_eq!(
        first.stale_files(out.path()).unwrap().len(),
        first.files().len(),
        "all missing before writing"
    );
    first.write(out.path()).unwrap();
    assert_eq!(first.stale_files(out.path()).unwrap(), []);

    fs::write(out.path().join("report.md"), "edited by hand").unwrap();
    fs::write(out.path().join("charts/old.svg"), "<svg/>").unwrap();
    assert_eq!(
        first.stale_files(out.path()).unwrap(),
        [
            Staleness::Differs("report.md".into()),
            Staleness::Extra("charts/old.svg".into())
        ]
    );
    first.write(out.path()).unwrap();
    assert_eq!(
        first.stale_files(out.path()).unwrap(),
        [],
        "write removes charts the evidence no longer produces"
    );

    // New evidence makes the committed report stale.
    let evidence = tempfile::tempdir().unwrap();
    copy_dir(&fixtures(), evidence.path());
    fs::remove_dir_all(evidence.path().join("micro")).unwrap();
    let changed = build(evidence.path(), None);
    let stale = changed.stale_files(out.path()).unwrap();
    assert!(
        stale.contains(&Staleness::Extra(
            "charts/convergence-micro-cp-async.svg".into()
        )),
        "{stale:?}"
    );
    assert!(
        stale.contains(&Staleness::Differs("index.html".into())),
        "{stale:?}"
    );
}

#[test]
fn empty_or_missing_evidence_is_refused_and_nothing_is_written() {
    let empty = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let report = build(&fixtures(), None);
    report.write(out.path()).unwrap();
    for dir in [empty.path().to_path_buf(), empty.path().join("missing")] {
        let err = Report::build(&dir, &ReportOptions::default()).unwrap_err();
        assert!(
            matches!(err, attn_report::ReportError::NoEvidence { .. }),
            "{err}"
        );
        let line = err.to_string();
        assert!(
            line.contains(&dir.display().to_string()) && !line.contains('\n'),
            "{line}"
        );
    }
    // The report written before is still whole.
    assert_eq!(report.stale_files(out.path()).unwrap(), []);
}

#[test]
fn a_broken_evidence_file_is_an_error_naming_it() {
    let evidence = tempfile::tempdir().unwrap();
    copy_dir(&fixtures(), evidence.path());
    fs::write(
        evidence.path().join("gate/broken.json"),
        r#"{"kind":"gate","schema":1}"#,
    )
    .unwrap();
    let err = Report::build(evidence.path(), &ReportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("broken.json"), "{err}");
}

#[test]
fn gate_runs_over_different_shapes_given_one_by_one_keep_their_own_charts() {
    // Two runs of the same candidate and baseline with no suite, over different shape lists: each
    // is the latest of its own, so each gets a section, and its chart files must not overwrite the
    // other's.
    let evidence = tempfile::tempdir().unwrap();
    copy_dir(&fixtures(), evidence.path());
    let source = fixtures().join("gate/2025-11-22T14-19-00Z-nvidia-h100-80gb-hbm3-bbbbbbb.json");
    let text = fs::read_to_string(source).unwrap();
    for (name, cases) in [("all-shapes.json", 3), ("first-shape.json", 1)] {
        let mut gate: serde_json::Value = serde_json::from_str(&text).unwrap();
        gate["suite"] = serde_json::Value::Null;
        gate["cases"].as_array_mut().unwrap().truncate(cases);
        fs::write(evidence.path().join("gate").join(name), gate.to_string()).unwrap();
    }
    let report = build(evidence.path(), None);
    let speedups: Vec<&String> = report
        .files()
        .keys()
        .filter(|name| name.starts_with("charts/speedup-mma-vs-sdpa-flash-"))
        .collect();
    assert_eq!(speedups.len(), 3, "{speedups:?}");
    let html = &report.files()["index.html"];
    assert_eq!(
        html.matches("<img src=\"charts/").count(),
        report
            .files()
            .keys()
            .filter(|name| name.starts_with("charts/"))
            .count(),
        "every chart shown in the page has its own file"
    );
}

#[test]
fn a_gate_run_with_overridden_knobs_is_named_by_them_and_never_stands_for_the_tuning() {
    let evidence = tempfile::tempdir().unwrap();
    copy_dir(&fixtures(), evidence.path());
    let tuned = "gate/2025-11-22T14-19-00Z-nvidia-h100-80gb-hbm3-bbbbbbb.json";
    let text = fs::read_to_string(fixtures().join(tuned)).unwrap();
    // A later run of the same suite with knobs set over the tuning, in each spelling of --config.
    for (command, knobs) in [
        (&["--config", "BLOCK_N=64"][..], "BLOCK_N=64"),
        (&["--config=BLOCK_N=64,STAGES=2"][..], "BLOCK_N=64,STAGES=2"),
    ] {
        let mut gate: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut argv = vec!["cargo", "xtask", "gate"];
        argv.extend(command);
        gate["provenance"]["command"] = serde_json::json!(argv);
        let later = evidence
            .path()
            .join("gate/2025-11-23T08-00-00Z-nvidia-h100-80gb-hbm3-ddddddd.json");
        fs::write(&later, gate.to_string()).unwrap();
        let md = build(evidence.path(), None).files()["report.md"].clone();
        let experiment = format!("mma [{knobs}] vs sdpa:flash");
        assert!(
            md.contains("flushed timing: mma vs sdpa:flash"),
            "{command:?}: the suite's headline must keep the tuned run"
        );
        assert!(
            !md.contains(&format!("flushed timing: {experiment}")),
            "{command:?}"
        );
        assert!(
            md.contains(&experiment),
            "{command:?}: the experiment keeps a verdict of its own, named by its knobs"
        );
    }
    // Where the suite has no run of the tuning, the experiment stands for it, named so.
    fs::remove_file(evidence.path().join(tuned)).unwrap();
    fs::remove_file(
        evidence
            .path()
            .join("gate/2025-11-20T09-00-00Z-nvidia-h100-80gb-hbm3-aaaaaaa.json"),
    )
    .unwrap();
    let md = build(evidence.path(), None).files()["report.md"].clone();
    assert!(
        md.contains("flushed timing: mma [BLOCK_N=64,STAGES=2] vs sdpa:flash"),
        "{md}"
    );
}

#[test]
fn a_pair_gated_in_two_modes_shows_both_each_heading_naming_its_mode() {
    let evidence = tempfile::tempdir().unwrap();
    copy_dir(&fixtures(), evidence.path());
    // The latest fixture run again, later, in graph mode, its first case with a defence record.
    let mut graph = latest_gate();
    graph.provenance.date = "2025-11-23T10:00:00Z".into();
    for case in &mut graph.cases {
        for timing in [case.candidate.as_mut(), case.baseline.as_mut()]
            .into_iter()
            .flatten()
        {
            timing.mode = attn_evidence::TimingMode::Graph;
        }
    }
    graph.cases[0].defences = vec![
        attn_evidence::Defence::ran(
            attn_evidence::DefenceName::TimedVerification,
            "400 timed samples",
            false,
        ),
        attn_evidence::Defence::not_run(attn_evidence::DefenceName::EdgeBattery, "not reached"),
    ];
    attn_evidence::write_json_atomic(
        &evidence
            .path()
            .join("gate/2025-11-23T10-00-00Z-nvidia-h100-80gb-hbm3-ddddddd.json"),
        &graph,
    )
    .unwrap();
    let report = build(evidence.path(), None);
    let markdown = &report.files()["report.md"];
    // Both runs of the pair keep their section, neither chosen silently, one after the other.
    let label = format!("{} median (µs, ", graph.baseline.label());
    let flushed = markdown
        .find(&format!("{label}flushed)"))
        .unwrap_or_else(|| panic!("no flushed table:\n{markdown}"));
    let graphed = markdown
        .find(&format!("{label}graph)"))
        .unwrap_or_else(|| panic!("no graph table:\n{markdown}"));
    assert!(markdown.contains("TFLOP/s (graph)") && markdown.contains("TFLOP/s (flushed)"));
    assert_ne!(flushed, graphed);
    for setup in ["H100 · flushed", "H100 · graph"] {
        let chart = format!(
            "Speedup of mma vs {} per shape ({setup})",
            graph.baseline.label()
        );
        let svg = report.files().iter().find(|(name, svg)| {
            name.starts_with("charts/speedup-") && svg_text(svg).contains(&chart)
        });
        assert!(svg.is_some(), "no chart titled {chart}");
    }
    // The defences column: a count in the cell, every defence in its tooltip; older cases "–".
    let html = &report.files()["index.html"];
    assert!(
        html.contains("title=\"timed-verification: passed: 400 timed samples\nedge-battery: not run: not reached\">1 of 2</td>"),
        "no defences cell"
    );
    assert!(markdown.contains("| defences |"), "{markdown}");
}
