//! Decode batches on the host: seeded inputs ([`generate_decode`]: Q packed like varlen, K and V
//! in their cache layout, a block table by [`PagePolicy`], sentinels wherever no key lives) and
//! the f64 oracle read through the block table ([`reference_decode`]).
//!
//! The oracle gathers each sequence's keys and values in logical order ([`KvCache::logical`])
//! and hands the equivalent varlen prefill batch to [`reference_varlen_rows`], so a decode row
//! is exact by the same arithmetic as a prefill row.

use std::fmt;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::tensor::Element;
use crate::{
    compare_packed, generate_varlen, reference_varlen_rows, CaseSpec, Distribution, HostData,
    HostTensor, OracleError, Packed, Reference, RowSelection, Shape, Tolerance, Verdict,
};
use attn_problem::{BlockTable, DecodeSpec, KvLayout, PagePolicy};

/// What fills every element of a page no block-table list names: NaN, so that a kernel reading a
/// page it was not given writes NaN.
pub const SENTINEL_PAGE: f64 = f64::NAN;

/// What fills the slots that hold no key of a used page (past its sequence's last token) and
/// the contiguous layout's padding: 2¹⁴, exact in fp16 and bf16, a logit that dominates its row
/// when a kernel forgets to mask it, yet finite, so that a zero weight times it stays 0.
pub const SENTINEL_SLOT: f64 = 16384.0;

/// Everything that determines a generated decode case; print it in every failure report.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeCase {
    /// The batch: lengths, heads, dtype, window, layout and page policy.
    pub spec: DecodeSpec,
    /// How Q, K and V are drawn.
    pub distribution: Distribution,
    /// The RNG seed of the values and of a shuffled table.
    pub seed: u64,
}

/// `"<distribution> <decode spec> seed=<seed>"`.
impl fmt::Display for DecodeCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} seed={}", self.distribution, self.spec, self.seed)
    }
}

/// A decode batch's K and V as a kernel reads them.
#[derive(Clone, Debug, PartialEq)]
pub enum KvCache {
    /// K and V `[B, H_kv, S_max, D]`: sequence `b`'s keys at positions `0..kv_b`.
    Contiguous {
        /// Keys.
        k: HostTensor,
        /// Values.
        v: HostTensor,
    },
    /// K and V caches `[num_pages, page_size, H_kv, D]`, read through `table`.
    Paged {
        /// Key cache.
        k: HostTensor,
        /// Value cache.
        v: HostTensor,
        /// Where each sequence's pages are.
        table: BlockTable,
    },
}

/// A generated decode case: Q `[1, total_q, H, D]` packed like varlen, and the cache.
#[derive(Clone, Debug)]
pub struct DecodeInputs {
    /// The case these tensors were generated from.
    pub case: DecodeCase,
    /// Queries, packed: sequence `b`'s new tokens at rows `cu_seqlens_q[b]..cu_seqlens_q[b+1]`.
    pub q: HostTensor,
    /// Keys and values in the spec's layout.
    pub cache: KvCache,
}

impl KvCache {
    /// The key tensor (cache).
    pub fn k(&self) -> &HostTensor {
        match self {
            KvCache::Contiguous { k, .. } | KvCache::Paged { k, .. } => k,
        }
    }

    /// The value tensor (cache).
    pub fn v(&self) -> &HostTensor {
        match self {
            KvCache::Contiguous { v, .. } | KvCache::Paged { v, .. } => v,
        }
    }

    /// The block table of a paged cache.
    pub fn table(&self) -> Option<&BlockTable> {
        match self {
            KvCache::Contiguous { .. } => None,
            KvCache::Paged { table, .. } => Some(table),
        }
    }

    /// Checks that the cache holds `spec`'s keys: its layout, dims `[B, H_kv, S_max, D]` or
    /// `[num_pages, P, H_kv, D]`, K and V alike, and a table that covers every sequence.
    pub fn check(&self, spec: &DecodeSpec) -> Result<(), OracleError> {
        let (k, v) = (self.k(), self.v());
        k.check_len()?;
        v.check_len()?;
        let (kv_heads, d) = (spec.kv_heads(), spec.head_dim());
        let (expected, words) = match (self, spec.layout()) {
            (KvCache::Contiguous { .. }, KvLayout::Contiguous) => (
                [spec.sequences(), kv_heads, spec.max_kv(), d],
                "[B, H_kv, S_max, D] for a contiguous cache",
            ),
            (KvCache::Paged { table, .. }, KvLayout::Paged { page_size, .. }) => {
                spec.check_table(table)?;
                (
                    [table.num_pages(), page_size, kv_heads, d],
                    "[num_pages, page_size, H_kv, D] for a paged cache",
                )
            }
            (_, layout) => {
                let wanted = match layout {
                    KvLayout::Contiguous => "a contiguous cache [B, H_kv, S_max, D]",
                    KvLayout::Paged { .. } => "a paged cache with a block table",
                };
                return Err(OracleError::DimsMismatch {
                    tensor: "k",
                    expected: format!("{wanted}, as the problem says"),
                    found: k.dims,
                });
            }
        };
        for (tensor, t) in [("k", k), ("v", v)] {
            if t.dims != expected {
                return Err(OracleError::DimsMismatch {
                    tensor,
                    expected: format!("{expected:?}: {words}"),
                    found: t.dims,
                });
            }
        }
        Ok(())
    }

    /// Every sequence's keys and values in logical order, packed like varlen K and V
    /// `[1, total_kv, H_kv, D]` in the cache's own element type (a copy, exact): what the
    /// equivalent prefill batch ([`DecodeSpec::varlen`]) reads.
    pub fn logical(&self, spec: &DecodeSpec) -> Result<(HostTensor, HostTensor), OracleError> {
        self.check(spec)?;
        let row = spec.kv_heads() * spec.head_dim();
        let lens = spec.seqlens_kv();
        // The element offset of token `t` of sequence `b`'s row of K/V heads, in the cache.
        let source = |b: usize, t: usize, head: usize| -> usize {
            match self {
                KvCache::Contiguous { k, .. } => {
                    let [_, heads, s_max, d] = k.dims;
                    ((b * heads + head) * s_max + t) * d
                }
                KvCache::Paged { table, .. } => {
                    let (page, slot) = table.slot(b, t);
                    (page * table.page_size() + slot) * row + head * spec.head_dim()
                }
            }
        };
        let gather = |cache: &HostTensor| -> HostTensor {
            let d = spec.head_dim();
            macro_rules! gather_as {
                ($variant:ident, $values:expr) => {{
                    let mut out = Vec::with_capacity(spec.varlen().total_kv() * row);
                    for (b, &len) in lens.iter().enumerate() {
                        for t in 0..len {
                            for head in 0..spec.kv_heads() {
                                let start = source(b, t, head);
                                out.extend_from_slice(&$values[start..start + d]);
                            }
                        }
                    }
                    HostData::$variant(out)
                }};
            }
            let data = match &cache.data {
                HostData::F16(values) => gather_as!(F16, values),
                HostData::Bf16(values) => gather_as!(Bf16, values),
                HostData::F32(values) => gather_as!(F32, values),
                HostData::F64(values) => gather_as!(F64, values),
            };
            HostTensor {
                dims: [1, spec.varlen().total_kv(), spec.kv_heads(), d],
                data,
            }
        };
        Ok((gather(self.k()), gather(self.v())))
    }
}

/// The block table `spec`'s page policy makes for its KV lengths (`None` when contiguous),
/// deterministic in `seed` (which only a shuffled table reads):
/// - in order: the sequences' pages one after another, one spare page last;
/// - shuffled: a seeded permutation of the used pages and `max(1, used/8)` spare ones;
/// - interleaved: round `j` gives each sequence with a `j`-th page the next page, then leaves
///   one page unused, a gap;
/// - shared prefix `N`: pages `0..N` are every sequence's first (up to) `N`, the rest in order
///   after them, one spare page last.
pub fn block_table(spec: &DecodeSpec, seed: u64) -> Result<Option<BlockTable>, OracleError> {
    let KvLayout::Paged { page_size, policy } = spec.layout() else {
        return Ok(None);
    };
    let counts: Vec<usize> = (0..spec.sequences()).map(|b| spec.pages_of(b)).collect();
    let used: usize = counts.iter().sum();
    let in_order = |first: usize| -> Vec<Vec<usize>> {
        let mut next = first;
        counts
            .iter()
            .map(|&n| {
                next += n;
                (next - n..next).collect()
            })
            .collect()
    };
    let (lists, num_pages) = match policy {
        PagePolicy::InOrder => (in_order(0), used + 1),
        PagePolicy::Shuffled => {
            let total = used + (used / 8).max(1);
            let mut order: Vec<usize> = (0..total).collect();
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            // A stream of its own, apart from the values' streams.
            rng.set_stream(u64::MAX);
            order.shuffle(&mut rng);
            let lists = in_order(0)
                .into_iter()
                .map(|list| list.into_iter().map(|i| order[i]).collect())
                .collect();
            (lists, total)
        }
        PagePolicy::Interleaved => {
            let mut lists = vec![Vec::new(); counts.len()];
            let mut next = 0;
            for j in 0..counts.iter().copied().max().unwrap_or(0) {
                for (list, &n) in lists.iter_mut().zip(&counts) {
                    if j < n {
                        list.push(next);
                        next += 1;
                    }
                }
                next += 1; // the gap
            }
            (lists, next.max(1))
        }
        PagePolicy::SharedPrefix(shared) => {
            let mut next = shared;
            let lists = counts
                .iter()
                .map(|&n| {
                    let own = n.saturating_sub(shared);
                    next += own;
                    (0..n.min(shared)).chain(next - own..next).collect()
                })
                .collect();
            (lists, next + 1)
        }
    };
    let as_i32 = |lists: Vec<Vec<usize>>| -> Option<Vec<Vec<i32>>> {
        lists
            .into_iter()
            .map(|list| list.into_iter().map(|p| i32::try_from(p).ok()).collect())
            .collect()
    };
    let lists = as_i32(lists).ok_or(attn_problem::ProblemError::InvalidBlockTable {
        reason: format!("{num_pages} pages do not fit int32 indices"),
    })?;
    Ok(Some(BlockTable::new(page_size, num_pages, lists)?))
}

/// Generates a decode case: Q, K and V are [`generate_varlen`]'s for the equivalent prefill
/// batch (so every [`Distribution`] means what it means there), K and V then written into the
/// spec's layout. Pages no list names hold [`SENTINEL_PAGE`]; slots of a used page past its
/// last token, and contiguous padding, hold [`SENTINEL_SLOT`]. A page several sequences share
/// holds, slot by slot, the first such sequence's key, which is then every sharer's logical key.
pub fn generate_decode(case: &DecodeCase) -> Result<DecodeInputs, OracleError> {
    let spec = &case.spec;
    let per_head =
        Shape::new(1, spec.heads(), 1, 1, spec.head_dim())?.with_kv_heads(spec.kv_heads())?;
    let packed = generate_varlen(
        &CaseSpec {
            shape: per_head,
            dtype: spec.dtype(),
            distribution: case.distribution,
            seed: case.seed,
        },
        spec.varlen(),
    );
    let cache = match block_table(spec, case.seed)? {
        None => KvCache::Contiguous {
            k: lay_out(&packed.k, spec, None),
            v: lay_out(&packed.v, spec, None),
        },
        Some(table) => KvCache::Paged {
            k: lay_out(&packed.k, spec, Some(&table)),
            v: lay_out(&packed.v, spec, Some(&table)),
            table,
        },
    };
    Ok(DecodeInputs {
        case: case.clone(),
        q: packed.q,
        cache,
    })
}

/// Packed varlen K or V `[1, total_kv, H_kv, D]` written into `spec`'s cache layout.
fn lay_out(packed: &HostTensor, spec: &DecodeSpec, table: Option<&BlockTable>) -> HostTensor {
    fn typed<T: Element>(
        packed: &[T],
        spec: &DecodeSpec,
        table: Option<&BlockTable>,
    ) -> ([usize; 4], Vec<T>) {
        let (heads, d) = (spec.kv_heads(), spec.head_dim());
        let row = heads * d;
        let (slot_fill, page_fill) = (T::from_f64(SENTINEL_SLOT), T::from_f64(SENTINEL_PAGE));
        let cu = spec.varlen().cu_seqlens(Packed::Keys);
        let Some(table) = table else {
            let s_max = spec.max_kv();
            let mut cache = vec![slot_fill; spec.sequences() * row * s_max];
            for (b, &len) in spec.seqlens_kv().iter().enumerate() {
                for t in 0..len {
                    let token = cu[b] as usize + t;
                    for h in 0..heads {
                        let at = ((b * heads + h) * s_max + t) * d;
                        cache[at..at + d].copy_from_slice(&packed[(token * heads + h) * d..][..d]);
                    }
                }
            }
            return ([spec.sequences(), heads, s_max, d], cache);
        };
        let p = table.page_size();
        let mut cache = vec![page_fill; table.num_pages() * p * row];
        let mut written = vec![false; table.num_pages() * p];
        for b in 0..spec.sequences() {
            for &page in &table.pages(b)[..spec.pages_of(b)] {
                let page = page as usize;
                cache[page * p * row..(page + 1) * p * row].fill(slot_fill);
            }
        }
        for (b, &len) in spec.seqlens_kv().iter().enumerate() {
            for t in 0..len {
                let (page, slot) = table.slot(b, t);
                let at = page * p + slot;
                if !std::mem::replace(&mut written[at], true) {
                    let token = cu[b] as usize + t;
                    cache[at * row..(at + 1) * row]
                        .copy_from_slice(&packed[token * row..(token + 1) * row]);
                }
            }
        }
        ([table.num_pages(), p, heads, d], cache)
    }
    let (dims, data) = match &packed.data {
        HostData::F16(values) => {
            let (dims, cache) = typed(values, spec, table);
            (dims, HostData::F16(cache))
        }
        HostData::Bf16(values) => {
            let (dims, cache) = typed(values, spec, table);
            (dims, HostData::Bf16(cache))
        }
        HostData::F32(values) => {
            let (dims, cache) = typed(values, spec, table);
            (dims, HostData::F32(cache))
        }
        HostData::F64(values) => {
            let (dims, cache) = typed(values, spec, table);
            (dims, HostData::F64(cache))
        }
    };
    HostTensor { dims, data }
}

/// The exact f64 output of a decode batch on the rows `rows` selects in each sequence (as its
/// own dense problem `[1, H, q_b, kv_b, D]`), reading K and V through the cache's layout: a
/// [`Reference`] over the batch's bounding shape whose rows are (sequence, head, row within the
/// sequence), as [`reference_varlen_rows`] makes. An empty sequence has no row; every other row
/// sees at least one key (its own).
///
/// Q is `[1, total_q, H, D]`, packed like [`DecodeSpec::varlen`]; query head `h` reads K/V head
/// `h / (H / H_kv)`.
pub fn reference_decode(
    spec: &DecodeSpec,
    q: &HostTensor,
    cache: &KvCache,
    rows: &RowSelection,
) -> Result<Reference, OracleError> {
    reference_decode_scaled(spec, q, cache, rows, spec.params().scale)
}

/// [`reference_decode`] at softmax scale `scale` instead of the spec's 1/√D (a check's draw).
pub fn reference_decode_scaled(
    spec: &DecodeSpec,
    q: &HostTensor,
    cache: &KvCache,
    rows: &RowSelection,
    scale: f64,
) -> Result<Reference, OracleError> {
    q.check_len()?;
    let expected = [1, spec.varlen().total_q(), spec.heads(), spec.head_dim()];
    if q.dims != expected {
        return Err(OracleError::DimsMismatch {
            tensor: "q",
            expected: format!("{expected:?}: [1, total_q, H, D], packed like varlen"),
            found: q.dims,
        });
    }
    let (k, v) = cache.logical(spec)?;
    let params = spec.params().with_scale(scale);
    reference_varlen_rows(q, &k, &v, &params, spec.varlen(), &|_, _| *rows)
}

/// Compares a decode output `[1, total_q, H, D]` (packed like Q) with a [`reference_decode`]
/// on every row it computed, poison counted over the whole output; `worst` is
/// `[sequence, head, row within the sequence, d]`.
pub fn compare_decode(
    output: &HostTensor,
    reference: &Reference,
    spec: &DecodeSpec,
    tolerance: &Tolerance,
) -> Verdict {
    compare_packed(output, reference, spec.varlen(), tolerance)
}
