//! The attention problem of one gate or bench case, built once from its [`ShapeSpec`].

use attn_evidence::{Dtype, ShapeSpec};
use attn_oracle::{DType, Params, Shape};

use crate::Result;

/// One problem: the evidence's description, and the typed pieces every step needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// As recorded in evidence (`"2,16,8192,128 causal bf16"`).
    pub spec: ShapeSpec,
    /// The tensor dimensions (validated).
    pub shape: Shape,
    /// The element type.
    pub dtype: DType,
    /// Scale and mask.
    pub params: Params,
}

impl Problem {
    /// Validates `spec` (positive dimensions, fp16 or bf16).
    pub fn new(spec: ShapeSpec) -> Result<Problem> {
        let shape = Shape::new(
            spec.batch,
            spec.heads,
            spec.seq_q,
            spec.seq_kv,
            spec.head_dim,
        )?;
        Ok(Problem {
            dtype: oracle_dtype(spec.dtype),
            params: Params::new(spec.head_dim, spec.causal),
            shape,
            spec,
        })
    }

    /// Parses `"B,H,S,D [causal] [bf16]"`.
    pub fn parse(text: &str) -> Result<Problem> {
        Problem::new(text.parse()?)
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.spec.fmt(f)
    }
}

/// The oracle's element type of an evidence dtype.
pub fn oracle_dtype(dtype: Dtype) -> DType {
    match dtype {
        Dtype::Fp16 => DType::F16,
        Dtype::Bf16 => DType::Bf16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_is_built_once_from_its_text() {
        let p = Problem::parse("2,4,300,64 causal bf16").unwrap();
        assert_eq!(p.dtype, DType::Bf16);
        assert!(p.params.causal);
        assert_eq!((p.shape.seq_q, p.shape.head_dim), (300, 64));
        assert!((p.params.scale - 0.125).abs() < 1e-12);
        assert_eq!(p.to_string(), "2,4,300,64 causal bf16");
        assert!(Problem::parse("2,4,0,64").is_err());
        assert!(Problem::parse("2,4,64 fp8").is_err());
    }
}
