//! Host tensors ([`HostTensor`]): contiguous `[B, H, S, D]` buffers of one element type, their
//! conversions, raw-byte views for device transfers, and the poison values that mark unwritten
//! output.

use std::fmt;

use half::{bf16, f16};

use crate::{DType, OracleError};

/// The fp16 poison: a signalling NaN (quiet bit clear) with payload `0x1A5`.
///
/// Arithmetic only ever produces *quiet* NaNs (and CUDA's canonical NaN `0x7FFF`, x86's `0xFE00`),
/// so an output element that still holds this exact bit pattern after a kernel ran was never
/// written. Copies (memcpy, loads and stores) preserve it.
pub const POISON_F16_BITS: u16 = 0x7DA5;
/// The bf16 poison: a signalling NaN with payload `0x25`; the upper half of [`POISON_F32_BITS`].
///
/// Not the canonical NaN `0x7FFF`/`0x7FC0`, nor any quiet NaN, so no arithmetic produces it.
pub const POISON_BF16_BITS: u16 = 0x7FA5;
/// The f32 poison: a signalling NaN with payload `0x25A5A5`.
///
/// Not the canonical NaN `0x7FC00000` (nor x86's `0xFFC00000`), nor any quiet NaN, so no
/// arithmetic produces it.
pub const POISON_F32_BITS: u32 = 0x7FA5_A5A5;

/// An element type this crate computes with: exact widening to f64, rounding to nearest from it.
pub(crate) trait Element: Copy + Send + Sync + 'static {
    /// Explicitly stored mantissa bits.
    const MANTISSA_BITS: u32;
    /// Rounds to the nearest representable value (ties to even).
    fn from_f64(value: f64) -> Self;
    /// Exact for every element type here except f64 itself, which is the identity.
    fn to_f64(self) -> f64;
    /// Exact for f16, bf16 and f32; rounds f64.
    fn to_f32(self) -> f32;
}

impl Element for f16 {
    const MANTISSA_BITS: u32 = 10;
    fn from_f64(value: f64) -> Self {
        f16::from_f64(value)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

impl Element for bf16 {
    const MANTISSA_BITS: u32 = 7;
    fn from_f64(value: f64) -> Self {
        bf16::from_f64(value)
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
}

impl Element for f32 {
    const MANTISSA_BITS: u32 = 23;
    fn from_f64(value: f64) -> Self {
        value as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn to_f32(self) -> f32 {
        self
    }
}

impl Element for f64 {
    const MANTISSA_BITS: u32 = 52;
    fn from_f64(value: f64) -> Self {
        value
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn to_f32(self) -> f32 {
        self as f32
    }
}

/// The elements of a [`HostTensor`], row-major.
#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    /// IEEE binary16.
    F16(Vec<f16>),
    /// bfloat16.
    Bf16(Vec<bf16>),
    /// IEEE binary32.
    F32(Vec<f32>),
    /// IEEE binary64: host only (references and fixtures), never uploaded to a kernel.
    F64(Vec<f64>),
}

/// Applies `$body` to the typed vector inside a `HostData`, whatever its element type.
macro_rules! with_data {
    ($data:expr, $values:ident => $body:expr) => {
        match $data {
            HostData::F16($values) => $body,
            HostData::Bf16($values) => $body,
            HostData::F32($values) => $body,
            HostData::F64($values) => $body,
        }
    };
}

impl HostData {
    /// Number of elements.
    pub fn len(&self) -> usize {
        with_data!(self, values => values.len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element names as in error messages and `.npy` docs: "fp16", "bf16", "f32", "f64".
    pub fn type_name(&self) -> &'static str {
        match self {
            HostData::F16(_) => "fp16",
            HostData::Bf16(_) => "bf16",
            HostData::F32(_) => "f32",
            HostData::F64(_) => "f64",
        }
    }

    /// `len` elements from `start`, widened to f64 (exactly, for every element type).
    pub(crate) fn slice_f64(&self, start: usize, len: usize) -> Vec<f64> {
        with_data!(self, values => values[start..start + len].iter().map(|x| x.to_f64()).collect())
    }

    /// `len` elements from `start`, as f32 (exact for fp16, bf16 and f32).
    pub(crate) fn slice_f32(&self, start: usize, len: usize) -> Vec<f32> {
        with_data!(self, values => values[start..start + len].iter().map(|x| x.to_f32()).collect())
    }

    /// Element `index` widened to f64.
    pub(crate) fn get_f64(&self, index: usize) -> f64 {
        with_data!(self, values => values[index].to_f64())
    }

    /// Whether element `index` holds its type's poison bit pattern (f64 has none).
    pub(crate) fn is_poison(&self, index: usize) -> bool {
        match self {
            HostData::F16(values) => values[index].to_bits() == POISON_F16_BITS,
            HostData::Bf16(values) => values[index].to_bits() == POISON_BF16_BITS,
            HostData::F32(values) => values[index].to_bits() == POISON_F32_BITS,
            HostData::F64(_) => false,
        }
    }
}

/// A contiguous, row-major `[B, H, S, D]` tensor on the host.
///
/// The fields are public for easy construction; every function that takes a `HostTensor` checks
/// that `data` holds exactly `dims.iter().product()` elements and reports
/// [`OracleError::DataLength`] otherwise.
///
/// ```
/// use attn_oracle::{DType, HostTensor};
/// let t = HostTensor::from_f64([1, 1, 2, 2], DType::F16, &[1.0, 2.0, 3.0, 1.0 / 3.0]);
/// assert_eq!(t.dtype()?, DType::F16);
/// assert_eq!(t.to_f64()[3], 0.333251953125); // 1/3 rounded to the nearest fp16
/// let bytes = t.as_bytes(); // little-endian element bits, ready for a device upload
/// assert_eq!(HostTensor::from_bytes([1, 1, 2, 2], DType::F16, bytes)?, t);
/// # Ok::<(), attn_oracle::OracleError>(())
/// ```
#[derive(Clone, PartialEq)]
pub struct HostTensor {
    /// `[B, H, S, D]`.
    pub dims: [usize; 4],
    /// The elements, row-major over `dims`.
    pub data: HostData,
}

/// Summarises instead of printing every element.
impl fmt::Debug for HostTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostTensor")
            .field("dims", &self.dims)
            .field("type", &self.data.type_name())
            .field("len", &self.data.len())
            .finish()
    }
}

impl HostTensor {
    /// The device dtype of the elements.
    ///
    /// f64 data has no device dtype (no kernel reads or writes f64), so it is an error:
    /// [`OracleError::NoDeviceDType`]. Use [`HostData::type_name`] to describe any tensor.
    pub fn dtype(&self) -> Result<DType, OracleError> {
        match self.data {
            HostData::F16(_) => Ok(DType::F16),
            HostData::Bf16(_) => Ok(DType::Bf16),
            HostData::F32(_) => Ok(DType::F32),
            HostData::F64(_) => Err(OracleError::NoDeviceDType { dims: self.dims }),
        }
    }

    /// Number of elements held.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether no elements are held.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Every element widened to f64 (exact for every element type).
    pub fn to_f64(&self) -> Vec<f64> {
        self.data.slice_f64(0, self.data.len())
    }

    /// A tensor of `dtype` holding `values` rounded to nearest (ties to even).
    ///
    /// # Panics
    /// If `values.len()` is not the product of `dims`: the two arguments come from the same
    /// caller, so a mismatch is a bug in that caller, not bad input.
    pub fn from_f64(dims: [usize; 4], dtype: DType, values: &[f64]) -> HostTensor {
        let expected: usize = dims.iter().product();
        assert_eq!(
            values.len(),
            expected,
            "HostTensor::from_f64: {} values for dims {dims:?}",
            values.len()
        );
        HostTensor {
            dims,
            data: round_all(dtype, values.iter().copied()),
        }
    }

    /// The same values held as `dtype`, rounded to nearest (f64 data is rounded once, directly).
    pub fn to_dtype(&self, dtype: DType) -> HostTensor {
        let data =
            with_data!(&self.data, values => round_all(dtype, values.iter().map(|x| x.to_f64())));
        HostTensor {
            dims: self.dims,
            data,
        }
    }

    /// A tensor whose every element is `dtype`'s poison bit pattern ([`POISON_F16_BITS`], ...).
    ///
    /// Upload it as the output buffer before a kernel runs; [`compare`](crate::compare) counts the
    /// elements still poisoned afterwards.
    pub fn poisoned(dims: [usize; 4], dtype: DType) -> HostTensor {
        let len = dims.iter().product();
        let data = match dtype {
            DType::F16 => HostData::F16(vec![f16::from_bits(POISON_F16_BITS); len]),
            DType::Bf16 => HostData::Bf16(vec![bf16::from_bits(POISON_BF16_BITS); len]),
            DType::F32 => HostData::F32(vec![f32::from_bits(POISON_F32_BITS); len]),
        };
        HostTensor { dims, data }
    }

    /// The raw element bits, little-endian (every supported host is little-endian), for upload.
    pub fn as_bytes(&self) -> &[u8] {
        with_data!(&self.data, values => bytemuck::cast_slice(values))
    }

    /// A tensor from little-endian raw element bits, as downloaded from a device.
    pub fn from_bytes(
        dims: [usize; 4],
        dtype: DType,
        bytes: &[u8],
    ) -> Result<HostTensor, OracleError> {
        let len: usize = dims.iter().product();
        let expected = len * dtype.size_bytes();
        if bytes.len() != expected {
            return Err(OracleError::ByteLength {
                dims,
                dtype,
                expected,
                found: bytes.len(),
            });
        }
        let data = match dtype {
            DType::F16 => HostData::F16(
                bytes
                    .chunks_exact(2)
                    .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                    .collect(),
            ),
            DType::Bf16 => HostData::Bf16(
                bytes
                    .chunks_exact(2)
                    .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                    .collect(),
            ),
            DType::F32 => HostData::F32(
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_bits(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                    .collect(),
            ),
        };
        Ok(HostTensor { dims, data })
    }

    /// Checks that `data` holds exactly the product of `dims` elements.
    pub(crate) fn check_len(&self) -> Result<(), OracleError> {
        let expected: usize = self.dims.iter().product();
        if self.data.len() == expected {
            Ok(())
        } else {
            Err(OracleError::DataLength {
                dims: self.dims,
                expected,
                found: self.data.len(),
            })
        }
    }
}

/// Rounds f64 values to `dtype`.
fn round_all(dtype: DType, values: impl Iterator<Item = f64>) -> HostData {
    match dtype {
        DType::F16 => HostData::F16(values.map(f16::from_f64).collect()),
        DType::Bf16 => HostData::Bf16(values.map(bf16::from_f64).collect()),
        DType::F32 => HostData::F32(values.map(|x| x as f32).collect()),
    }
}
