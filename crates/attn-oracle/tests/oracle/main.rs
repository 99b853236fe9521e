//! Integration tests of attn-oracle, one binary (faster to build and link than one per file).

mod compare;
mod decode;
mod generate;
mod io;
mod reference;
mod tiled;
mod variants;

use attn_oracle::{generate, CaseSpec, DType, Distribution, Inputs};

/// Generates the case `shape` (a `Shape` string) of `dtype` and `distribution` with `seed`.
pub fn case(shape: &str, dtype: DType, distribution: Distribution, seed: u64) -> Inputs {
    generate(&CaseSpec {
        shape: shape.parse().expect("test shapes are valid"),
        dtype,
        distribution,
        seed,
    })
}
