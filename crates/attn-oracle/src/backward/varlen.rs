//! The forward with LSE and the backward of a packed variable-length batch: each sequence's dense
//! oracle, packed, so that each is exact by construction as the forward's varlen oracle is.

use crate::varlen::check_packed_dims;
use crate::{HostData, HostTensor, OracleError, Packed, Params, Varlen, VarlenTensors};

use super::{forward_with_lse, gradients_of, scale_floor, Forward, Gradients};

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

/// [`backward`](super::backward) of a packed batch: Q, O, dO `[1, total_q, H, D]`, the LSE `[1, total_q, H, 1]`,
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
    let inputs = [q, k, v, o, d_o, lse];
    Ok(packed_gradients(inputs, params, varlen, false)?.0)
}

/// [`backward_varlen`] with each element's rounding scale ([`super::backward_with_scales`]),
/// packed alike; a sequence with no key or no query has gradients 0 there, and scales the
/// input type's smallest normal, every scale's floor.
#[allow(clippy::too_many_arguments)] // the backward's five tensors, the LSE, the mask, the batch
pub fn backward_varlen_with_scales(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    o: &HostTensor,
    d_o: &HostTensor,
    lse: &HostTensor,
    params: &Params,
    varlen: &Varlen,
) -> Result<(Gradients, Gradients), OracleError> {
    let inputs = [q, k, v, o, d_o, lse];
    let (grads, scales) = packed_gradients(inputs, params, varlen, true)?;
    Ok((grads, scales.expect("asked for")))
}

/// Each sequence's backward (with `scales`, its scales too), packed.
fn packed_gradients(
    [q, k, v, o, d_o, lse]: [&HostTensor; 6],
    params: &Params,
    varlen: &Varlen,
    scales: bool,
) -> Result<(Gradients, Option<Gradients>), OracleError> {
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
    // Per sequence: (gradients, scales), each `None` for a side with no rows.
    let mut parts: [Vec<Option<HostTensor>>; 6] = Default::default();
    for b in 0..varlen.sequences() {
        let queries = |t: &HostTensor| varlen.unpack(t, Packed::Queries, b);
        let keys = |t: &HostTensor| varlen.unpack(t, Packed::Keys, b);
        let found: [Option<HostTensor>; 6] = match (queries(q), keys(k), keys(v)) {
            (Some(qb), Some(kb), Some(vb)) => {
                // O, dO and the LSE are packed like Q (checked above), so they have its rows.
                let packed_like_q = |t| queries(t).expect("packed like q");
                let (ob, gb, lb) = (packed_like_q(o), packed_like_q(d_o), packed_like_q(lse));
                let (grads, scaled) = gradients_of([&qb, &kb, &vb, &ob, &gb, &lb], params, scales)?;
                let [sq, sk, sv] = match scaled {
                    Some(s) => [Some(s.dq), Some(s.dk), Some(s.dv)],
                    None => [None, None, None],
                };
                [Some(grads.dq), Some(grads.dk), Some(grads.dv), sq, sk, sv]
            }
            (queries, keys, _) => {
                // Gradients 0; scales at their floor, as every other element's.
                let fill =
                    |t: &Option<HostTensor>, value| t.as_ref().map(|t| filled(t.dims, value));
                let floor = scale_floor(q);
                [
                    fill(&queries, 0.0),
                    fill(&keys, 0.0),
                    fill(&keys, 0.0),
                    fill(&queries, floor),
                    fill(&keys, floor),
                    fill(&keys, floor),
                ]
            }
        };
        for (part, tensor) in parts.iter_mut().zip(found) {
            part.push(tensor);
        }
    }
    let pack = |at: usize| {
        let (side, h) = if at % 3 == 0 {
            (Packed::Queries, heads)
        } else {
            (Packed::Keys, kv_heads)
        };
        varlen.pack(&parts[at], side, h, d)
    };
    let grads = Gradients {
        dq: pack(0),
        dk: pack(1),
        dv: pack(2),
    };
    let scaled = scales.then(|| Gradients {
        dq: pack(3),
        dk: pack(4),
        dv: pack(5),
    });
    Ok((grads, scaled))
}

/// An f64 tensor of `dims` holding `value` everywhere.
fn filled(dims: [usize; 4], value: f64) -> HostTensor {
    HostTensor {
        dims,
        data: HostData::F64(vec![value; dims.iter().product()]),
    }
}
