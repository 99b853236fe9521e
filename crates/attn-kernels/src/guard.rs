//! The gate's defences around a candidate's buffers, and its own small device probes
//! (`kernels/harness.cu`).
//!
//! - [`GuardedTensor`]: a device tensor allocated with [`GUARD_BYTES`] of canary bytes before and
//!   after it; the kernel is handed the interior only. A write outside the interior (past the end
//!   of O, before its start, between inputs) changes canaries, which [`GuardedTensor::check`]
//!   finds and measures ("128 bytes after O"). The canaries are seeded per buffer, so a kernel
//!   cannot know them; each canary word is a finite negative value in both fp16 and bf16 with a
//!   non-zero low byte (a kernel that reads past a buffer reads finite numbers, and a small
//!   positive value written over a canary changes both of its bytes).
//! - [`HarnessKernels::checksum`]: a keyed hash of every word of a tensor, on the device: Q, K and
//!   V are checksummed before and after every checked launch. The invariant variant ignores the
//!   sign bit and the column order within a row, so it survives the timing's signed column
//!   permutations and can be compared across a whole timing.
//! - [`HarnessKernels::stamp_clocks`]: every SM's clock64() and %globaltimer at one moment. Two
//!   stamps on the timed stream, before and after a block of samples, give the mean SM clock over
//!   the whole block ([`span_mhz`]), not the clock of an instant at its edges.

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

use attn_oracle::{DType, HostTensor};
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};

use crate::compile::CompileRequest;
use crate::error::{DriverContext, KernelError, Result};
use crate::gpu::{DeviceTensor, Gpu};

const SOURCE: &str = include_str!("../../../kernels/harness.cu");

/// Canary bytes before and after every guarded buffer (a multiple of 256, so the interior keeps
/// the allocation's alignment: TMA descriptors need 16 bytes, vector loads 16).
pub const GUARD_BYTES: usize = 256 * 1024;

/// Which guard of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The bytes just before the buffer.
    Before,
    /// The bytes just after it.
    After,
}

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The canary byte at offset `i` of the guard on `side` of a buffer seeded with `seed`. Even
/// offsets are the low bytes of 16-bit words: never 0. Odd offsets are the high bytes: the sign
/// bit set and the exponent bits never all ones in either fp16 (bits 10–14) or bf16 (bits 7–14),
/// so every canary word is a finite negative number in both.
pub fn canary_byte(seed: u64, side: Side, i: u64) -> u8 {
    let side_key = match side {
        Side::Before => 0x5afe_0000_0000_0001,
        Side::After => 0x5afe_0000_0000_0002,
    };
    let word = mix64(seed ^ side_key ^ mix64(i / 8));
    let b = (word >> ((i % 8) * 8)) as u8;
    if i % 2 == 0 {
        // 1..=255
        if b == 0 {
            0x5a
        } else {
            b
        }
    } else {
        let h = 0x80 | (b & 0x7f);
        // fp16 exponent bits of the high byte are 0x7c; all ones would be Inf/NaN (and then the
        // bf16 exponent could be all ones too).
        if h & 0x7c == 0x7c {
            h ^ 0x40
        } else {
            h
        }
    }
}

/// The canaries of one guard, `len` bytes.
pub fn canaries(seed: u64, side: Side, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| canary_byte(seed, side, i))
        .collect()
}

/// Bytes that differ between what a guard should hold and what it holds: the first and last
/// offsets that differ and how many do.
pub fn mismatches(expected: &[u8], found: &[u8]) -> Option<(usize, usize, usize)> {
    let mut first = None;
    let mut last = 0;
    let mut count = 0;
    for (i, (a, b)) in expected.iter().zip(found).enumerate() {
        if a != b {
            first.get_or_insert(i);
            last = i;
            count += 1;
        }
    }
    first.map(|f| (f, last, count))
}

/// Writes found in the guards of one buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardViolation {
    /// The buffer (`"O"`, `"Q"`, ...).
    pub buffer: String,
    /// How far before the buffer the farthest changed byte lies (0: none changed).
    pub before: usize,
    /// How far after the buffer's end the farthest changed byte lies (0: none changed).
    pub after: usize,
    /// Changed bytes in both guards.
    pub changed: usize,
}

impl GuardViolation {
    /// The violation of `buffer` from the contents of its two guards, if any byte changed.
    pub fn find(buffer: &str, seed: u64, before: &[u8], after: &[u8]) -> Option<GuardViolation> {
        let b = mismatches(&canaries(seed, Side::Before, before.len()), before);
        let a = mismatches(&canaries(seed, Side::After, after.len()), after);
        if b.is_none() && a.is_none() {
            return None;
        }
        Some(GuardViolation {
            buffer: buffer.to_string(),
            // The guard before ends where the buffer starts: offset f is len − f bytes before it.
            before: b.map_or(0, |(first, _, _)| before.len() - first),
            after: a.map_or(0, |(_, last, _)| last + 1),
            changed: b.map_or(0, |m| m.2) + a.map_or(0, |m| m.2),
        })
    }
}

/// `"128 bytes after O"`, `"2 bytes before O"`, or both joined by "and".
impl std::fmt::Display for GuardViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = &self.buffer;
        match (self.before, self.after) {
            (0, after) => write!(f, "{after} bytes after {name}"),
            (before, 0) => write!(f, "{before} bytes before {name}"),
            (before, after) => write!(
                f,
                "{before} bytes before {name} and {after} bytes after {name}"
            ),
        }
    }
}

/// A device tensor with canary guards before and after it (see the module). Derefs to the
/// interior, which is what kernels get.
pub struct GuardedTensor {
    name: String,
    seed: u64,
    /// Canary bytes on each side ([`GUARD_BYTES`], or 0: an exact allocation).
    guard_bytes: usize,
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
            .finish_non_exhaustive()
    }
}

impl GuardedTensor {
    /// `dims` elements of `dtype` between two guards of `guard_bytes` (a multiple of 256, or 0 for
    /// an exact allocation); the interior is left unwritten.
    fn alloc(
        gpu: &Gpu,
        name: &str,
        dims: [usize; 4],
        dtype: DType,
        seed: u64,
        guard_bytes: usize,
    ) -> Result<Self> {
        let len: usize = dims.iter().product();
        let guard_bytes = guard_bytes.next_multiple_of(256);
        let guard = guard_bytes / 2;
        let stream = gpu.stream();
        // SAFETY: both guards are written below; the interior is the caller's to fill.
        let mut padded = unsafe { stream.alloc::<u16>(guard + len + guard) }
            .during("cuMemAlloc (guarded tensor)")?;
        if guard > 0 {
            let words = |side| -> Vec<u16> {
                canaries(seed, side, guard_bytes)
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect()
            };
            stream
                .memcpy_htod(&words(Side::Before), &mut padded.slice_mut(..guard))
                .during("cuMemcpyHtoD (guard before)")?;
            stream
                .memcpy_htod(&words(Side::After), &mut padded.slice_mut(guard + len..))
                .during("cuMemcpyHtoD (guard after)")?;
        }
        let interior = {
            let (base, _sync) = padded.device_ptr(stream);
            base + guard_bytes as u64
        };
        // SAFETY: `interior` addresses `len` u16 elements inside `padded`, which outlives the
        // alias (dropped after it leaks the alias, see Drop); the alias is never freed.
        let buf = unsafe { stream.upgrade_device_ptr::<u16>(interior, len) };
        Ok(GuardedTensor {
            name: name.to_string(),
            seed,
            guard_bytes,
            padded,
            inner: ManuallyDrop::new(DeviceTensor { dims, dtype, buf }),
        })
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
        let dtype = tensor.dtype()?;
        if !matches!(dtype, DType::F16 | DType::Bf16) {
            return Err(KernelError::Unsupported {
                implementation: "the GPU path".into(),
                what: format!("dtype {dtype}"),
            });
        }
        let mut guarded = GuardedTensor::alloc(gpu, name, tensor.dims, dtype, seed, guard_bytes)?;
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
        let mut guarded = GuardedTensor::alloc(gpu, name, dims, dtype, seed, guard_bytes)?;
        gpu.poison(&mut guarded.inner)?;
        Ok(guarded)
    }

    /// Its name in verdicts (`"O"`, `"Q"`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads both guards back (after everything enqueued on the GPU's stream) and says where they
    /// were written, if anywhere.
    pub fn check(&self, gpu: &Gpu) -> Result<Option<GuardViolation>> {
        let guard = self.guard_bytes / 2;
        if guard == 0 {
            return Ok(None);
        }
        let len = self.inner.buf.len();
        let stream = gpu.stream();
        let before: Vec<u16> = stream
            .clone_dtoh(&self.padded.slice(..guard))
            .during("cuMemcpyDtoH (guard before)")?;
        let after: Vec<u16> = stream
            .clone_dtoh(&self.padded.slice(guard + len..))
            .during("cuMemcpyDtoH (guard after)")?;
        gpu.synchronize()?;
        let bytes = |w: Vec<u16>| -> Vec<u8> { w.iter().flat_map(|x| x.to_le_bytes()).collect() };
        Ok(GuardViolation::find(
            &self.name,
            self.seed,
            &bytes(before),
            &bytes(after),
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

    fn is_finite_negative(word: u16) -> bool {
        let f16 = half::f16::from_bits(word);
        let bf16 = half::bf16::from_bits(word);
        f16.is_finite() && bf16.is_finite() && f16.is_sign_negative() && bf16.is_sign_negative()
    }

    #[test]
    fn every_canary_word_is_finite_negative_with_a_non_zero_low_byte() {
        for seed in [0, 1, 0xdead_beef, u64::MAX] {
            for side in [Side::Before, Side::After] {
                let bytes = canaries(seed, side, 1 << 16);
                for w in bytes.chunks_exact(2) {
                    assert_ne!(w[0], 0);
                    let word = u16::from_le_bytes([w[0], w[1]]);
                    assert!(is_finite_negative(word), "{word:#06x}");
                    assert_ne!(word, attn_oracle::POISON_F16_BITS);
                    assert_ne!(word, attn_oracle::POISON_BF16_BITS);
                }
                // Not a constant pattern: many distinct words.
                let mut words: Vec<_> = bytes.chunks_exact(2).map(|w| (w[0], w[1])).collect();
                words.sort_unstable();
                words.dedup();
                assert!(words.len() > 5000, "{}", words.len());
            }
        }
        // Seeds and sides give different guards.
        assert_ne!(canaries(1, Side::Before, 64), canaries(2, Side::Before, 64));
        assert_ne!(canaries(1, Side::Before, 64), canaries(1, Side::After, 64));
    }

    #[test]
    fn a_small_positive_value_changes_both_bytes_of_any_canary_word() {
        // What a planted kernel writes: 2.0 is 0x4000 in both fp16 and bf16; 1.0 is 0x3c00 in
        // fp16 (bf16's 0x3f80 has a low byte a canary may share, so planted kernels write 2.0).
        let two = 0x4000u16.to_le_bytes();
        for i in (0..1 << 14).step_by(2) {
            for side in [Side::Before, Side::After] {
                let c = [canary_byte(9, side, i), canary_byte(9, side, i + 1)];
                assert_ne!(c[0], two[0]);
                assert_ne!(c[1], two[1]);
            }
        }
    }

    #[test]
    fn violations_are_measured_from_the_buffer() {
        let seed = 77;
        let len = 4096;
        let clean_before = canaries(seed, Side::Before, len);
        let clean_after = canaries(seed, Side::After, len);
        assert_eq!(
            GuardViolation::find("O", seed, &clean_before, &clean_after),
            None
        );
        // 64 fp16 elements of 2.0 written just past the end of O: 128 bytes after O.
        let mut after = clean_after.clone();
        for w in after[..128].chunks_exact_mut(2) {
            w.copy_from_slice(&0x4000u16.to_le_bytes());
        }
        let v = GuardViolation::find("O", seed, &clean_before, &after).unwrap();
        assert_eq!((v.before, v.after, v.changed), (0, 128, 128));
        assert_eq!(v.to_string(), "128 bytes after O");
        // One element written just before O: 2 bytes before O.
        let mut before = clean_before.clone();
        before[len - 2..].copy_from_slice(&0x4000u16.to_le_bytes());
        let v = GuardViolation::find("O", seed, &before, &clean_after).unwrap();
        assert_eq!(v.to_string(), "2 bytes before O");
        // A sparse write far out counts to the farthest byte; both sides are named.
        let mut far = clean_after.clone();
        far[1000] ^= 0xff;
        let v = GuardViolation::find("K", seed, &before, &far).unwrap();
        assert_eq!(v.to_string(), "2 bytes before K and 1001 bytes after K");
        assert_eq!(v.changed, 3);
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
