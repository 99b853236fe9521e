//! Packed variable-length batches (FlashAttention's "varlen" or THD layout): sequences of
//! different lengths in one batch, Q and O packed `[total_q, H, D]`, K and V `[total_kv, H_kv,
//! D]`, each sequence's rows one after another, described by cumulative int32 offsets.
//!
//! A packed tensor is held in a [`HostTensor`] with dims `[1, total, H, D]`. Every mask aligns
//! bottom-right within its own sequence. The oracle of a varlen batch is the oracle of each
//! sequence as its own dense problem ([`VarlenTensors::unpack`]), so it is exact by construction.

use rayon::prelude::*;

use crate::compare::{compare_in, OutputLayout};
use crate::{
    compare, generate, reference, shape_from_dims, CaseSpec, DType, HostData, HostTensor, Inputs,
    OracleError, Packed, Params, ProblemError, Reference, RowId, RowSelection, Shape, Tolerance,
    Varlen, Verdict,
};

/// [`Varlen`]'s work on host tensors: a packed tensor's sequences as dense tensors and back.
pub trait VarlenTensors {
    /// Sequence `b` of a packed tensor as a dense `[1, heads, S_b, D]` tensor of the packed
    /// tensor's own element type (exact: a copy), or `None` when that sequence has no rows on
    /// this side.
    fn unpack(&self, packed: &HostTensor, side: Packed, b: usize) -> Option<HostTensor>;

    /// Dense `[1, heads, S_b, D]` parts (`None` for an empty sequence) packed into
    /// `[1, total, heads, D]`, exactly: a copy in the parts' own element type (f64 when their
    /// types differ or there is no part), in parallel over tokens.
    fn pack(
        &self,
        parts: &[Option<HostTensor>],
        side: Packed,
        heads: usize,
        d: usize,
    ) -> HostTensor;
}

impl VarlenTensors for Varlen {
    fn unpack(&self, packed: &HostTensor, side: Packed, b: usize) -> Option<HostTensor> {
        let [_, _, heads, d] = packed.dims;
        let lens = self.lengths(side);
        let (start, len) = (lens[..b].iter().sum::<usize>(), lens[b]);
        if len == 0 {
            return None;
        }
        let data = match &packed.data {
            HostData::F16(v) => HostData::F16(gather_sequence(v, heads, d, start, len)),
            HostData::Bf16(v) => HostData::Bf16(gather_sequence(v, heads, d, start, len)),
            HostData::F32(v) => HostData::F32(gather_sequence(v, heads, d, start, len)),
            HostData::F64(v) => HostData::F64(gather_sequence(v, heads, d, start, len)),
        };
        Some(HostTensor {
            dims: [1, heads, len, d],
            data,
        })
    }

    // In parallel and in the parts' own type: a batch-mode bench packs dozens of large sets, which
    // widening to f64 on one thread made take seconds each.
    fn pack(
        &self,
        parts: &[Option<HostTensor>],
        side: Packed,
        heads: usize,
        d: usize,
    ) -> HostTensor {
        let lens = self.lengths(side);
        let offsets = self.cu_seqlens(side);
        let total: usize = lens.iter().sum();
        let first = parts.iter().flatten().next().map(|p| &p.data);
        let kind = |data: &HostData| std::mem::discriminant(data);
        let uniform =
            first.is_some_and(|f| parts.iter().flatten().all(|p| kind(&p.data) == kind(f)));
        macro_rules! scatter_as {
            ($variant:ident) => {{
                let slices: Vec<Option<&[_]>> = parts
                    .iter()
                    .map(|p| {
                        p.as_ref().map(|t| match &t.data {
                            HostData::$variant(v) => &v[..],
                            _ => unreachable!("parts of one element type"),
                        })
                    })
                    .collect();
                HostData::$variant(scatter_sequences(&slices, lens, &offsets, heads, d))
            }};
        }
        let data = match first {
            Some(HostData::F16(_)) if uniform => scatter_as!(F16),
            Some(HostData::Bf16(_)) if uniform => scatter_as!(Bf16),
            Some(HostData::F32(_)) if uniform => scatter_as!(F32),
            Some(HostData::F64(_)) if uniform => scatter_as!(F64),
            _ => {
                let wide: Vec<Option<Vec<f64>>> = parts
                    .iter()
                    .map(|p| p.as_ref().map(HostTensor::to_f64))
                    .collect();
                let slices: Vec<Option<&[f64]>> = wide.iter().map(|p| p.as_deref()).collect();
                HostData::F64(scatter_sequences(&slices, lens, &offsets, heads, d))
            }
        };
        HostTensor {
            dims: [1, total, heads, d],
            data,
        }
    }
}

/// Sequence rows `start..start + len` of a packed `[total, heads, d]` tensor as dense
/// `[heads, len, d]`.
fn gather_sequence<T: Copy>(
    packed: &[T],
    heads: usize,
    d: usize,
    start: usize,
    len: usize,
) -> Vec<T> {
    let mut dense = Vec::with_capacity(heads * len * d);
    for h in 0..heads {
        for t in start..start + len {
            dense.extend_from_slice(&packed[(t * heads + h) * d..][..d]);
        }
    }
    dense
}

/// Dense `[heads, len_b, d]` parts (`None`: no rows) packed into `[Σ len_b, heads, d]`, each
/// token's row of heads filled by its own task.
fn scatter_sequences<T: Copy + Default + Send + Sync>(
    parts: &[Option<&[T]>],
    lens: &[usize],
    offsets: &[i32],
    heads: usize,
    d: usize,
) -> Vec<T> {
    let starts = &offsets[..lens.len()];
    let total = offsets[lens.len()] as usize;
    let mut packed = vec![T::default(); total * heads * d];
    packed
        .par_chunks_mut((heads * d).max(1))
        .enumerate()
        .for_each(|(token, row)| {
            // The last sequence starting at or before the token: an empty one shares its start
            // with the next, which holds the token.
            let b = starts.partition_point(|&start| start as usize <= token) - 1;
            let (t, len) = (token - starts[b] as usize, lens[b]);
            if let Some(part) = parts[b] {
                for h in 0..heads {
                    row[h * d..][..d].copy_from_slice(&part[(h * len + t) * d..][..d]);
                }
            }
        });
    packed
}

/// Generates a packed varlen case: each sequence is the dense case of `spec` (its heads, head dim,
/// dtype and distribution) with that sequence's lengths and a seed of its own, then packed.
pub fn generate_varlen(spec: &CaseSpec, varlen: &Varlen) -> Inputs {
    let shape = spec.shape;
    let mut parts = [vec![], vec![], vec![]];
    for b in 0..varlen.sequences() {
        let (lq, lkv) = (varlen.seqlens_q[b], varlen.seqlens_kv[b]);
        let dense = Shape::new(1, shape.heads, lq.max(1), lkv.max(1), shape.head_dim)
            .and_then(|s| s.with_kv_heads(shape.kv_heads));
        let inputs = dense.ok().map(|dense| {
            generate(&CaseSpec {
                shape: dense,
                seed: spec.seed ^ (b as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                ..*spec
            })
        });
        let keep = |t: &HostTensor, len: usize| (len > 0).then(|| t.clone());
        parts[0].push(inputs.as_ref().and_then(|i| keep(&i.q, lq)));
        parts[1].push(inputs.as_ref().and_then(|i| keep(&i.k, lkv)));
        parts[2].push(inputs.as_ref().and_then(|i| keep(&i.v, lkv)));
    }
    // Packed in `spec.dtype`, the parts' type; a side with no rows packs as f64 (no part to take
    // the type from), converted here (exact: it is empty).
    let (d, dtype) = (shape.head_dim, spec.dtype);
    let in_dtype = |t: HostTensor| match t.dtype() {
        Ok(own) if own == dtype => t,
        _ => t.to_dtype(dtype),
    };
    Inputs {
        spec: *spec,
        q: in_dtype(varlen.pack(&parts[0], Packed::Queries, shape.heads, d)),
        k: in_dtype(varlen.pack(&parts[1], Packed::Keys, shape.kv_heads, d)),
        v: in_dtype(varlen.pack(&parts[2], Packed::Keys, shape.kv_heads, d)),
    }
}

/// The exact f64 output of a packed batch, packed `[1, total_q, H, D]` (f64): every sequence's
/// oracle; rows of a sequence with no key are 0.
pub fn reference_varlen(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    params: &Params,
    varlen: &Varlen,
) -> Result<HostTensor, OracleError> {
    let [_, _, heads, d] = q.dims;
    check_packed_dims(q, k, v, varlen)?;
    let mut parts = Vec::with_capacity(varlen.sequences());
    for b in 0..varlen.sequences() {
        let Some(qb) = varlen.unpack(q, Packed::Queries, b) else {
            parts.push(None);
            continue;
        };
        let out = match (
            varlen.unpack(k, Packed::Keys, b),
            varlen.unpack(v, Packed::Keys, b),
        ) {
            (Some(kb), Some(vb)) => reference(&qb, &kb, &vb, params, &RowSelection::All)?
                .to_tensor()
                .expect("every row was computed"),
            // No key: every row sees nothing and is 0.
            _ => HostTensor {
                dims: qb.dims,
                data: crate::HostData::F64(vec![0.0; qb.len()]),
            },
        };
        parts.push(Some(out));
    }
    Ok(varlen.pack(&parts, Packed::Queries, heads, d))
}

/// Compares a packed output with [`reference_varlen`] element by element: one verdict over the
/// whole batch (`worst` as `[sequence, head, row, d]`), through [`compare`] on each sequence.
pub fn compare_varlen(
    output: &HostTensor,
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    params: &Params,
    varlen: &Varlen,
    tolerance: &Tolerance,
) -> Result<Verdict, OracleError> {
    let mut merged: Option<Verdict> = None;
    for b in 0..varlen.sequences() {
        let (Some(qb), Some(ob)) = (
            varlen.unpack(q, Packed::Queries, b),
            varlen.unpack(output, Packed::Queries, b),
        ) else {
            continue;
        };
        let verdict = match (
            varlen.unpack(k, Packed::Keys, b),
            varlen.unpack(v, Packed::Keys, b),
        ) {
            (Some(kb), Some(vb)) => {
                let r = reference(&qb, &kb, &vb, params, &RowSelection::All)?;
                compare(&ob, &r, tolerance)
            }
            _ => {
                // No key: the reference is zeros; compare against a zero-key-free stand-in.
                let zeros = HostTensor::from_f64(qb.dims, DType::F32, &vec![0.0; qb.len()]);
                let r = crate::Reference {
                    shape: Shape::new(1, qb.dims[1], qb.dims[2], 1, qb.dims[3])?,
                    params: *params,
                    rows: (0..qb.dims[1])
                        .flat_map(|h| {
                            (0..qb.dims[2]).map(move |row| crate::RowId {
                                batch: 0,
                                head: h,
                                row,
                            })
                        })
                        .collect(),
                    out: zeros.to_f64(),
                    lse: vec![f64::NEG_INFINITY; qb.dims[1] * qb.dims[2]],
                };
                compare(&ob, &r, tolerance)
            }
        };
        merged = Some(match merged {
            None => Verdict {
                worst: [b, verdict.worst[1], verdict.worst[2], verdict.worst[3]],
                reason: verdict.reason.map(|r| format!("sequence {b}: {r}")),
                ..verdict
            },
            Some(m) => merge(m, verdict, b),
        });
    }
    merged.ok_or_else(|| {
        ProblemError::InvalidVarlen {
            reason: "every sequence is empty".into(),
        }
        .into()
    })
}

/// Two sequences' verdicts as one: counts summed, the worst errors kept, the first failure's
/// reason (`rel_l2` is the worst sequence's).
fn merge(a: Verdict, b: Verdict, sequence: usize) -> Verdict {
    let b_worse = !b.passed && a.passed || (b.passed == a.passed && b.max_abs > a.max_abs);
    Verdict {
        passed: a.passed && b.passed,
        max_abs: a.max_abs.max(b.max_abs),
        max_rel: a.max_rel.max(b.max_rel),
        rel_l2: a.rel_l2.max(b.rel_l2),
        worst: if b_worse {
            [sequence, b.worst[1], b.worst[2], b.worst[3]]
        } else {
            a.worst
        },
        nan_count: a.nan_count + b.nan_count,
        inf_count: a.inf_count + b.inf_count,
        poison_count: a.poison_count + b.poison_count,
        compared: a.compared + b.compared,
        tolerance: a.tolerance,
        reason: a
            .reason
            .or_else(|| b.reason.map(|r| format!("sequence {sequence}: {r}"))),
    }
}

/// The f64 oracle of a packed batch on the rows `select` picks in each sequence (given that
/// sequence's own dense shape `[1, H, S_q, S_kv, D]` and its index), as one [`Reference`] over
/// the batch's bounding shape ([`Varlen::bounding_shape`]) whose rows are (sequence, head, row
/// within the sequence): what [`compare_packed`] judges a packed output by. Every row of a
/// sequence with no key is 0 (logsumexp −∞); a sequence with no query has no row.
pub fn reference_varlen_rows(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    params: &Params,
    varlen: &Varlen,
    select: &dyn Fn(&Shape, usize) -> RowSelection,
) -> Result<Reference, OracleError> {
    let [_, _, heads, d] = q.dims;
    let kv_heads = k.dims[2];
    check_packed_dims(q, k, v, varlen)?;
    let per_head = Shape::new(1, heads, 1, 1, d)?.with_kv_heads(kv_heads)?;
    let mut merged = Reference {
        shape: varlen.bounding_shape(&per_head)?,
        params: *params,
        rows: vec![],
        out: vec![],
        lse: vec![],
    };
    for b in 0..varlen.sequences() {
        let Some(qb) = varlen.unpack(q, Packed::Queries, b) else {
            continue;
        };
        let keys = varlen.unpack(k, Packed::Keys, b);
        let values = varlen.unpack(v, Packed::Keys, b);
        let (Some(kb), Some(vb)) = (keys, values) else {
            // No key: every row sees nothing.
            let rows = qb.dims[1] * qb.dims[2];
            merged.rows.extend((0..rows).map(|r| RowId {
                batch: b,
                head: r / qb.dims[2],
                row: r % qb.dims[2],
            }));
            merged.out.extend(std::iter::repeat_n(0.0, rows * d));
            merged
                .lse
                .extend(std::iter::repeat_n(f64::NEG_INFINITY, rows));
            continue;
        };
        let dense = shape_from_dims(qb.dims, kb.dims)?;
        let one = reference(&qb, &kb, &vb, params, &select(&dense, b))?;
        merged
            .rows
            .extend(one.rows.iter().map(|id| RowId { batch: b, ..*id }));
        merged.out.extend(one.out);
        merged.lse.extend(one.lse);
    }
    Ok(merged)
}

/// Compares a packed output `[1, total_q, H, D]` with a reference of [`reference_varlen_rows`]
/// on every row it computed, as [`compare`] does a dense one (poison counted over the whole
/// output); `worst` is `[sequence, head, row within the sequence, d]`.
pub fn compare_packed(
    output: &HostTensor,
    reference: &Reference,
    varlen: &Varlen,
    tolerance: &Tolerance,
) -> Verdict {
    let (heads, d) = (reference.shape.heads, reference.shape.head_dim);
    compare_in(
        output,
        reference,
        tolerance,
        &OutputLayout {
            dims: [1, varlen.total_q(), heads, d],
            row_start: &|id| varlen.packed_row(id, heads).map(|r| r * d),
            index_of: &|flat| match varlen.row_id(flat / d, heads) {
                Some(id) => [id.batch, id.head, id.row, flat % d],
                None => [varlen.sequences(), 0, 0, flat % d],
            },
            floor: None,
            size: None,
        },
    )
}

/// Packed Q, K and V must hold the batch's queries and keys, K and V alike.
pub(crate) fn check_packed_dims(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    varlen: &Varlen,
) -> Result<(), OracleError> {
    if q.dims[1] != varlen.total_q() || k.dims[1] != varlen.total_kv() || k.dims != v.dims {
        return Err(ProblemError::InvalidVarlen {
            reason: format!(
                "packed Q {:?}, K {:?}, V {:?} do not hold the batch's {} queries and {} keys",
                q.dims,
                k.dims,
                v.dims,
                varlen.total_q(),
                varlen.total_kv()
            ),
        }
        .into());
    }
    Ok(())
}
