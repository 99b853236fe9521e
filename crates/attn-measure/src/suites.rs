//! The named shape suites, in one place.

use attn_evidence::{DType, ShapeSpec};

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
pub const SUITES: [Suite; 8] = [
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
    Suite {
        name: "varlen",
        shapes: &[
            "varlen=512,3072,1024,8192,256,2048,128,1536 H=32/8 D=128 causal",
            "varlen=512,3072,1024,8192,256,2048,128,1536 H=32/8 D=128",
            "varlen=8192,4096,6144,2048,1024,512,4096,3072 H=32/8 D=128 causal",
            "varlen=4096,128,0,8192,2048,640,3000,1024 H=16 D=128 causal",
            "varlen=1000,3000,500,7000,2500,1500,600,200 H=16 D=64",
            "varlen=2048,256,5120,128,1024,4096,768,3584 H=32/8 D=64 causal",
            "varlen=4100,3750,4450,3990,4230,3870,4330,4000 H=32/8 D=128 causal",
        ],
        purpose: "packed variable-length batches, Llama-style prefill: 8 sequences of 128 to 8192 tokens, 16k-32k in all, one with an empty sequence, one of ragged lengths within 10% of their mean (where time per token against dense at the mean length is a fair comparison: the work ratio is about 1) (baseline: another implementation; bench compares each with dense at its mean length)",
    },
    Suite {
        name: "train",
        shapes: &[
            "8,32/8,2048,128 causal",
            "4,32/8,4096,128 causal",
            "2,32/8,8192,128 causal",
            "2,32/8,16384,128 causal",
            "8,32/8,2048,64 causal",
            "2,32/8,8192,64 causal",
        ],
        purpose: "Llama-style training steps: 2-8 sequences of 2k-16k tokens (16k-32k in all), GQA 32/8, D 64 and 128, causal: the backward's shapes, and the forward that precedes it",
    },
];

/// The problems of suite `name` in `dtype`.
pub fn suite(name: &str, dtype: DType) -> Result<Vec<Problem>> {
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
            assert_eq!(suite(s.name, DType::Bf16).unwrap().len(), s.shapes.len());
        }
        // Varlen: Llama-style prefill batches, within the kernels' limits, every kind asked for.
        let varlen = suite("varlen", DType::Bf16).unwrap();
        for p in &varlen {
            let lengths = p.varlen.as_ref().unwrap();
            assert_eq!(lengths.sequences(), 8, "{p}");
            assert!((16_000..=32_768).contains(&lengths.total_q()), "{p}");
            assert!(
                lengths
                    .seqlens_q
                    .iter()
                    .all(|&n| n == 0 || (128..=8192).contains(&n)),
                "{p}"
            );
            assert!(matches!(p.shape.head_dim, 64 | 128) && p.shape.heads % p.shape.kv_heads == 0);
            assert!(attn_evidence::ShapeSpec::flops(&p.spec) > 0.0);
        }
        assert!(varlen.iter().any(|p| p.params.causal) && varlen.iter().any(|p| !p.params.causal));
        // Training: 2-8 causal GQA 32/8 sequences of 2k-16k tokens, both head dims.
        let train = suite("train", DType::Bf16).unwrap();
        for p in &train {
            let s = p.shape;
            assert!(p.params.causal && s.heads == 32 && s.kv_heads == 8, "{p}");
            assert!(
                (2..=8).contains(&s.batch) && (2048..=16_384).contains(&s.seq_q),
                "{p}"
            );
            assert!((16_384..=32_768).contains(&(s.batch * s.seq_q)), "{p}");
        }
        assert!([64, 128]
            .iter()
            .all(|d| train.iter().any(|p| p.shape.head_dim == *d)));
        assert!(
            varlen.iter().any(|p| p.shape.group() == 4)
                && varlen.iter().any(|p| p.shape.group() == 1)
        );
        assert!(
            varlen.iter().any(|p| p.shape.head_dim == 64)
                && varlen.iter().any(|p| p.shape.head_dim == 128)
        );
        assert!(varlen
            .iter()
            .any(|p| p.varlen.as_ref().unwrap().seqlens_q.contains(&0)));
        // One batch for varlen's per-token target read literally: lengths within 10% of their mean.
        assert!(varlen.iter().any(|p| {
            let lens = &p.varlen.as_ref().unwrap().seqlens_q;
            let mean = lens.iter().sum::<usize>() as f64 / lens.len() as f64;
            lens.iter().all(|&n| (n as f64 - mean).abs() <= 0.1 * mean)
        }));
        let large = suite("large", DType::F16).unwrap();
        assert!(large[2].params.causal && !large[1].params.causal);
        assert!(suite("huge", DType::F16)
            .unwrap_err()
            .to_string()
            .contains("known: seed, large, sweep, gqa"));
    }
}
