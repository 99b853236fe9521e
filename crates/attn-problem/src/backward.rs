//! What a backward (training) pass over a [`ShapeSpec`] costs: its floating-point operations and
//! the bytes it must move, the work and memory floors a backward kernel is measured against.
//!
//! The backward reads Q, K, V, O, dO and the forward's row logsumexp (LSE) and writes dQ, dK and
//! dV; with grouped heads dK and dV have the K/V heads' shape, summed over each group's queries.

use crate::ShapeSpec;

/// Bytes of one logsumexp element: the kernels write it in f32 (see [`crate::DType`]).
const LSE_BYTES: u64 = 4;

impl ShapeSpec {
    /// Floating-point operations of a backward pass: FlashAttention's convention of 2.5 × the
    /// forward's [`ShapeSpec::flops`], its five matmuls (`S = Q·Kᵀ` recomputed, `dV = Pᵀ·dO`,
    /// `dP = dO·Vᵀ`, `dQ = dS·K`, `dK = dSᵀ·Q`) against the forward's two.
    ///
    /// The pairs counted are the forward's: halved when causal, or with a window or for a
    /// varlen batch the (query, key) pairs the masks let through, counted exactly, so that a
    /// backward's TFLOP/s and its forward's compare directly.
    ///
    /// ```
    /// use attn_problem::ShapeSpec;
    /// let spec: ShapeSpec = "2,16,1024,64 causal".parse()?;
    /// assert_eq!(spec.backward_flops(), 2.5 * 4.0 * 2.0 * 16.0 * 1024.0 * 1024.0 * 64.0 / 2.0);
    /// # Ok::<(), attn_problem::ProblemError>(())
    /// ```
    pub fn backward_flops(&self) -> f64 {
        2.5 * self.flops()
    }

    /// The bytes a backward pass must move at the least, its memory floor: it reads Q, K, V,
    /// O and dO in the problem's dtype and the LSE in f32, and writes dQ, dK and dV in the
    /// dtype. Scratch a kernel may add (an f32 dQ accumulator, the row sums `D = rowsum(dO ∘
    /// O)`) is not counted, since a kernel need not have it.
    ///
    /// Q, O, dO and dQ hold `tokens · H · D` elements, K, V, dK and dV `key tokens · H_kv · D`
    /// (a varlen batch: its totals), the LSE `tokens · H`.
    ///
    /// ```
    /// use attn_problem::ShapeSpec;
    /// let spec: ShapeSpec = "1,4/2,8,16,32 bf16".parse()?;
    /// let (q, kv, lse) = (8 * 4 * 32, 16 * 2 * 32, 8 * 4);
    /// assert_eq!(spec.backward_bytes(), 2 * (4 * q + 4 * kv) + 4 * lse);
    /// # Ok::<(), attn_problem::ProblemError>(())
    /// ```
    pub fn backward_bytes(&self) -> u64 {
        let key_tokens = match &self.varlen {
            Some(varlen) => varlen.total_kv(),
            None => self.batch * self.seq_kv,
        } as u64;
        let (tokens, d) = (self.tokens() as u64, self.head_dim as u64);
        let query_side = tokens * self.heads as u64 * d;
        let key_side = key_tokens * self.kv_heads() as u64 * d;
        let element = self.dtype.size_bytes() as u64;
        // Reads Q, O, dO and writes dQ; reads K, V and writes dK, dV.
        element * (4 * query_side + 4 * key_side) + LSE_BYTES * tokens * self.heads as u64
    }
}

#[cfg(test)]
mod tests {
    use crate::{ShapeSpec, Varlen, Window};

    #[test]
    fn backward_flops_are_two_and_a_half_forwards_over_the_same_pairs() {
        let dense: ShapeSpec = "2,8,100,37,16".parse().unwrap();
        assert_eq!(
            dense.backward_flops(),
            2.5 * 4.0 * 2.0 * 8.0 * 100.0 * 37.0 * 16.0
        );
        // A window of 2 keys on each side of the diagonal: rows see 3, 4 or 5 keys.
        let local = ShapeSpec {
            window: Some(Window {
                left: Some(2),
                right: Some(2),
            }),
            ..dense.clone()
        };
        let pairs = local.params().visible_pairs(100, 37) as f64;
        assert!(pairs < 100.0 * 37.0);
        assert_eq!(local.backward_flops(), 2.5 * 4.0 * 2.0 * 8.0 * 16.0 * pairs);
        let packed = ShapeSpec {
            causal: true,
            ..ShapeSpec::packed(
                Varlen::new(vec![3, 0, 5], vec![3, 4, 2]).unwrap(),
                8,
                None,
                16,
            )
        };
        // Causal pairs per sequence: 3 queries over 3 keys see 1 + 2 + 3; 5 over 2 see 0+0+0+1+2.
        assert_eq!(packed.backward_flops(), 2.5 * 4.0 * 8.0 * 16.0 * 9.0);
    }

    #[test]
    fn backward_bytes_count_grouped_heads_and_packed_tokens() {
        let mha: ShapeSpec = "2,4,8,8,16".parse().unwrap();
        let gqa: ShapeSpec = "2,4/1,8,8,16".parse().unwrap();
        let elements = |spec: &ShapeSpec| spec.batch * spec.seq_q * spec.head_dim;
        // Each K/V head removed saves its K, V, dK and dV.
        let saved = 3 * elements(&mha) * 4 * 2;
        assert_eq!(mha.backward_bytes() - gqa.backward_bytes(), saved as u64);
        let packed = ShapeSpec::packed(
            Varlen::new(vec![5, 0, 2], vec![1, 6, 2]).unwrap(),
            2,
            None,
            8,
        );
        let (q, kv) = (7 * 2 * 8, 9 * 2 * 8);
        assert_eq!(
            packed.backward_bytes(),
            (2 * 4 * (q + kv) + 4 * 7 * 2) as u64
        );
    }
}
