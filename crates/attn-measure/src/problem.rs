//! The attention problem of one gate or bench case, built once from its [`ShapeSpec`].

use attn_evidence::{Dtype, ShapeSpec, WindowSpec};
use attn_oracle::{DType, Params, Shape, Window};

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
    /// Validates `spec` (positive dimensions, key/value heads dividing the query heads, fp16 or
    /// bf16).
    pub fn new(spec: ShapeSpec) -> Result<Problem> {
        let shape = Shape::new(
            spec.batch,
            spec.heads,
            spec.seq_q,
            spec.seq_kv,
            spec.head_dim,
        )?
        .with_kv_heads(spec.kv_heads())?;
        let window = spec.window.map_or(Window::NONE, oracle_window);
        Ok(Problem {
            dtype: oracle_dtype(spec.dtype),
            params: Params::new(spec.head_dim, spec.causal).with_window(window),
            shape,
            spec,
        })
    }

    /// Whether this is dense multi-head attention with no window: the problem every kernel
    /// supports, and the only one SDPA's fast backends run without help.
    pub fn is_plain(&self) -> bool {
        self.shape.kv_heads == self.shape.heads && !self.params.window.is_bounded()
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

/// The oracle's window of an evidence window.
pub fn oracle_window(window: WindowSpec) -> Window {
    Window {
        left: window.left,
        right: window.right,
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

    #[test]
    fn grouped_heads_and_windows_reach_the_oracle_and_count_their_work() {
        let p = Problem::parse("2,32/8,300,64 causal window=100,-1").unwrap();
        assert_eq!((p.shape.heads, p.shape.kv_heads), (32, 8));
        assert_eq!(p.params.window.left, Some(100));
        assert!(p.params.causal && !p.is_plain());
        // Evidence's FLOP count and the oracle's mask agree on the work a window leaves.
        let pairs = p.params.visible_pairs(300, 300) as f64;
        assert_eq!(p.spec.flops(), 4.0 * 2.0 * 32.0 * 64.0 * pairs);
        assert!(Problem::parse("2,32/6,300,64").is_err());
        assert!(Problem::parse("2,8,300,64").unwrap().is_plain());
    }
}
