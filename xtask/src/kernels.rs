//! `cargo xtask kernels`: the registered implementations, their knobs, domains and default configs;
//! with `--ptxas`, registers / shared memory / stack / spills of every default variant (CPU only).

use attn_kernels::compile::{self, Arch};
use attn_kernels::registry::{registry, Limits};
use attn_kernels::{Candidate, Config};
use attn_oracle::DType;

/// Arguments of `cargo xtask kernels`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Compile every default variant with NVRTC and report ptxas's resource usage.
    #[arg(long)]
    pub ptxas: bool,
    /// Virtual architecture for --ptxas (implementations bound to one architecture use theirs).
    #[arg(long, default_value = "compute_90")]
    pub arch: String,
}

/// Runs the subcommand; returns the process exit code (1 when a default variant spills).
pub fn run(args: Args) -> anyhow::Result<u8> {
    for imp in registry() {
        println!("{:<8} {}", imp.name, imp.summary);
        let dims = imp
            .head_dims
            .map(|d| format!("{d:?}"))
            .unwrap_or_else(|| "any".into());
        println!("         head dims: {dims}; dtypes: fp16, bf16");
        for knob in imp.knobs {
            println!(
                "         {:<15} {:<20} {}",
                knob.name,
                format!("{:?}", knob.domain),
                knob.doc
            );
        }
        for d in [64, 128] {
            if imp.check_head_dim(d).is_ok() {
                println!("         default (D={d}): {}", imp.default_config(d));
            }
        }
    }
    if !args.ptxas {
        return Ok(0);
    }
    let arch = Arch(args.arch.clone());
    println!(
        "\nptxas -arch={} (an implementation bound to one architecture uses its own) on the NVRTC output of every default variant:",
        arch.sm()
    );
    println!(
        "{:<8} {:<5} {:>4}  {:<40} {:>5} {:>8} {:>6} {:>7}",
        "impl", "dtype", "D", "config", "regs", "smem", "stack", "spills"
    );
    let mut spills = 0;
    for imp in registry() {
        for dtype in [DType::F16, DType::Bf16] {
            for d in [64usize, 128] {
                if imp.check_head_dim(d).is_err() {
                    continue;
                }
                let candidate = Candidate::Registered {
                    implementation: imp,
                    overrides: Config::default(),
                };
                let variant = candidate.variant(dtype, d, &arch, &Limits::H100)?;
                let (req, cfg, entry) = (&variant.request, &variant.config, variant.entry);
                let imp_arch = req.arch.clone();
                let compiled = compile::compile(req)?;
                let res = compile::ptxas_resources(&compiled.ptx, &imp_arch, entry)?;
                let shown = if cfg.0.is_empty() {
                    entry.to_string()
                } else {
                    cfg.to_string()
                };
                println!(
                    "{:<8} {:<5} {:>4}  {:<40} {:>5} {:>8} {:>6} {:>7}",
                    imp.name,
                    dtype.to_string(),
                    d,
                    shown,
                    res.registers,
                    res.shared_bytes,
                    res.stack_bytes,
                    res.spill_stores + res.spill_loads
                );
                if res.uses_local_memory() {
                    spills += 1;
                }
            }
        }
    }
    if spills > 0 {
        eprintln!("{spills} default variant(s) use local memory (spills or a stack frame)");
        return Ok(crate::EXIT_FAILED);
    }
    Ok(0)
}
