//! CPU-only: every decode implementation × config × dtype × head dim compiles with NVRTC for sm_80
//! and sm_90a, and under ptxas (when available) the defaults and the listed opt-in configs use no
//! local memory. Needs NVRTC (`cargo xtask test` provides it).

use attn_kernels::compile::{self, Arch, CompileRequest};
use attn_kernels::decode::decode_registry;
use attn_kernels::registry::Limits;
use attn_kernels::Config;
use attn_oracle::DType;

/// Configs beside the defaults, per implementation and head dim: the knobs' ends.
const OPT_IN: [(&str, &str, usize); 14] = [
    ("decode", "NUM_WARPS=1,STAGES=1", 64),
    ("decode", "NUM_WARPS=1,STAGES=1", 128),
    ("decode", "NUM_WARPS=8,STAGES=2", 128),
    ("decode", "BLOCK_M=32", 64),
    ("decode", "ROW_WARPS=1", 128),
    ("decode", "BLOCK_M=32,ROW_WARPS=2", 64),
    ("decode", "BLOCK_N=64,STAGES=2", 64),
    ("decode", "BLOCK_N=32,STAGES=2", 128),
    ("decode", "PAGE_AHEAD=1", 128),
    ("decode", "PAGE_AHEAD=1,NUM_WARPS=1,STAGES=1", 64),
    ("decode-naive", "ROWS_PER_BLOCK=8", 128),
    ("decode-hopper", "BLOCK_N=128,STAGES=2", 128),
    ("decode-hopper", "BLOCK_N=128,STAGES=4", 64),
    ("decode-hopper", "BLOCK_N=128,PAGE_AHEAD=1", 128),
];

#[test]
fn every_decode_variant_compiles_without_local_memory() {
    let ptxas = attn_kernels::toolkit::ptxas_path();
    let mut checked = 0;
    for imp in decode_registry() {
        for head_dim in [64usize, 128] {
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
                    for arch in ["compute_80", "compute_90a"] {
                        // decode-hopper's wgmma exist on sm_90a alone.
                        if arch == "compute_80" && !imp.gpus.include((8, 0)) {
                            continue;
                        }
                        let arch = Arch(arch.into());
                        let mut defines = CompileRequest::abi_defines(dtype, head_dim).unwrap();
                        defines.extend(imp.defines(&config));
                        let label = format!(
                            "{} [{}] {dtype} for {}",
                            imp.name,
                            defines.join(" "),
                            arch.0
                        );
                        let request = CompileRequest {
                            name: imp.name.into(),
                            source: imp.source,
                            include_dir: None,
                            defines,
                            arch: arch.clone(),
                        };
                        let compiled = compile::compile(&request).unwrap_or_else(|e| panic!("{e}"));
                        let entries: &[&str] = if imp.kernel.combines() {
                            &["attn_decode", "attn_decode_combine"]
                        } else {
                            &["attn_decode"]
                        };
                        for entry in entries {
                            assert!(
                                compile::ptx_has_entry(&compiled.ptx, entry),
                                "{label}: no {entry}"
                            );
                            if ptxas.is_some() {
                                let res = compile::ptxas_resources(&compiled.ptx, &arch, entry)
                                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                                println!("{label} {entry}: {} registers, {} bytes stack, {} spill stores", res.registers, res.stack_bytes, res.spill_stores);
                                assert!(
                                    !res.uses_local_memory(),
                                    "{label} {entry}: local memory {res:?}"
                                );
                            }
                        }
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked >= 40, "only {checked} decode variants compiled");
}
