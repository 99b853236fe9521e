//! Decode through the gate: a [`DecodeSpec`] judged as a prefill problem is, by the same
//! phases and the same decision ([`crate::decide::decide`]).
//!
//! - check ([`check`]): fresh seeded inputs over the check distributions and every block-table
//!   policy the layout allows, guards, checksums, the determinism launch, the read probe, every
//!   row against the f64 oracle;
//! - battery: the same check on [`decode_battery`]'s edge batches, once per dtype, head dim,
//!   window and layout in a run;
//! - time ([`timing`]): input sets sized by memory, every timed output verified, ABBA blocks
//!   with the clock guard ([`crate::timing::interleave`]);
//! - record: the bandwidth achieved beside the time, the copy bandwidth measured in the run
//!   ([`copy_bandwidth`]) and the floor of the case's bytes at it.
//!
//! The baseline is a registered decode implementation (`decode-naive`), PyTorch SDPA on a
//! contiguous cache through the helper ([`crate::sdpa::Sdpa::time_decode`]: equal lengths only,
//! no window, refused in one line otherwise) or FlashInfer on a paged cache through the same
//! helper (`--sdpa-backend flashinfer`: paged batches, ragged included), each on as many input
//! sets as the candidate.

pub mod check;
pub mod sets;
pub mod timing;

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use attn_evidence::{
    decode_floor_us, decode_shape, CaseStatus, CorrectnessCheck, DecodeRecord, EdgeBattery,
    GateCase, Implementation,
};
use attn_kernels::decode::{find_decode, PreparedDecode};
use attn_kernels::{Config, Gpu, HarnessKernels};
use attn_oracle::{decode_battery, DecodeCase, DecodeSpec, Distribution, Window};

use crate::baseline::{median, sdpa_implementation, timing_evidence};
use crate::check::scale_factor;
use crate::defences::{case_defences, CaseFacts};
use crate::gate::{
    compare_sides, ended_by, ended_case_of, plausibility_flag, timed_output_check, GatePlan,
};
use crate::sdpa::{decode_refusal, Backend, Sdpa};
use crate::supervise::Watchdog;
use crate::timing::{interleave, TimedSide};
use crate::{MeasureError, Result};

pub use check::{check_plan, check_policies, check_scales, run_decode_checks};
pub use timing::{decode_set_count, draw_decode_sets, DecodeSide, SdpaDecodeSide};

/// Copies timed for the copy bandwidth; their median is recorded.
pub const COPY_REPEATS: usize = 5;

/// The device's copy bandwidth, GB/s: the median of [`COPY_REPEATS`] device-to-device copies of
/// 1 GiB timed with events, and how it was measured.
pub fn copy_bandwidth(gpu: &Gpu) -> Result<(f64, String)> {
    let bytes = attn_kernels::decode::copy::COPY_BYTES;
    let times = attn_kernels::decode::copy::time_copies(gpu, bytes, COPY_REPEATS)?;
    let us = median(&times);
    let gbs = attn_evidence::copy_gbs(bytes as u64, us);
    Ok((
        gbs,
        format!(
            "a {} MiB device-to-device copy (read and written once), median of {COPY_REPEATS}: {us:.1} µs",
            bytes >> 20
        ),
    ))
}

/// Refuses, in one line, a decode implementation name the decode registry does not hold.
pub fn check_decode_implementation(name: &str) -> Result<()> {
    find_decode(name)?;
    Ok(())
}

/// What a decode candidate is compared with.
#[derive(Debug, Clone)]
pub enum DecodeBaseline {
    /// A registered decode implementation at its defaults (`decode-naive`).
    Registered(String),
    /// PyTorch SDPA with one of its own backends, on a contiguous cache, or FlashInfer on a
    /// paged one ([`SdpaDecodeSide`]).
    Sdpa(Backend),
}

impl DecodeBaseline {
    /// The baseline `--baseline NAME` names for a decode problem (`sdpa` at its default
    /// dispatch), refused in one line when it cannot time decode.
    pub fn from_name(name: &str) -> Result<DecodeBaseline> {
        DecodeBaseline::from_args(name, Backend::Default)
    }

    /// [`DecodeBaseline::from_name`] with `--sdpa-backend`, which only SDPA's own backends and
    /// FlashInfer answer for decode.
    pub fn from_args(name: &str, backend: Backend) -> Result<DecodeBaseline> {
        if name == "fa3" || (name == "sdpa" && backend == Backend::Fa3) {
            return Err(MeasureError::Invalid(crate::sdpa::FA3_NO_DECODE.into()));
        }
        if name == "sdpa" {
            if !backend.times_decode() {
                return Err(MeasureError::Invalid(format!(
                    "--sdpa-backend {backend} does not time decode batches: give an SDPA backend (default, flash, efficient, cudnn, math), flashinfer, or --baseline decode-naive"
                )));
            }
            return Ok(DecodeBaseline::Sdpa(backend));
        }
        if name == "cublas" || name.starts_with("rev:") {
            return Err(MeasureError::Invalid(format!(
                "--baseline {name} cannot time a decode batch: give --baseline sdpa, decode-naive or another decode implementation"
            )));
        }
        check_decode_implementation(name)?;
        Ok(DecodeBaseline::Registered(name.into()))
    }

    /// Refuses, in one line, a batch this baseline cannot run (SDPA: unequal lengths, a window;
    /// FlashInfer: a contiguous cache, a head dim it is not built for).
    pub fn check_supports(&self, spec: &DecodeSpec) -> Result<()> {
        match self {
            DecodeBaseline::Sdpa(backend) => match decode_refusal(spec, *backend) {
                Some(why) => Err(MeasureError::Invalid(why)),
                None => Ok(()),
            },
            DecodeBaseline::Registered(_) => Ok(()),
        }
    }

    /// As evidence records it.
    pub fn implementation(&self) -> Implementation {
        match self {
            DecodeBaseline::Registered(name) => Implementation::named(name.clone()),
            DecodeBaseline::Sdpa(backend) => sdpa_implementation(*backend),
        }
    }
}

/// What makes two cases' decode batteries the same.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct BatteryKey {
    dtype: attn_oracle::DType,
    head_dim: usize,
    window: Option<Window>,
    page_size: Option<usize>,
}

/// A decode gate run's state across cases: the device, both sides' names, the copy bandwidth.
pub struct DecodeGate<'a> {
    gpu: &'a Gpu,
    candidate: String,
    overrides: Config,
    baseline: &'a DecodeBaseline,
    plan: &'a GatePlan,
    watchdog: Option<&'a Watchdog>,
    copy: Option<(f64, String)>,
    sdpa: Option<&'a Sdpa>,
    batteries: HashMap<BatteryKey, (String, Option<CorrectnessCheck>)>,
    /// Set after a fault: the CUDA context is lost.
    pub lost: bool,
}

impl std::fmt::Debug for DecodeGate<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeGate")
            .field("candidate", &self.candidate)
            .field("lost", &self.lost)
            .finish_non_exhaustive()
    }
}

/// An empty decode case with a status and reason.
pub fn ended_decode_case(spec: &DecodeSpec, status: CaseStatus, reason: String) -> GateCase {
    ended_case_of(
        decode_shape(spec),
        Some(DecodeRecord::new(spec)),
        status,
        reason,
    )
}

impl<'a> DecodeGate<'a> {
    /// A session of the decode implementation `candidate` with `overrides`.
    pub fn new(
        gpu: &'a Gpu,
        candidate: &str,
        overrides: Config,
        baseline: &'a DecodeBaseline,
        plan: &'a GatePlan,
        watchdog: Option<&'a Watchdog>,
    ) -> Result<DecodeGate<'a>> {
        check_decode_implementation(candidate)?;
        Ok(DecodeGate {
            gpu,
            candidate: candidate.into(),
            overrides,
            baseline,
            plan,
            watchdog,
            copy: None,
            sdpa: None,
            batteries: HashMap::new(),
            lost: false,
        })
    }

    /// The SDPA helper a [`DecodeBaseline::Sdpa`] baseline is timed through.
    pub fn with_sdpa(mut self, sdpa: &'a Sdpa) -> DecodeGate<'a> {
        self.sdpa = Some(sdpa);
        self
    }

    /// The candidate as evidence records it.
    pub fn implementation(&self) -> Implementation {
        let mut implementation = Implementation::named(self.candidate.clone());
        implementation.config = self.overrides.0.clone();
        implementation
    }

    /// Judges `spec` with inputs from `seed`.
    pub fn case(&mut self, spec: &DecodeSpec, seed: u64) -> GateCase {
        match self.try_case(spec, seed) {
            Ok(case) => case,
            Err(err) => {
                let (status, reason, fault) = ended_by(&err);
                self.lost |= fault;
                let mut case = ended_decode_case(spec, status, reason);
                case.defences = case_defences(&case, &self.plan.rule, &self.facts(0));
                case
            }
        }
    }

    fn watched(&self) -> crate::check::Watched<'a> {
        self.watchdog.map(|w| (w, self.plan.hang_floor))
    }

    fn try_case(&mut self, spec: &DecodeSpec, seed: u64) -> Result<GateCase> {
        let mut case = ended_decode_case(spec, CaseStatus::CouldNotRun, String::new());
        let (gpu, dtype, d) = (self.gpu, spec.dtype(), spec.head_dim());
        let prepared = PreparedDecode::new(gpu, &self.candidate, &self.overrides, dtype, d)?;
        case.config = prepared.config().0.clone();
        let watched = self.watched();
        case.correctness =
            run_decode_checks(gpu, &prepared, spec, seed, self.plan.checks, watched)?;
        if case.correctness.iter().any(|c| !c.passed) {
            return Ok(self.finish(case, 0));
        }
        let battery = self.battery(&prepared, spec, seed ^ 0xed9e)?;
        let battery_failed = battery.checks.iter().any(|c| !c.passed);
        case.battery = Some(battery);
        if battery_failed {
            return Ok(self.finish(case, 0));
        }
        self.time(&mut case, &prepared, spec, seed)?;
        // No side-stream guard pass runs on a decode side: its defence records none.
        Ok(self.finish(case, 0))
    }

    /// The decode edge battery, once per [`BatteryKey`] in a run.
    fn battery(
        &mut self,
        prepared: &PreparedDecode,
        spec: &DecodeSpec,
        seed: u64,
    ) -> Result<EdgeBattery> {
        let key = BatteryKey {
            dtype: spec.dtype(),
            head_dim: spec.head_dim(),
            window: spec.window(),
            page_size: spec.layout().page_size(),
        };
        if let Some((first, failed)) = self.batteries.get(&key) {
            return Ok(EdgeBattery {
                shapes: vec![],
                checks: failed.iter().cloned().collect(),
                skipped: vec![],
                checked_in: Some(first.clone()),
            });
        }
        let harness = HarnessKernels::new(self.gpu)?;
        let mut battery = EdgeBattery {
            shapes: vec![],
            checks: vec![],
            skipped: vec![],
            checked_in: None,
        };
        for (i, edge) in decode_battery(spec).into_iter().enumerate() {
            battery.shapes.push(edge.to_string());
            let edge_scale = edge.params().scale;
            let case = DecodeCase {
                spec: edge,
                distribution: Distribution::CHECKS[i % Distribution::CHECKS.len()],
                seed: seed.wrapping_add(i as u64),
            };
            // Any factor, 1 included (index 1 of the draw allows it), as a prefill battery's.
            let scale = edge_scale * scale_factor(case.seed, 1, case.distribution);
            let (check, _) =
                check::check_one(self.gpu, prepared, &harness, &case, scale, self.watched())?;
            let failed = !check.passed;
            battery.checks.push(check);
            if failed {
                break;
            }
        }
        let failed = battery.checks.iter().find(|c| !c.passed).cloned();
        self.batteries.insert(key, (spec.to_string(), failed));
        Ok(battery)
    }

    /// Both sides timed interleaved, the candidate's every timed output verified; then the
    /// evidence: verified outputs, floor, clock guard, comparison, bandwidths.
    fn time(
        &mut self,
        case: &mut GateCase,
        prepared: &PreparedDecode,
        spec: &DecodeSpec,
        seed: u64,
    ) -> Result<()> {
        let (gpu, plan) = (self.gpu, self.plan);
        if self.copy.is_none() {
            self.copy = Some(copy_bandwidth(gpu)?);
        }
        let info = gpu.info();
        let sets = decode_set_count(spec, info.l2_bytes as usize, info.total_memory);
        let mut cand = DecodeSide::new(gpu, prepared, spec, sets, seed ^ 0x5eed, true)?;
        let bound = Rc::new(Cell::new(plan.hang_floor));
        if let Some(w) = self.watchdog {
            cand.with_watchdog(w, Rc::clone(&bound));
        }
        let (base_prepared, mut registered, mut sdpa_side);
        let base: &mut dyn TimedSide = match self.baseline {
            DecodeBaseline::Registered(name) => {
                let (dtype, d) = (spec.dtype(), spec.head_dim());
                base_prepared = PreparedDecode::new(gpu, name, &Config::default(), dtype, d)?;
                registered =
                    DecodeSide::new(gpu, &base_prepared, spec, sets, seed ^ 0xba5e, false)?;
                &mut registered
            }
            DecodeBaseline::Sdpa(backend) => {
                let sdpa = self.sdpa.ok_or_else(|| {
                    MeasureError::Invalid(
                        "the sdpa decode baseline needs its helper (DecodeGate::with_sdpa)".into(),
                    )
                })?;
                // As many sets as the candidate rotates over (evidence/METHOD.md, `equal-input-sets`).
                let count = cand.set_count();
                sdpa_side = SdpaDecodeSide::new(gpu, sdpa, *backend, spec, count, seed ^ 0xba5e);
                &mut sdpa_side
            }
        };
        let (floor, factor) = (plan.hang_floor, plan.hang_factor);
        let timed = interleave(gpu, &mut cand, base, &plan.interleave, |first| {
            let scaled = Duration::try_from_secs_f64(factor * median(&first.samples_us) * 1e-6);
            bound.set(scaled.map_or(floor, |scaled| floor.max(scaled)));
        })?;
        let verified = cand.verifier.as_ref().map(|v| v.finish(gpu)).transpose()?;
        let timing = &plan.interleave.timing;
        let watch = cand.watch()?;
        case.timed_outputs = verified.map(|v| timed_output_check(v, watch, sets, timing));
        let (copy_gbs, copy_source) = self.copy.clone().unwrap_or_default();
        let bytes = spec.bytes().total();
        case.memory_floor_us = Some(decode_floor_us(bytes, copy_gbs));
        case.clock_guard = Some(timed.guard.clone());
        let mut record = DecodeRecord::new(spec);
        record.copy_gbs = Some(copy_gbs);
        record.copy_source = Some(copy_source);
        if let Some(comparison) = compare_sides(&timed, &plan.compare)? {
            let tflops = |us: f64| spec.flops() / (us * 1e-6) / 1e12;
            case.candidate_tflops = Some(tflops(comparison.candidate.median));
            case.baseline_tflops = Some(tflops(comparison.baseline.median));
            record.candidate_gbs = Some(spec.bandwidth_gbs(comparison.candidate.median));
            record.baseline_gbs = Some(spec.bandwidth_gbs(comparison.baseline.median));
            case.comparison = Some(comparison);
        }
        case.decode = Some(record);
        case.candidate = Some(timing_evidence(&timed.a));
        case.baseline = Some(timing_evidence(&timed.b));
        case.flags.extend(plausibility_flag(case, plan));
        Ok(())
    }

    fn facts(&self, side_stream_launches: usize) -> CaseFacts {
        self.plan
            .case_facts(self.watchdog.is_some(), side_stream_launches)
    }

    fn finish(&self, case: GateCase, side_stream_launches: usize) -> GateCase {
        // The decision's reason, then both sides' bandwidths.
        self.plan.settle(
            case,
            &self.facts(side_stream_launches),
            |case, reason| match (&case.decode, &case.comparison) {
                (Some(record), Some(c)) => format!(
                    "{reason}; candidate {}, baseline {}",
                    record.describe(c.candidate.median),
                    record.describe(c.baseline.median)
                ),
                _ => reason,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_baselines_are_sdpas_backends_flashinfer_or_a_decode_implementation() {
        let flashinfer = DecodeBaseline::from_args("sdpa", Backend::Flashinfer).unwrap();
        assert_eq!(flashinfer.implementation().label(), "sdpa:flashinfer");
        let ragged: DecodeSpec =
            "decode B=3 q=1,4,16 kv=100,8192,17 H=32/8 D=128 page=16 pages=shuffled"
                .parse()
                .unwrap();
        assert!(flashinfer.check_supports(&ragged).is_ok());
        let sdpa = DecodeBaseline::from_name("sdpa").unwrap();
        let why = sdpa.check_supports(&ragged).unwrap_err().to_string();
        assert!(why.contains("--sdpa-backend flashinfer"), "{why}");
        let contiguous: DecodeSpec = "decode B=2 q=1 kv=512 H=8/2 D=64".parse().unwrap();
        assert!(flashinfer.check_supports(&contiguous).is_err());
        for backend in [Backend::Varlen, Backend::Flex, Backend::Fa3] {
            let err = DecodeBaseline::from_args("sdpa", backend)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("flashinfer") && err.contains("decode-naive") && !err.contains('\n'),
                "{err}"
            );
        }
        // FA3's build has neither paged KV nor split-KV: said whichever way it is named.
        for err in [
            DecodeBaseline::from_name("fa3").unwrap_err().to_string(),
            DecodeBaseline::from_args("sdpa", Backend::Fa3)
                .unwrap_err()
                .to_string(),
        ] {
            assert!(
                err.contains("without paged KV") && err.contains("split-KV"),
                "{err}"
            );
        }
    }
}
