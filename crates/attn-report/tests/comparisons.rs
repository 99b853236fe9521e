//! The comparison tables from made-up evidence (the fixtures, edited): the implementations
//! matrix, hopper against FlashAttention-3 and cuDNN, and varlen batches against dense.

mod common;

use std::fs;
use std::path::Path;

use attn_evidence::{read, Evidence};
use attn_report::format::{speedup_ci, tflops};
use common::{build, fixtures, latest_gate};

#[test]
fn implementations_matrix_takes_the_latest_entry_of_every_pair() {
    let report = build(&fixtures(), None);
    let markdown = &report.files()["report.md"];
    let header = markdown
        .lines()
        .find(|l| l.starts_with("| shape | mma |"))
        .expect("implementations matrix missing");
    // Project kernels first (known order, then the rest), then the references.
    assert_eq!(
        header,
        "| shape | mma | minimal | cublas | sdpa:flash | sdpa:cudnn | sdpa:efficient | best ours / sdpa:default | best ours / sdpa:flash | best ours / fastest PyTorch |"
    );
    // 4,16,1024,64 causal appears in both fixture runs: sdpa:flash is the later 314.8, and the
    // best of ours is mma (293.4 beats minimal's 2.9 from the older run); PyTorch's fastest there
    // is cuDNN (328.0).
    let row = markdown
        .lines()
        .find(|l| l.starts_with("| 4,16,1024,64 causal | 293.4 |"))
        .expect("row for 4,16,1024,64 causal missing");
    assert!(
        row.contains("| 293.4 | 2.9 | – | 314.8 | 328.0 | 198.1 | – | 0.93× | 0.89× (cudnn) |"),
        "{row}"
    );
}

/// The "hopper against FlashAttention-3" rows of `dir`'s report (`None` without the table).
fn against_fa3_rows(dir: &Path) -> Option<Vec<String>> {
    let markdown = build(dir, None).files()["report.md"].clone();
    let table = markdown
        .split("## hopper against FlashAttention-3")
        .nth(1)?;
    Some(
        table
            .lines()
            .filter(|l| l.starts_with("| 4,") || l.starts_with("| 2,"))
            .map(str::to_string)
            .collect(),
    )
}

#[test]
fn hopper_against_fa3_comes_from_one_fair_run_a_gate_before_a_bench() {
    let dir = tempfile::tempdir().unwrap();
    let bench_path =
        fixtures().join("bench/2025-11-21T10-30-00Z-nvidia-h100-80gb-hbm3-ccccccc.json");
    let Evidence::Bench(mut bench) = read(&bench_path).unwrap() else {
        panic!("fixture is not a bench run")
    };
    let mut hopper = bench.entries[0].clone();
    hopper.implementation.name = "hopper".into();
    let mut fa3 = hopper.clone();
    fa3.implementation.name = "fa3".into();
    fa3.summary.median *= 1.25;
    bench.entries = vec![hopper, fa3];
    // FA3 timed by its device span, as from that date on.
    bench.provenance.date = "2026-12-03T00:00:00Z".into();
    let shape = bench.entries[0].shape.to_string();
    let write_bench = |bench: &attn_evidence::BenchRun| {
        fs::create_dir_all(dir.path().join("bench")).unwrap();
        let path = dir
            .path()
            .join("bench/2025-11-21T10-30-00Z-nvidia-h100-80gb-hbm3-ccccccc.json");
        attn_evidence::write_json_atomic(&path, bench).unwrap();
    };
    // Sets not recorded: the run may have timed FA3 on fewer resident sets than hopper.
    write_bench(&bench);
    assert_eq!(against_fa3_rows(dir.path()), None);
    // FA3 on fewer sets than hopper: still not shown.
    bench.entries[0].timing.input_sets = Some(50);
    bench.entries[1].timing.input_sets = Some(2);
    write_bench(&bench);
    assert_eq!(against_fa3_rows(dir.path()), None);
    // As many sets on both sides: the ratio of that one run.
    bench.entries[1].timing.input_sets = Some(50);
    write_bench(&bench);
    let rows = against_fa3_rows(dir.path()).expect("a fair bench run gives a row");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].starts_with(&format!("| {shape} |")), "{rows:?}");
    assert!(
        rows[0].contains("| 1.25× |") && rows[0].contains("| – | – | meets | bench "),
        "{rows:?}"
    );
    // A run from before FA3 was timed on the device is left out: its FA3 side is host-clocked.
    bench.provenance.date = "2026-12-02T17:12:42Z".into();
    write_bench(&bench);
    assert_eq!(against_fa3_rows(dir.path()), None);
    bench.provenance.date = "2026-12-03T00:00:00Z".into();
    // Entries that carry their SM clock show both.
    bench.entries[0].sm_mhz = Some(1612.4);
    bench.entries[1].sm_mhz = Some(1650.0);
    write_bench(&bench);
    let rows = against_fa3_rows(dir.path()).expect("rows");
    assert!(
        rows[0].contains("| 1612 / 1650 | – | meets | bench "),
        "{rows:?}"
    );
    // A gate run of hopper against fa3 on the same shape takes the row, whatever its date.
    let mut gate = latest_gate();
    gate.candidate.name = "hopper".into();
    gate.baseline.name = "fa3".into();
    gate.baseline.backend = None;
    gate.cases.truncate(1);
    // Older than the bench run, yet from after FA3 was timed on the device.
    gate.provenance.date = attn_report::sections::FA3_DEVICE_SPAN_SINCE.into();
    gate.cases[0].shape = bench.entries[0].shape.clone();
    // Timed as the bench run was (the fixture gate is flushed): rows of one setup share a table.
    let case = &mut gate.cases[0];
    for timing in [&mut case.candidate, &mut case.baseline] {
        timing.as_mut().expect("fixture case was timed").mode = bench.entries[0].timing.mode;
    }
    // Each side's clock is the mean of its kept blocks; a dropped block does not count.
    let block = |side, mhz, kept| attn_evidence::BlockClock {
        side,
        mhz: Some(mhz),
        source: "device".into(),
        kept,
        warmup: false,
        threshold_mhz: None,
    };
    gate.cases[0].clock_guard = Some(attn_evidence::ClockGuard {
        block_samples: 10,
        kept_blocks: [2, 1],
        dropped_blocks: [0, 1],
        threshold_mhz: Some(1485),
        min_kept_mhz: Some(1590),
        complete: true,
        rule: None,
        blocks: vec![
            block(1, 1650.0, true),
            block(0, 1600.0, true),
            block(1, 1200.0, false),
            block(0, 1590.0, true),
        ],
    });
    fs::create_dir_all(dir.path().join("gate")).unwrap();
    let gate_path = dir
        .path()
        .join("gate/2025-11-20T10-30-00Z-nvidia-h100-80gb-hbm3-bbbbbbb.json");
    attn_evidence::write_json_atomic(&gate_path, &gate).unwrap();
    let rows = against_fa3_rows(dir.path()).expect("rows");
    let c = gate.cases[0]
        .comparison
        .clone()
        .expect("fixture case has a comparison");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(
        rows[0].contains(&speedup_ci(
            c.speedup.point,
            c.speedup.lower,
            c.speedup.upper
        )) && rows[0].contains("| 1595 / 1650 | – |")
            && rows[0].contains("| gate "),
        "{rows:?}"
    );
    // With every kept block clocked over its span, the speed at equal clocks: FA3 ran at the
    // higher clock, so per cycle hopper is further ahead than its speedup.
    let guard = gate.cases[0].clock_guard.as_mut().unwrap();
    for b in &mut guard.blocks {
        b.source = attn_evidence::BlockClock::SPAN_SOURCE.into();
    }
    attn_evidence::write_json_atomic(&gate_path, &gate).unwrap();
    let rows = against_fa3_rows(dir.path()).expect("rows");
    assert!(
        rows[0].contains(&format!(
            "| 1595 / 1650 | {:.2}× |",
            c.speedup.point * 1650.0 / 1595.0
        )),
        "{rows:?}"
    );
    // One kept block read at its edges (an older probe) and the ratio is not shown.
    let guard = gate.cases[0].clock_guard.as_mut().unwrap();
    guard.blocks[1].source = "device".into();
    attn_evidence::write_json_atomic(&gate_path, &gate).unwrap();
    let rows = against_fa3_rows(dir.path()).expect("rows");
    assert!(rows[0].contains("| 1595 / 1650 | – |"), "{rows:?}");
    // No cuDNN in a gate run against FA3: it comes from a batch-mode gate run of hopper against
    // SDPA's default on the shape, with that run named; a graph-mode one is not comparable.
    let cudnn_cell = |row: &str| {
        row.split('|')
            .map(str::trim)
            .nth(4)
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(cudnn_cell(&rows[0]), "–", "{rows:?}");
    let mut cudnn = gate.clone();
    cudnn.baseline.name = "sdpa".into();
    cudnn.baseline.backend = Some("default".into());
    let mode = |gate: &mut attn_evidence::GateRun, mode| {
        let case = &mut gate.cases[0];
        for timing in [&mut case.candidate, &mut case.baseline] {
            timing.as_mut().expect("fixture case was timed").mode = mode;
        }
    };
    mode(&mut cudnn, attn_evidence::TimingMode::Graph);
    let cudnn_path = |name: &str| {
        dir.path()
            .join(format!("gate/{name}-nvidia-h100-80gb-hbm3-ddddddd.json"))
    };
    attn_evidence::write_json_atomic(&cudnn_path("2025-11-20T11-30-00Z"), &cudnn).unwrap();
    let rows = against_fa3_rows(dir.path()).expect("rows");
    assert!(
        cudnn_cell(&rows[0]) == "–" && !rows[0].contains("cuDNN: gate"),
        "{rows:?}"
    );
    mode(&mut cudnn, attn_evidence::TimingMode::Batch);
    // On another GPU model: not beside this GPU's FA3 row.
    let gpu = cudnn.provenance.gpu.clone();
    cudnn.provenance.gpu = "NVIDIA H200".into();
    attn_evidence::write_json_atomic(&cudnn_path("2025-11-20T12-30-00Z"), &cudnn).unwrap();
    let rows = against_fa3_rows(dir.path()).expect("rows");
    assert!(
        cudnn_cell(&rows[0]) == "–" && !rows[0].contains("cuDNN: gate"),
        "{rows:?}"
    );
    cudnn.provenance.gpu = gpu;
    attn_evidence::write_json_atomic(&cudnn_path("2025-11-20T12-30-00Z"), &cudnn).unwrap();
    let rows = against_fa3_rows(dir.path()).expect("rows");
    assert!(
        cudnn_cell(&rows[0]) == tflops(cudnn.cases[0].baseline_tflops.unwrap())
            && rows[0].contains("cuDNN: gate gate/2025-11-20T12-30-00Z"),
        "{rows:?}"
    );
    // A later run of other knobs (`--config`) is an experiment: it takes neither the FA3 row nor
    // the cuDNN cells; an empty `--config` is the tuned hopper.
    for (command, takes_row) in [
        (vec!["gate", "--config", "BLOCK_N=128"], false),
        (vec!["gate", "--config=SCHEDULE=1"], false),
        (vec!["gate", "--config", ""], true),
    ] {
        let mut later = gate.clone();
        later.provenance.command = command.iter().map(|a| a.to_string()).collect();
        later.cases[0].comparison.as_mut().unwrap().speedup.point = 9.87;
        let later_path = dir
            .path()
            .join("gate/2025-11-21T10-30-00Z-nvidia-h100-80gb-hbm3-eeeeeee.json");
        attn_evidence::write_json_atomic(&later_path, &later).unwrap();
        let rows = against_fa3_rows(dir.path()).expect("rows");
        assert_eq!(
            rows[0].contains("9.87×"),
            takes_row,
            "{command:?}: {rows:?}"
        );
        fs::remove_file(later_path).unwrap();
    }
}

#[test]
fn a_varlen_batch_is_shown_per_token_per_work_and_against_varlen_attn_from_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixtures().join("bench/2025-11-21T10-30-00Z-nvidia-h100-80gb-hbm3-ccccccc.json");
    let Evidence::Bench(mut bench) = read(&fixture).unwrap() else {
        panic!("fixture is not a bench run")
    };
    // Lengths 1000 and 3000 (10M visible pairs) against 2 × 2000 (8M): hopper 125 µs against
    // 100 µs dense is 1.25× per token and 1.00× per unit of work; varlen_attn takes 250 µs.
    let entry = |name: &str, backend: Option<&str>, shape: &str, median: f64| {
        let mut e = bench.entries[0].clone();
        e.implementation = attn_evidence::Implementation::named(name);
        e.implementation.backend = backend.map(str::to_string);
        e.shape = shape.parse().unwrap();
        e.summary.median = median;
        e.timing.input_sets = Some(20);
        e
    };
    let mut hopper = entry("hopper", None, "varlen=1000,3000 H=8 D=64", 125.0);
    let dense = entry("hopper", None, "2,8,2000,64", 100.0);
    hopper.dense_at_mean = Some(attn_evidence::DenseAtMean::of(&hopper, &dense));
    let mut pytorch = entry("sdpa", Some("varlen"), "varlen=1000,3000 H=8 D=64", 250.0);
    let rows = |bench: &attn_evidence::BenchRun| {
        fs::create_dir_all(dir.path().join("bench")).unwrap();
        attn_evidence::write_json_atomic(
            &dir.path().join("bench").join(fixture.file_name().unwrap()),
            bench,
        )
        .unwrap();
        let markdown = build(dir.path(), None).files()["report.md"].clone();
        let table = markdown
            .split("## Varlen batches against dense at the mean length")
            .nth(1)
            .expect("the varlen table")
            .split("\n## ")
            .next()
            .unwrap()
            .to_string();
        table
            .lines()
            .filter(|l| l.starts_with("| hopper |"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // PyTorch's varlen_attn on fewer input sets is not comparable: no ratio.
    pytorch.timing.input_sets = Some(2);
    bench.entries = vec![hopper.clone(), dense.clone(), pytorch.clone()];
    let shown = rows(&bench);
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert!(
        shown[0].contains("| 1.25× | 1.25× | 1.00× | misses per token, meets per work | – | – |"),
        "{shown:?}"
    );
    // On as many sets: its time per token (250 µs over 4000 tokens) and its time over ours.
    pytorch.timing.input_sets = Some(20);
    bench.entries = vec![hopper, dense, pytorch];
    let shown = rows(&bench);
    assert!(shown[0].ends_with("| 62.50 | 2.00× |"), "{shown:?}");
}
