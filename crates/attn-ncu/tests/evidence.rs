//! Explained and scored evidence round-trips through evidence/ncu-style JSON files.

use attn_ncu::metrics::TENSOR_PIPE_PCT;
use attn_ncu::{
    explain, fitness, group, parse_details, Ceilings, FitnessInputs, FitnessWeights, KernelFilter,
    NcuError, NcuEvidence, Provenance,
};

fn cudnn() -> attn_ncu::KernelSummary {
    let launches = parse_details(include_str!("fixtures/h100_sdpa_cudnn_details.csv")).unwrap();
    group(&launches, Some(&KernelFilter::parse("cudnn").unwrap())).remove(0)
}

#[test]
fn scored_evidence_round_trips_and_leaves_no_temporary_files() {
    let kernel = cudnn();
    let inputs = FitnessInputs::from_summary(&kernel, 1.0, 2.0).unwrap();
    assert!(
        (inputs.tensor_pct - 30.74).abs() < 1e-9,
        "median of 29.77 and 31.71"
    );
    assert_eq!(
        (inputs.registers_per_thread, inputs.spill_bytes),
        (168.0, 0.0)
    );
    let score = fitness(&inputs, &FitnessWeights::default());
    // 1000·1 + 2·30.74 + 6.755 − 5·2
    assert!((score.score - 1058.235).abs() < 1e-9, "{}", score.score);
    let provenance = Provenance {
        label: "sdpa-cudnn".into(),
        seed: Some(7),
        ..Provenance::default()
    };
    let evidence = NcuEvidence::new(provenance, &kernel)
        .with_explanation(explain(&kernel, None, &Ceilings::H100_MEASURED))
        .with_fitness(score);

    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("evidence/ncu");
    let path = evidence.write_in(&target).unwrap();
    let again = evidence.write_in(&target).unwrap();
    assert_eq!(path, again, "rewriting replaces the file");
    assert_eq!(NcuEvidence::read(&path).unwrap(), evidence);
    let files: Vec<_> = std::fs::read_dir(&target)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(files, ["sdpa-cudnn.json"]);
    assert!(evidence
        .summary
        .unwrap()
        .contains("bound by    latency/occupancy"));
}

#[test]
fn missing_counters_are_named_in_the_error() {
    let mut kernel = cudnn();
    kernel.metrics.remove(TENSOR_PIPE_PCT);
    let err = FitnessInputs::from_summary(&kernel, 1.0, 0.0).unwrap_err();
    assert!(
        matches!(&err, NcuError::MissingMetric { metric, .. } if metric == TENSOR_PIPE_PCT),
        "{err}"
    );
}

#[test]
fn unreadable_evidence_is_an_error_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.json");
    std::fs::write(&path, "{\"schema\": 1").unwrap();
    let err = NcuEvidence::read(&path).unwrap_err().to_string();
    assert!(
        err.contains("broken.json") && err.contains("not valid ncu evidence JSON"),
        "{err}"
    );
    let missing = NcuEvidence::read(&dir.path().join("absent.json")).unwrap_err();
    assert!(matches!(missing, NcuError::Io { .. }));
}

#[test]
fn explaining_again_recovers_the_numbers_under_the_current_rules() {
    let kernel = cudnn();
    // B·H = 8, N = 512, D = 64: the fixture's shape.
    let flops = 4.0 * 8.0 * 512.0 * 512.0 * 64.0;
    let ceilings = Ceilings {
        tensor_tflops: 800.0,
        dram_bytes_per_s: 2.5e12,
    };
    let fresh = explain(&kernel, Some(flops), &ceilings);
    // A file written by an older version: fields it did not know are missing, its verdict stale.
    let mut stale = fresh.clone();
    stale.wgmma_instructions = None;
    stale.bank_conflict_cycles_pct = None;
    stale.bound = attn_ncu::Bound::Unknown;
    let evidence = NcuEvidence::new(Provenance::default(), &kernel).with_explanation(stale);

    let again = evidence.explain_again().unwrap();
    assert_eq!(again.bound, fresh.bound);
    assert_eq!(again.wgmma_instructions, fresh.wgmma_instructions);
    // The FLOP count and the ceilings come back from the stored throughput and fractions.
    let close =
        |a: Option<f64>, b: Option<f64>| (a.unwrap() - b.unwrap()).abs() < 1e-9 * b.unwrap();
    assert!(
        close(again.tflops, fresh.tflops) && close(again.tflops_fraction, fresh.tflops_fraction)
    );
    assert_eq!(again.next_step(), fresh.next_step());
}
