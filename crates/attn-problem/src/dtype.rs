//! Element types ([`DType`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ProblemError;

/// The element type of a buffer: a problem's Q, K, V and O are [`DType::INPUTS`] (what the
/// kernels take); f32 is for host-side outputs and logsumexps.
///
/// Serialized as `"fp16"`, `"bf16"`, `"f32"` (evidence's spelling; `"f16"` also reads).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub enum DType {
    /// IEEE binary16 (`half::f16`, CUDA `__half`).
    #[default]
    #[serde(rename = "fp16", alias = "f16")]
    F16,
    /// bfloat16 (`half::bf16`, CUDA `__nv_bfloat16`).
    #[serde(rename = "bf16")]
    Bf16,
    /// IEEE binary32.
    #[serde(rename = "f32")]
    F32,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 3] = [DType::F16, DType::Bf16, DType::F32];

    /// The element types a problem's Q, K, V and O may have: what the GPU kernels support.
    pub const INPUTS: [DType; 2] = [DType::F16, DType::Bf16];

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F16 | DType::Bf16 => 2,
            DType::F32 => 4,
        }
    }

    /// Unit roundoff `u`: the largest relative error of rounding to nearest, half an ulp at 1.
    pub fn unit_roundoff(self) -> f64 {
        match self {
            DType::F16 => 2f64.powi(-11),
            DType::Bf16 => 2f64.powi(-8),
            DType::F32 => 2f64.powi(-24),
        }
    }

    /// The smallest positive normal number: below it rounding to nearest errs by up to
    /// `u` times it (the subnormals' half spacing), however small the value.
    pub fn smallest_normal(self) -> f64 {
        match self {
            DType::F16 => 2f64.powi(-14),
            DType::Bf16 | DType::F32 => 2f64.powi(-126),
        }
    }

    /// `"fp16"`, `"bf16"` or `"f32"`.
    pub fn as_str(self) -> &'static str {
        match self {
            DType::F16 => "fp16",
            DType::Bf16 => "bf16",
            DType::F32 => "f32",
        }
    }

    /// Whether a problem's Q, K and V may have this type ([`DType::INPUTS`]).
    pub fn is_input(self) -> bool {
        DType::INPUTS.contains(&self)
    }

    /// A problem's dtype from text: fp16 or bf16 (any spelling [`FromStr`] reads), refusing the
    /// rest in one line; what `--dtype` options parse with.
    ///
    /// ```
    /// use attn_problem::DType;
    /// assert_eq!(DType::parse_input("bf16")?, DType::Bf16);
    /// assert!(DType::parse_input("f32").unwrap_err().to_string().contains("fp16 or bf16"));
    /// # Ok::<(), attn_problem::ProblemError>(())
    /// ```
    pub fn parse_input(text: &str) -> Result<DType, ProblemError> {
        match text.parse::<DType>() {
            Ok(dtype) if dtype.is_input() => Ok(dtype),
            _ => Err(ProblemError::InputDType(text.to_owned())),
        }
    }
}

/// `"fp16"`, `"bf16"` or `"f32"`.
impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DType {
    type Err = ProblemError;

    /// Accepts `fp16|f16|half|float16`, `bf16|bfloat16`, `f32|fp32`, case-insensitively.
    fn from_str(input: &str) -> Result<DType, ProblemError> {
        match input.trim().to_ascii_lowercase().as_str() {
            "fp16" | "f16" | "half" | "float16" => Ok(DType::F16),
            "bf16" | "bfloat16" => Ok(DType::Bf16),
            "f32" | "fp32" => Ok(DType::F32),
            _ => Err(ProblemError::ParseDType {
                input: input.to_owned(),
            }),
        }
    }
}

/// Deserializes a problem's dtype, refusing f32 as the kernels do.
pub(crate) fn deserialize_input<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<DType, D::Error> {
    let dtype = DType::deserialize(deserializer)?;
    if dtype.is_input() {
        Ok(dtype)
    } else {
        Err(serde::de::Error::custom(ProblemError::InputDType(
            dtype.to_string(),
        )))
    }
}
