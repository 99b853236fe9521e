//! GPU: a decode gate case end to end, `decode` against `decode-naive`, SDPA and FlashInfer.

use std::time::Duration;

use attn_evidence::{CaseStatus, GateCase, GateRule};
use attn_kernels::{Config, Gpu, TimingMode, TimingOptions};
use attn_measure::decode::{DecodeBaseline, DecodeGate};
use attn_measure::gate::GatePlan;
use attn_measure::timing::Interleave;
use attn_oracle::DecodeSpec;
use attn_stats::CompareOptions;

fn plan(gpu: &Gpu) -> GatePlan {
    let timing = TimingOptions {
        warmup: 3,
        samples: 40,
        mode: TimingMode::Graph,
        ..TimingOptions::default()
    };
    GatePlan {
        checks: 5,
        interleave: Interleave::new(timing, gpu.info().max_sm_mhz),
        compare: CompareOptions::default(),
        rule: GateRule::default(),
        hang_floor: Duration::from_secs(10),
        hang_factor: 100.0,
        peak_tflops: None,
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn decode_against_decode_naive_is_checked_timed_and_its_bandwidth_recorded() {
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let plan = plan(&gpu);
    let baseline = DecodeBaseline::from_name("decode-naive").unwrap();
    let mut gate =
        DecodeGate::new(&gpu, "decode", Config::default(), &baseline, &plan, None).unwrap();
    for text in [
        "decode B=4 q=1,2,4,1 kv=100,512,1000,17 H=8/2 D=64 page=16 pages=shuffled",
        "decode B=16 q=1 kv=8192 H=32/8 D=128 page=16 bf16",
        "decode B=8 q=4 kv=2048 H=32/8 D=128",
    ] {
        let spec: DecodeSpec = text.parse().unwrap();
        let case = gate.case(&spec, 7);
        println!("{text}: {:?} {}", case.status, case.reason);
        assert!(
            case.correctness.len() >= 5 && case.correctness.iter().all(|c| c.passed),
            "{}",
            case.reason
        );
        assert!(case
            .battery
            .as_ref()
            .unwrap()
            .checks
            .iter()
            .all(|c| c.passed));
        let timed = case.timed_outputs.as_ref().expect("timed");
        assert!(timed.sets >= 2 && timed.samples_checked > 0 && timed.samples_bad == 0);
        let record = case.decode.as_ref().unwrap();
        assert_eq!(record.spec, spec);
        assert!(record.copy_gbs.unwrap() > 100.0);
        assert!(record.candidate_fraction().unwrap() > 0.0);
        assert!(case.memory_floor_us.unwrap() > 0.0);
        assert_ne!(case.status, Some(CaseStatus::CouldNotRun));
    }
}

/// The gate's case of `text` (seed 7), which ran (not "could not run") with its baseline timed
/// on as many input sets as the candidate.
fn timed_on_as_many_sets(gate: &mut DecodeGate<'_>, text: &str) -> GateCase {
    let spec: DecodeSpec = text.parse().unwrap();
    let case = gate.case(&spec, 7);
    println!("{text}: {:?} {}", case.status, case.reason);
    assert_ne!(
        case.status,
        Some(CaseStatus::CouldNotRun),
        "{}",
        case.reason
    );
    let (cand, base) = (
        case.candidate.as_ref().unwrap(),
        case.baseline.as_ref().unwrap(),
    );
    assert_eq!(cand.input_sets, base.input_sets, "the same-input-sets rule");
    case
}

#[test]
#[ignore = "needs a CUDA GPU and PyTorch"]
fn decode_against_sdpa_is_timed_on_as_many_sets() {
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let plan = plan(&gpu);
    let sdpa = attn_measure::sdpa::Sdpa::detect().expect("PyTorch");
    let baseline = DecodeBaseline::from_name("sdpa").unwrap();
    let gate = DecodeGate::new(&gpu, "decode", Config::default(), &baseline, &plan, None).unwrap();
    let mut gate = gate.with_sdpa(&sdpa);
    for text in [
        "decode B=16 q=1 kv=8192 H=32/8 D=128 page=16 bf16",
        "decode B=8 q=4 kv=2048 H=32/8 D=128",
    ] {
        let case = timed_on_as_many_sets(&mut gate, text);
        assert!(case.decode.as_ref().unwrap().baseline_gbs.unwrap() > 0.0);
    }
}

#[test]
#[ignore = "needs a CUDA GPU, PyTorch and FlashInfer (skipped without it)"]
fn decode_against_flashinfer_is_checked_and_timed_on_ragged_paged_batches() {
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let plan = plan(&gpu);
    let sdpa = attn_measure::sdpa::Sdpa::detect().expect("PyTorch");
    // FlashInfer is fetched separately (scripts/fetch-flashinfer.sh): skipped where it is not
    // installed, unless ATTN_FLASHINFER_TEST=required says it must be.
    let version = match sdpa.probe_flashinfer() {
        Ok(version) => version,
        Err(err) => {
            let required = std::env::var("ATTN_FLASHINFER_TEST").as_deref() == Ok("required");
            assert!(!required, "{err}");
            eprintln!("SKIPPED: {err}");
            return;
        }
    };
    let backend = attn_measure::sdpa::Backend::Flashinfer;
    let baseline = DecodeBaseline::from_args("sdpa", backend).unwrap();
    let gate = DecodeGate::new(&gpu, "decode", Config::default(), &baseline, &plan, None).unwrap();
    let mut gate = gate.with_sdpa(&sdpa);
    // One new token (the tensor-core decode wrapper), several (paged prefill), a ragged batch
    // with an idle slot on shuffled pages, and a window.
    for text in [
        "decode B=16 q=1 kv=8192 H=32/8 D=128 page=16 bf16",
        "decode B=8 q=4 kv=2048 H=32/8 D=128 page=16 pages=shuffled bf16",
        "decode B=4 q=1,0,4,16 kv=1000,0,4096,300 H=32/8 D=128 page=64 pages=shuffled bf16",
        "decode B=4 q=1 kv=4096 H=8/2 D=64 page=16 window=256,0",
    ] {
        timed_on_as_many_sets(&mut gate, text);
    }
    assert_eq!(sdpa.versions().flashinfer, Some(version));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn decode_bench_records_each_entrys_bandwidth_beside_the_copy() {
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let request = attn_measure::bench::DecodeBenchRequest {
        specs: vec!["decode B=16 q=1 kv=8192 H=32/8 D=128 page=16 bf16"
            .parse()
            .unwrap()],
        implementations: ["decode", "decode-naive"]
            .iter()
            .map(|n| (n.to_string(), Config::default()))
            .collect(),
        backends: vec![],
        timing: TimingOptions {
            samples: 10,
            mode: TimingMode::Graph,
            ..TimingOptions::default()
        },
        seed: 1,
        suite: None,
        git: ("test".into(), false),
    };
    let run =
        attn_measure::bench::run_decode_bench(&gpu, &request, &mut |_| {}, &mut || None).unwrap();
    assert_eq!(run.entries.len(), 2);
    for e in &run.entries {
        let record = e.decode.as_ref().unwrap();
        println!(
            "{}: {}",
            e.implementation.label(),
            record.describe(e.summary.median)
        );
        assert!(record.copy_gbs.unwrap() > 100.0 && record.candidate_fraction().unwrap() > 0.0);
    }
}
