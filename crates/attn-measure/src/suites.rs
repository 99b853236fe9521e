//! The named shape suites, in one place.

use attn_evidence::{Dtype, ShapeSpec};

use crate::{MeasureError, Problem, Result};

/// A named list of shapes.
#[derive(Debug, Clone, Copy)]
pub struct Suite {
    /// `--suite NAME`.
    pub name: &'static str,
    /// Shapes as `B,H,S,D [causal]`.
    pub shapes: &'static [&'static str],
    /// What it is for.
    pub purpose: &'static str,
}

/// Every suite.
pub const SUITES: [Suite; 6] = [
    Suite {
        name: "seed",
        shapes: &["1,8,512,64", "2,8,512,64"],
        purpose: "the seeds' small shapes: launch- and latency-bound",
    },
    Suite {
        name: "large",
        shapes: &[
            "4,16,2048,128",
            "2,16,8192,128",
            "2,16,8192,128 causal",
            "2,16,8192,64",
        ],
        purpose: "throughput-bound shapes where FlashAttention-class kernels are compared",
    },
    Suite {
        name: "sweep",
        shapes: &[
            "2,16,512,128",
            "2,16,1024,128",
            "2,16,2048,128",
            "2,16,4096,128",
            "2,16,8192,128",
            "2,16,16384,128",
        ],
        purpose: "TFLOP/s against sequence length at D=128",
    },
    Suite {
        name: "gqa",
        shapes: &[
            "2,32/8,2048,128",
            "2,32/8,4096,128",
            "2,32/8,8192,128",
            "2,32/8,8192,128 causal",
            "1,32/8,16384,128 causal",
        ],
        purpose: "grouped-query attention, Llama-3-8B prefill (32 query heads over 8 K/V heads, D=128)",
    },
    Suite {
        name: "mqa",
        shapes: &[
            "2,32/1,4096,128",
            "2,32/1,8192,128 causal",
            "2,16/1,8192,64",
        ],
        purpose: "multi-query attention: one K/V head for every query head",
    },
    Suite {
        name: "window",
        shapes: &[
            "2,16,16384,128 causal window=4096,-1",
            "2,16,16384,128 window=2048,2048",
            "2,32/8,16384,128 causal window=4096,-1",
            "2,16,8192,64 causal window=1024,-1",
        ],
        purpose: "sliding-window (local) attention: time should follow the window, not S (baseline: another implementation; SDPA has no window kernel)",
    },
];

/// The problems of suite `name` in `dtype`.
pub fn suite(name: &str, dtype: Dtype) -> Result<Vec<Problem>> {
    let found = SUITES.iter().find(|s| s.name == name).ok_or_else(|| {
        let known: Vec<&str> = SUITES.iter().map(|s| s.name).collect();
        MeasureError::Invalid(format!(
            "unknown suite `{name}` (known: {})",
            known.join(", ")
        ))
    })?;
    found
        .shapes
        .iter()
        .map(|s| {
            let mut spec: ShapeSpec = s.parse()?;
            spec.dtype = dtype;
            Problem::new(spec)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_parse_and_unknown_names_fail() {
        for s in SUITES {
            assert_eq!(suite(s.name, Dtype::Bf16).unwrap().len(), s.shapes.len());
        }
        let large = suite("large", Dtype::Fp16).unwrap();
        assert!(large[2].params.causal && !large[1].params.causal);
        assert!(suite("huge", Dtype::Fp16)
            .unwrap_err()
            .to_string()
            .contains("known: seed, large, sweep, gqa"));
    }
}
