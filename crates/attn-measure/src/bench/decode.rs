//! `bench` on decode batches: each decode implementation and SDPA backend (FlashInfer included)
//! timed on every batch (the gate's decode sides, one block of samples each), one entry each with
//! its bandwidth and the copy bandwidth measured in the same run
//! ([`crate::decode::copy_bandwidth`]).

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use attn_evidence::{decode_shape, BenchEntry, BenchRun, DecodeRecord, Implementation};
use attn_kernels::decode::PreparedDecode;
use attn_kernels::{Config, Gpu, TimingOptions, Timings};
use attn_oracle::{DType, DecodeInputs, DecodeSpec};
use attn_stats::Sample;

use super::{detect_sdpa, push, Event, Report};
use crate::baseline::{sdpa_implementation, timing_evidence};
use crate::decode::{
    copy_bandwidth, decode_set_count, draw_decode_sets, DecodeSide, SdpaDecodeSide,
};
use crate::sdpa::{decode_refusal, Backend, Sdpa};
use crate::timing::{clocked_block, TimedSide};
use crate::Result;

/// Everything `cargo xtask bench` asks of decode batches, typed and validated.
#[derive(Debug, Clone)]
pub struct DecodeBenchRequest {
    /// The batches, in order.
    pub specs: Vec<DecodeSpec>,
    /// The decode implementations timed, each with its overrides.
    pub implementations: Vec<(String, Config)>,
    /// The SDPA backends (and FlashInfer) timed alongside (none: PyTorch is not looked for).
    pub backends: Vec<Backend>,
    /// The harness options of every entry.
    pub timing: TimingOptions,
    /// Base seed of the timing inputs.
    pub seed: u64,
    /// The suite's name, for the record.
    pub suite: Option<String>,
    /// The git revision and dirty flag of the code that runs, for provenance.
    pub git: (String, bool),
}

/// The entry of one side's `timings` on `spec`: µs summary, bandwidth at the median beside the
/// run's copy bandwidth, TFLOP/s, the SM clock.
pub fn decode_entry(
    implementation: Implementation,
    spec: &DecodeSpec,
    (timings, sm_mhz): (Timings, Option<f64>),
    copy: &(f64, String),
) -> Result<BenchEntry> {
    let summary = Sample::new(timings.samples_us.clone())?.summary();
    let mut record = DecodeRecord::new(spec);
    record.copy_gbs = Some(copy.0);
    record.copy_source = Some(copy.1.clone());
    record.candidate_gbs = Some(spec.bandwidth_gbs(summary.median));
    Ok(BenchEntry {
        implementation,
        shape: decode_shape(spec),
        decode: Some(record),
        timing: timing_evidence(&timings),
        tflops: spec.flops() / (summary.median * 1e-6) / 1e12,
        summary,
        dense_at_mean: None,
        backward: None,
        sm_mhz,
    })
}

/// Runs `request` on `gpu`: the copy bandwidth first, a thrown-away warm-up, then every batch
/// that `admit` lets start (it answers why not), implementations then backends; the run's record.
pub fn run_decode_bench(
    gpu: &Gpu,
    request: &DecodeBenchRequest,
    report: Report<'_>,
    admit: &mut dyn FnMut() -> Option<String>,
) -> Result<BenchRun> {
    let sdpa = detect_sdpa(!request.backends.is_empty(), report, "our implementations");
    let mut backends = request.backends.clone();
    if let (Some(sdpa), true) = (&sdpa, backends.contains(&Backend::Flashinfer)) {
        // FlashInfer imported once up front: a missing install is one line, not one per batch.
        match sdpa.probe_flashinfer() {
            Ok(version) => report(Event::Line(format!("FlashInfer {version}"))),
            Err(err) => {
                report(Event::Line(format!(
                    "FlashInfer is unavailable ({err}): not timing sdpa:flashinfer"
                )));
                backends.retain(|&b| b != Backend::Flashinfer);
            }
        }
    }
    let per_spec = request.implementations.len() + sdpa.as_ref().map_or(0, |_| backends.len());
    report(Event::Start((per_spec * request.specs.len()) as u64));
    let copy = copy_bandwidth(gpu)?;
    report(Event::Line(format!(
        "copy bandwidth: {:.0} GB/s ({})",
        copy.0, copy.1
    )));
    let (opts, seed) = (&request.timing, request.seed);
    let info = gpu.info();
    let mut prepared: HashMap<(usize, DType, usize), PreparedDecode> = HashMap::new();
    let mut entries = Vec::new();
    let before = attn_kernels::telemetry::read_clocks(0);
    for (n, spec) in request.specs.iter().enumerate() {
        if let Some(why) = admit() {
            report(Event::Line(format!("  {spec}: {why}")));
            report(Event::Done(per_spec as u64));
            continue;
        }
        let sets = decode_set_count(spec, info.l2_bytes as usize, info.total_memory);
        // Drawn at the first implementation's turn, then shared by the others.
        let mut drawn: Option<Vec<DecodeInputs>> = None;
        for (i, (name, config)) in request.implementations.iter().enumerate() {
            report(Event::Step(format!("{name} {spec}")));
            let (dtype, d) = (spec.dtype(), spec.head_dim());
            let timed = (|| -> Result<BenchEntry> {
                let p = match prepared.entry((i, dtype, d)) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => e.insert(PreparedDecode::new(gpu, name, config, dtype, d)?),
                };
                let inputs = match &mut drawn {
                    Some(inputs) => inputs,
                    empty => empty.insert(draw_decode_sets(spec, sets, seed)?),
                };
                let mut side = DecodeSide::on_inputs(gpu, p, spec, inputs, seed, false)?;
                if n == 0 && i == 0 {
                    // The GPU starts cool and would favour what runs first (evidence/METHOD.md,
                    // `bench-warm-up`): one block thrown away.
                    clocked_block(gpu, &mut side, opts)?;
                }
                let mut implementation = Implementation::named(name.clone());
                implementation.config = p.config().0.clone();
                decode_entry(
                    implementation,
                    spec,
                    clocked_block(gpu, &mut side, opts)?,
                    &copy,
                )
            })();
            push(&mut entries, report, timed, name, spec);
        }
        let Some(sdpa) = &sdpa else { continue };
        for &backend in &backends {
            if let Some(why) = decode_refusal(spec, backend) {
                report(Event::Line(format!("  sdpa:{backend} skipped: {why}")));
                report(Event::Done(1));
                continue;
            }
            report(Event::Step(format!("sdpa:{backend} {spec}")));
            let mut side = SdpaDecodeSide::new(gpu, sdpa, backend, spec, sets, seed);
            let side: &mut dyn TimedSide = &mut side;
            let timed = clocked_block(gpu, side, opts)
                .and_then(|t| decode_entry(sdpa_implementation(backend), spec, t, &copy));
            push(
                &mut entries,
                report,
                timed,
                &format!("sdpa:{backend}"),
                spec,
            );
        }
    }
    report(Event::Finished);
    let after = attn_kernels::telemetry::read_clocks(0);
    let versions = sdpa.as_ref().map(Sdpa::versions);
    let torch = versions.as_ref();
    let (git_rev, git_dirty) = request.git.clone();
    Ok(BenchRun {
        schema: attn_evidence::SCHEMA_VERSION,
        kind: attn_evidence::EvidenceKind::Bench,
        provenance: crate::provenance::collect(gpu, torch, before, after, git_rev, git_dirty),
        suite: request.suite.clone(),
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decode_entry_records_its_bandwidth_beside_the_copy() {
        let spec: DecodeSpec = "decode B=16 q=1 kv=8192 H=32/8 D=128 page=16 bf16"
            .parse()
            .unwrap();
        let timings = Timings {
            mode: attn_kernels::TimingMode::Graph,
            warmup: 0,
            launches_per_sample: 1,
            input_sets: 2,
            samples_us: vec![100.0; 5],
            wall_us: vec![],
            guard_event_us: vec![],
            guard_residual_us: vec![],
            guard_stream_residual_us: vec![],
        };
        let copy = (3000.0, "a copy".to_string());
        let entry = decode_entry(
            Implementation::named("decode"),
            &spec,
            (timings, None),
            &copy,
        )
        .unwrap();
        let record = entry.decode.as_ref().unwrap();
        let gbs = spec.bytes().total() as f64 / 100e-6 / 1e9;
        assert!((record.candidate_gbs.unwrap() - gbs).abs() < 1e-6 * gbs);
        assert!((record.candidate_fraction().unwrap() - gbs / 3000.0).abs() < 1e-9);
        assert_eq!(record.copy_gbs, Some(3000.0));
        assert_eq!(entry.shape, decode_shape(&spec));
    }
}
