//! Finding (or installing) the CUDA compile toolkit: NVRTC, ptxas and the CUDA headers.
//!
//! Compiling kernels needs no GPU. On a machine without a CUDA toolkit, `cargo xtask test` installs
//! NVIDIA's pinned 13.0.x PyPI wheels into `target/cuda-wheels/`, whose `nvidia/cu13/` folder has the
//! same `include/`, `lib/` and `bin/` layout as a CUDA install.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// The wheels `cargo xtask test` installs when no toolkit is found, pinned to CUDA 13.0.
pub const PINNED_WHEELS: [&str; 4] = [
    "nvidia-cuda-nvrtc==13.0.*",
    "nvidia-cuda-nvcc==13.0.*",
    "nvidia-cuda-runtime==13.0.*",
    "nvidia-cuda-crt==13.0.*",
];

/// A CUDA toolkit root with `include/cuda_fp16.h` and an NVRTC library.
#[derive(Debug, Clone)]
pub struct Toolkit {
    pub root: PathBuf,
    pub origin: &'static str,
}

impl Toolkit {
    /// The folders holding `libnvrtc.so*` (and, in the wheels, `libnvrtc-builtins`).
    pub fn lib_dirs(&self) -> Vec<PathBuf> {
        ["lib64", "lib"]
            .iter()
            .map(|d| self.root.join(d))
            .filter(|d| d.is_dir())
            .collect()
    }

    /// The environment a child process needs to compile kernels with this toolkit.
    pub fn apply(&self, cmd: &mut Command) {
        let mut lib_path: Vec<PathBuf> = self.lib_dirs();
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            lib_path.extend(std::env::split_paths(&old));
        }
        let mut path = vec![self.root.join("bin")];
        if let Some(old) = std::env::var_os("PATH") {
            path.extend(std::env::split_paths(&old));
        }
        cmd.env("CUDA_HOME", &self.root)
            .env(
                "LD_LIBRARY_PATH",
                std::env::join_paths(lib_path).expect("paths without ':'"),
            )
            .env(
                "PATH",
                std::env::join_paths(path).expect("paths without ':'"),
            );
    }
}

fn is_toolkit(root: &Path) -> bool {
    let has_header = root.join("include/cuda_fp16.h").is_file();
    let has_nvrtc = ["lib64", "lib"].iter().any(|d| {
        std::fs::read_dir(root.join(d))
            .map(|entries| {
                entries
                    .flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with("libnvrtc.so"))
            })
            .unwrap_or(false)
    });
    has_header && has_nvrtc
}

/// Looks for a toolkit in `CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda` and `target/cuda-wheels`.
pub fn find(workspace: &Path) -> Option<Toolkit> {
    let candidates = [
        (
            std::env::var_os("CUDA_HOME").map(PathBuf::from),
            "CUDA_HOME",
        ),
        (
            std::env::var_os("CUDA_PATH").map(PathBuf::from),
            "CUDA_PATH",
        ),
        (Some(PathBuf::from("/usr/local/cuda")), "/usr/local/cuda"),
        (
            Some(wheel_root(workspace)),
            "pip wheels in target/cuda-wheels",
        ),
    ];
    candidates
        .into_iter()
        .filter_map(|(root, origin)| root.map(|r| (r, origin)))
        .find(|(root, _)| is_toolkit(root))
        .map(|(root, origin)| Toolkit { root, origin })
}

fn wheel_root(workspace: &Path) -> PathBuf {
    workspace.join("target/cuda-wheels/nvidia/cu13")
}

/// Finds a toolkit, installing the pinned wheels with pip when there is none.
pub fn find_or_install(workspace: &Path) -> anyhow::Result<Toolkit> {
    if let Some(toolkit) = find(workspace) {
        return Ok(toolkit);
    }
    let target = workspace.join("target/cuda-wheels");
    eprintln!(
        "no CUDA toolkit found: installing {} into {}",
        PINNED_WHEELS.join(" "),
        target.display()
    );
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| Command::new(p).arg("-m").arg("pip").arg("--version").output().is_ok_and(|o| o.status.success()))
        .context("no CUDA toolkit and no python3 with pip to install NVIDIA's NVRTC wheels (install pip, or set CUDA_HOME)")?;
    let status = Command::new(python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--upgrade",
            "--target",
        ])
        .arg(&target)
        .args(PINNED_WHEELS)
        .status()
        .with_context(|| format!("running {python} -m pip"))?;
    if !status.success() {
        bail!("pip could not install the CUDA wheels ({status}); set CUDA_HOME to a CUDA 13 toolkit instead");
    }
    match find(workspace) {
        Some(toolkit) => Ok(toolkit),
        None => bail!(
            "pip installed the wheels but {} has no include/cuda_fp16.h or libnvrtc",
            wheel_root(workspace).display()
        ),
    }
}
