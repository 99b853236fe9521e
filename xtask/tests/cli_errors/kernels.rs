//! `kernels`: a closed pipe, the NVRTC flags and `--ptxas --src` refusals.

use std::path::Path;
use std::process::Command;

use crate::{common, inputs, one_error_line, xtask};

#[test]
#[cfg(unix)]
fn a_reader_that_closes_the_pipe_early_ends_xtask_quietly() {
    // `cargo xtask kernels --configs hopper | head -1`, made certain: the pipe's read end is
    // closed before xtask starts, so its first write fails (a real reader may close while its
    // output still fits the pipe's buffer). A panic in println! prints "panicked" and a backtrace.
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fds[0] is the read end just opened and owned by no one else.
    unsafe { libc::close(fds[0]) };
    // SAFETY: fds[1] is the write end just opened; the Stdio takes sole ownership of it.
    let write_end = unsafe { std::process::Stdio::from_raw_fd(fds[1]) };
    let out = Command::new(common::xtask())
        .args(["kernels", "--configs", "hopper"])
        .env("RUST_BACKTRACE", "1")
        .stdout(write_end)
        .output()
        .expect("xtask runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
    assert!(!out.status.success(), "xtask cannot have written its lines");
}

#[test]
fn kernels_prints_the_nvrtc_flags_the_host_compiles_with() {
    // What kernels/tools' scripts compile with: exactly the host's list, one per line.
    let (code, stdout, stderr) = xtask(Path::new("."), &["kernels", "--nvrtc-flags"]);
    assert_eq!(code, 0, "{stderr}");
    let printed: Vec<&str> = stdout.lines().collect();
    assert_eq!(printed, attn_kernels::compile::LANGUAGE_FLAGS, "{stdout}");
    // clap's own usage error: its first line names both.
    let (code, _, stderr) = xtask(
        Path::new("."),
        &["kernels", "--nvrtc-flags", "--configs", "hopper"],
    );
    assert_eq!(code, 2, "{stderr}");
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error: ")
            && first.contains("--nvrtc-flags")
            && first.contains("--configs"),
        "{stderr}"
    );
}

#[test]
fn kernels_ptxas_src_refuses_a_file_it_cannot_compile_before_compiling() {
    let dir = inputs();
    let d = dir.path();
    one_error_line(
        d,
        &["kernels", "--ptxas", "--src", "missing.cu"],
        &["missing.cu", "No such file"],
    );
    one_error_line(
        d,
        &["kernels", "--ptxas", "--src", "empty.cu"],
        &["--src empty.cu: the file is empty"],
    );
    one_error_line(
        d,
        &[
            "kernels", "--ptxas", "--src", "empty.cu", "--define", "BLOCK_M",
        ],
        &["--define"],
    );
    // --src is a --ptxas report; clap's usage error names what is missing.
    let (code, _, stderr) = xtask(d, &["kernels", "--src", "empty.cu"]);
    assert_eq!(code, 2, "{stderr}");
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error: ") && stderr.contains("--ptxas"),
        "{stderr}"
    );
}
