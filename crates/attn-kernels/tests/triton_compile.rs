//! CPU-only: the starter Triton kernel (kernels/examples/starter_triton.py) compiles ahead of time
//! for sm_90 in both dtypes and head dims, to PTX whose entry takes the ABI's ten parameters and
//! Triton's two scratch pointers, which ptxas (when available) builds without local memory; and a
//! kernel off the ABI is refused in one line. Needs Triton: skipped with a message when python3
//! cannot import it, unless `ATTN_TRITON_TEST=required` (`cargo xtask test` installs it and sets
//! that).

use std::path::{Path, PathBuf};

use attn_kernels::compile::{self, Arch};
use attn_kernels::triton::{self, TritonRequest};
use attn_kernels::Config;
use attn_oracle::DType;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether Triton is there; panics when it is required and is not.
fn triton_available() -> bool {
    let ok = triton::importable();
    if !ok {
        assert!(
            std::env::var("ATTN_TRITON_TEST").as_deref() != Ok("required"),
            "ATTN_TRITON_TEST=required but python3 cannot import triton"
        );
        println!(
            "skipped: python3 cannot import triton (set {} to a folder holding it)",
            triton::PYTHONPATH_VAR
        );
    }
    ok
}

fn build(
    path: &Path,
    kernel: &str,
    defines: &str,
    dtype: DType,
    head_dim: usize,
) -> attn_kernels::Result<triton::TritonBuild> {
    let defines: Config = defines.parse().unwrap();
    triton::compile(&TritonRequest {
        path,
        kernel,
        dtype,
        head_dim,
        defines: &defines,
        arch: 90,
    })
}

#[test]
fn the_starter_triton_kernel_compiles_to_the_abi() {
    if !triton_available() {
        return;
    }
    let starter = workspace().join("kernels/examples/starter_triton.py");
    let ptxas = attn_kernels::toolkit::ptxas_path();
    for dtype in [DType::F16, DType::Bf16] {
        for head_dim in [64usize, 128] {
            let built = build(
                &starter,
                "attn_fwd",
                "BLOCK_M=64,BLOCK_N=64",
                dtype,
                head_dim,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(built.name, "attn_fwd");
            assert_eq!(built.num_warps, 4);
            assert_eq!(built.params, 12);
            assert!(compile::ptx_has_entry(&built.ptx, "attn_fwd"));
            let entry = built.ptx.split(".entry attn_fwd(").nth(1).unwrap();
            let params = entry.split(')').next().unwrap().matches(".param").count();
            assert_eq!(params, 12, "{dtype} D={head_dim}");
            if ptxas.is_some() {
                let res =
                    compile::ptxas_resources(&built.ptx, &Arch("compute_90a".into()), "attn_fwd")
                        .unwrap_or_else(|e| panic!("{e}"));
                println!("starter_triton {dtype} D={head_dim}: {} registers, {} bytes shared (Triton), {} bytes stack", res.registers, built.shared, res.stack_bytes);
                assert_eq!(res.spill_stores, 0, "{dtype} D={head_dim}");
            }
        }
    }
}

#[test]
fn a_triton_kernel_off_the_abi_is_refused_in_one_line() {
    if !triton_available() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("attn-triton-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("short.py");
    std::fs::write(
        &path,
        "import triton\nimport triton.language as tl\n\n@triton.jit\ndef attn_fwd(q, k, v, o, HEAD_DIM: tl.constexpr):\n    pass\n",
    )
    .unwrap();
    let starter = workspace().join("kernels/examples/starter_triton.py");
    for (file, kernel, defines, says) in [
        (path.as_path(), "attn_fwd", "", "the ABI's first 10"),
        (
            starter.as_path(),
            "attn_fwd",
            "BLOCK_M=64",
            "no value for constexpr BLOCK_N",
        ),
        (
            starter.as_path(),
            "attn_fwd",
            "BLOCK_M=64,BLOCK_N=64,EXTRA=1",
            "no constexpr EXTRA",
        ),
        (starter.as_path(), "missing", "", "has no `missing`"),
        (
            starter.as_path(),
            "attn_fwd",
            "BLOCK_M=64,BLOCK_N=48",
            "power of 2",
        ),
    ] {
        let err = build(file, kernel, defines, DType::F16, 64)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(says) && !err.contains('\n'),
            "{defines}: {err}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_triton_file_that_hangs_at_import_is_ended_in_one_line() {
    if !triton_available() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("attn-triton-hang-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("hangs.py");
    std::fs::write(&path, "import time\ntime.sleep(60)\n").unwrap();
    let defines = Config::default();
    let req = TritonRequest {
        path: &path,
        kernel: "attn_fwd",
        dtype: DType::F16,
        head_dim: 64,
        defines: &defines,
        arch: 90,
    };
    let started = std::time::Instant::now();
    let err = triton::build_within(&req, std::time::Duration::from_secs(2))
        .unwrap_err()
        .to_string();
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    assert!(
        err.contains("did not finish within 2 s") && !err.contains('\n'),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
