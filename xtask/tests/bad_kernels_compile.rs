//! CPU: the gate's planted bad kernels compile (so their GPU test fails for the planted fault, not
//! for a typo). Needs NVRTC (`cargo xtask test` provides it).

use std::path::Path;

use attn_kernels::compile::{compile, Arch, CompileRequest};

#[test]
fn planted_bad_kernels_compile() {
    let dir = Path::new("tests/bad_kernels");
    for file in ["writes_nothing.cu", "writes_half.cu", "stale_output.cu"] {
        let source = std::fs::read_to_string(dir.join(file)).unwrap();
        let req = CompileRequest {
            name: file.into(),
            source: &source,
            include_dir: Some(dir),
            defines: vec!["ATTN_DTYPE_F16".into(), "HEAD_DIM=64".into()],
            arch: Arch("compute_90".into()),
        };
        let ptx = compile(&req).unwrap_or_else(|e| panic!("{e}")).ptx;
        assert!(ptx.contains(".entry attn_fwd"), "{file}");
    }
}
