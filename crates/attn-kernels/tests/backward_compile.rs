//! CPU-only: every backward implementation × config × dtype × head dim compiles with NVRTC for
//! sm_80 and sm_90a with all its stages, and so does the gate's `backward_reference.cu`; under
//! ptxas (when available) the defaults and the listed opt-in configs use no local memory. Needs
//! NVRTC (`cargo xtask test` provides it).

use attn_kernels::backward::{backward_registry, BackwardKernel, STAGE_ENTRIES};
use attn_kernels::compile::{self, Arch, CompileRequest};
use attn_kernels::registry::Limits;
use attn_kernels::Config;
use attn_oracle::DType;

/// Configs beside the defaults, per implementation and head dim, that compile without spills on
/// both architectures: more and fewer warps, smaller query tiles, one stage, 32 keys per warp at
/// D=64.
const OPT_IN: [(&str, &str, usize); 10] = [
    ("backward-mma", "NUM_WARPS=8", 64),
    ("backward-mma", "BLOCK_M=32", 64),
    ("backward-mma", "NUM_WARPS=2,BLOCK_M=32", 64),
    ("backward-mma", "BLOCK_N=128", 64),
    ("backward-mma", "STAGES=1", 64),
    ("backward-mma", "NUM_WARPS=8", 128),
    ("backward-mma", "BLOCK_M=32", 128),
    ("backward-mma", "NUM_WARPS=2,BLOCK_M=32", 128),
    ("backward-naive", "ROWS_PER_BLOCK=8", 128),
    ("backward-naive", "ROWS_PER_BLOCK=1", 64),
];

const ARCHS: [&str; 2] = ["compute_80", "compute_90a"];

/// Compiles `source` with `defines` for `arch` and checks each of `entries` is in the PTX and,
/// under ptxas, uses no local memory; prints ptxas's report.
fn compile_entries(
    label: &str,
    name: &str,
    source: &str,
    defines: Vec<String>,
    arch: &Arch,
    entries: &[&str],
) {
    let request = CompileRequest {
        name: name.into(),
        source,
        include_dir: None,
        defines,
        arch: arch.clone(),
    };
    let compiled = compile::compile(&request).unwrap_or_else(|e| panic!("{label}: {e}"));
    for entry in entries {
        assert!(
            compile::ptx_has_entry(&compiled.ptx, entry),
            "{label}: no {entry}"
        );
        if attn_kernels::toolkit::ptxas_path().is_some() {
            let res = compile::ptxas_resources(&compiled.ptx, arch, entry)
                .unwrap_or_else(|e| panic!("{label}: {e}"));
            println!(
                "{label} {entry}: {} registers, {} bytes stack, {} bytes spill stores, {} bytes spill loads",
                res.registers, res.stack_bytes, res.spill_stores, res.spill_loads
            );
            assert!(
                !res.uses_local_memory(),
                "{label} {entry}: local memory {res:?}"
            );
        }
    }
}

#[test]
fn every_backward_variant_compiles_without_local_memory() {
    let mut checked = 0;
    for imp in backward_registry() {
        let head_dims: &[usize] = match imp.kernel {
            BackwardKernel::Naive => &[32, 64, 96, 128, 256],
            BackwardKernel::Mma => &[64, 128],
        };
        for &head_dim in head_dims {
            let mut configs = vec![Config::default()];
            configs.extend(
                OPT_IN
                    .iter()
                    .filter(|(name, _, d)| *name == imp.name && *d == head_dim)
                    .map(|(_, c, _)| c.parse::<Config>().unwrap()),
            );
            for overrides in configs {
                let config = imp
                    .resolve(&overrides, head_dim, &Limits::H100)
                    .unwrap_or_else(|e| panic!("{e}"));
                for dtype in [DType::F16, DType::Bf16] {
                    for arch in ARCHS {
                        let arch = Arch(arch.into());
                        let mut defines = CompileRequest::abi_defines(dtype, head_dim).unwrap();
                        defines.extend(imp.defines(&config));
                        let label = format!("{} [{}] for {}", imp.name, defines.join(" "), arch.0);
                        compile_entries(
                            &label,
                            imp.name,
                            imp.source,
                            defines,
                            &arch,
                            &STAGE_ENTRIES,
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked >= 60, "only {checked} backward variants compiled");
}

#[test]
fn the_gates_backward_reference_compiles_without_local_memory() {
    let source = include_str!("../../../kernels/backward_reference.cu");
    for head_dim in [64usize, 128] {
        for dtype in [DType::F16, DType::Bf16] {
            for arch in ARCHS {
                let arch = Arch(arch.into());
                let defines = CompileRequest::abi_defines(dtype, head_dim).unwrap();
                let label = format!(
                    "backward_reference.cu [{}] for {}",
                    defines.join(" "),
                    arch.0
                );
                compile_entries(
                    &label,
                    "backward_reference.cu",
                    source,
                    defines,
                    &arch,
                    &["reference_fwd_lse", "reference_bwd"],
                );
            }
        }
    }
}

#[test]
fn configs_the_kernels_refuse_are_refused_by_the_registry_first() {
    // The rules mirror backward_mma.cu's static_asserts: what the host accepts compiles, and a
    // combination the kernel asserts against is refused before NVRTC with its reason.
    let imp = attn_kernels::backward::find_backward("backward-mma").unwrap();
    for (config, d) in [
        ("NUM_WARPS=8,BLOCK_M=16", 64),
        ("NUM_WARPS=4,BLOCK_N=32", 128),
    ] {
        assert!(
            imp.resolve(&config.parse().unwrap(), d, &Limits::H100)
                .is_err(),
            "{config}"
        );
        let mut defines = CompileRequest::abi_defines(DType::F16, d).unwrap();
        defines.extend(config.split(',').map(str::to_string));
        let request = CompileRequest {
            name: imp.name.into(),
            source: imp.source,
            include_dir: None,
            defines,
            arch: Arch("compute_90a".into()),
        };
        let err = compile::compile(&request).unwrap_err().to_string();
        assert!(err.contains("backward_mma.cu"), "{config}: {err}");
    }
}
