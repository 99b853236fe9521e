//! `cargo xtask run`: one implementation on a user's own `.npy` tensors, checked against the oracle.
//!
//! Everything that needs no GPU is checked first (the implementation and its config, the `--out`
//! folder, the tensors' ranks, dtypes, dims and values), so that a bad request fails on one line
//! before any device is opened. Ambiguous input is refused rather than guessed at: arrays that are
//! not 4-D, tensors of different dtypes, fp16 files with `--bf16`, and NaN or infinite values
//! unless `--allow-nan`.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use attn_kernels::{Candidate, Config, Gpu, Prepared};
use attn_oracle::{
    compare, npy, reference, tolerance, DType, Distribution, HostTensor, OracleError, Params,
    RowSelection,
};

/// Arguments of `cargo xtask run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Implementation (`cargo xtask kernels` lists them), or `reference` for the CPU f64 oracle.
    /// Defaults to the IMPL environment variable, then the best registered implementation.
    #[arg(long = "impl")]
    pub implementation: Option<String>,
    /// Knob overrides, `K=V,K=V`.
    #[arg(long, default_value = "")]
    pub config: String,
    /// Q, a 4-D `[B, H, S_q, D]` array of fp16, or bf16 as uint16 bit patterns (see attn-oracle's
    /// npy docs).
    #[arg(long)]
    pub q: PathBuf,
    /// K, `[B, H, S_kv, D]`, the dtype of Q.
    #[arg(long)]
    pub k: PathBuf,
    /// V, `[B, H, S_kv, D]`, the dtype of Q.
    #[arg(long)]
    pub v: PathBuf,
    /// Where to write O (`[B, H, S_q, D]`, the inputs' dtype); its folder must exist.
    #[arg(long)]
    pub out: PathBuf,
    /// Causal mask (bottom-right aligned when S_q != S_kv).
    #[arg(long)]
    pub causal: bool,
    /// Softmax scale (default 1/sqrt(D)).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Round f32/f64 inputs to bf16 (bf16 files, uint16 bit patterns, are read as bf16 anyway;
    /// fp16 files are refused rather than rounded).
    #[arg(long)]
    pub bf16: bool,
    /// Run on inputs holding NaN or infinite values (refused otherwise).
    #[arg(long)]
    pub allow_nan: bool,
    /// Skip the comparison with the f64 oracle.
    #[arg(long)]
    pub no_check: bool,
}

/// One input tensor as read: its name (`q`, `k`, `v`), file, the dtype its file stores (`f64`
/// included) and the tensor in the dtype it will run in.
struct Input {
    name: &'static str,
    path: PathBuf,
    stored: String,
    tensor: HostTensor,
}

impl Input {
    fn label(&self) -> String {
        format!("--{} {}", self.name, self.path.display())
    }
}

/// The dtype a `.npy` file stores, in words (`f64` is not a [`DType`]).
fn dtype_name(tensor: &HostTensor) -> String {
    tensor
        .dtype()
        .map_or_else(|_| "f64".to_string(), |d| d.to_string())
}

/// The shape tuple stored in a `.npy` file's header, before npy::read pads it to 4-D; `None` when
/// the header cannot be read (npy::read then says why).
fn stored_shape(path: &Path) -> Option<Vec<usize>> {
    let mut head = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(65_536 + 12)
        .read_to_end(&mut head)
        .ok()?;
    if !head.starts_with(b"\x93NUMPY") || head.len() < 10 {
        return None;
    }
    let (len, start) = match head[6] {
        1 => (usize::from(u16::from_le_bytes([head[8], head[9]])), 10),
        _ if head.len() >= 12 => {
            let len = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
            (usize::try_from(len).ok()?, 12)
        }
        _ => return None,
    };
    let header = String::from_utf8_lossy(head.get(start..start + len)?).replace('"', "'");
    let at = header.find("'shape':")? + "'shape':".len();
    let tuple = header[at..]
        .trim_start()
        .strip_prefix('(')?
        .split(')')
        .next()?;
    tuple
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect()
}

/// Reads one input, refusing what would have to be guessed: a rank other than 4, fp16 rounded to
/// bf16, NaN or infinite values (unless `allow_nan`).
fn read(name: &'static str, path: &Path, args: &Args) -> anyhow::Result<Input> {
    let label = format!("--{name} {}", path.display());
    let tensor = npy::read(path).map_err(|e| match e {
        OracleError::Io { source, .. } => anyhow::anyhow!("{label}: {source}"),
        OracleError::Npy { reason, .. } => {
            anyhow::anyhow!("{label}: not a supported .npy file: {reason}")
        }
        other => anyhow::anyhow!("{label}: {other}"),
    })?;
    if let Some(shape) = stored_shape(path) {
        if shape.len() != 4 {
            bail!(
                "{label}: a {}-D array {shape:?}; give a 4-D [B, H, S, D] array (reshape it, e.g. to {:?}, if that is what you mean)",
                shape.len(),
                tensor.dims
            );
        }
    }
    let stored = dtype_name(&tensor);
    let tensor = match (tensor.dtype().ok(), args.bf16) {
        (Some(DType::Bf16), _) => tensor,
        (Some(DType::F16), true) => bail!(
            "{label} holds fp16 and --bf16 would round every value to bf16: drop --bf16 to run in fp16, or save bf16 bits (uint16) yourself"
        ),
        (_, true) => {
            println!("{label}: {stored} rounded to bf16 (--bf16)");
            tensor.to_dtype(DType::Bf16)
        }
        (None, false) => bail!(
            "{label} holds f64: give fp16 or bf16 (uint16 bits), or pass --bf16 to round it to bf16"
        ),
        (Some(_), false) => tensor,
    };
    if !args.allow_nan {
        let values = tensor.to_f64();
        let nan = values.iter().filter(|x| x.is_nan()).count();
        let inf = values.iter().filter(|x| x.is_infinite()).count();
        if nan + inf > 0 {
            let first = values.iter().position(|x| !x.is_finite()).unwrap_or(0);
            let [_, h, s, d] = tensor.dims;
            let index = [
                first / (h * s * d),
                first / (s * d) % h,
                first / d % s,
                first % d,
            ];
            bail!(
                "{label}: {nan} NaN and {inf} infinite value(s), the first at {index:?}: the output would be NaN there; pass --allow-nan to run anyway"
            );
        }
    }
    Ok(Input {
        name,
        path: path.to_path_buf(),
        stored,
        tensor,
    })
}

/// Refuses inputs of different dtypes or dims that do not fit together.
fn check_inputs(q: &Input, k: &Input, v: &Input) -> anyhow::Result<()> {
    for other in [k, v] {
        if other.stored != q.stored {
            bail!(
                "{} holds {} but {} holds {}: give all three in one dtype (fp16, or bf16 as uint16 bits)",
                q.label(),
                q.stored,
                other.label(),
                other.stored
            );
        }
    }
    let [b, h, _, d] = q.tensor.dims;
    for other in [k, v] {
        let [ob, oh, _, od] = other.tensor.dims;
        if (ob, oh, od) != (b, h, d) {
            bail!(
                "{} has dims {:?} but {} has {:?}: B, H and D must match",
                q.label(),
                q.tensor.dims,
                other.label(),
                other.tensor.dims
            );
        }
    }
    if v.tensor.dims[2] != k.tensor.dims[2] {
        bail!(
            "{} has S_kv = {} but {} has S_kv = {}: K and V must have the same length",
            k.label(),
            k.tensor.dims[2],
            v.label(),
            v.tensor.dims[2]
        );
    }
    Ok(())
}

/// Refuses an `--out` whose folder is missing or that names a folder.
fn check_out(out: &Path) -> anyhow::Result<()> {
    if out.is_dir() {
        bail!("--out {} is a folder; give a file name", out.display());
    }
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.is_dir() {
            bail!(
                "--out {}: the folder {} does not exist",
                out.display(),
                parent.display()
            );
        }
    }
    Ok(())
}

/// Runs the subcommand; returns the process exit code (1 when the output fails the oracle check).
pub fn run(args: Args) -> anyhow::Result<u8> {
    // Everything that needs no GPU first: the implementation and its config, then the files.
    let name = args
        .implementation
        .clone()
        .or_else(|| std::env::var("IMPL").ok())
        .unwrap_or_default();
    let registered = if name == "reference" {
        None
    } else {
        let implementation = attn_kernels::registry::select(args.implementation.as_deref())?;
        let overrides: Config = args
            .config
            .parse()
            .map_err(|e: String| anyhow::anyhow!("--config: {e}"))?;
        Some((implementation, overrides))
    };
    if let Some(scale) = args.scale {
        if !scale.is_finite() || scale == 0.0 {
            bail!("--scale must be a finite non-zero number, got {scale}");
        }
    }
    check_out(&args.out)?;
    let (q, k, v) = (
        read("q", &args.q, &args)?,
        read("k", &args.k, &args)?,
        read("v", &args.v, &args)?,
    );
    check_inputs(&q, &k, &v)?;
    let dtype = q.tensor.dtype()?;
    let head_dim = q.tensor.dims[3];
    let shape = attn_oracle::Shape::new(
        q.tensor.dims[0],
        q.tensor.dims[1],
        q.tensor.dims[2],
        k.tensor.dims[2],
        head_dim,
    )
    .with_context(|| q.label())?;
    let mut params = Params::new(head_dim, args.causal);
    if let Some(scale) = args.scale {
        params = params.with_scale(scale);
    }
    if let Some((implementation, overrides)) = &registered {
        if dtype == DType::F32 {
            bail!(
                "{} holds f32: `{}` takes fp16 or bf16 (uint16 bits); convert the files, or pass --bf16 to round them to bf16",
                q.label(),
                implementation.name
            );
        }
        implementation
            .resolve(overrides, head_dim, &attn_kernels::Limits::H100)
            .with_context(|| format!("{shape}"))?;
    }
    let (q, k, v) = (q.tensor, k.tensor, v.tensor);
    let rows = RowSelection::for_check(&shape, 0);
    let (out, label) = match registered {
        None => {
            let exact = reference(&q, &k, &v, &params, &RowSelection::All)?;
            let out = exact
                .to_tensor()
                .context("the reference computed every row")?
                .to_dtype(dtype);
            (out, "reference".to_string())
        }
        Some((implementation, overrides)) => {
            let gpu = Gpu::open(0)?;
            let candidate = Candidate::Registered {
                implementation,
                overrides,
            };
            let prepared = Prepared::new(&gpu, &candidate, dtype, head_dim)?;
            let out = prepared.run(&gpu, &q, &k, &v, &params)?;
            (
                out,
                format!(
                    "{} [{}] on {}",
                    prepared.label(),
                    prepared.config(),
                    gpu.info().name
                ),
            )
        }
    };
    npy::write(&args.out, &out)?;
    println!(
        "{label}: wrote {}{:?} {dtype} to {}",
        if args.causal { "causal " } else { "" },
        out.dims,
        args.out.display()
    );
    let non_finite = out.to_f64().iter().filter(|x| !x.is_finite()).count();
    if non_finite > 0 {
        println!(
            "the output holds {non_finite} NaN or infinite value(s){}",
            if args.allow_nan {
                " (the inputs held some: --allow-nan)"
            } else {
                ""
            }
        );
    }
    if args.no_check || name == "reference" {
        return Ok(0);
    }
    let exact = reference(&q, &k, &v, &params, &rows)?;
    let verdict = compare(&out, &exact, &tolerance(dtype, Distribution::Normal));
    println!(
        "vs f64 oracle ({}): max abs {:.3e}, rel L2 {:.3e}, NaN {}, unwritten {} -> {}",
        rows.describe(),
        verdict.max_abs,
        verdict.rel_l2,
        verdict.nan_count,
        verdict.poison_count,
        if verdict.passed { "pass" } else { "FAIL" }
    );
    Ok(if verdict.passed {
        0
    } else {
        crate::EXIT_FAILED
    })
}
