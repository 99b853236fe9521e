//! `.npy` files, to pass tensors to and from numpy/PyTorch and to keep them as fixtures.
//!
//! Element types: `<f2` ↔ fp16, `<f4` ↔ f32, `<f8` ↔ f64, and **bf16 as its raw bits in a
//! `<u2` (uint16) array** (numpy has no bfloat16). Reading also accepts `<i2` as bf16 bits and
//! big-endian (`>`) variants of all of these. From PyTorch:
//!
//! ```text
//! np.save("q.npy", q.cpu().view(torch.int16).numpy())     # bf16 tensor -> '<i2' bits
//! torch.from_numpy(np.load("o.npy")).view(torch.bfloat16)  # '<u2'/'<i2' bits -> bf16 tensor
//! ```
//!
//! Shapes of fewer than 4 dims are padded with leading 1s (`(S, D)` reads as `[1, 1, S, D]`);
//! more than 4 dims are accepted only when the extra leading ones are 1. Files are always written
//! 4-d, C order, format version 1.0, atomically (temp file in the same folder, then rename).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{DType, HostData, HostTensor, OracleError};

mod inputs;
pub use inputs::{check_output_path, read_inputs, read_packed_inputs, InputFiles, ReadOptions};

const MAGIC: &[u8] = b"\x93NUMPY";

/// Reads a `.npy` file in whatever element type it holds (see the module docs for the mapping).
///
/// ```
/// use attn_oracle::{npy, DType, HostTensor};
/// let path = std::env::temp_dir().join(format!("attn-oracle-doc-{}.npy", std::process::id()));
/// let tensor = HostTensor::from_f64([1, 2, 3, 4], DType::Bf16, &vec![1.5; 24]);
/// npy::write(&path, &tensor)?;
/// assert_eq!(npy::read(&path)?, tensor);
/// assert_eq!(npy::read_as(&path, DType::F32)?.to_f64(), vec![1.5; 24]);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), attn_oracle::OracleError>(())
/// ```
pub fn read(path: impl AsRef<Path>) -> Result<HostTensor, OracleError> {
    read_stored(path.as_ref()).map(|(tensor, _)| tensor)
}

/// Reads a `.npy` file: the tensor, and the shape its header stores (before padding to 4-D).
fn read_stored(path: &Path) -> Result<(HostTensor, Vec<usize>), OracleError> {
    let bytes = fs::read(path).map_err(|source| OracleError::Io {
        path: path.to_owned(),
        source,
    })?;
    parse(&bytes).map_err(|reason| OracleError::Npy {
        path: path.to_owned(),
        reason,
    })
}

/// Reads a `.npy` file and converts it to `dtype`, rounding to nearest (once, from the stored
/// values) where the file's type is wider.
pub fn read_as(path: impl AsRef<Path>, dtype: DType) -> Result<HostTensor, OracleError> {
    let tensor = read(path)?;
    if tensor.dtype().ok() == Some(dtype) {
        Ok(tensor)
    } else {
        Ok(tensor.to_dtype(dtype))
    }
}

/// Writes `tensor` as a 4-d `.npy` file, atomically: a reader sees the old file or the new one,
/// never a partial one.
pub fn write(path: impl AsRef<Path>, tensor: &HostTensor) -> Result<(), OracleError> {
    let path = path.as_ref();
    tensor.check_len()?;
    let descr = match tensor.data {
        HostData::F16(_) => "<f2",
        HostData::Bf16(_) => "<u2",
        HostData::F32(_) => "<f4",
        HostData::F64(_) => "<f8",
    };
    let [b, h, s, d] = tensor.dims;
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({b}, {h}, {s}, {d}), }}");
    // Pad with spaces so that the data starts 64-byte aligned; the header ends with a newline.
    let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let header_len = u16::try_from(header.len()).map_err(|_| OracleError::Npy {
        path: path.to_owned(),
        reason: "header longer than 65535 bytes".to_owned(),
    })?;
    let mut bytes = Vec::with_capacity(MAGIC.len() + 4 + header.len() + tensor.as_bytes().len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&[1, 0]);
    bytes.extend_from_slice(&header_len.to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(tensor.as_bytes());
    write_bytes_atomic(path, &bytes)
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, then renames it over `path`: a
/// reader sees the old file or the new one, never a partial one. The folder must exist. The one
/// atomic write of the crates below attn-evidence (attn-kernels' compile cache uses it too; above,
/// `attn_evidence::write_bytes_atomic`). Errors name `path`, never the temporary file.
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<(), OracleError> {
    let io_error = |path: &Path| {
        let path = path.to_owned();
        move |source| OracleError::Io { path, source }
    };
    let file_name = path.file_name().ok_or_else(|| OracleError::Io {
        path: path.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"),
    })?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(file_name);
    temp_name.push(format!(".tmp-{}-{nanos}", std::process::id()));
    let temp: PathBuf = path.with_file_name(temp_name);
    // Errors name the file asked for: the temporary file's name would only confuse.
    let result = (|| {
        let mut file = fs::File::create(&temp).map_err(io_error(path))?;
        file.write_all(bytes).map_err(io_error(path))?;
        file.sync_all().map_err(io_error(path))?;
        fs::rename(&temp, path).map_err(io_error(path))
    })();
    if result.is_err() {
        // Best effort: the original error is the one worth reporting.
        let _ = fs::remove_file(&temp);
    }
    result
}

/// Parses a whole `.npy` file: the tensor and the shape its header stores.
fn parse(bytes: &[u8]) -> Result<(HostTensor, Vec<usize>), String> {
    if !bytes.starts_with(MAGIC) || bytes.len() < 10 {
        return Err("missing the \\x93NUMPY magic".to_owned());
    }
    let major = bytes[6];
    let (header_len, header_start) = match major {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 if bytes.len() >= 12 => {
            let len = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            (len as usize, 12)
        }
        _ => return Err(format!("unsupported format version {major}")),
    };
    let data_start = header_start + header_len;
    let header = bytes
        .get(header_start..data_start)
        .ok_or("file ends inside the header")?;
    let header = String::from_utf8_lossy(header).replace('"', "'");
    let descr = quoted_value(&header, "descr")?;
    if raw_value(&header, "fortran_order")?.starts_with("True") {
        return Err("fortran_order=True is not supported; save a C-contiguous array".to_owned());
    }
    let stored = parse_shape(raw_value(&header, "shape")?)?;
    let dims = pad_shape(&stored)?;
    let count: usize = dims.iter().product();
    let data = &bytes[data_start..];

    let (big_endian, kind) = match descr.split_at(1) {
        ("<" | "=", kind) => (false, kind),
        (">", kind) => (true, kind),
        _ => return Err(format!("unsupported dtype descr {descr:?}")),
    };
    let item_size = match kind {
        "f2" | "u2" | "i2" => 2,
        "f4" => 4,
        "f8" => 8,
        _ => {
            return Err(format!(
                "unsupported dtype {descr:?}: expected f2, f4, f8, or u2/i2 holding bf16 bits"
            ))
        }
    };
    if data.len() != count * item_size {
        return Err(format!(
            "{} data bytes for shape {dims:?} of {descr}, expected {}{}",
            data.len(),
            count * item_size,
            if data.len() < count * item_size {
                " (truncated?)"
            } else {
                ""
            }
        ));
    }
    let words = |size: usize| {
        data.chunks_exact(size).map(move |chunk| {
            let mut word = [0u8; 8];
            word[..size].copy_from_slice(chunk);
            if big_endian {
                word[..size].reverse();
            }
            u64::from_le_bytes(word)
        })
    };
    // Each word below fits its target type: it was assembled from exactly that many bytes.
    let data = match kind {
        "f2" => HostData::F16(words(2).map(|w| half::f16::from_bits(w as u16)).collect()),
        "u2" | "i2" => HostData::Bf16(words(2).map(|w| half::bf16::from_bits(w as u16)).collect()),
        "f4" => HostData::F32(words(4).map(|w| f32::from_bits(w as u32)).collect()),
        _ => HostData::F64(words(8).map(f64::from_bits).collect()),
    };
    Ok((HostTensor { dims, data }, stored))
}

/// The text after `'key':` in a header dict, trimmed at the start.
fn raw_value<'h>(header: &'h str, key: &str) -> Result<&'h str, String> {
    let pattern = format!("'{key}':");
    let at = header
        .find(&pattern)
        .ok_or_else(|| format!("header has no {key:?} entry"))?;
    Ok(header[at + pattern.len()..].trim_start())
}

/// The quoted string value of `key` in a header dict.
fn quoted_value(header: &str, key: &str) -> Result<String, String> {
    let rest = raw_value(header, key)?;
    let rest = rest
        .strip_prefix('\'')
        .ok_or_else(|| format!("{key:?} is not a string"))?;
    let end = rest
        .find('\'')
        .ok_or_else(|| format!("{key:?} string is not closed"))?;
    Ok(rest[..end].to_owned())
}

/// Parses `(a, b, ...)` into its extents.
fn parse_shape(text: &str) -> Result<Vec<usize>, String> {
    let inner = text
        .strip_prefix('(')
        .and_then(|t| t.split(')').next())
        .ok_or("shape is not a tuple")?;
    inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| format!("bad extent {s:?} in shape"))
        })
        .collect()
}

/// Extents as 4 dims, padded with leading 1s.
fn pad_shape(extents: &[usize]) -> Result<[usize; 4], String> {
    let extra = extents.len().saturating_sub(4);
    if extents[..extra].iter().any(|&e| e != 1) {
        return Err(format!(
            "shape {extents:?} has more than 4 dims that are not 1"
        ));
    }
    let mut dims = [1; 4];
    let kept = &extents[extra..];
    dims[4 - kept.len()..].copy_from_slice(kept);
    Ok(dims)
}
