//! `cargo xtask run`: one implementation on a user's own `.npy` tensors, checked against the oracle.

use std::path::PathBuf;

use anyhow::Context;
use attn_kernels::{Candidate, Config, Gpu, Prepared};
use attn_oracle::{
    compare, npy, reference, tolerance, Distribution, HostTensor, Params, RowSelection,
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
    /// Q, `[B, H, S_q, D]` fp16 or bf16 (bf16 as uint16 bit patterns, see attn-oracle's npy docs).
    #[arg(long)]
    pub q: PathBuf,
    /// K, `[B, H, S_kv, D]`.
    #[arg(long)]
    pub k: PathBuf,
    /// V, `[B, H, S_kv, D]`.
    #[arg(long)]
    pub v: PathBuf,
    /// Where to write O (`[B, H, S_q, D]`, the inputs' dtype).
    #[arg(long)]
    pub out: PathBuf,
    /// Causal mask (bottom-right aligned when S_q != S_kv).
    #[arg(long)]
    pub causal: bool,
    /// Softmax scale (default 1/sqrt(D)).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Read `.npy` files of dtype uint16 as bf16.
    #[arg(long)]
    pub bf16: bool,
    /// Skip the comparison with the f64 oracle.
    #[arg(long)]
    pub no_check: bool,
}

fn read(path: &PathBuf, bf16: bool) -> anyhow::Result<HostTensor> {
    let tensor = if bf16 {
        npy::read_as(path, attn_oracle::DType::Bf16)
    } else {
        npy::read(path)
    };
    tensor.with_context(|| format!("reading {}", path.display()))
}

/// Runs the subcommand; returns the process exit code (1 when the output fails the oracle check).
pub fn run(args: Args) -> anyhow::Result<u8> {
    let (q, k, v) = (
        read(&args.q, args.bf16)?,
        read(&args.k, args.bf16)?,
        read(&args.v, args.bf16)?,
    );
    let dtype = q.dtype()?;
    let head_dim = q.dims[3];
    let mut params = Params::new(head_dim, args.causal);
    if let Some(scale) = args.scale {
        params = params.with_scale(scale);
    }
    let name = args
        .implementation
        .clone()
        .or_else(|| std::env::var("IMPL").ok())
        .unwrap_or_default();
    let shape = attn_oracle::Shape::new(q.dims[0], q.dims[1], q.dims[2], k.dims[2], head_dim)?;
    let rows = RowSelection::for_check(&shape, 0);
    let (out, label) = if name == "reference" {
        let exact = reference(&q, &k, &v, &params, &RowSelection::All)?;
        let out = exact
            .to_tensor()
            .context("the reference computed every row")?
            .to_dtype(dtype);
        (out, "reference".to_string())
    } else {
        let implementation = attn_kernels::registry::select(args.implementation.as_deref())?;
        let overrides: Config = args.config.parse().map_err(anyhow::Error::msg)?;
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
    };
    npy::write(&args.out, &out).with_context(|| format!("writing {}", args.out.display()))?;
    println!(
        "{label}: wrote {} {:?} {dtype} to {}",
        if args.causal { "causal" } else { "" },
        out.dims,
        args.out.display()
    );
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
