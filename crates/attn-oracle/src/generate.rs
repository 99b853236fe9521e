//! Seeded input generators: a [`CaseSpec`] (shape, dtype, distribution, seed) determines Q, K and V
//! bit for bit, so any failure is reproducible from the spec printed in its report.
//!
//! Each `(batch, head)` slab of each tensor draws from its own ChaCha8 stream of the case's seed,
//! which makes generation parallel (rayon) and still deterministic.

use std::fmt;
use std::str::FromStr;

use half::{bf16, f16};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution as _, StandardNormal};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::tensor::Element;
use crate::{DType, HostData, HostTensor, OracleError, Shape};

/// How Q, K and V are drawn. Values are drawn in f64 and rounded to nearest into the dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Distribution {
    /// Q, K, V ~ N(0, 1) independently.
    Normal,
    /// Q, K, V ~ U[−1, 1) independently.
    Uniform,
    /// Q, K ~ N(μ, 1) with μ = √(150/√D), V ~ N(0, 1): under the default scale the logits are
    /// ≈ 150 ± 5, far past where a naive `exp` overflows (88.7 in f32, 11.1 in fp16), while the
    /// spread keeps several keys in play.
    LargeMagnitude,
    /// K, V ~ N(0, 1); each query row is a multiple of one key it may see (under a causal mask
    /// too), scaled so that its logit under the default scale is 20 while the others are
    /// ≈ N(0, 400/D): one key dominates each row (for D ≥ 16).
    Peaky,
    /// Within each (batch, head) every key row is the same N(0, 1) vector, so all logits of a row
    /// are equal and the output is the mean of the visible values; Q, V ~ N(0, 1).
    ConstantRows,
    /// Every element of a tensor is a distinct non-zero value of the dtype in ±[0.25, 2), in
    /// random order, so a misplaced or transposed element shows. Distinctness holds for tensors up
    /// to 6144 (fp16), 768 (bf16) or 49152 (f32) elements; larger tensors repeat the pool in
    /// a fresh random order per block of that many elements.
    Distinct,
    /// Q, K, V ~ N(0, σ²) with σ = [`SMALL_SIGMA`]: logits near zero (attention close to uniform)
    /// and outputs near σ/√S_kv, so absolute epsilons and lost low-order bits show.
    SmallVariance,
}

/// The standard deviation of [`Distribution::SmallVariance`].
pub const SMALL_SIGMA: f64 = 1.0 / 16.0;

impl Distribution {
    /// Every distribution, in declaration order.
    pub const ALL: [Distribution; 7] = [
        Distribution::Normal,
        Distribution::Uniform,
        Distribution::LargeMagnitude,
        Distribution::Peaky,
        Distribution::ConstantRows,
        Distribution::Distinct,
        Distribution::SmallVariance,
    ];

    /// What the gate's correctness checks cycle through, in order: check `i` draws from
    /// `CHECKS[i % 5]`, so five checks see every one.
    pub const CHECKS: [Distribution; 5] = [
        Distribution::Normal,
        Distribution::LargeMagnitude,
        Distribution::Peaky,
        Distribution::ConstantRows,
        Distribution::SmallVariance,
    ];

    /// The scale of V's values (outputs are convex combinations of them): tolerances scale with it.
    pub fn value_scale(self) -> f64 {
        match self {
            Distribution::SmallVariance => SMALL_SIGMA,
            _ => 1.0,
        }
    }

    /// The kebab-case name, as in serde, `Display` and `FromStr`.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Normal => "normal",
            Distribution::Uniform => "uniform",
            Distribution::LargeMagnitude => "large-magnitude",
            Distribution::Peaky => "peaky",
            Distribution::ConstantRows => "constant-rows",
            Distribution::Distinct => "distinct",
            Distribution::SmallVariance => "small-variance",
        }
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Distribution {
    type Err = OracleError;

    /// Accepts the kebab-case names (`large-magnitude`), case-insensitively, `_` for `-` too.
    fn from_str(input: &str) -> Result<Distribution, OracleError> {
        let wanted = input.trim().to_ascii_lowercase().replace('_', "-");
        Distribution::ALL
            .into_iter()
            .find(|d| d.name() == wanted)
            .ok_or_else(|| OracleError::ParseDistribution {
                input: input.to_owned(),
                expected: Distribution::ALL.map(Distribution::name).join(", "),
            })
    }
}

/// Everything that determines a generated case; print it in every failure report.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseSpec {
    /// The problem geometry.
    pub shape: Shape,
    /// The element type of Q, K and V.
    pub dtype: DType,
    /// How the values are drawn.
    pub distribution: Distribution,
    /// The RNG seed.
    pub seed: u64,
}

/// `"<distribution> <dtype> <shape> seed=<seed>"`, e.g. `"normal fp16 2,16,1024,64 seed=7"`.
impl fmt::Display for CaseSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} seed={}",
            self.distribution, self.dtype, self.shape, self.seed
        )
    }
}

/// A generated case: the spec that made it and Q `[B,H,S_q,D]`, K and V `[B,H,S_kv,D]`.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// The spec these tensors were generated from.
    pub spec: CaseSpec,
    /// Queries.
    pub q: HostTensor,
    /// Keys.
    pub k: HostTensor,
    /// Values.
    pub v: HostTensor,
}

/// Generates Q, K and V for `spec`; the result depends on nothing but `spec`.
///
/// ```
/// use attn_oracle::{generate, CaseSpec, DType, Distribution};
/// let spec = CaseSpec {
///     shape: "1,2,17,16".parse()?,
///     dtype: DType::Bf16,
///     distribution: Distribution::Normal,
///     seed: 7,
/// };
/// let inputs = generate(&spec);
/// assert_eq!(inputs.q.dims, [1, 2, 17, 16]);
/// assert_eq!(inputs.k, generate(&spec).k); // deterministic
/// # Ok::<(), attn_oracle::OracleError>(())
/// ```
pub fn generate(spec: &CaseSpec) -> Inputs {
    let (q, k, v) = match spec.dtype {
        DType::F16 => {
            let (q, k, v) = generate_typed::<f16>(spec);
            (HostData::F16(q), HostData::F16(k), HostData::F16(v))
        }
        DType::Bf16 => {
            let (q, k, v) = generate_typed::<bf16>(spec);
            (HostData::Bf16(q), HostData::Bf16(k), HostData::Bf16(v))
        }
        DType::F32 => {
            let (q, k, v) = generate_typed::<f32>(spec);
            (HostData::F32(q), HostData::F32(k), HostData::F32(v))
        }
    };
    let shape = spec.shape;
    Inputs {
        spec: *spec,
        q: HostTensor {
            dims: shape.q_dims(),
            data: q,
        },
        k: HostTensor {
            dims: shape.kv_dims(),
            data: k,
        },
        v: HostTensor {
            dims: shape.kv_dims(),
            data: v,
        },
    }
}

/// Which tensor a random stream belongs to.
#[derive(Clone, Copy)]
enum Which {
    Q = 0,
    K = 1,
    V = 2,
    /// The per-row choice of the dominant key (Peaky).
    HotKeys = 3,
}

/// The RNG of one tensor's (batch, head) slab.
fn slab_rng(seed: u64, which: Which, slab: usize) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(((slab as u64) << 2) | which as u64);
    rng
}

fn generate_typed<T: Element>(spec: &CaseSpec) -> (Vec<T>, Vec<T>, Vec<T>) {
    let shape = spec.shape;
    let zero = T::from_f64(0.0);
    let mut q = vec![zero; shape.q_len()];
    let mut k = vec![zero; shape.kv_len()];
    let mut v = vec![zero; shape.kv_len()];
    let q_slab = shape.seq_q * shape.head_dim;
    let kv_slab = shape.seq_kv * shape.head_dim;
    if q_slab == 0 || kv_slab == 0 {
        return (q, k, v);
    }
    // f32's pool keeps 13 mantissa bits: 49152 values are plenty and cheap to shuffle.
    let pool_bits = T::MANTISSA_BITS.min(13);
    let round = |dst: &mut [T], src: Vec<f64>| {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = T::from_f64(s);
        }
    };
    // K and V per (batch, K/V head) slab; Q per (batch, query head) slab, from its group's K
    // (Peaky aims queries at keys). With H_kv = H both slab indices are the same, so multi-head
    // cases are what they always were.
    let kv_values: Vec<[Vec<f64>; 2]> = (0..shape.batch * shape.kv_heads)
        .into_par_iter()
        .map(|slab| kv_slab_values(spec, slab, pool_bits))
        .collect();
    k.par_chunks_mut(kv_slab)
        .zip(v.par_chunks_mut(kv_slab))
        .zip(&kv_values)
        .for_each(|((k, v), [k64, v64])| {
            round(k, k64.clone());
            round(v, v64.clone());
        });
    q.par_chunks_mut(q_slab).enumerate().for_each(|(slab, q)| {
        let kv = slab / shape.heads * shape.kv_heads + slab % shape.heads / shape.group();
        round(q, q_slab_values(spec, slab, &kv_values[kv][0], pool_bits));
    });
    (q, k, v)
}

/// The f64 values of K and V in (batch, K/V head) slab `slab`, before rounding.
fn kv_slab_values(spec: &CaseSpec, slab: usize, pool_bits: u32) -> [Vec<f64>; 2] {
    let Shape {
        seq_kv, head_dim, ..
    } = spec.shape;
    let seed = spec.seed;
    let kv_len = seq_kv * head_dim;
    let normal = |which, len| -> Vec<f64> {
        let mut rng = slab_rng(seed, which, slab);
        (0..len).map(|_| StandardNormal.sample(&mut rng)).collect()
    };
    match spec.distribution {
        Distribution::Normal | Distribution::Peaky => {
            [normal(Which::K, kv_len), normal(Which::V, kv_len)]
        }
        Distribution::Uniform => {
            let uniform = |which, len| -> Vec<f64> {
                let mut rng = slab_rng(seed, which, slab);
                (0..len).map(|_| rng.random_range(-1.0..1.0)).collect()
            };
            [uniform(Which::K, kv_len), uniform(Which::V, kv_len)]
        }
        Distribution::LargeMagnitude => {
            let mean = large_magnitude_mean(head_dim);
            let k = normal(Which::K, kv_len).into_iter().map(|x| x + mean);
            [k.collect(), normal(Which::V, kv_len)]
        }
        Distribution::ConstantRows => {
            let row = normal(Which::K, head_dim);
            let k = row.iter().copied().cycle().take(kv_len).collect();
            [k, normal(Which::V, kv_len)]
        }
        Distribution::SmallVariance => {
            let small = |which, len| -> Vec<f64> {
                normal(which, len)
                    .into_iter()
                    .map(|x| x * SMALL_SIGMA)
                    .collect()
            };
            [small(Which::K, kv_len), small(Which::V, kv_len)]
        }
        Distribution::Distinct => {
            let distinct =
                |which: Which, len: usize| distinct_values(seed, which, slab * len, len, pool_bits);
            [distinct(Which::K, kv_len), distinct(Which::V, kv_len)]
        }
    }
}

/// Logits of order 150 (exp overflows f16 without the max subtraction): the mean added to Q and K.
fn large_magnitude_mean(head_dim: usize) -> f64 {
    (150.0 / (head_dim as f64).sqrt()).sqrt()
}

/// The f64 values of Q in (batch, query head) slab `slab`, before rounding; `keys` are the f64
/// keys of its K/V head (Peaky aims each query at one of them).
fn q_slab_values(spec: &CaseSpec, slab: usize, keys: &[f64], pool_bits: u32) -> Vec<f64> {
    let Shape {
        seq_q,
        seq_kv,
        head_dim,
        ..
    } = spec.shape;
    let seed = spec.seed;
    let q_len = seq_q * head_dim;
    let normal = |len| -> Vec<f64> {
        let mut rng = slab_rng(seed, Which::Q, slab);
        (0..len).map(|_| StandardNormal.sample(&mut rng)).collect()
    };
    match spec.distribution {
        Distribution::Normal | Distribution::ConstantRows => normal(q_len),
        Distribution::Uniform => {
            let mut rng = slab_rng(seed, Which::Q, slab);
            (0..q_len).map(|_| rng.random_range(-1.0..1.0)).collect()
        }
        Distribution::LargeMagnitude => {
            let mean = large_magnitude_mean(head_dim);
            normal(q_len).into_iter().map(|x| x + mean).collect()
        }
        Distribution::Peaky => {
            let mut rng = slab_rng(seed, Which::HotKeys, slab);
            let target_logit = 20.0;
            let mut q = Vec::with_capacity(q_len);
            for row in 0..seq_q {
                // The keys this row sees under a bottom-right causal mask, or all when it sees none.
                let visible = (row + 1 + seq_kv).saturating_sub(seq_q).min(seq_kv);
                let choices = if visible == 0 { seq_kv } else { visible };
                let hot = rng.random_range(0..choices);
                let key = &keys[hot * head_dim..(hot + 1) * head_dim];
                let norm2 = key.iter().map(|x| x * x).sum::<f64>();
                // q = c·k with scale·c·|k|² = target, scale = 1/√D; the floor keeps c bounded.
                let c = target_logit * (head_dim as f64).sqrt() / norm2.max(head_dim as f64 / 4.0);
                q.extend(key.iter().map(|x| c * x));
            }
            q
        }
        Distribution::SmallVariance => normal(q_len).into_iter().map(|x| x * SMALL_SIGMA).collect(),
        Distribution::Distinct => distinct_values(seed, Which::Q, slab * q_len, q_len, pool_bits),
    }
}

/// Elements `start..start + len` of a tensor's Distinct sequence: consecutive blocks of the
/// pool (every value ±2^e·(1 + m/2^bits), e ∈ {−2, −1, 0}), each block shuffled by its own stream.
fn distinct_values(seed: u64, which: Which, start: usize, len: usize, bits: u32) -> Vec<f64> {
    let per_sign = 3usize << bits;
    let pool = 2 * per_sign;
    let value = |index: usize| {
        let sign = if index < per_sign { 1.0 } else { -1.0 };
        let rest = index % per_sign;
        let exponent = (rest >> bits) as i32 - 2;
        let mantissa = (rest & ((1 << bits) - 1)) as f64 / (1u64 << bits) as f64;
        sign * 2f64.powi(exponent) * (1.0 + mantissa)
    };
    let mut out = Vec::with_capacity(len);
    let mut position = start;
    while out.len() < len {
        let block = position / pool;
        let mut order: Vec<usize> = (0..pool).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // Streams with the top bit set never collide with slab streams.
        rng.set_stream((1 << 63) | ((block as u64) << 2) | which as u64);
        order.shuffle(&mut rng);
        let from = position % pool;
        let take = (pool - from).min(len - out.len());
        out.extend(order[from..from + take].iter().map(|&i| value(i)));
        position += take;
    }
    out
}
