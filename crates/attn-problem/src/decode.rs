//! Decode batches ([`DecodeSpec`]): a few new query tokens per sequence against a long KV cache,
//! contiguous or held in fixed-size pages ([`KvLayout`], [`BlockTable`]), and what a launch must
//! move and compute ([`DecodeBytes`], [`DecodeSpec::flops`]).

use serde::{Deserialize, Serialize};

use crate::{DType, Params, ProblemError, ProblemKind, Varlen, Window};

/// How the physical pages of a generated block table are chosen ([`KvLayout::Paged`]).
///
/// Written `in-order`, `shuffled`, `interleaved` or `shared-prefix=N` (the `pages=` word of a
/// [`DecodeSpec`]), and serialized as the same text.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(into = "String", try_from = "String")]
pub enum PagePolicy {
    /// Each sequence's pages one after another, the sequences in order: the layout a fresh cache
    /// has, where reading past a page lands in the next logical page.
    #[default]
    InOrder,
    /// A seeded permutation of the physical pages (spare pages among them), so that logical
    /// neighbours are almost never physical neighbours.
    Shuffled,
    /// The sequences' pages dealt round-robin with one unused page after each round: no two
    /// logical neighbours are physical neighbours, and the gaps hold the sentinel.
    Interleaved,
    /// Every sequence's first `N` logical pages (fewer for a shorter sequence) are the same `N`
    /// physical pages, as prefix caching shares a system prompt; `N ≥ 1`.
    SharedPrefix(usize),
}

/// Where a decode batch's K and V live.
///
/// Serialized `"contiguous"` or `{"paged": {"page_size": P, "policy": "in-order"}}`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum KvLayout {
    /// K and V `[B, H_kv, S_max, D]`, `S_max` the longest KV length: sequence `b`'s keys are
    /// positions `0..kv_b` of its slab, the rest padding a kernel must not read.
    #[default]
    Contiguous,
    /// K and V caches `[num_pages, page_size, H_kv, D]`; logical page `j` of sequence `b` (its
    /// tokens `j·P .. (j+1)·P`) is physical page `table[b][j]` of a [`BlockTable`].
    Paged {
        /// Tokens per page, 1 to [`BlockTable::MAX_PAGE_SIZE`] (any size, as FlashInfer takes).
        page_size: usize,
        /// How a generated table picks its pages.
        #[serde(default)]
        policy: PagePolicy,
    },
}

impl KvLayout {
    /// The page size of a paged layout; `None` when contiguous.
    pub fn page_size(&self) -> Option<usize> {
        match self {
            KvLayout::Contiguous => None,
            KvLayout::Paged { page_size, .. } => Some(*page_size),
        }
    }
}

/// One decode launch: sequence `b` has `q_b` new query tokens at the end of its `kv_b` keys (the
/// KV length includes the new tokens), so under the causal mask, aligned bottom-right as
/// [`Params::kv_range`] defines it for `S_q ≠ S_kv`, its query row `i` sees keys
/// `0 ..= kv_b − q_b + i` (fewer with a sliding window's left bound).
///
/// Invariants, checked by [`DecodeSpec::new`] and on deserialization:
/// - at least one sequence, not all empty; each sequence is empty (`q = kv = 0`, an idle slot)
///   or has `1 ≤ q ≤ min(`[`DecodeSpec::MAX_QUERIES`]`, kv)`;
/// - the totals fit the kernels' int32 offsets ([`Varlen::MAX_TOKENS`]);
/// - `kv_heads` divides `heads`, and `heads`, `head_dim` are at least 1;
/// - a window bounds at most the left side (decode is causal: right is 0 or unbounded);
/// - a paged layout's page size is 1 to [`BlockTable::MAX_PAGE_SIZE`], and a shared prefix is
///   at least one page.
///
/// Q and O are packed like a varlen batch, `[total_q, H, D]` ([`DecodeSpec::varlen`] is the
/// prefill batch that computes the same rows). The text form is in `decode_text.rs`
/// (`decode B=64 q=1 kv=8192 H=32/8 D=128 page=16 bf16`).
///
/// ```
/// use attn_problem::{DecodeSpec, KvLayout, PagePolicy};
/// let spec: DecodeSpec = "decode q=1,4,0 kv=100,8192,0 H=32/8 D=128 page=16 pages=shuffled".parse()?;
/// assert_eq!((spec.sequences(), spec.varlen().total_q(), spec.pages_of(1)), (3, 5, 512));
/// let paged = KvLayout::Paged { page_size: 16, policy: PagePolicy::Shuffled };
/// assert_eq!((spec.layout(), spec.params().causal), (paged, true));
/// assert!("decode q=0 kv=100 H=8 D=64".parse::<DecodeSpec>().is_err());
/// # Ok::<(), attn_problem::ProblemError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "DecodeRepr", into = "DecodeRepr")]
pub struct DecodeSpec {
    lengths: Varlen,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    window: Option<Window>,
    layout: KvLayout,
    dtype: DType,
}

/// The serialized form of a [`DecodeSpec`], checked by [`DecodeSpec::new`] when read.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct DecodeRepr {
    seqlens_q: Vec<usize>,
    seqlens_kv: Vec<usize>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    window: Option<Window>,
    layout: KvLayout,
    #[serde(default, deserialize_with = "crate::dtype::deserialize_input")]
    dtype: DType,
}

impl TryFrom<DecodeRepr> for DecodeSpec {
    type Error = ProblemError;

    fn try_from(r: DecodeRepr) -> Result<DecodeSpec, ProblemError> {
        let lengths = Varlen {
            seqlens_q: r.seqlens_q,
            seqlens_kv: r.seqlens_kv,
        };
        let spec = DecodeSpec::new(lengths, r.heads, r.kv_heads, r.head_dim, r.layout)?;
        let spec = match r.window {
            Some(window) => spec.with_window(window)?,
            None => spec,
        };
        spec.with_dtype(r.dtype)
    }
}

impl From<DecodeSpec> for DecodeRepr {
    fn from(s: DecodeSpec) -> DecodeRepr {
        DecodeRepr {
            seqlens_q: s.lengths.seqlens_q,
            seqlens_kv: s.lengths.seqlens_kv,
            heads: s.heads,
            kv_heads: s.kv_heads,
            head_dim: s.head_dim,
            window: s.window,
            layout: s.layout,
            dtype: s.dtype,
        }
    }
}

/// A decode problem that is not one, as one line.
pub(crate) fn invalid(reason: impl Into<String>) -> ProblemError {
    ProblemError::InvalidDecode {
        reason: reason.into(),
    }
}

impl DecodeSpec {
    /// The most new tokens a sequence may have (speculative decoding drafts 4 to 16); longer
    /// query runs are prefill, a [`Varlen`] batch.
    pub const MAX_QUERIES: usize = 16;

    /// A decode batch of `lengths` (`seqlens_q` the new tokens, `seqlens_kv` the keys including
    /// them), fp16, no window; see the type's invariants.
    pub fn new(
        lengths: Varlen,
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        layout: KvLayout,
    ) -> Result<DecodeSpec, ProblemError> {
        let Varlen {
            seqlens_q,
            seqlens_kv,
        } = lengths;
        for (b, (&q, &kv)) in seqlens_q.iter().zip(&seqlens_kv).enumerate() {
            if q > kv {
                return Err(invalid(format!(
                    "sequence {b} has q={q} new tokens but kv={kv} keys: the KV length includes the new tokens"
                )));
            }
            if q == 0 && kv > 0 {
                return Err(invalid(format!(
                    "sequence {b} has kv={kv} keys but no new token: q is 1 to {} (q=0 only with kv=0, an empty slot)",
                    DecodeSpec::MAX_QUERIES
                )));
            }
            if q > DecodeSpec::MAX_QUERIES {
                return Err(invalid(format!(
                    "sequence {b} has q={q} new tokens: decode takes 1 to {} (longer runs are prefill, a varlen batch)",
                    DecodeSpec::MAX_QUERIES
                )));
            }
        }
        let lengths = Varlen::new(seqlens_q, seqlens_kv).map_err(|error| match error {
            ProblemError::InvalidVarlen { reason } => invalid(reason),
            other => other,
        })?;
        if heads == 0 || head_dim == 0 {
            return Err(invalid(format!(
                "H={heads} D={head_dim}: heads and head dim must be at least 1"
            )));
        }
        if kv_heads == 0 || heads % kv_heads != 0 {
            return Err(invalid(format!(
                "{kv_heads} key/value heads do not divide {heads} query heads"
            )));
        }
        if let KvLayout::Paged { page_size, policy } = layout {
            check_page_size(page_size)?;
            if policy == PagePolicy::SharedPrefix(0) {
                return Err(invalid(
                    "shared-prefix=0 shares no page: give N >= 1 or pages=in-order",
                ));
            }
        }
        Ok(DecodeSpec {
            lengths,
            heads,
            kv_heads,
            head_dim,
            window: None,
            layout,
            dtype: DType::F16,
        })
    }

    /// The same batch with a sliding window, whose right side must be 0 or unbounded (causal).
    pub fn with_window(self, window: Window) -> Result<DecodeSpec, ProblemError> {
        if let Some(right) = window.right.filter(|&r| r > 0) {
            return Err(invalid(format!(
                "decode is causal (right = 0), but window={window} sees {right} keys past the diagonal"
            )));
        }
        Ok(DecodeSpec {
            window: Some(window),
            ..self
        })
    }

    /// The same batch in `dtype`, fp16 or bf16.
    pub fn with_dtype(self, dtype: DType) -> Result<DecodeSpec, ProblemError> {
        if !dtype.is_input() {
            return Err(ProblemError::InputDType(dtype.to_string()));
        }
        Ok(DecodeSpec { dtype, ..self })
    }

    /// The same batch with another KV layout (checked as [`DecodeSpec::new`] checks it).
    pub fn with_layout(self, layout: KvLayout) -> Result<DecodeSpec, ProblemError> {
        let spec = DecodeSpec::new(
            self.lengths.clone(),
            self.heads,
            self.kv_heads,
            self.head_dim,
            layout,
        )?;
        Ok(DecodeSpec {
            window: self.window,
            dtype: self.dtype,
            ..spec
        })
    }

    /// What it computes: [`ProblemKind::Decode`].
    pub fn kind(&self) -> ProblemKind {
        ProblemKind::Decode
    }

    /// Number of sequences `B`.
    pub fn sequences(&self) -> usize {
        self.lengths.sequences()
    }

    /// New query tokens per sequence.
    pub fn seqlens_q(&self) -> &[usize] {
        &self.lengths.seqlens_q
    }

    /// Keys per sequence, the new tokens included.
    pub fn seqlens_kv(&self) -> &[usize] {
        &self.lengths.seqlens_kv
    }

    /// The prefill batch over the same rows: Q and O packed `[total_q, H, D]` as it packs them,
    /// each sequence's keys those of the cache in logical order.
    pub fn varlen(&self) -> &Varlen {
        &self.lengths
    }

    /// Query heads `H`.
    pub fn heads(&self) -> usize {
        self.heads
    }

    /// Key/value heads `H_kv`, dividing `H`; query head `h` reads K/V head `h / (H / H_kv)`.
    pub fn kv_heads(&self) -> usize {
        self.kv_heads
    }

    /// Head dimension `D`.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// The sliding window, if any.
    pub fn window(&self) -> Option<Window> {
        self.window
    }

    /// Where K and V live.
    pub fn layout(&self) -> KvLayout {
        self.layout
    }

    /// Element type of Q, K, V and O.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The longest KV length, at least 1: the contiguous layout's `S_max`.
    pub fn max_kv(&self) -> usize {
        self.lengths.longest().1
    }

    /// The scale `1/√D`, causal, and the window.
    pub fn params(&self) -> Params {
        Params::new(self.head_dim, true).with_window(self.window.unwrap_or_default())
    }

    /// Pages sequence `b` needs to hold its keys, `⌈kv_b / P⌉` (0 when contiguous).
    pub fn pages_of(&self, b: usize) -> usize {
        self.layout
            .page_size()
            .map_or(0, |p| self.lengths.seqlens_kv[b].div_ceil(p))
    }

    /// The keys sequence `b`'s queries see between them, `lo..hi`: every row's range lies in it,
    /// and the ranges, sliding with the row, leave no gap.
    pub fn attended(&self, b: usize) -> std::ops::Range<usize> {
        let (q, kv) = (self.lengths.seqlens_q[b], self.lengths.seqlens_kv[b]);
        if q == 0 {
            return 0..0;
        }
        let params = self.params();
        params.kv_range(0, q, kv).start..params.kv_range(q - 1, q, kv).end
    }

    /// Floating-point operations of the two matmuls: `4·H·D` per (query, key) pair the mask lets
    /// through, counted exactly per sequence ([`Params::visible_pairs`]); softmax not counted.
    pub fn flops(&self) -> f64 {
        let params = self.params();
        let pairs: u64 = (0..self.sequences())
            .map(|b| params.visible_pairs(self.lengths.seqlens_q[b], self.lengths.seqlens_kv[b]))
            .sum();
        4.0 * self.heads as f64 * self.head_dim as f64 * pairs as f64
    }

    /// The bytes a launch must move at the least: each sequence's attended keys and values once
    /// per K/V head (not per query head, which a grouped kernel shares), Q read and O written
    /// once, and the block-table entries of the attended pages. Shared pages count once per
    /// sequence that reads them, so a kernel that shares them across sequences can beat it.
    pub fn bytes(&self) -> DecodeBytes {
        let size = self.dtype.size_bytes() as u64;
        let row = self.head_dim as u64 * size;
        let mut bytes = DecodeBytes::default();
        for b in 0..self.sequences() {
            let seen = self.attended(b);
            bytes.kv += 2 * seen.len() as u64 * self.kv_heads as u64 * row;
            if let (Some(p), false) = (self.layout.page_size(), seen.is_empty()) {
                let pages = (seen.end - 1) / p - seen.start / p + 1;
                bytes.block_table += 4 * pages as u64;
            }
        }
        bytes.q = self.lengths.total_q() as u64 * self.heads as u64 * row;
        bytes.out = bytes.q;
        bytes
    }

    /// The bandwidth in GB/s (10⁹ bytes a second) of one launch taking `time_us` microseconds,
    /// over [`DecodeSpec::bytes`].
    pub fn bandwidth_gbs(&self, time_us: f64) -> f64 {
        self.bytes().total() as f64 / (time_us * 1e-6) / 1e9
    }

    /// Checks that `table` serves this batch: its page size is the layout's, it has one list
    /// per sequence, and each list covers its sequence's KV length.
    pub fn check_table(&self, table: &BlockTable) -> Result<(), ProblemError> {
        let table_error = |reason: String| ProblemError::InvalidBlockTable { reason };
        match self.layout.page_size() {
            None => {
                return Err(table_error(
                    "a contiguous KV layout takes no block table".into(),
                ))
            }
            Some(p) if p != table.page_size() => {
                return Err(table_error(format!(
                    "pages of {} tokens, but the problem's are {p}",
                    table.page_size()
                )))
            }
            Some(_) => {}
        }
        if table.sequences() != self.sequences() {
            return Err(table_error(format!(
                "{} page lists for {} sequences",
                table.sequences(),
                self.sequences()
            )));
        }
        for b in 0..self.sequences() {
            let (have, need) = (table.pages(b).len(), self.pages_of(b));
            if have < need {
                return Err(table_error(format!(
                    "sequence {b} has {have} pages of {} tokens, which do not cover its kv={} keys ({need} needed)",
                    table.page_size(),
                    self.lengths.seqlens_kv[b]
                )));
            }
        }
        Ok(())
    }
}

/// What [`DecodeSpec::bytes`] counts, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeBytes {
    /// Q, read once.
    pub q: u64,
    /// The attended keys and values, once per K/V head.
    pub kv: u64,
    /// O, written once.
    pub out: u64,
    /// The int32 block-table entries of the attended pages (0 when contiguous).
    pub block_table: u64,
}

impl DecodeBytes {
    /// All of them: the memory floor's numerator.
    pub fn total(&self) -> u64 {
        self.q + self.kv + self.out + self.block_table
    }
}

/// A page size a paged layout may have: 1 to [`BlockTable::MAX_PAGE_SIZE`].
pub(crate) fn check_page_size(page_size: usize) -> Result<(), ProblemError> {
    if (1..=BlockTable::MAX_PAGE_SIZE).contains(&page_size) {
        Ok(())
    } else {
        Err(invalid(format!(
            "page={page_size}: pages hold 1 to {} tokens, any size (page=0 is the contiguous layout)",
            BlockTable::MAX_PAGE_SIZE
        )))
    }
}

/// The int32 block table of a paged KV cache: logical page `j` of sequence `b` is physical page
/// `pages(b)[j]` of K and V caches `[num_pages, page_size, H_kv, D]`, so token `t` of sequence
/// `b` is slot `t % P` of page `pages(b)[t / P]`.
///
/// Invariants, checked by [`BlockTable::new`]: the page size is 1 to
/// [`BlockTable::MAX_PAGE_SIZE`]; `num_pages` is 1 to `i32::MAX`; every entry is a page
/// (`0..num_pages`). Pages may be shared between sequences (prefix sharing) and pages no list
/// names may exist. Whether the lists cover a batch's KV lengths is
/// [`DecodeSpec::check_table`]'s question.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BlockTable {
    page_size: usize,
    num_pages: usize,
    pages: Vec<Vec<i32>>,
}

impl BlockTable {
    /// The largest page size (tokens per page).
    pub const MAX_PAGE_SIZE: usize = 256;

    /// A table of `pages` (one list per sequence) into `num_pages` pages of `page_size` tokens.
    pub fn new(
        page_size: usize,
        num_pages: usize,
        pages: Vec<Vec<i32>>,
    ) -> Result<BlockTable, ProblemError> {
        let table_error = |reason: String| ProblemError::InvalidBlockTable { reason };
        check_page_size(page_size).map_err(|_| {
            table_error(format!(
                "page size {page_size}: pages hold 1 to {} tokens",
                BlockTable::MAX_PAGE_SIZE
            ))
        })?;
        if num_pages == 0 || num_pages > i32::MAX as usize {
            return Err(table_error(format!(
                "{num_pages} pages: a cache has 1 to {} (int32 indices)",
                i32::MAX
            )));
        }
        for (b, list) in pages.iter().enumerate() {
            if let Some((j, &page)) = list
                .iter()
                .enumerate()
                .find(|(_, &p)| p < 0 || p as usize >= num_pages)
            {
                return Err(table_error(format!(
                    "sequence {b}'s logical page {j} is physical page {page}, outside the cache's 0..{num_pages}"
                )));
            }
        }
        Ok(BlockTable {
            page_size,
            num_pages,
            pages,
        })
    }

    /// Tokens per page `P`.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Physical pages in the cache.
    pub fn num_pages(&self) -> usize {
        self.num_pages
    }

    /// Number of page lists (sequences).
    pub fn sequences(&self) -> usize {
        self.pages.len()
    }

    /// Sequence `b`'s physical pages in logical order.
    pub fn pages(&self, b: usize) -> &[i32] {
        &self.pages[b]
    }

    /// The (physical page, slot) of token `t` of sequence `b`, which its list must cover.
    pub fn slot(&self, b: usize, t: usize) -> (usize, usize) {
        (
            self.pages[b][t / self.page_size] as usize,
            t % self.page_size,
        )
    }

    /// Whether some list names physical page `page`.
    pub fn is_used(&self, page: usize) -> bool {
        self.pages.iter().flatten().any(|&p| p as usize == page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lengths(q: &[usize], kv: &[usize]) -> Varlen {
        Varlen {
            seqlens_q: q.to_vec(),
            seqlens_kv: kv.to_vec(),
        }
    }

    fn paged(p: usize) -> KvLayout {
        KvLayout::Paged {
            page_size: p,
            policy: PagePolicy::InOrder,
        }
    }

    #[test]
    fn refuses_what_cannot_run_in_one_line() {
        let new = |q: &[usize], kv: &[usize], h, hkv, layout| {
            DecodeSpec::new(lengths(q, kv), h, hkv, 64, layout)
                .unwrap_err()
                .to_string()
        };
        let cases = [
            (new(&[5], &[4], 8, 2, paged(16)), "q=5 new tokens but kv=4"),
            (new(&[0, 1], &[3, 1], 8, 2, paged(16)), "no new token"),
            (new(&[17], &[100], 8, 2, paged(16)), "decode takes 1 to 16"),
            (new(&[1], &[100], 8, 3, paged(16)), "3 key/value heads"),
            (new(&[0], &[0], 8, 2, paged(16)), "every sequence is empty"),
            (
                new(&[1], &[100], 8, 2, paged(0)),
                "page=0: pages hold 1 to 256",
            ),
            (new(&[1], &[100], 8, 2, paged(257)), "page=257"),
            (new(&[], &[], 8, 2, paged(16)), "at least one sequence"),
        ];
        for (message, expected) in cases {
            assert!(message.contains(expected), "{message:?} lacks {expected:?}");
            assert!(!message.contains('\n'), "{message:?}");
        }
        let spec = DecodeSpec::new(lengths(&[1], &[10]), 4, 1, 64, paged(3)).unwrap();
        let wide = spec.with_window(Window {
            left: Some(4),
            right: Some(2),
        });
        assert!(wide.unwrap_err().to_string().contains("decode is causal"));
        let shared = KvLayout::Paged {
            page_size: 16,
            policy: PagePolicy::SharedPrefix(0),
        };
        assert!(DecodeSpec::new(lengths(&[1], &[10]), 4, 1, 64, shared).is_err());
    }

    #[test]
    fn empty_slots_and_page_sizes_that_are_not_powers_of_two_are_accepted() {
        let spec = DecodeSpec::new(lengths(&[0, 16, 1], &[0, 16, 1]), 6, 3, 64, paged(3)).unwrap();
        assert_eq!(
            (spec.pages_of(0), spec.pages_of(1), spec.pages_of(2)),
            (0, 6, 1)
        );
        assert_eq!(spec.attended(0), 0..0);
        assert_eq!(spec.kind(), ProblemKind::Decode);
    }

    #[test]
    fn causal_rows_see_the_cache_and_the_new_tokens_before_them() {
        // q=4 new tokens at the end of kv=10 keys: row i sees keys 0..=6+i.
        let spec = DecodeSpec::new(lengths(&[4], &[10]), 2, 1, 8, paged(4)).unwrap();
        let params = spec.params();
        let ends: Vec<usize> = (0..4).map(|i| params.kv_range(i, 4, 10).end).collect();
        assert_eq!(ends, [7, 8, 9, 10]);
        assert_eq!(spec.attended(0), 0..10);
        let windowed = spec
            .with_window(Window {
                left: Some(2),
                right: None,
            })
            .unwrap();
        assert_eq!(windowed.attended(0), 4..10);
    }

    #[test]
    fn bytes_count_kv_once_per_kv_head_and_flops_count_visible_pairs() {
        // Two sequences: (q=1, kv=100) and (q=4, kv=20); H=8 over H_kv=2, D=64, fp16, pages of 16.
        let spec = DecodeSpec::new(lengths(&[1, 4], &[100, 20]), 8, 2, 64, paged(16)).unwrap();
        let bytes = spec.bytes();
        assert_eq!(bytes.kv, 2 * (100 + 20) * 2 * 64 * 2);
        assert_eq!(bytes.q, 5 * 8 * 64 * 2);
        assert_eq!(bytes.out, bytes.q);
        assert_eq!(bytes.block_table, 4 * (7 + 2));
        assert_eq!(bytes.total(), bytes.kv + 2 * bytes.q + 36);
        // Pairs: 100 for the first; 17 + 18 + 19 + 20 for the second.
        assert_eq!(spec.flops(), 4.0 * 8.0 * 64.0 * (100.0 + 74.0));
        let contiguous = spec.clone().with_layout(KvLayout::Contiguous).unwrap();
        assert_eq!(contiguous.bytes().block_table, 0);
        // A window of 8 to the left: keys 91..100 for the first, 8..20 for the second.
        let local = spec
            .with_window(Window {
                left: Some(8),
                right: Some(0),
            })
            .unwrap();
        assert_eq!(local.bytes().kv, 2 * (9 + 12) * 2 * 64 * 2);
        assert_eq!(local.bytes().block_table, 4 * (2 + 2));
        assert_eq!(local.flops(), 4.0 * 8.0 * 64.0 * (9.0 + 4.0 * 9.0));
        let gbs = local.bandwidth_gbs(1.0);
        assert_eq!(gbs, local.bytes().total() as f64 / 1e3);
    }

    #[test]
    fn tables_are_checked_against_the_cache_and_the_batch() {
        let err = |r: Result<BlockTable, ProblemError>| r.unwrap_err().to_string();
        assert!(err(BlockTable::new(16, 4, vec![vec![0, 4]])).contains("physical page 4"));
        assert!(err(BlockTable::new(16, 4, vec![vec![-1]])).contains("outside the cache"));
        assert!(err(BlockTable::new(0, 4, vec![])).contains("page size 0"));
        assert!(err(BlockTable::new(16, 0, vec![])).contains("0 pages"));
        let spec = DecodeSpec::new(lengths(&[1, 1], &[33, 16]), 4, 4, 8, paged(16)).unwrap();
        let short = BlockTable::new(16, 8, vec![vec![0, 1], vec![2]]).unwrap();
        let message = spec.check_table(&short).unwrap_err().to_string();
        assert!(message.contains("sequence 0 has 2 pages"), "{message}");
        let fits = BlockTable::new(16, 8, vec![vec![5, 1, 0], vec![5]]).unwrap();
        spec.check_table(&fits).unwrap();
        assert_eq!((fits.slot(0, 33), fits.slot(1, 15)), ((0, 1), (5, 15)));
        assert!(fits.is_used(5) && !fits.is_used(7));
        let other = BlockTable::new(8, 8, vec![vec![0; 5], vec![1; 2]]).unwrap();
        assert!(spec.check_table(&other).is_err());
        let one = BlockTable::new(16, 8, vec![vec![0, 1, 2]]).unwrap();
        assert!(spec
            .check_table(&one)
            .unwrap_err()
            .to_string()
            .contains("1 page lists"));
    }

    #[test]
    fn json_round_trips_and_is_validated_when_read() {
        let spec = DecodeSpec::new(lengths(&[1, 4], &[100, 20]), 8, 2, 64, paged(16))
            .unwrap()
            .with_dtype(DType::Bf16)
            .unwrap();
        let json = serde_json::to_string(&spec).unwrap();
        assert!(
            json.contains(r#""layout":{"paged":{"page_size":16,"policy":"in-order"}}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<DecodeSpec>(&json).unwrap(), spec);
        let bad = json.replace("[100,20]", "[100,2]");
        let error = serde_json::from_str::<DecodeSpec>(&bad)
            .unwrap_err()
            .to_string();
        assert!(error.contains("q=4 new tokens but kv=2"), "{error}");
    }
}
