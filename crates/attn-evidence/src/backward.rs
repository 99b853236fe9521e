//! A backward case's record ([`BackwardRecord`]): what a gate case or bench entry of a backward
//! (training) pass records beyond its [`ShapeSpec`], whose FLOPs and bytes it counts by the
//! backward's convention (`ShapeSpec::backward_flops`, `ShapeSpec::backward_bytes`).

use serde::{Deserialize, Serialize};

use crate::ShapeSpec;

/// What a backward case records beyond its shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackwardRecord {
    /// Floating-point operations of one launch (2.5 × the forward's over the same pairs).
    pub flops: f64,
    /// The bytes a launch must move at the least (Q, K, V, O, dO and the LSE read, dQ, dK and
    /// dV written).
    pub bytes: u64,
    /// Whether the candidate declares itself deterministic: its gradients were then required to
    /// be bitwise the same on a repeated launch, otherwise each launch within the bounds.
    pub deterministic: bool,
    /// Whether the f64 oracle computed every gradient element, or sampled rows with the GPU
    /// reference bounding the rest.
    pub oracle_full: bool,
}

impl BackwardRecord {
    /// The record of `shape`'s backward for a candidate that declares `deterministic`.
    pub fn new(shape: &ShapeSpec, deterministic: bool, oracle_full: bool) -> BackwardRecord {
        BackwardRecord {
            flops: shape.backward_flops(),
            bytes: shape.backward_bytes(),
            deterministic,
            oracle_full,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BackwardRecord;

    #[test]
    fn a_backward_record_counts_the_backwards_work_not_the_forwards() {
        let shape: crate::ShapeSpec = "2,16/4,1024,64 causal bf16".parse().unwrap();
        let record = BackwardRecord::new(&shape, true, false);
        assert_eq!(record.flops, 2.5 * shape.flops());
        assert_eq!(record.bytes, shape.backward_bytes());
        let json = serde_json::to_string(&record).unwrap();
        assert_eq!(
            serde_json::from_str::<BackwardRecord>(&json).unwrap(),
            record
        );
    }
}
