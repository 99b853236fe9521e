//! The forward with LSE and the backward of a packed variable-length batch: each sequence's dense
//! oracle, packed, so that each is exact by construction as the forward's varlen oracle is.

use crate::varlen::check_packed_dims;
use crate::{HostData, HostTensor, OracleError, Packed, Params, Varlen, VarlenTensors};

use super::{backward, forward_with_lse, Forward, Gradients};

/// [`forward_with_lse`] of a packed batch: O `[1, total_q, H, D]` and the LSE `[1, total_q, H,
/// 1]`, f64; every row of a sequence with no key is 0 with LSE −∞.
pub fn forward_varlen(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    params: &Params,
    varlen: &Varlen,
) -> Result<Forward, OracleError> {
    check_packed_dims(q, k, v, varlen)?;
    let [_, _, heads, d] = q.dims;
    let (mut outs, mut lses) = (vec![], vec![]);
    for b in 0..varlen.sequences() {
        let Some(qb) = varlen.unpack(q, Packed::Queries, b) else {
            outs.push(None);
            lses.push(None);
            continue;
        };
        let keys = varlen.unpack(k, Packed::Keys, b);
        let forward = match (keys, varlen.unpack(v, Packed::Keys, b)) {
            (Some(kb), Some(vb)) => forward_with_lse(&qb, &kb, &vb, params)?,
            // No key: every row sees nothing.
            _ => {
                let [_, h, s, _] = qb.dims;
                Forward {
                    out: filled(qb.dims, 0.0),
                    lse: filled([1, h, s, 1], f64::NEG_INFINITY),
                }
            }
        };
        outs.push(Some(forward.out));
        lses.push(Some(forward.lse));
    }
    Ok(Forward {
        out: varlen.pack(&outs, Packed::Queries, heads, d),
        lse: varlen.pack(&lses, Packed::Queries, heads, 1),
    })
}

/// [`backward`] of a packed batch: Q, O, dO `[1, total_q, H, D]`, the LSE `[1, total_q, H, 1]`,
/// K, V `[1, total_kv, H_kv, D]`; dQ, dK and dV packed like Q, K and V, f64. A sequence with no
/// key has dQ 0; one with no query has dK and dV 0.
#[allow(clippy::too_many_arguments)] // the backward's five tensors, the LSE, the mask, the batch
pub fn backward_varlen(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    o: &HostTensor,
    d_o: &HostTensor,
    lse: &HostTensor,
    params: &Params,
    varlen: &Varlen,
) -> Result<Gradients, OracleError> {
    check_packed_dims(q, k, v, varlen)?;
    let [_, _, heads, d] = q.dims;
    let kv_heads = k.dims[2];
    for (name, tensor, last) in [("o", o, d), ("d_o", d_o, d), ("lse", lse, 1)] {
        let dims = [1, varlen.total_q(), heads, last];
        if tensor.dims != dims {
            return Err(OracleError::DimsMismatch {
                tensor: name,
                expected: format!("{dims:?}, packed like q"),
                found: tensor.dims,
            });
        }
    }
    let (mut dq, mut dk, mut dv) = (vec![], vec![], vec![]);
    for b in 0..varlen.sequences() {
        let queries = |t: &HostTensor| varlen.unpack(t, Packed::Queries, b);
        let keys = |t: &HostTensor| varlen.unpack(t, Packed::Keys, b);
        match (queries(q), keys(k), keys(v)) {
            (Some(qb), Some(kb), Some(vb)) => {
                // O, dO and the LSE are packed like Q (checked above), so they have its rows.
                let packed_like_q = |t| queries(t).expect("packed like q");
                let (ob, gb, lb) = (packed_like_q(o), packed_like_q(d_o), packed_like_q(lse));
                let grads = backward(&qb, &kb, &vb, &ob, &gb, &lb, params)?;
                dq.push(Some(grads.dq));
                dk.push(Some(grads.dk));
                dv.push(Some(grads.dv));
            }
            (queries, keys, _) => {
                dq.push(queries.map(|t| filled(t.dims, 0.0)));
                dk.push(keys.as_ref().map(|t| filled(t.dims, 0.0)));
                dv.push(keys.map(|t| filled(t.dims, 0.0)));
            }
        }
    }
    Ok(Gradients {
        dq: varlen.pack(&dq, Packed::Queries, heads, d),
        dk: varlen.pack(&dk, Packed::Keys, kv_heads, d),
        dv: varlen.pack(&dv, Packed::Keys, kv_heads, d),
    })
}

/// An f64 tensor of `dims` holding `value` everywhere.
fn filled(dims: [usize; 4], value: f64) -> HostTensor {
    HostTensor {
        dims,
        data: HostData::F64(vec![value; dims.iter().product()]),
    }
}
