//! The exact backward (training) pass: the gradients dQ, dK and dV of attention in f64, for all
//! elements or a seeded sample of rows, the reference a backward kernel is judged by.
//!
//! With `P = softmax(scale · Q·Kᵀ + mask)` and `O = P·V`, given dO (the loss's gradient in O):
//! `dP = dO·Vᵀ`, `D_i = rowsum(dO ∘ O)`, `dS = P ∘ (dP − D)`, `dQ = scale · dS·K`,
//! `dK = scale · dSᵀ·Q`, `dV = Pᵀ·dO`. Conventions, each as FlashAttention's:
//!
//! * The mask is the forward's own [`Params`]: causal aligned bottom-right, the sliding window,
//!   each varlen sequence on its own ([`Params::kv_range`]), so a mask means exactly what it
//!   means in [`reference()`].
//! * LSE: the forward's row logsumexp, natural log, `max + ln Σ exp(s_j − max)` over the keys
//!   the row sees, stored `[B, H, S_q, 1]` (packed `[1, total_q, H, 1]`); a row that sees no key
//!   has output 0 and LSE −∞, the true log of an empty sum, which [`compare_lse`] requires
//!   exactly. FlashAttention 2 stores +∞ there (−∞ in its split-KV partials), which makes
//!   `exp(s − LSE) = 0` without a branch; under −∞ a backward kernel must skip such rows, as
//!   [`backward`] does. [`backward`] recomputes `P = exp(scale·q·k − LSE)` from the LSE given,
//!   as kernels do.
//! * `D_i` comes from the O given, as kernels compute it, so the oracle reproduces what a kernel
//!   fed the same (rounded) O and LSE should produce; [`backward_exact`] recomputes O and LSE in
//!   f64 instead, the true gradient of the inputs.
//! * Grouped heads: dK and dV have K's and V's shape `[B, H_kv, S_kv, D]`, each the sum over the
//!   query heads of its group, added in head order so that the result does not depend on threads.
//! * A row that sees no key contributes nothing: its dQ is 0 and it adds nothing to dK or dV,
//!   whatever its Q, dO, O or LSE hold.

use rayon::prelude::*;

use crate::reference::{check_inputs, dot, select_rows};
use crate::{
    reference, DType, HostData, HostTensor, OracleError, Params, RowId, RowSelection, Shape,
};

mod compare;
mod varlen;

pub use compare::{
    backward_tolerance, compare_gradient, compare_lse, BackwardTolerance, Gradient, ELEMENT_SPREAD,
};
pub use varlen::{backward_varlen, backward_varlen_with_scales, forward_varlen};

/// The forward's output and row logsumexps in f64 ([`forward_with_lse`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Forward {
    /// O, `[B, H, S_q, D]` (packed: `[1, total_q, H, D]`), f64.
    pub out: HostTensor,
    /// The LSE, `[B, H, S_q, 1]` (packed: `[1, total_q, H, 1]`), f64; −∞ for a row that sees
    /// no key.
    pub lse: HostTensor,
}

/// The gradients of a backward pass in f64: dQ like Q, dK and dV like K and V.
#[derive(Clone, Debug, PartialEq)]
pub struct Gradients {
    /// dQ, `[B, H, S_q, D]` (packed: `[1, total_q, H, D]`).
    pub dq: HostTensor,
    /// dK, `[B, H_kv, S_kv, D]` (packed: `[1, total_kv, H_kv, D]`).
    pub dk: HostTensor,
    /// dV, shaped like dK.
    pub dv: HostTensor,
}

/// The gradients at a sample of rows ([`backward_rows`]): dQ at query rows, dK and dV at keys.
///
/// A key's dK and dV sum over every query row of every query head of its group, so a sampled key
/// is computed over all of them, as exact as a complete backward: a sample reduces how many keys
/// are checked, not the work or the exactness of each.
#[derive(Clone, Debug, PartialEq)]
pub struct SampledGradients {
    /// The problem's shape.
    pub shape: Shape,
    /// The dQ rows computed: (batch, query head, query row), in that order.
    pub query_rows: Vec<RowId>,
    /// `query_rows.len() × D` values, row `i` of `query_rows` at `dq[i·D..(i+1)·D]`.
    pub dq: Vec<f64>,
    /// The keys computed: (batch, K/V head, key), in that order.
    pub key_rows: Vec<RowId>,
    /// `key_rows.len() × D` values of dK.
    pub dk: Vec<f64>,
    /// `key_rows.len() × D` values of dV.
    pub dv: Vec<f64>,
}

/// The forward in f64 with its row logsumexps as tensors, every row: [`reference()`] reshaped
/// for [`backward`].
///
/// ```
/// use attn_oracle::{forward_with_lse, DType, HostTensor, Params};
/// // Causal with 2 queries over 1 key: row 0 sees no key.
/// let q = HostTensor::from_f64([1, 1, 2, 1], DType::F32, &[1.0, 1.0]);
/// let k = HostTensor::from_f64([1, 1, 1, 1], DType::F32, &[2.0]);
/// let forward = forward_with_lse(&q, &k, &k, &Params::new(1, true))?;
/// assert_eq!(forward.lse.to_f64(), [f64::NEG_INFINITY, 2.0]);
/// assert_eq!(forward.out.to_f64(), [0.0, 2.0]);
/// # Ok::<(), attn_oracle::OracleError>(())
/// ```
pub fn forward_with_lse(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    params: &Params,
) -> Result<Forward, OracleError> {
    let exact = reference(q, k, v, params, &RowSelection::All)?;
    let [b, h, s, _] = exact.shape.q_dims();
    Ok(Forward {
        out: exact.to_tensor().expect("every row was computed"),
        lse: HostTensor {
            dims: [b, h, s, 1],
            data: HostData::F64(exact.lse),
        },
    })
}

/// The gradients dQ, dK and dV in f64 from the forward's O and LSE as given (see the module
/// doc), every element, in parallel (rayon) over (batch, query head).
///
/// Q, O and dO are `[B, H, S_q, D]`, K and V `[B, H_kv, S_kv, D]`, the LSE `[B, H, S_q, 1]`, of
/// any element types. The LSE of a row that sees keys must be finite
/// ([`OracleError::InvalidLse`]); that of a row that sees none is not read.
///
/// ```
/// use attn_oracle::{backward, forward_with_lse, DType, HostTensor, Params};
/// // One key: P = 1 whatever Q, so dV = dO and dQ = dK = 0.
/// let t = |x: &[f64]| HostTensor::from_f64([1, 1, 1, 2], DType::F32, x);
/// let (q, k, v, d_o) = (t(&[1.0, 2.0]), t(&[0.5, -1.0]), t(&[3.0, 4.0]), t(&[0.25, -2.0]));
/// let params = Params::new(2, false);
/// let forward = forward_with_lse(&q, &k, &v, &params)?;
/// let grads = backward(&q, &k, &v, &forward.out, &d_o, &forward.lse, &params)?;
/// assert_eq!(grads.dv.to_f64(), [0.25, -2.0]);
/// assert!(grads.dq.to_f64().iter().chain(&grads.dk.to_f64()).all(|g| g.abs() < 1e-15));
/// # Ok::<(), attn_oracle::OracleError>(())
/// ```
pub fn backward(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    o: &HostTensor,
    d_o: &HostTensor,
    lse: &HostTensor,
    params: &Params,
) -> Result<Gradients, OracleError> {
    Ok(gradients_of([q, k, v, o, d_o, lse], params, false)?.0)
}

/// [`backward`] and, beside each gradient element, its rounding scale: the square root of the sum
/// of its terms' sizes squared (dV: `P_ij·dO_i` over the query rows that see key j, dK:
/// `scale·|dS|_ij·Q_i`, dQ: `scale·|dS|_ij·K_j` over the keys), summed over a group's heads for
/// dK and dV, where `|dS|_ij = P_ij·(|dP_ij| + |D_i|)` is the size at which dS is rounded. P,
/// `scale·|dS|` and the scale itself count no smaller than the input dtype's smallest normal
/// number: below it rounding errs by `u` times that normal (fp16's subnormals), so a peaky row's
/// P ≈ 1e-9 and the dK of a key no row picks are rounded at that size, not at their own.
///
/// A kernel rounds each term's operand (P or dS) to the input dtype, and dS from a rounded dP
/// and D, so an element's error is about `u` times this scale whatever the element's own value:
/// where its terms cancel (dQ of a row whose `Σ_j dS_ij = 0`), where dS itself cancels (a peaky
/// row's one key, whose dP is its D), or where it sums many more rows than the tensor's typical
/// element (dV of an early key under a causal mask), a bound relative to the element or to the
/// tensor's RMS would reject the rounding of an exact kernel. [`compare_gradient`] takes these
/// scales.
///
/// ```
/// use attn_oracle::{backward_with_scales, forward_with_lse, DType, HostTensor, Params};
/// // One key: dV = dO, its one term, so its scale is |dO|.
/// let t = |x: &[f64]| HostTensor::from_f64([1, 1, 1, 2], DType::F32, x);
/// let (q, k, v, d_o) = (t(&[1.0, 2.0]), t(&[0.5, -1.0]), t(&[3.0, 4.0]), t(&[0.25, -2.0]));
/// let params = Params::new(2, false);
/// let forward = forward_with_lse(&q, &k, &v, &params)?;
/// let (grads, scales) = backward_with_scales(&q, &k, &v, &forward.out, &d_o, &forward.lse, &params)?;
/// assert_eq!(grads.dv.to_f64(), [0.25, -2.0]);
/// assert_eq!(scales.dv.to_f64(), [0.25, 2.0]);
/// # Ok::<(), attn_oracle::OracleError>(())
/// ```
pub fn backward_with_scales(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    o: &HostTensor,
    d_o: &HostTensor,
    lse: &HostTensor,
    params: &Params,
) -> Result<(Gradients, Gradients), OracleError> {
    let (grads, scales) = gradients_of([q, k, v, o, d_o, lse], params, true)?;
    Ok((grads, scales.expect("asked for")))
}

/// The gradients of the backward's inputs `[Q, K, V, O, dO, LSE]`, and with `scales` their
/// rounding scales: [`backward`] and [`backward_with_scales`] in one (a varlen batch's sequences
/// take either).
fn gradients_of(
    [q, k, v, o, d_o, lse]: [&HostTensor; 6],
    params: &Params,
    scales: bool,
) -> Result<(Gradients, Option<Gradients>), OracleError> {
    Ok(Problem::new(q, k, v, o, d_o, lse, params)?.gradients(scales))
}

/// The true gradients of `L = Σ dO ∘ O(Q, K, V)`: [`backward`] with O and the LSE recomputed in
/// f64 ([`forward_with_lse`]) rather than given.
pub fn backward_exact(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    d_o: &HostTensor,
    params: &Params,
) -> Result<Gradients, OracleError> {
    let forward = forward_with_lse(q, k, v, params)?;
    backward(q, k, v, &forward.out, d_o, &forward.lse, params)
}

/// [`backward`] at the rows `rows` selects: dQ at the query rows it picks in each (batch, query
/// head), dK and dV at the keys the same selection picks among `S_kv` in each (batch, K/V head),
/// each key over every query row of its group (see [`SampledGradients`]).
///
/// [`RowSelection::All`] computes everything, the same values as [`backward`] up to the order
/// of additions.
#[allow(clippy::too_many_arguments)] // the backward's five tensors, the LSE, the mask, the rows
pub fn backward_rows(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    o: &HostTensor,
    d_o: &HostTensor,
    lse: &HostTensor,
    params: &Params,
    rows: &RowSelection,
) -> Result<SampledGradients, OracleError> {
    if let RowSelection::Sampled { rows_per_head, .. } = *rows {
        if rows_per_head < 2 {
            return Err(OracleError::InvalidRowSelection {
                rows_per_head,
                reason: "need at least 2 rows per head (the first and the last)",
            });
        }
    }
    let problem = Problem::new(q, k, v, o, d_o, lse, params)?;
    let shape = problem.shape;
    let d = shape.head_dim;
    let query_side: Vec<(Vec<RowId>, Vec<f64>)> = (0..shape.batch * shape.heads)
        .into_par_iter()
        .map(|slab| {
            let picked = select_rows(rows, shape.seq_q, slab);
            let mut dq = vec![0.0; picked.len() * d];
            for (&row, out) in picked.iter().zip(dq.chunks_exact_mut(d)) {
                problem.query_row(slab, row, out, |_, _, _| {});
            }
            (ids(slab, shape.heads, picked), dq)
        })
        .collect();
    let key_side: Vec<(Vec<RowId>, Vec<f64>, Vec<f64>)> = (0..shape.batch * shape.kv_heads)
        .into_par_iter()
        .map(|kv_slab| {
            let picked = select_rows(rows, shape.seq_kv, kv_slab);
            let (mut dk, mut dv) = (vec![0.0; picked.len() * d], vec![0.0; picked.len() * d]);
            for (i, &key) in picked.iter().enumerate() {
                let (dk, dv) = (&mut dk[i * d..][..d], &mut dv[i * d..][..d]);
                problem.key_row(kv_slab, key, dk, dv);
            }
            (ids(kv_slab, shape.kv_heads, picked), dk, dv)
        })
        .collect();
    let mut sampled = SampledGradients {
        shape,
        query_rows: vec![],
        dq: vec![],
        key_rows: vec![],
        dk: vec![],
        dv: vec![],
    };
    for (ids, dq) in query_side {
        sampled.query_rows.extend(ids);
        sampled.dq.extend(dq);
    }
    for (ids, dk, dv) in key_side {
        sampled.key_rows.extend(ids);
        sampled.dk.extend(dk);
        sampled.dv.extend(dv);
    }
    Ok(sampled)
}

/// One (batch, query head)'s share: its dQ rows, and its additions to its K/V head's dK and dV.
struct SlabGradients {
    dq: Vec<f64>,
    dk: Vec<f64>,
    dv: Vec<f64>,
}

/// The floor of every rounding scale of a backward on `q`'s dtype: its smallest normal number
/// (0 for f64 inputs, which no kernel rounds).
fn scale_floor(q: &HostTensor) -> f64 {
    q.dtype().map_or(0.0, DType::smallest_normal)
}

/// A backward's inputs, checked and widened to f64, with `D_i = rowsum(dO ∘ O)` per query row.
struct Problem {
    shape: Shape,
    params: Params,
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    d_o: Vec<f64>,
    lse: Vec<f64>,
    delta: Vec<f64>,
    /// The inputs' smallest normal number (0 for f64 inputs): the size below which no rounded
    /// operand or result is counted in the scales, as its rounding errs by `u` times it.
    normal: f64,
}

impl Problem {
    /// Checks every dims against Q's and K's and every LSE a visible row reads.
    fn new(
        q: &HostTensor,
        k: &HostTensor,
        v: &HostTensor,
        o: &HostTensor,
        d_o: &HostTensor,
        lse: &HostTensor,
        params: &Params,
    ) -> Result<Problem, OracleError> {
        let shape = check_inputs(q, k, v, params)?;
        let [b, h, s, d] = shape.q_dims();
        for (name, tensor, dims) in [
            ("o", o, shape.q_dims()),
            ("d_o", d_o, shape.q_dims()),
            ("lse", lse, [b, h, s, 1]),
        ] {
            tensor.check_len()?;
            if tensor.dims != dims {
                return Err(OracleError::DimsMismatch {
                    tensor: name,
                    expected: format!("{dims:?} to match q"),
                    found: tensor.dims,
                });
            }
        }
        let lse = lse.to_f64();
        for (index, &value) in lse.iter().enumerate() {
            let row = index % s;
            if !value.is_finite() && !params.kv_range(row, s, shape.seq_kv).is_empty() {
                let row = RowId {
                    batch: index / s / h,
                    head: index / s % h,
                    row,
                };
                return Err(OracleError::InvalidLse { row, value });
            }
        }
        let (o, d_o) = (o.to_f64(), d_o.to_f64());
        let delta = o
            .chunks_exact(d)
            .zip(d_o.chunks_exact(d))
            .map(|(o, g)| dot(o, g))
            .collect();
        Ok(Problem {
            shape,
            params: *params,
            q: q.to_f64(),
            k: k.to_f64(),
            v: v.to_f64(),
            d_o,
            lse,
            delta,
            normal: scale_floor(q),
        })
    }

    /// The K/V slab (batch, K/V head) that query slab (batch, query head) reads.
    fn kv_slab(&self, slab: usize) -> usize {
        let heads = self.shape.heads;
        slab / heads * self.shape.kv_heads + slab % heads / self.shape.group()
    }

    /// Row `row` of a tensor of `[.., S, D]` slabs.
    fn row<'a>(&self, tensor: &'a [f64], slab: usize, seq: usize, row: usize) -> &'a [f64] {
        let d = self.shape.head_dim;
        &tensor[(slab * seq + row) * d..][..d]
    }

    /// `(P_ij, dS_ij, |dS_ij|'s rounding size)` of query row `row` of query slab `slab` and key
    /// `key` of its K/V slab: a kernel computes `dP_ij − D_i` from a rounded `dP_ij` and `D_i`, so
    /// dS is off by about `u·P_ij·(|dP_ij| + |D_i|)` however much the difference cancels (a peaky
    /// row, whose P is one key and whose D is that key's dP).
    fn pair(&self, slab: usize, row: usize, key: usize) -> (f64, f64, f64) {
        let Shape { seq_q, seq_kv, .. } = self.shape;
        let kv_slab = self.kv_slab(slab);
        let flat = slab * seq_q + row;
        let logit = self.params.scale
            * dot(
                self.row(&self.q, slab, seq_q, row),
                self.row(&self.k, kv_slab, seq_kv, key),
            );
        let p = (logit - self.lse[flat]).exp();
        let dp = dot(
            self.row(&self.d_o, slab, seq_q, row),
            self.row(&self.v, kv_slab, seq_kv, key),
        );
        let delta = self.delta[flat];
        (p, p * (dp - delta), p * (dp.abs() + delta.abs()))
    }

    /// Writes query row `row`'s dQ into `dq` and hands each key it sees to `each(key, P, dS)`.
    fn query_row(
        &self,
        slab: usize,
        row: usize,
        dq: &mut [f64],
        mut each: impl FnMut(usize, f64, f64),
    ) {
        let Shape { seq_q, seq_kv, .. } = self.shape;
        let kv_slab = self.kv_slab(slab);
        let scale = self.params.scale;
        for key in self.params.kv_range(row, seq_q, seq_kv) {
            let (p, ds, _) = self.pair(slab, row, key);
            for (g, x) in dq.iter_mut().zip(self.row(&self.k, kv_slab, seq_kv, key)) {
                *g += scale * ds * x;
            }
            each(key, p, ds);
        }
    }

    /// Adds key `key`'s dK and dV, over every query row of its group that sees it.
    fn key_row(&self, kv_slab: usize, key: usize, dk: &mut [f64], dv: &mut [f64]) {
        let Shape {
            seq_q,
            seq_kv,
            heads,
            kv_heads,
            ..
        } = self.shape;
        let group = self.shape.group();
        let first = kv_slab / kv_heads * heads + kv_slab % kv_heads * group;
        for slab in first..first + group {
            for row in 0..seq_q {
                if !self.params.kv_range(row, seq_q, seq_kv).contains(&key) {
                    continue;
                }
                let (p, ds, _) = self.pair(slab, row, key);
                let (query, grad) = (
                    self.row(&self.q, slab, seq_q, row),
                    self.row(&self.d_o, slab, seq_q, row),
                );
                for ((k, v), (x, g)) in dk.iter_mut().zip(dv.iter_mut()).zip(query.iter().zip(grad))
                {
                    *k += self.params.scale * ds * x;
                    *v += p * g;
                }
            }
        }
    }

    /// Every gradient (and with `squares`, every element's sum of squared terms), in parallel over
    /// (batch, query head), assembled in head order.
    fn gradients(&self, squares: bool) -> (Gradients, Option<Gradients>) {
        let per_slab: Vec<(SlabGradients, Option<SlabGradients>)> = (0..self.shape.batch
            * self.shape.heads)
            .into_par_iter()
            .map(|slab| self.slab_backward(slab, squares))
            .collect();
        let values = self.assemble(per_slab.iter().map(|(g, _)| g), |x| x);
        let scales = squares.then(|| {
            let squared = per_slab.iter().map(|(_, s)| s.as_ref().expect("asked for"));
            self.assemble(squared, |x| x.sqrt().max(self.normal))
        });
        (values, scales)
    }

    /// The slabs' shares as gradients: dQ in slab order, dK and dV summed over each group in head
    /// order; `finish` applied to every element last.
    fn assemble<'a>(
        &self,
        per_slab: impl Iterator<Item = &'a SlabGradients>,
        finish: impl Fn(f64) -> f64,
    ) -> Gradients {
        let shape = self.shape;
        let kv_slab_len = shape.seq_kv * shape.head_dim;
        let mut dq = Vec::with_capacity(shape.q_len());
        let (mut dk, mut dv) = (vec![0.0; shape.kv_len()], vec![0.0; shape.kv_len()]);
        for (slab, part) in per_slab.enumerate() {
            dq.extend_from_slice(&part.dq);
            let at = self.kv_slab(slab) * kv_slab_len;
            add(&mut dk[at..at + kv_slab_len], &part.dk);
            add(&mut dv[at..at + kv_slab_len], &part.dv);
        }
        let tensor = |dims, mut values: Vec<f64>| {
            values.iter_mut().for_each(|x| *x = finish(*x));
            HostTensor {
                dims,
                data: HostData::F64(values),
            }
        };
        Gradients {
            dq: tensor(shape.q_dims(), dq),
            dk: tensor(shape.kv_dims(), dk),
            dv: tensor(shape.kv_dims(), dv),
        }
    }

    /// The whole backward of one (batch, query head), and with `squares` its terms squared.
    fn slab_backward(&self, slab: usize, squares: bool) -> (SlabGradients, Option<SlabGradients>) {
        let Shape {
            seq_q,
            seq_kv,
            head_dim: d,
            ..
        } = self.shape;
        let zeros = || SlabGradients {
            dq: vec![0.0; seq_q * d],
            dk: vec![0.0; seq_kv * d],
            dv: vec![0.0; seq_kv * d],
        };
        let (mut out, mut squared) = (zeros(), squares.then(zeros));
        let kv_slab = self.kv_slab(slab);
        let scale = self.params.scale;
        for row in 0..seq_q {
            let (query, grad) = (
                self.row(&self.q, slab, seq_q, row),
                self.row(&self.d_o, slab, seq_q, row),
            );
            for key in self.params.kv_range(row, seq_q, seq_kv) {
                let (p, ds, ds_size) = self.pair(slab, row, key);
                let key_vec = self.row(&self.k, kv_slab, seq_kv, key);
                let terms = Terms {
                    row,
                    key,
                    p,
                    query,
                    grad,
                    key_vec,
                };
                terms.add_to(&mut out, scale * ds, |t| t);
                if let Some(squared) = &mut squared {
                    // P and scale·dS are rounded to the input type: no smaller than its normals.
                    let sizes = Terms {
                        p: p.max(self.normal),
                        ..terms
                    };
                    sizes.add_to(squared, (scale * ds_size).max(self.normal), |t| t * t);
                }
            }
        }
        (out, squared)
    }
}

/// One (query row, key) pair's terms of dQ, dK and dV.
struct Terms<'a> {
    row: usize,
    key: usize,
    p: f64,
    query: &'a [f64],
    grad: &'a [f64],
    key_vec: &'a [f64],
}

impl Terms<'_> {
    /// Adds each term, through `f` (itself or its square), to its element of `into`, with
    /// `scaled_ds` as dQ's and dK's factor (`scale·dS_ij`, or its rounding size for the scales).
    fn add_to(&self, into: &mut SlabGradients, scaled_ds: f64, f: impl Fn(f64) -> f64) {
        let d = self.query.len();
        for (g, x) in into.dq[self.row * d..][..d].iter_mut().zip(self.key_vec) {
            *g += f(scaled_ds * x);
        }
        for (g, x) in into.dk[self.key * d..][..d].iter_mut().zip(self.query) {
            *g += f(scaled_ds * x);
        }
        for (g, x) in into.dv[self.key * d..][..d].iter_mut().zip(self.grad) {
            *g += f(self.p * x);
        }
    }
}

/// The ids of rows `picked` of slab `slab` of a side with `heads` heads.
fn ids(slab: usize, heads: usize, picked: Vec<usize>) -> Vec<RowId> {
    picked
        .into_iter()
        .map(|row| RowId {
            batch: slab / heads,
            head: slab % heads,
            row,
        })
        .collect()
}

/// `into[i] += from[i]`.
fn add(into: &mut [f64], from: &[f64]) {
    for (a, b) in into.iter_mut().zip(from) {
        *a += b;
    }
}

#[cfg(test)]
mod tests;
