//! A decode case's record ([`DecodeRecord`]): its [`DecodeSpec`] and the bandwidth the kernels
//! achieved against the device's copy bandwidth measured in the same run.
//!
//! Decode moves its KV cache once and does little arithmetic, so its metric is bytes a second
//! ([`achieved_gbs`]) beside the time, and its plausibility bound the time to move those bytes
//! at the copy bandwidth ([`decode_floor_us`]).

use serde::{Deserialize, Serialize};

use crate::{DecodeSpec, ShapeSpec};

/// What a gate case or bench entry of a decode batch records beyond its [`ShapeSpec`] (the
/// varlen prefill batch over the same rows, [`decode_shape`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecodeRecord {
    /// The batch, as JSON.
    pub spec: DecodeSpec,
    /// The batch as text (`decode B=64 q=1 kv=8192 H=32/8 D=128 page=16 bf16`).
    pub text: String,
    /// The bytes a launch must move at the least (`DecodeBytes::total`).
    pub bytes: u64,
    /// The device's copy bandwidth measured in the same run: a device-to-device copy timed with
    /// events, the median of a few, GB/s (10⁹ bytes a second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_gbs: Option<f64>,
    /// How the copy bandwidth was measured, one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_source: Option<String>,
    /// The candidate's (a bench entry's: the implementation's) bandwidth at its median, GB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_gbs: Option<f64>,
    /// The baseline's bandwidth at its median, GB/s (a gate case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_gbs: Option<f64>,
}

impl DecodeRecord {
    /// The record of `spec`, nothing measured yet.
    pub fn new(spec: &DecodeSpec) -> DecodeRecord {
        DecodeRecord {
            spec: spec.clone(),
            text: spec.to_string(),
            bytes: spec.bytes().total(),
            copy_gbs: None,
            copy_source: None,
            candidate_gbs: None,
            baseline_gbs: None,
        }
    }

    /// The candidate's bandwidth as a fraction of the copy bandwidth, when both are known.
    pub fn candidate_fraction(&self) -> Option<f64> {
        copy_fraction(self.candidate_gbs?, self.copy_gbs?)
    }

    /// The baseline's bandwidth as a fraction of the copy bandwidth, when both are known.
    pub fn baseline_fraction(&self) -> Option<f64> {
        copy_fraction(self.baseline_gbs?, self.copy_gbs?)
    }

    /// `µs, GB/s, % of copy` of a side at `median_us`, one phrase.
    pub fn describe(&self, median_us: f64) -> String {
        let gbs = achieved_gbs(self.bytes, median_us);
        match self.copy_gbs.and_then(|c| copy_fraction(gbs, c)) {
            Some(f) => format!(
                "{median_us:.1} µs, {gbs:.0} GB/s, {:.0}% of copy",
                100.0 * f
            ),
            None => format!("{median_us:.1} µs, {gbs:.0} GB/s"),
        }
    }
}

/// The prefill batch that computes a decode batch's rows: packed varlen with its lengths, heads,
/// head dim, dtype and window, causal (bottom-right, as decode is).
pub fn decode_shape(spec: &DecodeSpec) -> ShapeSpec {
    let mut shape = ShapeSpec::packed(
        spec.varlen().clone(),
        spec.heads(),
        Some(spec.kv_heads()),
        spec.head_dim(),
    );
    shape.causal = true;
    shape.window = spec.window();
    shape.dtype = spec.dtype();
    shape
}

/// GB/s (10⁹ bytes a second) of `bytes` moved in `time_us`; 0 for a time that is not positive.
pub fn achieved_gbs(bytes: u64, time_us: f64) -> f64 {
    if time_us > 0.0 && time_us.is_finite() {
        bytes as f64 / (time_us * 1e-6) / 1e9
    } else {
        0.0
    }
}

/// `achieved` over `copy`, when the copy bandwidth is a positive number.
pub fn copy_fraction(achieved: f64, copy: f64) -> Option<f64> {
    (copy > 0.0 && copy.is_finite()).then(|| achieved / copy)
}

/// The least time a launch moving `bytes` can take at `copy_gbs`, µs: the decode case's
/// plausibility floor (a copy reads and writes each byte once, so this is a floor a decode
/// kernel, which mostly reads, can approach but not beat by much).
pub fn decode_floor_us(bytes: u64, copy_gbs: f64) -> f64 {
    if copy_gbs > 0.0 && copy_gbs.is_finite() {
        bytes as f64 / (copy_gbs * 1e9) * 1e6
    } else {
        0.0
    }
}

/// The bandwidth of a device-to-device copy of `bytes` (each read once and written once, so
/// `2 · bytes` moved) taking `time_us`, GB/s.
pub fn copy_gbs(bytes: u64, time_us: f64) -> f64 {
    achieved_gbs(2 * bytes, time_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_and_floor_arithmetic() {
        // 64 sequences × 8192 keys × 8 K/V heads × 128 × 2 bytes × (K and V) = 1 GiB of cache.
        let spec: DecodeSpec = "decode B=64 q=1 kv=8192 H=32/8 D=128 page=16 bf16"
            .parse()
            .unwrap();
        let record = DecodeRecord::new(&spec);
        let kv = 64u64 * 8192 * 8 * 128 * 2 * 2;
        let q = 64u64 * 32 * 128 * 2;
        let table = 64u64 * (8192 / 16) * 4;
        assert_eq!(record.bytes, kv + 2 * q + table);
        // 1 GB in 1000 µs is 1000 GB/s; its floor at 1000 GB/s is 1000 µs.
        assert!((achieved_gbs(1_000_000_000, 1000.0) - 1000.0).abs() < 1e-9);
        assert!((decode_floor_us(1_000_000_000, 1000.0) - 1000.0).abs() < 1e-9);
        assert_eq!(achieved_gbs(5, 0.0), 0.0);
        assert_eq!(decode_floor_us(5, f64::NAN), 0.0);
        // A 1 GiB copy in 800 µs moved 2 GiB: 2684 GB/s.
        let copy = copy_gbs(1 << 30, 800.0);
        assert!((copy - 2.0 * (1u64 << 30) as f64 / 800e-6 / 1e9).abs() < 1e-6);
        let measured = DecodeRecord {
            copy_gbs: Some(4000.0),
            candidate_gbs: Some(3000.0),
            ..record.clone()
        };
        assert_eq!(measured.candidate_fraction(), Some(0.75));
        assert_eq!(measured.baseline_fraction(), None);
        assert_eq!(copy_fraction(1.0, 0.0), None);
        let at = spec.bytes().total() as f64 / 4000e9 * 1e6 * 2.0;
        assert!(
            measured.describe(at).ends_with("50% of copy"),
            "{}",
            measured.describe(at)
        );
        // The same agrees with DecodeSpec's own arithmetic.
        assert!((achieved_gbs(record.bytes, 321.0) - spec.bandwidth_gbs(321.0)).abs() < 1e-9);
    }

    #[test]
    fn decode_shape_is_the_causal_varlen_batch_of_the_same_rows() {
        let spec: DecodeSpec = "decode q=1,4 kv=100,300 H=8/2 D=64 bf16".parse().unwrap();
        let shape = decode_shape(&spec);
        assert_eq!(
            shape.to_string(),
            "varlen=1:100,4:300 H=8/2 D=64 causal bf16"
        );
        assert_eq!(shape.params(), spec.params());
    }

    #[test]
    fn a_record_round_trips_through_json() {
        let spec: DecodeSpec =
            "decode B=4 q=1,2,4,1 kv=100,512,1000,17 H=8/2 D=64 page=16 pages=shuffled"
                .parse()
                .unwrap();
        let record = DecodeRecord {
            copy_gbs: Some(3900.0),
            ..DecodeRecord::new(&spec)
        };
        let json = serde_json::to_string(&record).unwrap();
        let back: DecodeRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back, record);
        assert_eq!(back.spec.to_string(), record.text);
    }
}
