//! The attention problem of one gate or bench case, built once from its [`ShapeSpec`].

use attn_evidence::ShapeSpec;
use attn_kernels::Candidate;
use attn_oracle::{
    compare, compare_packed, generate, generate_varlen, reference, reference_varlen_rows, CaseSpec,
    DType, Distribution, HostTensor, Inputs, Params, Reference, RowId, RowSelection, Shape,
    Tolerance, Varlen, Verdict, Window,
};

use crate::{MeasureError, Result};

/// One problem: the evidence's description, and the typed pieces every step needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// As recorded in evidence (`"2,16,8192,128 causal bf16"`).
    pub spec: ShapeSpec,
    /// The tensor dimensions (validated); for a varlen batch its bounding dense shape (the number
    /// of sequences, the longest lengths: the kernels' grid).
    pub shape: Shape,
    /// The element type.
    pub dtype: DType,
    /// Scale and mask.
    pub params: Params,
    /// A packed variable-length batch: Q and O `[1, total_q, H, D]`, K and V
    /// `[1, total_kv, H_kv, D]` (kernels/README.md).
    pub varlen: Option<Varlen>,
}

impl Problem {
    /// Validates `spec` (positive dimensions, key/value heads dividing the query heads, fp16 or
    /// bf16; a varlen batch's lengths, and its bounding shape as recorded).
    pub fn new(spec: ShapeSpec) -> Result<Problem> {
        let (shape, varlen) = match &spec.varlen {
            None => (
                Shape::new(
                    spec.batch,
                    spec.heads,
                    spec.seq_q,
                    spec.seq_kv,
                    spec.head_dim,
                )?
                .with_kv_heads(spec.kv_heads())?,
                None,
            ),
            Some(lengths) => {
                let varlen = Varlen::new(lengths.seqlens_q.clone(), lengths.seqlens_kv.clone())?;
                let per_head = Shape::new(1, spec.heads, 1, 1, spec.head_dim)?
                    .with_kv_heads(spec.kv_heads())?;
                let bounding = varlen.bounding_shape(&per_head)?;
                // Evidence edited by hand could disagree with itself: refuse, never guess.
                let recorded = (spec.batch, spec.seq_q, spec.seq_kv);
                let derived = (bounding.batch, bounding.seq_q, bounding.seq_kv);
                if recorded != derived {
                    return Err(MeasureError::Invalid(format!(
                        "{spec}: batch {} and lengths {}/{} disagree with the varlen lengths (sequences {}, longest {}/{})",
                        recorded.0, recorded.1, recorded.2, derived.0, derived.1, derived.2
                    )));
                }
                (bounding, Some(varlen))
            }
        };
        let window = spec.window.map_or(Window::NONE, oracle_window);
        Ok(Problem {
            dtype: oracle_dtype(spec.dtype),
            params: Params::new(spec.head_dim, spec.causal).with_window(window),
            shape,
            varlen,
            spec,
        })
    }

    /// Whether this is dense multi-head attention with no window: the problem every kernel
    /// supports, and the only one SDPA's fast backends run without help.
    pub fn is_plain(&self) -> bool {
        self.shape.kv_heads == self.shape.heads
            && !self.params.window.is_bounded()
            && self.varlen.is_none()
    }

    /// Parses `"B,H,S,D [causal] [bf16]"` (or any shape text [`ShapeSpec`] reads).
    pub fn parse(text: &str) -> Result<Problem> {
        Problem::new(text.parse()?)
    }

    /// Refuses, with one line and before any GPU work, a problem outside `candidate`'s variants
    /// (grouped heads, windows, varlen batches).
    pub fn check_supported_by(&self, candidate: &Candidate) -> Result<()> {
        Ok(candidate.check_supports_batch(&self.shape, &self.params, self.varlen.is_some())?)
    }

    /// Q's (and O's) dims: `[B, H, S_q, D]`, or packed `[1, total_q, H, D]`.
    pub fn q_dims(&self) -> [usize; 4] {
        match &self.varlen {
            Some(varlen) => varlen.dims(attn_oracle::Packed::Queries, &self.shape),
            None => self.shape.q_dims(),
        }
    }

    /// K's (and V's) dims: `[B, H_kv, S_kv, D]`, or packed `[1, total_kv, H_kv, D]`.
    pub fn kv_dims(&self) -> [usize; 4] {
        match &self.varlen {
            Some(varlen) => varlen.dims(attn_oracle::Packed::Keys, &self.shape),
            None => self.shape.kv_dims(),
        }
    }

    /// Elements of Q (and of O).
    pub fn q_elements(&self) -> usize {
        self.q_dims().iter().product()
    }

    /// Elements of K (and of V).
    pub fn kv_elements(&self) -> usize {
        self.kv_dims().iter().product()
    }

    /// Output rows of `D` elements: `B·H·S_q`, or `total_q·H`.
    pub fn output_rows(&self) -> usize {
        self.q_elements() / self.shape.head_dim
    }

    /// Fresh inputs of `distribution` from `seed`: dense, or packed (each sequence drawn as its
    /// own dense problem, [`generate_varlen`]).
    pub fn generate(&self, distribution: Distribution, seed: u64) -> Inputs {
        let spec = CaseSpec {
            shape: self.shape,
            dtype: self.dtype,
            distribution,
            seed,
        };
        match &self.varlen {
            Some(varlen) => generate_varlen(&spec, varlen),
            None => generate(&spec),
        }
    }

    /// The f64 oracle of a check seeded `seed` on `inputs` at `params`, on the rows of the one
    /// row policy ([`RowSelection::for_check`]; for a varlen batch, each sequence's own as a
    /// dense problem, seeded per sequence). Rows are (batch, head, row), or (sequence, head, row
    /// within the sequence).
    pub fn oracle(&self, inputs: &Inputs, params: &Params, seed: u64) -> Result<Reference> {
        let (q, k, v) = (&inputs.q, &inputs.k, &inputs.v);
        Ok(match &self.varlen {
            None => reference(q, k, v, params, &RowSelection::for_check(&self.shape, seed))?,
            Some(varlen) => reference_varlen_rows(q, k, v, params, varlen, &|shape, b| {
                RowSelection::for_check(shape, sequence_seed(seed, b))
            })?,
        })
    }

    /// The rows [`Problem::oracle`] computes, one line for evidence.
    pub fn oracle_rows(&self, seed: u64) -> String {
        let rows = RowSelection::for_check(&self.shape, seed);
        match &self.varlen {
            None => rows.describe(),
            Some(_) => format!(
                "each sequence as its own problem: every row up to {} query elements, else per (sequence, head) the first and last rows, the ragged tail of {:?}-row tiles and 64 sampled rows (seeded from {seed}, a seed per sequence)",
                attn_oracle::ALL_ROWS_LIMIT,
                attn_oracle::TILE_HEIGHTS
            ),
        }
    }

    /// `output` judged against `exact` (from [`Problem::oracle`]) on its rows.
    pub fn compare(&self, output: &HostTensor, exact: &Reference, tol: &Tolerance) -> Verdict {
        match &self.varlen {
            None => compare(output, exact, tol),
            Some(varlen) => compare_packed(output, exact, varlen, tol),
        }
    }

    /// Where a row of [`Problem::oracle`] sits in the output, as its row of `D` elements (`None`
    /// outside it).
    pub fn output_row(&self, id: &RowId) -> Option<usize> {
        let s = &self.shape;
        match &self.varlen {
            Some(varlen) => varlen.packed_row(id, s.heads),
            None => (id.batch < s.batch && id.head < s.heads && id.row < s.seq_q)
                .then(|| (id.batch * s.heads + id.head) * s.seq_q + id.row),
        }
    }

    /// The (batch or sequence, head, row) of output row `row` (see [`Problem::output_row`]).
    pub fn row_id(&self, row: usize) -> RowId {
        let s = &self.shape;
        match &self.varlen {
            // Past the batch: the sequence index one past the last says so.
            Some(varlen) => varlen.row_id(row, s.heads).unwrap_or(RowId {
                batch: varlen.sequences(),
                head: 0,
                row: 0,
            }),
            None => RowId {
                batch: row / (s.heads * s.seq_q),
                head: row / s.seq_q % s.heads,
                row: row % s.seq_q,
            },
        }
    }
}

/// The seed of sequence `b`'s rows in a check seeded `seed`.
fn sequence_seed(seed: u64, b: usize) -> u64 {
    seed ^ (b as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d)
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.spec.fmt(f)
    }
}

/// The oracle's window of an evidence window: one type since attn-problem (kept for callers).
pub fn oracle_window(window: Window) -> Window {
    window
}

/// The oracle's element type of an evidence dtype: one type since attn-problem (kept for callers).
pub fn oracle_dtype(dtype: DType) -> DType {
    dtype
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_is_built_once_from_its_text() {
        let p = Problem::parse("2,4,300,64 causal bf16").unwrap();
        assert_eq!(p.dtype, DType::Bf16);
        assert!(p.params.causal);
        assert_eq!((p.shape.seq_q, p.shape.head_dim), (300, 64));
        assert!((p.params.scale - 0.125).abs() < 1e-12);
        assert_eq!(p.to_string(), "2,4,300,64 causal bf16");
        assert!(Problem::parse("2,4,0,64").is_err());
        assert!(Problem::parse("2,4,64 fp8").is_err());
    }

    #[test]
    fn grouped_heads_and_windows_reach_the_oracle_and_count_their_work() {
        let p = Problem::parse("2,32/8,300,64 causal window=100,-1").unwrap();
        assert_eq!((p.shape.heads, p.shape.kv_heads), (32, 8));
        assert_eq!(p.params.window.left, Some(100));
        assert!(p.params.causal && !p.is_plain());
        // Evidence's FLOP count and the oracle's mask agree on the work a window leaves.
        let pairs = p.params.visible_pairs(300, 300) as f64;
        assert_eq!(p.spec.flops(), 4.0 * 2.0 * 32.0 * 64.0 * pairs);
        assert!(Problem::parse("2,32/6,300,64").is_err());
        assert!(Problem::parse("2,8,300,64").unwrap().is_plain());
    }

    #[test]
    fn a_varlen_batch_is_packed_bounded_and_counts_each_sequence_s_work() {
        let p = Problem::parse("varlen=300,0,1,100:250 H=8/2 D=64 causal window=40,-1").unwrap();
        let varlen = p.varlen.as_ref().unwrap();
        assert_eq!(varlen.cu_seqlens_q(), vec![0, 300, 300, 301, 401]);
        // The bounding shape is the grid's; Q and O are packed.
        assert_eq!(
            (p.shape.batch, p.shape.seq_q, p.shape.seq_kv),
            (4, 300, 300)
        );
        assert_eq!(
            (p.q_dims(), p.kv_dims()),
            ([1, 401, 8, 64], [1, 551, 2, 64])
        );
        assert_eq!(p.output_rows(), 401 * 8);
        assert!(!p.is_plain());
        // Evidence's FLOP count and the oracle's mask agree, sequence by sequence.
        let pairs: u64 = varlen
            .seqlens_q
            .iter()
            .zip(&varlen.seqlens_kv)
            .map(|(&q, &kv)| p.params.visible_pairs(q, kv))
            .sum();
        assert_eq!(p.spec.flops(), 4.0 * 8.0 * 64.0 * pairs as f64);
        // Output rows and (sequence, head, row) agree both ways.
        for row in [0, 7, 8 * 300, 8 * 300 + 5, 8 * 401 - 1] {
            assert_eq!(p.output_row(&p.row_id(row)), Some(row));
        }
        assert_eq!(p.row_id(8 * 300).batch, 2, "sequence 1 is empty");
        // Inputs are packed.
        let inputs = p.generate(Distribution::Normal, 3);
        assert_eq!((inputs.q.dims, inputs.k.dims), (p.q_dims(), p.kv_dims()));
        // Evidence that disagrees with itself is refused, not guessed at.
        let mut spec = p.spec.clone();
        spec.seq_q = 512;
        let err = Problem::new(spec).unwrap_err().to_string();
        assert!(err.contains("disagree with the varlen lengths"), "{err}");
        assert!(Problem::parse("varlen=0,0 H=8 D=64").is_err());
    }
}
