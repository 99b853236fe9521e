//! `cargo xtask run`: one implementation on a user's own `.npy` tensors, checked against the oracle.
//!
//! A packed variable-length batch (`--varlen L1,L2,...`) is read as `[1, tokens, heads, D]` files
//! and checked sequence by sequence. Everything that needs no GPU is checked first (the implementation and its config, the `--out`
//! folder, the tensors' ranks, dtypes, dims and values), so that a bad request fails on one line
//! before any device is opened. Ambiguous input is refused rather than guessed at: arrays that are
//! not 4-D, tensors of different dtypes, fp16 files with `--bf16`, and NaN or infinite values
//! unless `--allow-nan` (`attn_oracle::npy::read_inputs` reads and refuses; this module parses and
//! prints).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use attn_kernels::{registry, Candidate, Config, Gpu, Implementation, Limits, Prepared};
use attn_oracle::{
    compare, compare_packed, npy, reference, reference_varlen, reference_varlen_rows, tolerance,
    DType, Distribution, Params, RowSelection, Varlen,
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
    /// K, `[B, H_kv, S_kv, D]` (H_kv dividing H: grouped-query heads), the dtype of Q.
    #[arg(long)]
    pub k: PathBuf,
    /// V, `[B, H_kv, S_kv, D]`, the dtype of Q.
    #[arg(long)]
    pub v: PathBuf,
    /// Where to write O (`[B, H, S_q, D]`, the inputs' dtype); its folder must exist.
    #[arg(long)]
    pub out: PathBuf,
    /// Causal mask (bottom-right aligned when S_q != S_kv).
    #[arg(long)]
    pub causal: bool,
    /// Sliding window `L,R` (FlashAttention's window_size; -1 for an unbounded side).
    #[arg(long, allow_hyphen_values = true)]
    pub window: Option<attn_oracle::Window>,
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
    /// A packed varlen batch's lengths (`Q:KV` where a sequence's differ): Q is then `[1,
    /// total_q, H, D]`, K and V `[1, total_kv, H_kv, D]`, O like Q.
    #[arg(long, value_name = "L1,L2,...")]
    pub varlen: Option<attn_evidence::Varlen>,
}

/// Runs the subcommand; returns the process exit code (1 when the output fails the oracle check).
pub fn run(args: Args) -> anyhow::Result<u8> {
    // Everything that needs no GPU first: the implementation and its config, then the files.
    let name = args
        .implementation
        .clone()
        .or_else(|| std::env::var("IMPL").ok())
        .unwrap_or_default();
    // A named implementation is known (and its line printed) now; the device's best once the
    // GPU is open, its line printed first all the same (the inputs' notes wait for it).
    let registered = if name == "reference" {
        let by = if args.implementation.is_some() {
            "--impl"
        } else {
            "IMPL"
        };
        println!("implementation reference (the f64 oracle, on the CPU): named by {by}");
        None
    } else {
        let named = registry::named(args.implementation.as_deref())?;
        let overrides: Config = args
            .config
            .parse()
            .map_err(|e: attn_kernels::ConfigError| anyhow::anyhow!("--config: {e}"))?;
        if let Some(selection) = &named {
            println!("{}", selection.reason);
        }
        Some((named.map(|s| s.implementation), overrides))
    };
    let mut notes = Vec::new();
    if let Some(scale) = args.scale {
        if !scale.is_finite() || scale == 0.0 {
            bail!("--scale must be a finite non-zero number, got {scale}");
        }
    }
    npy::check_output_path("--out", &args.out)?;
    for (flag, input) in [("--q", &args.q), ("--k", &args.k), ("--v", &args.v)] {
        if same_file(&args.out, input) {
            bail!(
                "--out {} is {flag} {}: writing O would overwrite an input; give another --out",
                args.out.display(),
                input.display()
            );
        }
    }
    let options = npy::ReadOptions {
        bf16: args.bf16,
        allow_nan: args.allow_nan,
    };
    let files = [("--q", &*args.q), ("--k", &args.k), ("--v", &args.v)];
    let varlen = args
        .varlen
        .as_ref()
        .map(|l| Varlen::new(l.seqlens_q.clone(), l.seqlens_kv.clone()))
        .transpose()?;
    let inputs = match &varlen {
        None => npy::read_inputs(files, &options, |note| notes.push(note))?,
        Some(varlen) => npy::read_packed_inputs(files, &options, varlen, |note| notes.push(note))?,
    };
    let print_notes = |notes: &[String]| notes.iter().for_each(|note| println!("{note}"));
    if !matches!(registered, Some((None, _))) {
        print_notes(&notes);
    }
    let (dtype, shape, head_dim) = (inputs.dtype, inputs.shape, inputs.shape.head_dim);
    let mut params =
        Params::new(head_dim, args.causal).with_window(args.window.unwrap_or_default());
    if let Some(scale) = args.scale {
        params = params.with_scale(scale);
    }
    let check = |implementation: &Implementation, overrides: &Config, limits: &Limits| {
        if dtype == DType::F32 {
            bail!(
                "--q {} holds f32: `{}` takes fp16 or bf16 (uint16 bits); convert the files, or pass --bf16 to round them to bf16",
                args.q.display(),
                implementation.name
            );
        }
        implementation
            .resolve(overrides, head_dim, limits)
            .with_context(|| format!("{shape}"))?;
        anyhow::Ok(())
    };
    // A named implementation is checked against the inputs before any probe of the GPU.
    if let Some((Some(implementation), overrides)) = &registered {
        check(implementation, overrides, &Limits::H100)?;
    }
    let npy::InputFiles { q, k, v, .. } = inputs;
    let (out, label) = match registered {
        None => {
            let out = match &varlen {
                Some(varlen) => reference_varlen(&q, &k, &v, &params, varlen)?,
                None => reference(&q, &k, &v, &params, &RowSelection::All)?
                    .to_tensor()
                    .context("the reference computed every row")?,
            };
            (out.to_dtype(dtype), "reference".to_string())
        }
        Some((named, overrides)) => {
            let gpu = Gpu::open(0)?;
            let implementation = match named {
                Some(implementation) => implementation,
                None => {
                    let info = gpu.info();
                    let selection = registry::best_for(info.capability, &info.name)?;
                    println!("{}", selection.reason);
                    print_notes(&notes);
                    check(selection.implementation, &overrides, &gpu.limits())?;
                    selection.implementation
                }
            };
            let candidate = Candidate::Registered {
                implementation,
                overrides,
            };
            candidate.check_supports_batch(&shape, &params, varlen.is_some())?;
            let prepared = Prepared::new(&gpu, &candidate, dtype, head_dim)?;
            let out = prepared.run_batch(&gpu, &q, &k, &v, &params, varlen.as_ref())?;
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
    let tol = tolerance(dtype, Distribution::Normal);
    let (verdict, rows) = match &varlen {
        None => {
            let rows = RowSelection::for_check(&shape, 0);
            let exact = reference(&q, &k, &v, &params, &rows)?;
            (compare(&out, &exact, &tol), rows.describe())
        }
        Some(varlen) => {
            let select = |s: &attn_oracle::Shape, b: usize| RowSelection::for_check(s, b as u64);
            let exact = reference_varlen_rows(&q, &k, &v, &params, varlen, &select)?;
            let verdict = compare_packed(&out, &exact, varlen, &tol);
            (verdict, "each sequence's own check rows".to_string())
        }
    };
    println!(
        "vs f64 oracle ({}): max abs {:.3e}, rel L2 {:.3e}, NaN {}, unwritten {} -> {}",
        rows,
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

/// Whether `out` is the file `input` (the same path spelled otherwise, a link to it, or a hard
/// link): an `out` that does not exist yet is no input.
fn same_file(out: &Path, input: &Path) -> bool {
    let (Ok(a), Ok(b)) = (std::fs::metadata(out), std::fs::metadata(input)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.dev() == b.dev() && a.ino() == b.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        out.canonicalize().ok() == input.canonicalize().ok()
    }
}
