//! The gate's defences around a candidate's buffers, and its own small device probes
//! (`kernels/harness.cu`).
//!
//! - [`GuardedTensor`]: a device tensor allocated with guard bytes before and after it; the kernel
//!   is handed the interior only. A write outside the interior (past the end of O, before its
//!   start, between inputs) changes guard bytes, which [`GuardedTensor::check`] finds and measures
//!   ("128 bytes after O"). Guards are seeded per buffer, so a kernel cannot know them
//!   ([`pattern`]). A [`GuardFill::Finite`] guard (O's, the timing's buffers) holds canary words
//!   that are finite negative values in both fp16 and bf16 with a non-zero low byte. The checks'
//!   inputs ([`GuardedTensor::upload_for_reads`]) are guarded by [`GuardFill::Nan`] words, NaNs of
//!   their dtype with a seeded sign and payload, and after each by as many bytes as the input
//!   holds ([`read_guard_bytes`]): a kernel that reads past an input reads NaN, and a guard
//!   refilled ([`GuardedTensor::fill_guard`]) tells whether its output depends on what lies there.
//! - [`HarnessKernels::checksum`]: a keyed hash of every word of a tensor, on the device: Q, K and
//!   V are checksummed before and after every checked launch. The invariant variant ignores the
//!   sign bit and the column order within a row, so it survives the timing's signed column
//!   permutations and can be compared across a whole timing.
//! - [`HarnessKernels::stamp_clocks`]: every SM's clock64() and %globaltimer at one moment. Two
//!   stamps on the timed stream, before and after a block of samples, give the mean SM clock over
//!   the whole block ([`span_mhz`]), not the clock of an instant at its edges.

pub mod pattern;

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

use attn_oracle::{DType, HostTensor};
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};

use crate::compile::CompileRequest;
use crate::error::{DriverContext, KernelError, Result};
use crate::gpu::{DeviceTensor, Gpu};

use pattern::mix64;
pub use pattern::{
    canaries, canary_byte, guard_words, mismatches, nan_word, GuardFill, GuardViolation, Side,
};

const SOURCE: &str = include_str!("../../../../kernels/harness.cu");

/// Canary bytes before and after every guarded buffer (a multiple of 256, so the interior keeps
/// the allocation's alignment: TMA descriptors need 16 bytes, vector loads 16).
pub const GUARD_BYTES: usize = 256 * 1024;

/// The largest guard after a checked input: 256 MiB is 128 whole heads of 8192 rows of 128
/// fp16 elements, past any head or row a wrong index reaches, while Q, K and V's guards together
/// add at most 768 MiB of device memory and a bounded read-back after each checked launch.
pub const READ_GUARD_MAX_BYTES: usize = 256 << 20;

/// The guard after a checked input of `tensor_bytes`: as large as the input (a kernel that reads
/// whole heads or rows past its end reads guard), at least [`GUARD_BYTES`], at most
/// [`READ_GUARD_MAX_BYTES`], a multiple of 256.
pub fn read_guard_bytes(tensor_bytes: usize) -> usize {
    tensor_bytes
        .clamp(GUARD_BYTES, READ_GUARD_MAX_BYTES)
        .next_multiple_of(256)
}

/// A device tensor with guards before and after it (see the module). Derefs to the interior,
/// which is what kernels get.
pub struct GuardedTensor {
    name: String,
    seed: u64,
    /// Guard bytes before and after the interior (0: an exact allocation on that side).
    guard_bytes: [usize; 2],
    /// What each guard holds now, before and after.
    fills: [GuardFill; 2],
    /// Those guards' words, kept so that a check of a large guard does not draw them again.
    expected: [Vec<u16>; 2],
    padded: CudaSlice<u16>,
    /// An alias of the interior of `padded`: never freed itself (leaked on drop).
    inner: ManuallyDrop<DeviceTensor>,
}

impl std::fmt::Debug for GuardedTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedTensor")
            .field("name", &self.name)
            .field("dims", &self.inner.dims)
            .field("dtype", &self.inner.dtype)
            .field("guard_bytes", &self.guard_bytes)
            .field("fills", &self.fills)
            .finish_non_exhaustive()
    }
}

fn side_index(side: Side) -> usize {
    match side {
        Side::Before => 0,
        Side::After => 1,
    }
}

impl GuardedTensor {
    /// `dims` elements of `dtype` between a guard of `guard_bytes[0]` and one of `guard_bytes[1]`
    /// (each rounded up to a multiple of 256; 0 for none), both filled with `fill`; the interior
    /// is left unwritten.
    fn alloc(
        gpu: &Gpu,
        name: &str,
        dims: [usize; 4],
        dtype: DType,
        seed: u64,
        guard_bytes: [usize; 2],
        fill: GuardFill,
    ) -> Result<Self> {
        let len: usize = dims.iter().product();
        let guard_bytes = guard_bytes.map(|g| g.next_multiple_of(256));
        let [before, after] = guard_bytes.map(|g| g / 2);
        let stream = gpu.stream();
        // SAFETY: both guards are written below; the interior is the caller's to fill.
        let padded = unsafe { stream.alloc::<u16>(before + len + after) }
            .during("cuMemAlloc (guarded tensor)")?;
        let interior = {
            let (base, _sync) = padded.device_ptr(stream);
            base + guard_bytes[0] as u64
        };
        // SAFETY: `interior` addresses `len` u16 elements inside `padded`, which outlives the
        // alias (dropped after it leaks the alias, see Drop); the alias is never freed.
        let buf = unsafe { stream.upgrade_device_ptr::<u16>(interior, len) };
        let mut guarded = GuardedTensor {
            name: name.to_string(),
            seed,
            guard_bytes,
            fills: [fill; 2],
            expected: [vec![], vec![]],
            padded,
            inner: ManuallyDrop::new(DeviceTensor { dims, dtype, buf }),
        };
        guarded.fill_guard(gpu, Side::Before, fill)?;
        guarded.fill_guard(gpu, Side::After, fill)?;
        Ok(guarded)
    }

    /// A host tensor (fp16 or bf16) copied into the interior of a new guarded buffer.
    pub fn upload(gpu: &Gpu, name: &str, tensor: &HostTensor, seed: u64) -> Result<Self> {
        GuardedTensor::upload_with(gpu, name, tensor, seed, GUARD_BYTES)
    }

    /// As [`GuardedTensor::upload`] with guards of `guard_bytes` (0: none, an exact allocation,
    /// so that compute-sanitizer's memcheck sees the buffer's true bounds).
    pub fn upload_with(
        gpu: &Gpu,
        name: &str,
        tensor: &HostTensor,
        seed: u64,
        guard_bytes: usize,
    ) -> Result<Self> {
        GuardedTensor::upload_guarded(gpu, name, tensor, seed, [guard_bytes; 2], GuardFill::Finite)
    }

    /// A checked input: as [`GuardedTensor::upload`] between NaN guards, [`GUARD_BYTES`] before
    /// it and [`read_guard_bytes`] after it, so that what a kernel reads outside it is NaN.
    pub fn upload_for_reads(gpu: &Gpu, name: &str, tensor: &HostTensor, seed: u64) -> Result<Self> {
        let after = read_guard_bytes(tensor.as_bytes().len());
        GuardedTensor::upload_guarded(
            gpu,
            name,
            tensor,
            seed,
            [GUARD_BYTES, after],
            GuardFill::Nan,
        )
    }

    fn upload_guarded(
        gpu: &Gpu,
        name: &str,
        tensor: &HostTensor,
        seed: u64,
        guard_bytes: [usize; 2],
        fill: GuardFill,
    ) -> Result<Self> {
        let dtype = tensor.dtype()?;
        if !matches!(dtype, DType::F16 | DType::Bf16) {
            return Err(KernelError::Unsupported {
                implementation: "the GPU path".into(),
                what: format!("dtype {dtype}"),
            });
        }
        let mut guarded =
            GuardedTensor::alloc(gpu, name, tensor.dims, dtype, seed, guard_bytes, fill)?;
        let bits: Vec<u16> = tensor
            .as_bytes()
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        gpu.stream()
            .memcpy_htod(&bits, &mut guarded.inner.buf)
            .during("cuMemcpyHtoD")?;
        Ok(guarded)
    }

    /// A poisoned output between guards.
    pub fn alloc_poisoned(
        gpu: &Gpu,
        name: &str,
        dims: [usize; 4],
        dtype: DType,
        seed: u64,
    ) -> Result<Self> {
        GuardedTensor::alloc_poisoned_with(gpu, name, dims, dtype, seed, GUARD_BYTES)
    }

    /// As [`GuardedTensor::alloc_poisoned`] with guards of `guard_bytes` (0: none).
    pub fn alloc_poisoned_with(
        gpu: &Gpu,
        name: &str,
        dims: [usize; 4],
        dtype: DType,
        seed: u64,
        guard_bytes: usize,
    ) -> Result<Self> {
        let mut guarded = GuardedTensor::alloc(
            gpu,
            name,
            dims,
            dtype,
            seed,
            [guard_bytes; 2],
            GuardFill::Finite,
        )?;
        gpu.poison(&mut guarded.inner)?;
        Ok(guarded)
    }

    /// Its name in verdicts (`"O"`, `"Q"`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Guard bytes before and after the interior.
    pub fn guard_bytes(&self) -> [usize; 2] {
        self.guard_bytes
    }

    /// What the guard on `side` holds now.
    pub fn fill(&self, side: Side) -> GuardFill {
        self.fills[side_index(side)]
    }

    /// Rewrites the guard on `side` with `fill` (the same seeded pattern each time); later
    /// [`GuardedTensor::check`]s compare with it.
    pub fn fill_guard(&mut self, gpu: &Gpu, side: Side, fill: GuardFill) -> Result<()> {
        let at = side_index(side);
        self.fills[at] = fill;
        let words = self.guard_bytes[at] / 2;
        self.expected[at] = guard_words(fill, self.inner.dtype, self.seed, side, words);
        if words == 0 {
            return Ok(());
        }
        let len = self.inner.buf.len();
        let before = self.guard_bytes[0] / 2;
        let mut range = match side {
            Side::Before => self.padded.slice_mut(..before),
            Side::After => self.padded.slice_mut(before + len..),
        };
        gpu.stream()
            .memcpy_htod(&self.expected[at], &mut range)
            .during("cuMemcpyHtoD (guard)")?;
        Ok(())
    }

    /// Reads both guards back (after everything enqueued on the GPU's stream) and says where they
    /// were written, if anywhere.
    pub fn check(&self, gpu: &Gpu) -> Result<Option<GuardViolation>> {
        let [before, after] = self.guard_bytes.map(|g| g / 2);
        if before + after == 0 {
            return Ok(None);
        }
        let len = self.inner.buf.len();
        let stream = gpu.stream();
        let read = |range: cudarc::driver::CudaView<'_, u16>| -> Result<Vec<u16>> {
            if range.is_empty() {
                return Ok(vec![]);
            }
            stream.clone_dtoh(&range).during("cuMemcpyDtoH (guard)")
        };
        let found_before = read(self.padded.slice(..before))?;
        let found_after = read(self.padded.slice(before + len..))?;
        gpu.synchronize()?;
        Ok(GuardViolation::find_words(
            &self.name,
            [&self.expected[0], &self.expected[1]],
            [&found_before, &found_after],
        ))
    }
}

impl Deref for GuardedTensor {
    type Target = DeviceTensor;
    fn deref(&self) -> &DeviceTensor {
        &self.inner
    }
}

impl DerefMut for GuardedTensor {
    fn deref_mut(&mut self) -> &mut DeviceTensor {
        &mut self.inner
    }
}

impl Drop for GuardedTensor {
    fn drop(&mut self) {
        // SAFETY: `inner` is taken once, here, and never used again.
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        // The alias is not an allocation of its own: forget it; `padded` frees the memory.
        let _ = inner.buf.leak();
    }
}

/// The host mirror of `checksum_words` in `kernels/harness.cu`: what the device computes, for
/// tests of its properties.
pub fn checksum_host(words: &[u16], row_len: usize, invariant: bool, seed: u64) -> u64 {
    words.iter().enumerate().fold(0u64, |acc, (i, &w)| {
        let (pos, word) = if invariant {
            ((i / row_len.max(1)) as u64, u64::from(w & 0x7fff))
        } else {
            (i as u64, u64::from(w))
        };
        acc.wrapping_add(mix64(
            ((pos << 16) | word)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .wrapping_add(seed),
        ))
    })
}

/// One SM's counters at one moment ([`HarnessKernels::stamp_clocks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockStamp {
    /// clock64(): the SM's own cycle counter.
    pub cycles: u64,
    /// %globaltimer, ns: one timer for the whole GPU.
    pub ns: u64,
    /// The SM it was read on.
    pub sm: u32,
}

/// The mean SM clock (MHz) between two stamps of the GPU: each SM's cycles over the nanoseconds
/// between its stamps, paired by SM (clock64 is a counter of each SM, not one of the GPU), the
/// median over the SMs found in both. `None` where no SM is in both or no time passed.
pub fn span_mhz(before: &[ClockStamp], after: &[ClockStamp]) -> Option<f64> {
    let first_per_sm = |stamps: &[ClockStamp]| {
        let mut by_sm = std::collections::BTreeMap::new();
        for s in stamps {
            by_sm.entry(s.sm).or_insert(*s);
        }
        by_sm
    };
    let after = first_per_sm(after);
    let mut mhz: Vec<f64> = first_per_sm(before)
        .into_iter()
        .filter_map(|(sm, b)| {
            let a = after.get(&sm)?;
            (a.ns > b.ns && a.cycles >= b.cycles)
                .then(|| (a.cycles - b.cycles) as f64 / (a.ns - b.ns) as f64 * 1e3)
        })
        .collect();
    (!mhz.is_empty()).then(|| attn_stats::statistic::median(&mut mhz))
}

/// Device slots for one [`HarnessKernels::stamp_clocks`]: a stamp per thread block.
#[derive(Debug)]
pub struct ClockStamps(CudaSlice<u64>);

impl ClockStamps {
    /// Room for a stamp from each of `blocks` thread blocks (twice the SMs reach every SM).
    pub fn new(gpu: &Gpu, blocks: usize) -> Result<ClockStamps> {
        Ok(ClockStamps(
            gpu.stream()
                .alloc_zeros::<u64>(3 * blocks.max(1))
                .during("cuMemAlloc (clock stamps)")?,
        ))
    }

    /// Number of stamps (thread blocks).
    pub fn len(&self) -> usize {
        self.0.len() / 3
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Reads every stamp (synchronises).
    pub fn read(&self, gpu: &Gpu) -> Result<Vec<ClockStamp>> {
        let raw = gpu.stream().clone_dtoh(&self.0).during("cuMemcpyDtoH")?;
        gpu.synchronize()?;
        Ok(raw
            .chunks_exact(3)
            .map(|c| ClockStamp {
                cycles: c[0],
                ns: c[1],
                sm: c[2] as u32,
            })
            .collect())
    }
}

/// `kernels/harness.cu`, compiled once per device.
#[derive(Debug)]
pub struct HarnessKernels {
    checksum: CudaFunction,
    stamp: CudaFunction,
    /// Dynamic shared memory of a stamp's thread block: the most a block may have, so that no SM
    /// holds two at once and the first SM-count blocks land on every SM.
    stamp_shared: u32,
}

impl HarnessKernels {
    /// Compiles (through the caches) and loads the kernels.
    pub fn new(gpu: &Gpu) -> Result<HarnessKernels> {
        let request = CompileRequest {
            name: "harness.cu".into(),
            source: SOURCE,
            include_dir: None,
            defines: vec![],
            arch: gpu.arch(),
        };
        let stamp_shared = gpu.info().max_shared_per_block;
        Ok(HarnessKernels {
            checksum: gpu.load(&request, "checksum_words", 0)?,
            stamp: gpu.load(&request, "clock_stamp", stamp_shared)?,
            stamp_shared,
        })
    }

    /// The checksum of `tensor` with `seed` (synchronises): every word at its position, or with
    /// `invariant`, every word without its sign bit in its row (see the module).
    pub fn checksum(
        &self,
        gpu: &Gpu,
        tensor: &DeviceTensor,
        invariant: bool,
        seed: u64,
    ) -> Result<u64> {
        let stream = gpu.stream();
        let mut out = stream
            .alloc_zeros::<u64>(1)
            .during("cuMemAlloc (checksum)")?;
        let n = tensor.buf.len() as i64;
        let row_len = tensor.dims[3].max(1) as i32;
        let invariant_arg = i32::from(invariant);
        let blocks = (n as usize).div_ceil(256).clamp(1, 2048) as u32;
        let mut launch = stream.launch_builder(&self.checksum);
        launch
            .arg(&tensor.buf)
            .arg(&n)
            .arg(&row_len)
            .arg(&invariant_arg)
            .arg(&seed)
            .arg(&mut out);
        // SAFETY: checksum_words(const u16* x, long long n, int row_len, int invariant, u64 seed,
        // u64* out): `x` holds n elements, `out` one; a grid-stride loop covers every element.
        unsafe {
            launch.launch(LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            })
        }
        .during("cuLaunchKernel (checksum_words)")?;
        let sum = stream.clone_dtoh(&out).during("cuMemcpyDtoH")?;
        gpu.synchronize()?;
        Ok(sum[0])
    }

    /// Enqueues a stamp of every SM's clock on the GPU's stream into `stamps` (no host wait): one
    /// thread block per stamp, each with the most shared memory a block may have, so blocks
    /// spread one per SM (give it at least as many stamps as SMs).
    pub fn stamp_clocks(&self, gpu: &Gpu, stamps: &mut ClockStamps) -> Result<()> {
        let blocks = stamps.len() as u32;
        let mut launch = gpu.stream().launch_builder(&self.stamp);
        launch.arg(&mut stamps.0);
        // SAFETY: clock_stamp(u64* out) writes out[3·blockIdx.x .. 3·blockIdx.x + 3), inside
        // `stamps`: one block of one warp per stamp. Its shared memory is reserved, never used;
        // the function's limit was raised to it when loaded.
        unsafe {
            launch.launch(LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (32, 1, 1),
                shared_mem_bytes: self.stamp_shared,
            })
        }
        .during("cuLaunchKernel (clock_stamp)")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checked_input_is_followed_by_a_guard_of_its_own_size_within_bounds() {
        assert_eq!(read_guard_bytes(0), GUARD_BYTES);
        assert_eq!(read_guard_bytes(GUARD_BYTES - 2), GUARD_BYTES);
        assert_eq!(read_guard_bytes(4 << 20), 4 << 20);
        assert_eq!(read_guard_bytes(1 << 30), READ_GUARD_MAX_BYTES);
        let odd = read_guard_bytes(1_000_002);
        assert!(
            odd >= 1_000_002 && odd % 256 == 0 && odd - 1_000_002 < 256,
            "{odd}"
        );
    }

    #[test]
    fn the_invariant_checksum_survives_signed_column_permutations_only() {
        let (rows, d) = (6, 8);
        let words: Vec<u16> = (0..rows * d)
            .map(|i| (i as u16).wrapping_mul(2654) ^ 0x3c00)
            .collect();
        let seed = 5;
        // Swap two columns of every row and flip the sign of a third.
        let mut turned = words.clone();
        for row in turned.chunks_exact_mut(d) {
            row.swap(1, 6);
            row[3] ^= 0x8000;
        }
        assert_eq!(
            checksum_host(&words, d, true, seed),
            checksum_host(&turned, d, true, seed)
        );
        assert_ne!(
            checksum_host(&words, d, false, seed),
            checksum_host(&turned, d, false, seed)
        );
        // Any changed value (one element zeroed) changes both.
        let mut zeroed = words.clone();
        zeroed[d * 2] = 0;
        assert_ne!(
            checksum_host(&words, d, true, seed),
            checksum_host(&zeroed, d, true, seed)
        );
        assert_ne!(
            checksum_host(&words, d, false, seed),
            checksum_host(&zeroed, d, false, seed)
        );
        // Moving a value to another row changes the invariant one too.
        let mut moved = words.clone();
        moved.swap(0, d);
        assert_ne!(
            checksum_host(&words, d, true, seed),
            checksum_host(&moved, d, true, seed)
        );
    }

    #[test]
    fn the_span_clock_pairs_stamps_by_sm_and_takes_the_median() {
        let stamp = |sm, cycles, ns| ClockStamp { cycles, ns, sm };
        // SM 0 at 1500 MHz, SM 1 at 1700 MHz, SM 2 at 1600 MHz over 1 ms; SM 1's counter starts
        // far from SM 0's (each SM counts for itself), and SM 3 is in only one of the stamps.
        let before = [
            stamp(0, 10_000, 5_000_000),
            stamp(1, 900_000_000, 5_000_100),
            stamp(2, 40_000, 5_000_050),
            stamp(3, 0, 5_000_000),
            stamp(0, 10_100, 5_000_060), // a second block on SM 0: the first one counts
        ];
        let after = [
            stamp(2, 40_000 + 1_600_000, 6_000_050),
            stamp(0, 10_000 + 1_500_000, 6_000_000),
            stamp(1, 900_000_000 + 1_700_000, 6_000_100),
        ];
        let mhz = span_mhz(&before, &after).unwrap();
        assert!((mhz - 1600.0).abs() < 1e-9, "{mhz}");
        // An even count takes the mean of the middle two.
        let mhz = span_mhz(&before[..2], &after).unwrap();
        assert!((mhz - 1600.0).abs() < 1e-9, "{mhz}");
        // No SM in both, or no time between them: nothing measured.
        assert_eq!(span_mhz(&before[3..4], &after), None);
        assert_eq!(span_mhz(&before, &before), None);
        assert_eq!(span_mhz(&[], &after), None);
    }
}
