//! The whole-output check on the GPU: a reference attention in f32 whose correctness is easy to
//! see (`kernels/reference.cu`: one warp per row, two plain passes, no tiling), and a per-row
//! comparison of a candidate's output with it. The f64 oracle on the CPU checks selected rows
//! exactly; this checks every element of every shape, fast enough for the largest suites.

use attn_oracle::{DType, Params, Shape};
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};

use crate::compile::CompileRequest;
use crate::error::{DriverContext, KernelError, Result};
use crate::gpu::{DeviceTensor, Gpu};

const SOURCE: &str = include_str!("../../../kernels/reference.cu");
/// Rows (warps) per block of both kernels (`ROWS_PER_BLOCK` in the source).
const ROWS_PER_BLOCK: usize = 4;
/// Statistics per row written by `compare_rows`.
const ROW_STATS: usize = 6;

/// How a reference is stored on the device: row `r` at row `(a·r + b) mod rows`, every 32-bit
/// word XORed with a mask of `key` and `r` (`kernels/reference.cu`). The timing's references sit
/// in device memory while the candidate runs: stored as the candidate should write them, a kernel
/// that found one could copy it; stored this way, what it would copy is noise. [`RowMask::PLAIN`]
/// is plain storage. This is the host mirror of the kernels' arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowMask {
    /// The mask's key (0: no mask).
    pub key: u64,
    /// The row permutation's multiplier, coprime with the row count.
    pub a: u64,
    /// Its offset.
    pub b: u64,
}

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl RowMask {
    /// Plain storage.
    pub const PLAIN: RowMask = RowMask { key: 0, a: 1, b: 0 };

    /// A secret mask for `rows` rows from `entropy`: a non-zero key, a multiplier coprime with
    /// `rows` other than 1 where one exists, an offset. Beyond 2³² rows (where the kernels'
    /// 64-bit product could overflow) the rows stay in place and only the words are masked.
    pub fn secret(rows: usize, entropy: u64) -> RowMask {
        let rows = rows.max(1) as u64;
        let mut state = entropy;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            mix64(state)
        };
        let key = next() | 1;
        if rows >= 1 << 32 || rows <= 2 {
            return RowMask {
                key,
                a: 1,
                b: if rows >= 1 << 32 { 0 } else { next() % rows },
            };
        }
        let a = loop {
            let a = 2 + next() % (rows - 2);
            if gcd(a, rows) == 1 {
                break a;
            }
        };
        RowMask {
            key,
            a,
            b: next() % rows,
        }
    }

    /// Where row `r` of `rows` is stored.
    pub fn stored_row(&self, r: usize, rows: usize) -> usize {
        ((r as u64).wrapping_mul(self.a).wrapping_add(self.b) % rows.max(1) as u64) as usize
    }

    /// The XOR mask of row `r`'s words.
    pub fn word_mask(&self, r: usize) -> u32 {
        if self.key == 0 {
            0
        } else {
            mix64(self.key ^ (r as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) as u32
        }
    }

    /// `plain` (`rows × d` values) as the device stores it under this mask.
    pub fn apply(&self, plain: &[f32], d: usize) -> Vec<u32> {
        let rows = plain.len() / d.max(1);
        let mut stored = vec![0u32; plain.len()];
        for r in 0..rows {
            let to = self.stored_row(r, rows) * d;
            let mask = self.word_mask(r);
            for (j, x) in plain[r * d..(r + 1) * d].iter().enumerate() {
                stored[to + j] = x.to_bits() ^ mask;
            }
        }
        stored
    }

    /// The values of `stored` (as [`RowMask::apply`] left them), in row order.
    pub fn undo(&self, stored: &[u32], d: usize) -> Vec<f32> {
        let rows = stored.len() / d.max(1);
        let mut plain = vec![0f32; stored.len()];
        for r in 0..rows {
            let from = self.stored_row(r, rows) * d;
            let mask = self.word_mask(r);
            for j in 0..d {
                plain[r * d + j] = f32::from_bits(stored[from + j] ^ mask);
            }
        }
        plain
    }
}

/// The reference output of one input set: f32 in the output's layout (dense `[B, H, S_q, D]`, or
/// packed `[1, total_q, H, D]` for a varlen batch), on the device, stored under a [`RowMask`]
/// (plain for the checks, secret for the timing's verification).
#[derive(Debug)]
pub struct ReferenceOutput {
    /// The problem (a varlen batch's bounding shape).
    shape: Shape,
    /// The dims of the output it is the reference of.
    out_dims: [usize; 4],
    pub(crate) data: CudaSlice<f32>,
    mask: RowMask,
}

impl ReferenceOutput {
    /// The problem it was computed for (a varlen batch: its bounding shape).
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The dims of the output it is the reference of: Q's.
    pub fn out_dims(&self) -> [usize; 4] {
        self.out_dims
    }

    /// Its elements: the output's.
    pub fn elements(&self) -> usize {
        self.out_dims.iter().product()
    }

    /// Whether it is stored masked.
    pub fn is_masked(&self) -> bool {
        self.mask != RowMask::PLAIN
    }

    /// Copies it to the host (row-major in the output's layout, unmasked).
    pub fn download(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        let out = gpu.stream().clone_dtoh(&self.data).during("cuMemcpyDtoH")?;
        gpu.synchronize()?;
        if !self.is_masked() {
            return Ok(out);
        }
        let bits: Vec<u32> = out.iter().map(|x| x.to_bits()).collect();
        Ok(self.mask.undo(&bits, self.shape.head_dim))
    }
}

/// Per-row comparison of an output with a [`ReferenceOutput`], flat row index `(b·H + h)·S_q + s`
/// (dense) or `t·H + h` (packed: `t` the query's token).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RowErrors {
    /// Largest |out − ref| over the row's finite, written elements.
    pub max_abs: Vec<f32>,
    /// Elements beyond the tolerance, poisoned, NaN or Inf.
    pub bad: Vec<u32>,
    /// Elements still holding the poison pattern (never written).
    pub poison: Vec<u32>,
    /// NaN or Inf elements (not poison).
    pub nonfinite: Vec<u32>,
    /// Σ (out − ref)² over finite elements.
    pub diff_sq: Vec<f64>,
    /// Σ ref².
    pub ref_sq: Vec<f64>,
}

impl RowErrors {
    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.max_abs.len()
    }

    /// Total bad elements.
    pub fn bad_elements(&self) -> u64 {
        self.bad.iter().map(|&b| u64::from(b)).sum()
    }

    /// Total poisoned elements.
    pub fn poisoned_elements(&self) -> u64 {
        self.poison.iter().map(|&b| u64::from(b)).sum()
    }

    /// Total NaN/Inf elements.
    pub fn nonfinite_elements(&self) -> u64 {
        self.nonfinite.iter().map(|&b| u64::from(b)).sum()
    }

    /// Rows with at least one bad element.
    pub fn bad_rows(&self) -> usize {
        self.bad.iter().filter(|&&b| b > 0).count()
    }

    /// The largest error of any row, and that row.
    pub fn worst(&self) -> (f32, usize) {
        self.max_abs.iter().enumerate().fold(
            (0.0f32, 0usize),
            |(m, at), (i, &e)| {
                if e > m {
                    (e, i)
                } else {
                    (m, at)
                }
            },
        )
    }

    /// ‖out − ref‖₂ / ‖ref‖₂ over the whole output.
    pub fn rel_l2(&self) -> f64 {
        let diff: f64 = self.diff_sq.iter().sum();
        let reference: f64 = self.ref_sq.iter().sum();
        (diff / reference.max(f64::MIN_POSITIVE)).sqrt()
    }
}

/// How far an output element may be off the f32 GPU reference `r`: `max(abs, rel·|r|) − slack`.
/// The oracle's per-element bound (`attn_oracle::Tolerance::element_bound`, which the device
/// computes again as `element_bound` in reference.cu) less the reference's own measured error against the f64 oracle, so that
/// passing it bounds the error against exact arithmetic.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ElementBound {
    /// The absolute bound (the tolerance's `max_abs`).
    pub abs: f64,
    /// The relative bound of an element above the table's magnitude (the tolerance's `rel_l2`).
    pub rel: f64,
    /// Taken off both: the reference's own error.
    pub slack: f64,
}

impl ElementBound {
    /// A plain absolute bound.
    pub fn absolute(abs: f64) -> ElementBound {
        ElementBound {
            abs,
            rel: 0.0,
            slack: 0.0,
        }
    }

    /// The bound of an element whose reference is 0 (the smallest): `abs − slack`.
    pub fn floor(&self) -> f64 {
        self.abs - self.slack
    }
}

/// Device counters of bad elements, one slot per verified output ([`GpuReference::count_bad_async`]).
#[derive(Debug)]
pub struct Counters(CudaSlice<u32>);

impl Counters {
    /// `slots` zeroed counters on the device.
    pub fn new(gpu: &Gpu, slots: usize) -> Result<Counters> {
        Ok(Counters(
            gpu.stream()
                .alloc_zeros::<u32>(slots.max(1))
                .during("cuMemAlloc (verification counters)")?,
        ))
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no slots.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The device slots, for a launcher of this crate.
    pub(crate) fn slots_mut(&mut self) -> &mut CudaSlice<u32> {
        &mut self.0
    }

    /// Copies the counts back (synchronises).
    pub fn read(&self, gpu: &Gpu) -> Result<Vec<u32>> {
        let counts = gpu.stream().clone_dtoh(&self.0).during("cuMemcpyDtoH")?;
        gpu.synchronize()?;
        Ok(counts)
    }
}

/// A signed column permutation on the device: `code[j] = src_j | (negate_j << 16)`
/// ([`GpuReference::scramble`]).
#[derive(Debug)]
pub struct ColumnMap(CudaSlice<i32>);

impl ColumnMap {
    /// Uploads `code` (one entry per column of the head dim).
    pub fn upload(gpu: &Gpu, code: &[i32]) -> Result<ColumnMap> {
        Ok(ColumnMap(
            gpu.stream()
                .clone_htod(code)
                .during("cuMemcpyHtoD (column map)")?,
        ))
    }
}

/// The reference and compare kernels compiled for one dtype and head dim.
#[derive(Debug)]
pub struct GpuReference {
    dtype: DType,
    head_dim: usize,
    attention: CudaFunction,
    compare: CudaFunction,
    count: CudaFunction,
    scramble_elem: CudaFunction,
    scramble_f32: CudaFunction,
}

impl GpuReference {
    /// Compiles (through the caches) and loads both kernels.
    pub fn new(gpu: &Gpu, dtype: DType, head_dim: usize) -> Result<GpuReference> {
        let request = CompileRequest {
            name: "reference.cu".into(),
            source: SOURCE,
            include_dir: None,
            defines: CompileRequest::abi_defines(dtype, head_dim)?,
            arch: gpu.arch(),
        };
        Ok(GpuReference {
            dtype,
            head_dim,
            attention: gpu.load(&request, "attn_reference", 0)?,
            compare: gpu.load(&request, "compare_rows", 0)?,
            count: gpu.load(&request, "count_bad", 0)?,
            scramble_elem: gpu.load(&request, "scramble_elem", 0)?,
            scramble_f32: gpu.load(&request, "scramble_f32", 0)?,
        })
    }

    fn grid(rows: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (rows.div_ceil(ROWS_PER_BLOCK) as u32, 1, 1),
            block_dim: ((ROWS_PER_BLOCK * 32) as u32, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// The f32 reference output of `q, k, v` (asynchronous, on the GPU's stream), stored plain: of
    /// a dense batch (`offsets` `None`) or a packed varlen batch, whose output is packed like Q.
    pub fn compute(
        &self,
        gpu: &Gpu,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        params: &Params,
        offsets: Option<&crate::gpu::VarlenOffsets>,
    ) -> Result<ReferenceOutput> {
        self.compute_with(gpu, q, k, v, params, offsets, RowMask::PLAIN)
    }

    /// As [`GpuReference::compute`], stored under `mask` from the start (the plain values never
    /// reach device memory).
    #[allow(clippy::too_many_arguments)] // the tensors, the problem, the batch and the storage
    pub fn compute_with(
        &self,
        gpu: &Gpu,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        params: &Params,
        offsets: Option<&crate::gpu::VarlenOffsets>,
        mask: RowMask,
    ) -> Result<ReferenceOutput> {
        // O has Q's dims: Q stands in for it in the shape check.
        let (shape, rows) = match offsets {
            None => {
                let shape = crate::attention::check_shapes(q, k, v, q, self.dtype, self.head_dim)?;
                (shape, shape.batch * shape.heads * shape.seq_q)
            }
            Some(o) => {
                let shape = crate::attention::check_packed(
                    q,
                    k,
                    v,
                    q,
                    self.dtype,
                    self.head_dim,
                    &o.varlen,
                )?;
                (shape, o.varlen.total_q() * shape.heads)
            }
        };
        // SAFETY: every element is written by the kernel below before anything reads it.
        let mut data = unsafe { gpu.stream().alloc::<f32>(rows * shape.head_dim) }
            .during("cuMemAlloc (reference output)")?;
        let (heads, seq_q, seq_kv) = (shape.heads as i32, shape.seq_q as i32, shape.seq_kv as i32);
        let (scale, causal, rows_arg) =
            (params.scale as f32, i32::from(params.causal), rows as i64);
        let (batch, kv_heads) = (shape.batch as i32, shape.kv_heads as i32);
        let (window_left, window_right) = params.abi_window(shape.seq_q, shape.seq_kv);
        let stream = gpu.stream();
        let (cu_q, _gq) = offsets.map(|o| o.cu_q.device_ptr(stream)).unzip();
        let (cu_kv, _gkv) = offsets.map(|o| o.cu_kv.device_ptr(stream)).unzip();
        let (cu_q, cu_kv): (u64, u64) = (cu_q.unwrap_or(0), cu_kv.unwrap_or(0));
        let mut launch = gpu.stream().launch_builder(&self.attention);
        launch
            .arg(&q.buf)
            .arg(&k.buf)
            .arg(&v.buf)
            .arg(&mut data)
            .arg(&batch)
            .arg(&heads)
            .arg(&kv_heads)
            .arg(&seq_q)
            .arg(&seq_kv)
            .arg(&scale)
            .arg(&causal)
            .arg(&window_left)
            .arg(&window_right)
            .arg(&cu_q)
            .arg(&cu_kv)
            .arg(&rows_arg)
            .arg(&mask.key)
            .arg(&mask.a)
            .arg(&mask.b);
        // SAFETY: attn_reference(q, k, v, float* o, batch, heads, kv_heads, seq_q, seq_kv,
        // scale, causal, window_left, window_right, cu_seqlens_q, cu_seqlens_kv, rows, key, a, b)
        // over checked tensors of the compiled dtype and head dim, dense [B, H, S_q, D] and
        // [B, H_kv, S_kv, D] with null offsets, or packed with live offsets matching them;
        // `data` holds rows × D floats and every stored row (a·r + b) mod rows is inside it; one
        // warp per row, the grid covers every row.
        unsafe { launch.launch(Self::grid(rows)) }.during("cuLaunchKernel (attn_reference)")?;
        Ok(ReferenceOutput {
            shape,
            out_dims: q.dims,
            data,
            mask,
        })
    }

    /// Adds to `counters[slot]` the number of elements of `out` that are poison, NaN/Inf or off
    /// `reference` by more than `bound` — asynchronously, on the GPU's stream, with no host wait.
    pub fn count_bad_async(
        &self,
        gpu: &Gpu,
        out: &DeviceTensor,
        reference: &ReferenceOutput,
        bound: ElementBound,
        counters: &mut Counters,
        slot: usize,
    ) -> Result<()> {
        if out.dims != reference.out_dims || out.dtype != self.dtype || slot >= counters.len() {
            return Err(KernelError::Shape(format!(
                "output {:?} {} or counter slot {slot} does not match the reference {:?} {}",
                out.dims, out.dtype, reference.out_dims, self.dtype
            )));
        }
        let n = out.buf.len() as i64;
        let poison: u16 = match self.dtype {
            DType::Bf16 => attn_oracle::POISON_BF16_BITS,
            _ => attn_oracle::POISON_F16_BITS,
        };
        let [atol, rtol, slack] = [bound.abs, bound.rel, bound.slack].map(|x| x as f32);
        let slot_arg = slot as i32;
        let blocks = (n as usize).div_ceil(256).min(4096) as u32;
        let mut launch = gpu.stream().launch_builder(&self.count);
        launch
            .arg(&out.buf)
            .arg(&reference.data)
            .arg(&atol)
            .arg(&rtol)
            .arg(&slack)
            .arg(&poison)
            .arg(&n)
            .arg(&mut counters.0)
            .arg(&slot_arg)
            .arg(&reference.mask.key)
            .arg(&reference.mask.a)
            .arg(&reference.mask.b);
        let cfg = LaunchConfig {
            grid_dim: (blocks.max(1), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: count_bad(const u16* out, const float* ref, float atol, float rtol, float slack,
        // u16 poison, long long n,
        // unsigned* bad, int slot, key, a, b): out and ref hold n elements (same dims, checked
        // above; every stored row is inside ref), slot is inside `counters`; a grid-stride loop
        // covers every element.
        unsafe { launch.launch(cfg) }.during("cuLaunchKernel (count_bad)")?;
        Ok(())
    }

    /// Rewrites every row of `tensor` through the signed column permutation `map`, in place and
    /// asynchronously (exact: a permutation and sign flips).
    pub fn scramble(&self, gpu: &Gpu, tensor: &mut DeviceTensor, map: &ColumnMap) -> Result<()> {
        self.check_map(map, tensor.dims[3])?;
        let rows = tensor.buf.len() / self.head_dim;
        let rows_arg = rows as i64;
        let mut launch = gpu.stream().launch_builder(&self.scramble_elem);
        launch.arg(&mut tensor.buf).arg(&rows_arg).arg(&map.0);
        // SAFETY: scramble_elem(u16* x, long long rows, const int* code): `x` holds rows × D
        // 16-bit elements, `code` D entries each < D (checked); one warp per row.
        unsafe { launch.launch(Self::grid(rows)) }.during("cuLaunchKernel (scramble_elem)")?;
        Ok(())
    }

    /// As [`GpuReference::scramble`], for a reference output: it stays the reference of inputs
    /// whose V went through the same map.
    pub fn scramble_reference(
        &self,
        gpu: &Gpu,
        reference: &mut ReferenceOutput,
        map: &ColumnMap,
    ) -> Result<()> {
        self.check_map(map, reference.shape.head_dim)?;
        let rows = reference.data.len() / self.head_dim;
        let rows_arg = rows as i64;
        let mut launch = gpu.stream().launch_builder(&self.scramble_f32);
        launch.arg(&mut reference.data).arg(&rows_arg).arg(&map.0);
        // SAFETY: scramble_f32(unsigned* x, long long rows, const int* code): `x` holds rows × D
        // 32-bit words, `code` D entries each < D (checked); one warp per row.
        unsafe { launch.launch(Self::grid(rows)) }.during("cuLaunchKernel (scramble_f32)")?;
        Ok(())
    }

    fn check_map(&self, map: &ColumnMap, head_dim: usize) -> Result<()> {
        if map.0.len() != self.head_dim || head_dim != self.head_dim {
            return Err(KernelError::Shape(format!(
                "a column map of {} entries for head dim {head_dim} (compiled for {})",
                map.0.len(),
                self.head_dim
            )));
        }
        Ok(())
    }

    /// Compares `out` with `reference`, element by element, and returns the per-row statistics
    /// (synchronises). `bound`: how far an element may be off.
    pub fn compare(
        &self,
        gpu: &Gpu,
        out: &DeviceTensor,
        reference: &ReferenceOutput,
        bound: ElementBound,
    ) -> Result<RowErrors> {
        if reference.is_masked() {
            return Err(KernelError::Shape(
                "a masked reference is compared by count_bad only".into(),
            ));
        }
        if out.dims != reference.out_dims || out.dtype != self.dtype {
            return Err(KernelError::Shape(format!(
                "output {:?} {} does not match the reference {:?} {}",
                out.dims, out.dtype, reference.out_dims, self.dtype
            )));
        }
        // Rows of D in the output's own order: (b·H + h)·S_q + s dense, t·H + h packed.
        let rows = reference.elements() / self.head_dim;
        // SAFETY: every row's statistics are written by the kernel below before they are read.
        let mut stats = unsafe { gpu.stream().alloc::<f32>(rows * ROW_STATS) }
            .during("cuMemAlloc (row statistics)")?;
        let poison: u16 = match self.dtype {
            DType::Bf16 => attn_oracle::POISON_BF16_BITS,
            _ => attn_oracle::POISON_F16_BITS,
        };
        let [atol, rtol, slack] = [bound.abs, bound.rel, bound.slack].map(|x| x as f32);
        let rows_arg = rows as i64;
        let mut launch = gpu.stream().launch_builder(&self.compare);
        launch
            .arg(&out.buf)
            .arg(&reference.data)
            .arg(&atol)
            .arg(&rtol)
            .arg(&slack)
            .arg(&poison)
            .arg(&rows_arg)
            .arg(&mut stats);
        // SAFETY: compare_rows(const u16* out, const float* ref, float atol, float rtol, float slack,
        // u16 poison, rows,
        // float* stats): out and ref hold rows × D elements (checked above), stats rows × 6.
        unsafe { launch.launch(Self::grid(rows)) }.during("cuLaunchKernel (compare_rows)")?;
        let flat = gpu.stream().clone_dtoh(&stats).during("cuMemcpyDtoH")?;
        gpu.synchronize()?;
        let mut errors = RowErrors::default();
        for row in flat.chunks_exact(ROW_STATS) {
            errors.max_abs.push(row[0]);
            errors.bad.push(row[1] as u32);
            errors.poison.push(row[2] as u32);
            errors.nonfinite.push(row[3] as u32);
            errors.diff_sq.push(f64::from(row[4]));
            errors.ref_sq.push(f64::from(row[5]));
        }
        Ok(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::RowMask;

    #[test]
    fn a_masked_reference_round_trips_and_is_noise_where_it_is_stored() {
        let d = 8;
        for rows in [1usize, 2, 3, 7, 64, 1000, 4096] {
            let plain: Vec<f32> = (0..rows * d).map(|i| (i as f32 * 0.37).sin()).collect();
            for entropy in [0u64, 1, 42, u64::MAX] {
                let mask = RowMask::secret(rows, entropy);
                assert_ne!(mask.key, 0);
                // A permutation of the rows.
                let mut seen = vec![false; rows];
                for r in 0..rows {
                    let to = mask.stored_row(r, rows);
                    assert!(!seen[to], "rows {rows}: {r} collides");
                    seen[to] = true;
                }
                let stored = mask.apply(&plain, d);
                assert_eq!(mask.undo(&stored, d), plain);
                // What a copying kernel would read where it expects row r: not row r's values.
                let copied: Vec<f32> = stored.iter().map(|&w| f32::from_bits(w)).collect();
                let same = copied
                    .iter()
                    .zip(&plain)
                    .filter(|(a, b)| (*a - *b).abs() <= 1e-3)
                    .count();
                assert!(
                    same <= plain.len() / 100 + 1,
                    "rows {rows}: {same} values readable"
                );
            }
        }
        // Plain storage is the identity.
        let plain = [1.0f32, -2.0, 3.5, 0.0];
        let stored = RowMask::PLAIN.apply(&plain, 2);
        assert_eq!(stored, plain.map(f32::to_bits));
        // Large row counts keep the rows in place, still masked.
        let big = RowMask::secret(1 << 33, 3);
        assert_eq!((big.a, big.b), (1, 0));
        assert_ne!(big.word_mask(5), 0);
    }

    #[test]
    fn signed_column_permutations_commute_with_the_mask() {
        // The timing turns a masked reference's stored rows through signed column permutations
        // (scramble_f32 on the words' bits): undoing the mask afterwards gives the turned values.
        let (rows, d) = (5, 4);
        let plain: Vec<f32> = (0..rows * d).map(|i| i as f32 - 7.5).collect();
        let mask = RowMask::secret(rows, 9);
        let code = [2usize, 0, 3, 1];
        let negate = [false, true, false, true];
        let turn_bits = |x: &[u32]| -> Vec<u32> {
            x.chunks_exact(d)
                .flat_map(|row| {
                    (0..d).map(move |j| row[code[j]] ^ if negate[j] { 0x8000_0000 } else { 0 })
                })
                .collect()
        };
        let plain_bits: Vec<u32> = plain.iter().map(|x| x.to_bits()).collect();
        let turned_plain: Vec<f32> = turn_bits(&plain_bits)
            .into_iter()
            .map(f32::from_bits)
            .collect();
        let turned_stored = turn_bits(&mask.apply(&plain, d));
        assert_eq!(mask.undo(&turned_stored, d), turned_plain);
    }
}
