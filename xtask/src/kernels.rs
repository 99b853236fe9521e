//! `cargo xtask kernels`: the registered implementations, their knobs, domains and default configs;
//! with `--ptxas`, registers / shared memory / stack / spills of every default variant (CPU only),
//! or with `--ptxas --src FILE` of a user's kernel at each dtype and head dim; with `--configs
//! IMPL`, every valid config of one implementation (a decode or backward one's too) and its dynamic shared
//! memory, after a line naming its file and architecture (what `kernels/tools/hopper_check.py` and
//! `ptx_identity.py` sweep, so that they re-derive neither); with `--nvrtc-flags`,
//! the flags NVRTC compiles every kernel with (what those scripts pass too).

use std::path::PathBuf;

use anyhow::Context;
use attn_kernels::compile::{self, Arch};
use attn_kernels::registry::{registry, Limits};
use attn_kernels::{Candidate, Config};
use attn_oracle::DType;

/// The virtual architecture of `--ptxas` for the registry's kernels.
const REGISTRY_ARCH: &str = "compute_90";
/// The virtual architecture of `--ptxas --src`: Hopper's, with its architecture-specific
/// instructions (wgmma, setmaxnreg), which a user's Hopper kernel may use.
const SOURCE_ARCH: &str = "compute_90a";

/// Arguments of `cargo xtask kernels`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Compile every default variant with NVRTC and report ptxas's resource usage.
    #[arg(long)]
    pub ptxas: bool,
    /// Virtual architecture for --ptxas (default compute_90; compute_90a with --src;
    /// implementations bound to one architecture use theirs).
    #[arg(long)]
    pub arch: Option<String>,
    /// With --ptxas: your own kernel file (kernels/README.md's ABI) instead of the registry's,
    /// compiled in fp16 and bf16 at each --head-dim.
    #[arg(long, requires = "ptxas")]
    pub src: Option<PathBuf>,
    /// Entry point of --src.
    #[arg(long, requires = "src")]
    pub entry: Option<String>,
    /// With --ptxas: your own Triton kernel, `FILE.py:KERNEL`, compiled by Triton (no GPU needed)
    /// in fp16 and bf16 at each --head-dim, its PTX through ptxas.
    #[arg(long, requires = "ptxas", conflicts_with = "src")]
    pub triton: Option<String>,
    /// Defines for --src or --triton, `K=V` (repeatable), as `gate` takes them.
    #[arg(long = "define")]
    pub defines: Vec<String>,
    /// Head dims to compile --src or --triton at, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "64,128")]
    pub head_dim: Vec<usize>,
    /// Print every valid config of this implementation (prefill, decode or backward) instead, one per
    /// line: `HEAD_DIM=D` and its knobs (space-separated `NAME=VALUE`), then `SHARED_BYTES=` its
    /// dynamic shared memory; valid = the knobs' domains, the implementation's constraints and
    /// the H100's limits. A first line `FILE=F ARCH=A` names its kernel file under kernels/ and
    /// the virtual architecture to compile it for.
    #[arg(long, value_name = "IMPL", conflicts_with = "ptxas")]
    pub configs: Option<String>,
    /// Print NVRTC's flags for every kernel instead, one per line (beside the target
    /// architecture, the include path and the defines): what kernels/tools' scripts compile with.
    #[arg(long, conflicts_with_all = ["ptxas", "configs"])]
    pub nvrtc_flags: bool,
}

/// Runs the subcommand; returns the process exit code (1 when a reported variant spills).
pub fn run(args: Args) -> anyhow::Result<u8> {
    if args.nvrtc_flags {
        for flag in compile::LANGUAGE_FLAGS {
            println!("{flag}");
        }
        return Ok(0);
    }
    if let Some(name) = &args.configs {
        let (file, arch, lines) = match attn_kernels::registry::find(name) {
            Ok(imp) => (
                imp.engine.kernel_file().0,
                imp.arch.unwrap_or(REGISTRY_ARCH),
                valid_configs(imp)?,
            ),
            // The decode and backward ABIs' implementations have registries of their own.
            Err(err) => match (
                attn_kernels::decode::find_decode(name),
                attn_kernels::backward::find_backward(name),
            ) {
                (Ok(imp), _) => (imp.file, REGISTRY_ARCH, valid_decode_configs(imp)),
                (_, Ok(imp)) => (imp.file, REGISTRY_ARCH, valid_backward_configs(imp)),
                _ => return Err(err.into()),
            },
        };
        println!("FILE={file} ARCH={arch}");
        for line in lines {
            println!("{line}");
        }
        return Ok(0);
    }
    if let Some(path) = &args.src {
        let candidate = crate::args::source_candidate(path, args.entry.as_deref(), &args.defines)?;
        return source_report(&args, &candidate, &path.display().to_string());
    }
    if let Some(spec) = &args.triton {
        let candidate = crate::args::triton_candidate(spec, &args.defines)?;
        return source_report(&args, &candidate, spec);
    }
    if !args.defines.is_empty() {
        anyhow::bail!("--define is for --ptxas --src or --ptxas --triton");
    }
    for imp in registry() {
        println!("{:<8} {}", imp.name, imp.summary);
        let dims = imp
            .head_dims
            .map(|d| format!("{d:?}"))
            .unwrap_or_else(|| "any".into());
        println!(
            "         head dims: {dims}; dtypes: fp16, bf16; variants: {}",
            imp.variants.describe()
        );
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
    let arch = Arch(args.arch.clone().unwrap_or_else(|| REGISTRY_ARCH.into()));
    let mut jobs = Vec::new();
    for imp in registry() {
        for dtype in [DType::F16, DType::Bf16] {
            for d in [64usize, 128] {
                if imp.check_head_dim(d).is_ok() {
                    let candidate = Candidate::Registered {
                        implementation: imp,
                        overrides: Config::default(),
                    };
                    jobs.push((candidate, dtype, d));
                }
            }
        }
    }
    let (table, spills) = ptxas_table(&jobs, &arch)?;
    println!(
        "\nptxas -arch={} (an implementation bound to one architecture uses its own) on the NVRTC output of every default variant.\n\
         static smem: shared memory declared in the kernel (ptxas); dyn smem: dynamic shared memory the launch requests (not in ptxas's count); bytes per block.",
        arch.sm()
    );
    print!("{table}");
    finish(spills, "default variant(s)")
}

/// `--ptxas --src FILE` or `--ptxas --triton FILE.py:KERNEL`: the user's kernel in fp16 and bf16
/// at each `--head-dim`, through the same variant (or Triton build), compile and ptxas calls as
/// the gate's (so a define or geometry the gate would refuse is refused here too).
fn source_report(args: &Args, candidate: &Candidate, what: &str) -> anyhow::Result<u8> {
    let arch = Arch(args.arch.clone().unwrap_or_else(|| SOURCE_ARCH.into()));
    let mut jobs = Vec::new();
    for dtype in [DType::F16, DType::Bf16] {
        for &d in &args.head_dim {
            jobs.push((candidate.clone(), dtype, d));
        }
    }
    let (table, spills) = ptxas_table(&jobs, &arch)?;
    println!(
        "\nptxas -arch={} on the NVRTC (or Triton) output of {what} in each dtype and head dim.\n\
         static smem: shared memory declared in the kernel (ptxas); dyn smem: the launch's SHARED_BYTES, or Triton's shared memory (not in ptxas's count); bytes per block.",
        arch.sm(),
    );
    print!("{table}");
    finish(spills, "variant(s)")
}

/// Exit 1, saying so, when `spills` reported variants use local memory.
fn finish(spills: usize, what: &str) -> anyhow::Result<u8> {
    if spills > 0 {
        eprintln!("{spills} {what} use local memory (spills or a stack frame)");
        return Ok(crate::EXIT_FAILED);
    }
    Ok(0)
}

/// Compiles each `(candidate, dtype, head dim)` for `arch`: ptxas's resource table, as text, and
/// how many variants use local memory.
fn ptxas_table(jobs: &[(Candidate, DType, usize)], arch: &Arch) -> anyhow::Result<(String, usize)> {
    let bar = crate::progress::bar(jobs.len() as u64, "NVRTC + ptxas");
    let mut table = attn_report::table::Table::new(&[
        "impl",
        "dtype",
        "D",
        "regs",
        "static smem",
        "dyn smem",
        "stack",
        "spills",
        "config",
    ])
    .numeric(&[2, 3, 4, 5, 6, 7]);
    let mut spills = 0;
    for (candidate, dtype, d) in jobs {
        let (dtype, d) = (*dtype, *d);
        let label = candidate.label();
        bar.set_message(format!("{label} {dtype} D={d}"));
        let built = build(candidate, dtype, d, arch)?;
        let (cfg, entry) = (&built.config, built.entry.as_str());
        if !compile::ptx_has_entry(&built.ptx, entry) {
            anyhow::bail!(
                "{}: no kernel `{entry}` in its PTX (declare it `extern \"C\" __global__`, or name it with --entry)",
                built.name
            );
        }
        let res = compile::ptxas_resources(&built.ptx, &built.arch, entry)
            .with_context(|| format!("ptxas on {} ({dtype}, D={d})", built.name))?;
        if res.uses_local_memory() {
            spills += 1;
        }
        let shown = if cfg.0.is_empty() {
            entry.to_string()
        } else {
            cfg.to_string()
        };
        table.push(vec![
            label,
            dtype.to_string(),
            d.to_string(),
            res.registers.to_string(),
            res.shared_bytes.to_string(),
            built.shared_bytes.to_string(),
            res.stack_bytes.to_string(),
            (res.spill_stores + res.spill_loads).to_string(),
            shown,
        ]);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok((table.to_text(), spills))
}

/// One variant's PTX and what the report shows of it.
struct Built {
    name: String,
    ptx: String,
    entry: String,
    arch: Arch,
    shared_bytes: u32,
    config: Config,
}

/// `candidate` at `dtype` and head dim `d` for `arch`: through NVRTC as the gate compiles it, or
/// for a Triton kernel through Triton (ptxas then reads Triton's PTX as it reads NVRTC's).
fn build(candidate: &Candidate, dtype: DType, d: usize, arch: &Arch) -> anyhow::Result<Built> {
    if let Candidate::Triton {
        path,
        kernel,
        defines,
        ..
    } = candidate
    {
        let capability = arch
            .capability()
            .with_context(|| format!("--arch {}: not compute_NN", arch.0))?;
        let triton = attn_kernels::triton::compile(&attn_kernels::triton::TritonRequest {
            path,
            kernel,
            dtype,
            head_dim: d,
            defines,
            arch: capability,
        })?;
        return Ok(Built {
            name: candidate.label(),
            ptx: triton.ptx,
            entry: triton.name,
            arch: arch.clone(),
            shared_bytes: triton.shared,
            config: defines.clone(),
        });
    }
    let variant = candidate.variant(dtype, d, arch, &Limits::H100)?;
    let compiled = compile::compile(&variant.request)?;
    Ok(Built {
        name: variant.request.name.clone(),
        ptx: compiled.ptx,
        entry: variant.entry.to_string(),
        arch: variant.request.arch.clone(),
        shared_bytes: variant.shared_bytes,
        config: variant.config,
    })
}

/// Every combination of the knobs' values, as overrides (one empty config for no knob).
fn knob_product<'k>(
    knobs: impl IntoIterator<Item = &'k attn_kernels::config::Knob>,
) -> Vec<Config> {
    knobs
        .into_iter()
        .fold(vec![Config::default()], |combos, knob| {
            combos
                .iter()
                .flat_map(|c| {
                    knob.domain
                        .iter()
                        .map(move |&v| c.merged(&Config::from_pairs(&[(knob.name, v)])))
                })
                .collect()
        })
}

/// Every config of `imp` that resolves for the H100 at head dims 64 and 128 (those it supports),
/// as `HEAD_DIM=D NAME=VALUE ... SHARED_BYTES=N`: the product of the knobs' domains through
/// [`Implementation::resolve`](attn_kernels::registry::Implementation::resolve), so the domains,
/// constraints, shared-memory formula and limit are the registry's alone.
fn valid_configs(imp: &attn_kernels::registry::Implementation) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    for d in [64usize, 128] {
        if imp.check_head_dim(d).is_err() {
            continue;
        }
        for overrides in knob_product(imp.knobs) {
            let Ok(cfg) = imp.resolve(&overrides, d, &Limits::H100) else {
                continue;
            };
            let shared = imp
                .geometry(&cfg, &attn_oracle::Shape::single(d))?
                .shared_bytes;
            let knobs: Vec<String> = imp
                .knobs
                .iter()
                .map(|k| format!("{}={}", k.name, cfg.get(k.name).unwrap_or_default()))
                .collect();
            lines.push(format!(
                "HEAD_DIM={d} {} SHARED_BYTES={shared}",
                knobs.join(" ")
            ));
        }
    }
    Ok(lines)
}

/// [`valid_configs`] of a decode implementation: its compile-time knobs (SPLITS, a launch
/// parameter, at its default), each config once, with [`DecodeImplementation::shared_bytes`].
///
/// [`DecodeImplementation::shared_bytes`]: attn_kernels::decode::DecodeImplementation::shared_bytes
fn valid_decode_configs(imp: &attn_kernels::decode::DecodeImplementation) -> Vec<String> {
    let knobs: Vec<_> = imp
        .knobs
        .iter()
        .filter(|k| k.name != attn_kernels::config::names::SPLITS)
        .collect();
    let mut lines = Vec::new();
    for d in [64usize, 128] {
        if imp.check_head_dim(d).is_err() {
            continue;
        }
        for overrides in knob_product(knobs.iter().copied()) {
            let Ok(cfg) = imp.resolve(&overrides, d, &Limits::H100) else {
                continue;
            };
            lines.push(format!(
                "HEAD_DIM={d} {} SHARED_BYTES={}",
                imp.defines(&cfg).join(" "),
                imp.shared_bytes(&cfg, d)
            ));
        }
    }
    lines
}

/// [`valid_configs`] of a backward implementation: its knobs' product through
/// [`BackwardImplementation::resolve`], each config once, with `attn_bwd`'s dynamic shared memory.
///
/// [`BackwardImplementation::resolve`]: attn_kernels::backward::BackwardImplementation::resolve
fn valid_backward_configs(imp: &attn_kernels::backward::BackwardImplementation) -> Vec<String> {
    let mut lines = Vec::new();
    for d in [64usize, 128] {
        if imp.check_head_dim(d).is_err() {
            continue;
        }
        for overrides in knob_product(imp.knobs) {
            let Ok(cfg) = imp.resolve(&overrides, d, &Limits::H100) else {
                continue;
            };
            let line = format!(
                "HEAD_DIM={d} {} SHARED_BYTES={}",
                imp.defines(&cfg).join(" "),
                imp.geometry(&cfg, d).main_shared
            );
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hopper_configs_come_from_the_registry() {
        let lines = valid_configs(attn_kernels::registry::find("hopper").unwrap()).unwrap();
        // BLOCK_N 64 and 128: D 64: 1, 2 or 3 warpgroups (2, 3, 3 OVERLAP/PINGPONG pairs) ×
        // BLOCK_N 2 × STAGES 3 × SCHEDULE 2 = 96; D 128: 2 warpgroup counts (5 pairs) × 12 = 60,
        // less the 10 with 4-deep rings of 128-key tiles, over the H100's 232448 bytes.
        // BLOCK_N 176 (1 or 2 warpgroups, 5 pairs): D 64 × STAGES 3 × SCHEDULE 2 = 30; D 128 only
        // STAGES 2: 10. Every D 128 config twice (PV_N 64 and 128), D 64 only with PV_N 64. Q_REGS=1
        // on top of those with BLOCK_N 64 or 128, 1 or 2 warpgroups and OVERLAP=1: D 64 60 less the
        // 24 unoverlapped, D 128 2 × (50 less 20 unoverlapped). Every one twice: LAZY_RESCALE 0
        // and 1. Q_STAGES=2 on top of those with SCHEDULE=1 and Q_REGS=0 (half of the first four
        // terms), less the 12 at D 128 that a second Q tile takes over the limit. BLOCK_N 160 as
        // 176 (30 + 2 × 10), and every one of those with SCHEDULE=1 and Q_REGS=0 with Q_STAGES=2
        // too (15 + 10: at D 128 its 2-stage ring fits beside two Q tiles). All of those with
        // CLUSTER=1, and with CLUSTER=2 those on the grid (half of the ones with one Q tile) and
        // those with two Q tiles. And Q_RELEASE=1 on top of those in the persistent loop with one
        // Q tile in shared memory (SCHEDULE=1, Q_REGS=0, Q_STAGES=1: half of the Q_REGS=0 terms),
        // with either CLUSTER (the persistent loop takes clusters with two Q tiles or with it).
        // And CLUSTER_HEADS=1 on top of every persistent one with CLUSTER=2. And STREAM_K=1 on top
        // of every one with two Q tiles (alone, in clusters over row blocks and over heads). And
        // CHAIN=1 on top of every one of all those with two Q tiles and OVERLAP=1 (but STREAM_K=1
        // at D 128, where the two together spill).
        let q_stages_2 = (96 + 30) / 2 + (2 * 50 + 2 * 10) / 2 - 12;
        let block_n_160 = 30 + 2 * 10 + 15 + 10;
        let one_cluster =
            2 * (96 + 2 * 50 + 30 + 2 * 10 + (60 - 24) + 2 * (50 - 20) + q_stages_2 + block_n_160);
        let two_q_tiles = 2 * (q_stages_2 + 15 + 10);
        // Both LAZY_RESCALE values, half of them persistent, both CLUSTER values.
        let q_release = 2 * (96 + 2 * 50 + 30 + 2 * 10 + 30 + 2 * 10) / 2 * 2;
        let cluster_heads = two_q_tiles + q_release / 2;
        let stream_k = 3 * two_q_tiles;
        let chains = |l: &&String| {
            l.contains("OVERLAP=1")
                && l.contains("Q_STAGES=2")
                && !(l.contains("HEAD_DIM=128") && l.contains("STREAM_K=1"))
        };
        let chain = lines.iter().filter(chains).count() / 2;
        assert_eq!(
            lines.iter().filter(|l| l.contains("CHAIN=1")).count(),
            chain
        );
        assert!(lines
            .iter()
            .filter(|l| l.contains("CHAIN=1"))
            .all(|l| chains(&l)));
        assert_eq!(
            lines.len() - chain,
            one_cluster
                + (one_cluster - two_q_tiles) / 2
                + two_q_tiles
                + q_release
                + cluster_heads
                + stream_k
        );
        assert!(!lines
            .iter()
            .any(|l| l.contains("STREAM_K=1") && !l.contains("Q_STAGES=2")));
        assert!(!lines
            .iter()
            .any(|l| l.contains("CLUSTER_HEADS=1") && !l.contains("SCHEDULE=1")));
        assert!(!lines.iter().any(|l| l.contains("SCHEDULE=1")
            && l.contains("Q_STAGES=1")
            && l.contains("CLUSTER=2 Q_RELEASE=0")));
        assert!(!lines
            .iter()
            .any(|l| l.contains("Q_RELEASE=1") && !l.contains("SCHEDULE=1 Q_REGS=0")));
        assert!(!lines
            .iter()
            .any(|l| l.contains("Q_STAGES=2") && !l.contains("SCHEDULE=1 Q_REGS=0")));
        assert!(lines.iter().any(|l| l.starts_with("HEAD_DIM=128")
            && l.contains("NUM_WARPS=8")
            && l.contains("SCHEDULE=1 Q_REGS=1")));
        assert!(!lines
            .iter()
            .any(|l| l.contains("OVERLAP=0") && l.contains("Q_REGS=1")));
        for pv_n in [64, 128] {
            assert!(lines.contains(&format!(
                "HEAD_DIM=128 BLOCK_M=128 BLOCK_N=128 NUM_WARPS=8 STAGES=3 OVERLAP=1 PINGPONG=1 SCHEDULE=0 Q_REGS=0 PV_N={pv_n} LAZY_RESCALE=0 Q_STAGES=1 CLUSTER=1 Q_RELEASE=0 CLUSTER_HEADS=0 STREAM_K=0 CHAIN=0 SHARED_BYTES=230400"
            )));
        }
        assert!(!lines
            .iter()
            .any(|l| l.contains("HEAD_DIM=64") && l.contains("PV_N=128")));
        assert!(!lines
            .iter()
            .any(|l| l.contains("NUM_WARPS=4 STAGES=2 OVERLAP=1 PINGPONG=1")));
        // FlashAttention-3's D=128 tile (opt-in); 160 keys beside two Q tiles.
        assert!(lines.contains(
            &"HEAD_DIM=128 BLOCK_M=128 BLOCK_N=176 NUM_WARPS=8 STAGES=2 OVERLAP=1 PINGPONG=1 SCHEDULE=0 Q_REGS=0 PV_N=64 LAZY_RESCALE=0 Q_STAGES=1 CLUSTER=1 Q_RELEASE=0 CLUSTER_HEADS=0 STREAM_K=0 CHAIN=0 SHARED_BYTES=214016"
                .to_string()
        ));
        assert!(lines.iter().any(|l| l.starts_with("HEAD_DIM=128")
            && l.contains("BLOCK_N=160 NUM_WARPS=8 STAGES=2")
            && l.contains(
                "Q_STAGES=2 CLUSTER=2 Q_RELEASE=0 CLUSTER_HEADS=0 STREAM_K=0 CHAIN=0 SHARED_BYTES=230400"
            )));
        assert!(!lines.iter().any(|l| l.contains("BLOCK_N=176 NUM_WARPS=12")
            || l.contains("HEAD_DIM=128 BLOCK_M=128 BLOCK_N=176 NUM_WARPS=8 STAGES=3")));
    }

    #[test]
    fn backward_configs_follow_the_registrys_rules() {
        let imp = attn_kernels::backward::find_backward("backward-mma").unwrap();
        let lines = valid_backward_configs(imp);
        let distinct: std::collections::BTreeSet<_> = lines.iter().collect();
        assert_eq!(distinct.len(), lines.len());
        // The defaults at both head dims, 32 keys per warp only at D=64.
        // (The deterministic dQ's tickets live in the workspace: no shared memory of their own.)
        for line in [
            "HEAD_DIM=64 BLOCK_M=64 BLOCK_N=64 DETERMINISTIC=0 NUM_WARPS=4 STAGES=2 SHARED_BYTES=59392",
            "HEAD_DIM=128 BLOCK_M=64 BLOCK_N=64 DETERMINISTIC=0 NUM_WARPS=4 STAGES=2 SHARED_BYTES=108544",
            "HEAD_DIM=128 BLOCK_M=64 BLOCK_N=64 DETERMINISTIC=1 NUM_WARPS=4 STAGES=2 SHARED_BYTES=108544",
            "HEAD_DIM=64 BLOCK_M=64 BLOCK_N=128 DETERMINISTIC=0 NUM_WARPS=4 STAGES=2 SHARED_BYTES=84992",
        ] {
            assert!(lines.contains(&line.to_string()), "{line}");
        }
        assert!(!lines
            .iter()
            .any(|l| l.starts_with("HEAD_DIM=128") && l.contains("BLOCK_N=128 NUM_WARPS=4")));
        let naive = valid_backward_configs(
            attn_kernels::backward::find_backward("backward-naive").unwrap(),
        );
        assert_eq!(naive.len(), 8);
    }

    #[test]
    fn decode_configs_are_its_kernels_once_each() {
        let imp = attn_kernels::decode::find_decode("decode").unwrap();
        let lines = valid_decode_configs(imp);
        // SPLITS is a launch parameter: one line per compiled kernel, none naming it.
        assert!(lines.iter().all(|l| !l.contains("SPLITS=")));
        let distinct: std::collections::BTreeSet<_> = lines.iter().collect();
        assert_eq!(distinct.len(), lines.len());
        // The D=64 defaults; BLOCK_M=32 only at D=64 (the registry's rule).
        assert!(lines.contains(
            &"HEAD_DIM=64 BLOCK_M=16 BLOCK_N=32 NUM_WARPS=4 PAGE_AHEAD=0 ROW_WARPS=4 STAGES=3 SHARED_BYTES=106496"
                .to_string()
        ));
        assert!(!lines
            .iter()
            .any(|l| l.starts_with("HEAD_DIM=128") && l.contains("BLOCK_M=32")));
    }
}
