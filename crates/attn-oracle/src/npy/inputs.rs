//! A user's own Q, K and V files, read and refused rather than guessed at: arrays that are not
//! 4-D, tensors of different dtypes or of dims that do not fit together, fp16 files to be run in
//! bf16, f64 files not rounded on request, and NaN or infinite values unless allowed. Every
//! refusal is one [`OracleError::Input`] line naming the file by its caller's label (`cargo xtask
//! run` labels them with its flags, `--q FILE`; the options are its `--bf16` and `--allow-nan`).

use std::path::Path;

use super::read_stored;
use crate::{DType, HostTensor, OracleError, Shape, Varlen};

/// How [`read_inputs`] treats what it reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Round f32/f64 files to bf16 (bf16 files are read as bf16 anyway; fp16 files are refused
    /// rather than rounded).
    pub bf16: bool,
    /// Accept NaN or infinite values.
    pub allow_nan: bool,
}

/// Q, K and V as read, in the dtype they run in, and the problem's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct InputFiles {
    /// Q, `[B, H, S_q, D]`.
    pub q: HostTensor,
    /// K, `[B, H_kv, S_kv, D]` (`H_kv` divides `H`).
    pub k: HostTensor,
    /// V, `[B, H_kv, S_kv, D]`.
    pub v: HostTensor,
    /// The dtype of all three.
    pub dtype: DType,
    /// `B, H, S_q, S_kv, D`.
    pub shape: Shape,
}

/// One file as read: its label, the dtype it stores (`f64` included) and its tensor.
struct Read {
    label: String,
    stored: String,
    tensor: HostTensor,
}

/// Reads Q, K and V from `files` (each `(label, path)`, the label naming the file in errors) and
/// checks that they make one problem. `note` hears what was done that was asked for (a file
/// rounded to bf16), as it is done.
pub fn read_inputs(
    files: [(&str, &Path); 3],
    options: &ReadOptions,
    mut note: impl FnMut(String),
) -> Result<InputFiles, OracleError> {
    let [q, k, v] = read_three(&files, options, &mut note)?;
    let refuse = |path: &Path, message: String| OracleError::Input {
        path: path.to_owned(),
        message,
    };
    let [b, h, _, d] = q.tensor.dims;
    for (other, path) in [(&k, files[1].1), (&v, files[2].1)] {
        let [ob, _, _, od] = other.tensor.dims;
        if (ob, od) != (b, d) {
            return Err(refuse(
                path,
                format!(
                    "{} has dims {:?} but {} has {:?}: B and D must match",
                    q.label, q.tensor.dims, other.label, other.tensor.dims
                ),
            ));
        }
    }
    if v.tensor.dims != k.tensor.dims {
        return Err(refuse(
            files[2].1,
            format!(
                "{} has dims {:?} but {} has {:?}: K and V must have the same length and heads",
                k.label, k.tensor.dims, v.label, v.tensor.dims
            ),
        ));
    }
    let (s_q, s_kv, kv_heads) = (q.tensor.dims[2], k.tensor.dims[2], k.tensor.dims[1]);
    let dtype = q.tensor.dtype()?;
    // K/V may carry fewer heads than Q (grouped-query attention): H_kv must divide H.
    let shape = Shape::new(b, h, s_q, s_kv, d)
        .map_err(|e| refuse(files[0].1, format!("{}: {e}", q.label)))?
        .with_kv_heads(kv_heads)
        .map_err(|e| {
            refuse(
                files[1].1,
                format!("{} has {kv_heads} heads for {h} query heads: {e}", k.label),
            )
        })?;
    Ok(InputFiles {
        q: q.tensor,
        k: k.tensor,
        v: v.tensor,
        dtype,
        shape,
    })
}

/// As [`read_inputs`] for a packed variable-length batch of `varlen`'s lengths: Q `[1, total_q,
/// H, D]`, K and V `[1, total_kv, H_kv, D]` with `H_kv` dividing `H`; `shape` is the batch's
/// bounding dense shape (its sequences, the longest lengths).
pub fn read_packed_inputs(
    files: [(&str, &Path); 3],
    options: &ReadOptions,
    varlen: &Varlen,
    mut note: impl FnMut(String),
) -> Result<InputFiles, OracleError> {
    let [q, k, v] = read_three(&files, options, &mut note)?;
    let [_, _, heads, d] = q.tensor.dims;
    let kv_heads = k.tensor.dims[2];
    let expected = [
        [1, varlen.total_q(), heads, d],
        [1, varlen.total_kv(), kv_heads, d],
        [1, varlen.total_kv(), kv_heads, d],
    ];
    for ((read, path), want) in [&q, &k, &v].iter().zip(files.map(|f| f.1)).zip(expected) {
        if read.tensor.dims != want {
            return Err(OracleError::Input {
                path: path.to_owned(),
                message: format!(
                    "{} has dims {:?}; the packed batch of {} queries and {} keys needs {want:?} ([1, tokens, heads, D], K and V alike)",
                    read.label,
                    read.tensor.dims,
                    varlen.total_q(),
                    varlen.total_kv()
                ),
            });
        }
    }
    let per_head = Shape::new(1, heads, 1, 1, d)
        .and_then(|s| s.with_kv_heads(kv_heads))
        .map_err(|e| OracleError::Input {
            path: files[1].1.to_owned(),
            message: format!("{}: {e}", k.label),
        })?;
    let shape = varlen.bounding_shape(&per_head)?;
    Ok(InputFiles {
        dtype: q.tensor.dtype()?,
        q: q.tensor,
        k: k.tensor,
        v: v.tensor,
        shape,
    })
}

/// Q, K and V read ([`read_one`]), K and V stored in Q's dtype.
fn read_three(
    files: &[(&str, &Path); 3],
    options: &ReadOptions,
    note: &mut impl FnMut(String),
) -> Result<[Read; 3], OracleError> {
    // In order, stopping at the first file refused.
    let (q, k, v) = (
        read_one(files[0], options, note)?,
        read_one(files[1], options, note)?,
        read_one(files[2], options, note)?,
    );
    for (other, path) in [(&k, files[1].1), (&v, files[2].1)] {
        if other.stored != q.stored {
            return Err(OracleError::Input {
                path: path.to_owned(),
                message: format!(
                    "{} holds {} but {} holds {}: give all three in one dtype (fp16, or bf16 as uint16 bits)",
                    q.label, q.stored, other.label, other.stored
                ),
            });
        }
    }
    Ok([q, k, v])
}

/// Reads one file, refusing a rank other than 4, fp16 rounded to bf16, f64 not rounded, and NaN
/// or infinite values (unless allowed).
fn read_one(
    (label, path): (&str, &Path),
    options: &ReadOptions,
    note: &mut impl FnMut(String),
) -> Result<Read, OracleError> {
    let label = format!("{label} {}", path.display());
    let refuse = |message: String| OracleError::Input {
        path: path.to_owned(),
        message,
    };
    let (tensor, stored_shape) = read_stored(path).map_err(|e| match e {
        OracleError::Io { source, .. } => refuse(format!("{label}: {source}")),
        OracleError::Npy { reason, .. } => {
            refuse(format!("{label}: not a supported .npy file: {reason}"))
        }
        other => refuse(format!("{label}: {other}")),
    })?;
    if stored_shape.len() != 4 {
        return Err(refuse(format!(
            "{label}: a {}-D array {stored_shape:?}; give a 4-D [B, H, S, D] array (reshape it, e.g. to {:?}, if that is what you mean)",
            stored_shape.len(),
            tensor.dims
        )));
    }
    // `f64` is not a DType: it exists in files and on the host only.
    let stored = tensor
        .dtype()
        .map_or_else(|_| "f64".to_string(), |d| d.to_string());
    let tensor = match (tensor.dtype().ok(), options.bf16) {
        (Some(DType::Bf16), _) | (Some(_), false) => tensor,
        (Some(DType::F16), true) => return Err(refuse(format!(
            "{label} holds fp16 and --bf16 would round every value to bf16: drop --bf16 to run in fp16, or save bf16 bits (uint16) yourself"
        ))),
        (_, true) => {
            note(format!("{label}: {stored} rounded to bf16 (--bf16)"));
            tensor.to_dtype(DType::Bf16)
        }
        (None, false) => return Err(refuse(format!(
            "{label} holds f64: give fp16 or bf16 (uint16 bits), or pass --bf16 to round it to bf16"
        ))),
    };
    if !options.allow_nan {
        let values = tensor.to_f64();
        let nan = values.iter().filter(|x| x.is_nan()).count();
        let inf = values.iter().filter(|x| x.is_infinite()).count();
        if let Some(first) = values.iter().position(|x| !x.is_finite()) {
            let [_, h, s, d] = tensor.dims;
            let index = [
                first / (h * s * d),
                first / (s * d) % h,
                first / d % s,
                first % d,
            ];
            return Err(refuse(format!(
                "{label}: {nan} NaN and {inf} infinite value(s), the first at {index:?}: the output would be NaN there; pass --allow-nan to run anyway"
            )));
        }
    }
    Ok(Read {
        label,
        stored,
        tensor,
    })
}

/// Refuses an output path that names a folder, or whose folder does not exist (`label` names it
/// in the error, e.g. `--out`).
pub fn check_output_path(label: &str, out: &Path) -> Result<(), OracleError> {
    let refuse = |message: String| OracleError::Input {
        path: out.to_owned(),
        message,
    };
    if out.is_dir() {
        return Err(refuse(format!(
            "{label} {} is a folder; give a file name",
            out.display()
        )));
    }
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.is_dir() {
            return Err(refuse(format!(
                "{label} {}: the folder {} does not exist",
                out.display(),
                parent.display()
            )));
        }
    }
    Ok(())
}
