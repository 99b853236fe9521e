//! CPU: `cargo xtask kernels --ptxas --src FILE` compile-checks a user's kernel with no GPU: the
//! shipped starter kernel (kernels/examples/starter.cu) compiles in both dtypes and head dims
//! without spills, and a kernel NVRTC rejects is one `error:` line naming the file (NVRTC's log
//! after it), exit 2. Needs NVRTC and ptxas: xtask finds them as `cargo xtask test` provides them
//! (a toolkit, or the wheels in target/cuda-wheels).

mod common;

use std::path::Path;
use std::process::Command;

/// Runs xtask with `args` from the xtask folder; returns (exit code, stdout, stderr).
fn xtask(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(common::xtask())
        .args(args)
        .output()
        .expect("xtask runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_starter_kernel_compiles_in_every_dtype_and_head_dim_without_spills() {
    let starter = "../kernels/examples/starter.cu";
    assert!(Path::new(starter).is_file(), "{starter} is shipped");
    let (code, stdout, stderr) = xtask(&["kernels", "--ptxas", "--src", starter]);
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(code, 0, "{context}");
    assert!(stdout.contains("ptxas -arch=sm_90a"), "{context}");
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with("src:starter.cu"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    // impl, dtype, D, regs, static smem, dyn smem, stack, spills, config.
    let variants: Vec<(&str, &str)> = rows.iter().map(|r| (r[1], r[2])).collect();
    assert_eq!(
        variants,
        [
            ("fp16", "64"),
            ("fp16", "128"),
            ("bf16", "64"),
            ("bf16", "128")
        ],
        "{context}"
    );
    for row in &rows {
        assert_eq!(row.len(), 9, "{context}");
        assert!(row[3].parse::<u32>().unwrap() > 0, "registers: {context}");
        assert!(row[4].parse::<u32>().unwrap() > 0, "static smem: {context}");
        assert_eq!((row[5], row[6], row[7]), ("0", "0", "0"), "{context}");
        assert_eq!(row[8], "attn_fwd", "{context}");
    }
    // The geometry defines reach the kernel (the host's launch reads the same ones).
    let (code, stdout, stderr) = xtask(&[
        "kernels",
        "--ptxas",
        "--src",
        starter,
        "--define",
        "BLOCK_M=32",
        "--define",
        "NUM_WARPS=2",
        "--head-dim",
        "64",
        "--arch",
        "compute_80",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("ptxas -arch=sm_80"), "{stdout}");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("src:starter.cu") && l.ends_with("BLOCK_M=32,NUM_WARPS=2"))
            .count(),
        2,
        "{stdout}"
    );
}

#[test]
fn a_kernel_that_does_not_compile_is_one_error_line_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("broken_kernel.cu");
    std::fs::write(
        &bad,
        "#include \"attn_common.cuh\"\n\
         extern \"C\" __global__ void attn_fwd(const elem_t* q) { undeclared = 1; }\n",
    )
    .unwrap();
    let bad = bad.to_str().unwrap();
    let (code, stdout, stderr) = xtask(&["kernels", "--ptxas", "--src", bad]);
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(code, 2, "{context}");
    assert!(!stderr.contains("panicked"), "{context}");
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error: NVRTC could not compile") && first.contains("broken_kernel.cu"),
        "{context}"
    );
    assert!(stderr.contains("\"undeclared\" is undefined"), "{context}");
    assert_eq!(stderr.matches("error: NVRTC").count(), 1, "{context}");

    // A kernel that compiles but has no such entry point: one line, before ptxas.
    let (code, stdout, stderr) = xtask(&[
        "kernels",
        "--ptxas",
        "--src",
        "../kernels/examples/starter.cu",
        "--entry",
        "no_such_kernel",
        "--head-dim",
        "64",
    ]);
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(code, 2, "{context}");
    assert_eq!(stderr.lines().count(), 1, "{context}");
    assert!(
        stderr.starts_with("error: ")
            && stderr.contains("starter.cu")
            && stderr.contains("no kernel `no_such_kernel`"),
        "{context}"
    );
}
