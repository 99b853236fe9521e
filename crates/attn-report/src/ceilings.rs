//! The physical lines drawn on throughput charts: the GPU's measured dense-matmul rate and its dense
//! tensor peak, each with the reason for its value. An attention implementation's rate is never one
//! of them (the `cublas` implementation is attention through cuBLAS, not a matmul ceiling).
//!
//! Where a value comes from, best first:
//! - the device peak: `peak_tflops` recorded in the evidence's provenance; else computed as
//!   SMs × max SM clock × dense FLOP per clock per SM, from the evidence's GPU facts (SM count,
//!   clock and compute capability where recorded) completed by [`KNOWN_GPUS`];
//! - the matmul rate: `--matmul-tflops` when given; else the measured value in [`KNOWN_GPUS`].
//!
//! A GPU missing from the table and without recorded facts gets no line rather than a guess.

use crate::format::significant;

/// A horizontal line on a TFLOP/s axis, with the reason for its value (shown in the legend).
#[derive(Debug, Clone, PartialEq)]
pub struct PhysicalLine {
    /// What the line is, e.g. `"device peak"`.
    pub name: &'static str,
    /// Its value, TFLOP/s.
    pub tflops: f64,
    /// Where the value comes from, e.g. `"132 SMs × 1980 MHz × 4096 FLOP/clock/SM"`.
    pub source: String,
}

impl PhysicalLine {
    /// Legend text: `"device peak 1070 TFLOP/s (132 SMs × …)"`.
    pub fn label(&self) -> String {
        format!(
            "{} {} TFLOP/s ({})",
            self.name,
            significant(self.tflops, 3),
            self.source
        )
    }
}

/// Name of the dense-matmul line.
pub const MATMUL_LINE: &str = "dense fp16 matmul";
/// Name of the device-peak line.
pub const PEAK_LINE: &str = "device peak";

/// Facts about one GPU product that the evidence does not (yet) record, keyed by the name the
/// driver reports. Each value says where it comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KnownGpu {
    /// Product name as in `provenance.gpu`.
    pub name: &'static str,
    /// SMs of the full product (a MIG slice records fewer in `sm_count`, which wins).
    pub sm_count: u32,
    /// Maximum SM clock, MHz.
    pub max_sm_mhz: u32,
    /// Compute capability (major, minor).
    pub compute_capability: (u32, u32),
    /// Dense fp16 matmul rate measured on this product, TFLOP/s.
    pub matmul_tflops: f64,
    /// How `matmul_tflops` was measured.
    pub matmul_source: &'static str,
}

/// GPUs whose facts were measured for this project (`shared/NOTES-cuda.md`): the development H100
/// SXM.
pub const KNOWN_GPUS: [KnownGpu; 1] = [KnownGpu {
    name: "NVIDIA H100 80GB HBM3",
    sm_count: 132,
    max_sm_mhz: 1980,
    compute_capability: (9, 0),
    matmul_tflops: 891.0,
    matmul_source: "cuBLAS 8192³, measured on the development H100",
}];

/// What the evidence records about the GPU it ran on; unknown fields are `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuFacts {
    /// Product name.
    pub name: String,
    /// `peak_tflops` from the provenance, when the evidence records it.
    pub recorded_peak_tflops: Option<f64>,
    /// Number of SMs.
    pub sm_count: Option<u32>,
    /// Maximum SM clock, MHz.
    pub max_sm_mhz: Option<f64>,
    /// Compute capability.
    pub compute_capability: Option<(u32, u32)>,
}

fn known(name: &str) -> Option<&'static KnownGpu> {
    KNOWN_GPUS.iter().find(|gpu| gpu.name == name)
}

/// The device's dense fp16/bf16 tensor peak, or `None` when it cannot be justified.
pub fn device_peak(facts: &GpuFacts) -> Option<PhysicalLine> {
    if let Some(peak) = facts
        .recorded_peak_tflops
        .filter(|p| p.is_finite() && *p > 0.0)
    {
        return Some(PhysicalLine {
            name: PEAK_LINE,
            tflops: peak,
            source: "recorded in the evidence's provenance".into(),
        });
    }
    let table = known(&facts.name);
    let sm_count = facts.sm_count.or(table.map(|t| t.sm_count))?;
    let mhz = facts
        .max_sm_mhz
        .or(table.map(|t| f64::from(t.max_sm_mhz)))?;
    let capability = facts
        .compute_capability
        .or(table.map(|t| t.compute_capability))?;
    let per_clock = attn_evidence::dense_flop_per_clock_per_sm(capability.0, capability.1)?;
    let tflops = attn_evidence::dense_peak_tflops(sm_count, mhz, capability.0, capability.1)?;
    Some(PhysicalLine {
        name: PEAK_LINE,
        tflops,
        source: format!(
            "{sm_count} SMs × {mhz:.0} MHz × {per_clock} FLOP/clock/SM, sm_{}{}",
            capability.0, capability.1
        ),
    })
}

/// The dense fp16 matmul rate: `given` (from `--matmul-tflops`) or the measured value of a known GPU.
pub fn matmul_rate(gpu: &str, given: Option<f64>) -> Option<PhysicalLine> {
    if let Some(value) = given {
        return Some(PhysicalLine {
            name: MATMUL_LINE,
            tflops: value,
            source: "given with --matmul-tflops".into(),
        });
    }
    let table = known(gpu)?;
    Some(PhysicalLine {
        name: MATMUL_LINE,
        tflops: table.matmul_tflops,
        source: table.matmul_source.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> GpuFacts {
        GpuFacts {
            name: "NVIDIA H100 80GB HBM3".into(),
            sm_count: Some(132),
            ..GpuFacts::default()
        }
    }

    #[test]
    fn h100_peak_is_sms_times_clock_times_flop_per_clock() {
        let peak = device_peak(&h100()).unwrap();
        assert_eq!(peak.tflops, 132.0 * 1980e6 * 4096.0 / 1e12);
        assert_eq!(significant(peak.tflops, 3), "1071");
        assert!(peak.label().contains("132 SMs × 1980 MHz × 4096"));
        // A MIG slice records fewer SMs, and the peak follows.
        let slice = GpuFacts {
            sm_count: Some(66),
            ..h100()
        };
        assert!((device_peak(&slice).unwrap().tflops - peak.tflops / 2.0).abs() < 1e-9);
    }

    #[test]
    fn a_recorded_peak_wins_and_unknown_gpus_get_no_line() {
        let recorded = GpuFacts {
            recorded_peak_tflops: Some(989.0),
            ..h100()
        };
        assert_eq!(device_peak(&recorded).unwrap().tflops, 989.0);
        let unknown = GpuFacts {
            name: "Some Future GPU".into(),
            sm_count: Some(100),
            ..GpuFacts::default()
        };
        assert_eq!(device_peak(&unknown), None);
        assert_eq!(matmul_rate("Some Future GPU", None), None);
        assert_eq!(
            matmul_rate("Some Future GPU", Some(500.0)).unwrap().source,
            "given with --matmul-tflops"
        );
        assert_eq!(
            matmul_rate("NVIDIA H100 80GB HBM3", None).unwrap().tflops,
            891.0
        );
    }
}
