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
        // Not CUDA_HOME: cudarc's build script reruns when CUDA_HOME changes, so a `cargo` child
        // given it would rebuild cudarc (and everything above it) for `cargo xtask test`, then
        // again for the next plain `cargo xtask`. attn-kernels reads ATTN_CUDA_HOME first.
        cmd.env(ATTN_CUDA_HOME, &self.root)
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

/// The variable through which xtask hands the toolkit it found to attn-kernels (headers, ptxas)
/// in this process and its children; see [`Toolkit::apply`] for why not `CUDA_HOME`.
pub const ATTN_CUDA_HOME: &str = "ATTN_CUDA_HOME";

/// Makes the toolkit that [`find`] finds usable in this very process, whatever `LD_LIBRARY_PATH`
/// says: NVRTC and its builtins are loaded by full path (cudarc's later `dlopen("libnvrtc.so.13")`
/// then finds the library already loaded under that soname), and `ATTN_CUDA_HOME` names the root
/// for the headers and ptxas. Without it `cargo xtask kernels --ptxas` failed after `cargo xtask
/// test` had fetched the wheels unless `LD_LIBRARY_PATH` was set by hand. Does nothing when NVRTC
/// already loads or no toolkit is found (compiling then fails with its own one-line error).
///
/// Call it at the start of `main`, before any thread is spawned (it sets an environment variable).
pub fn preload(workspace: &Path) {
    let Some(toolkit) = find(workspace) else {
        return;
    };
    if std::env::var_os(ATTN_CUDA_HOME).is_none() {
        std::env::set_var(ATTN_CUDA_HOME, &toolkit.root);
    }
    if attn_kernels::toolkit::nvrtc_available() {
        return;
    }
    for dir in toolkit.lib_dirs() {
        // The builtins first: libnvrtc opens them by soname when it compiles.
        for prefix in ["libnvrtc-builtins.so", "libnvrtc.so"] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut files: Vec<PathBuf> = entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .map(|e| e.path())
                .collect();
            files.sort();
            let Some(file) = files.first() else { continue };
            let Ok(path) = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()) else {
                continue;
            };
            // SAFETY: `path` is a valid NUL-terminated string; the library is NVIDIA's NVRTC (or
            // its builtins), whose initialisers are safe to run; the handle is deliberately never
            // closed, so that the library stays loaded for cudarc.
            unsafe {
                libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL);
            }
        }
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

/// Looks for a toolkit in `ATTN_CUDA_HOME`, `CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda` and
/// `target/cuda-wheels`.
pub fn find(workspace: &Path) -> Option<Toolkit> {
    let candidates = [
        (
            std::env::var_os(ATTN_CUDA_HOME).map(PathBuf::from),
            ATTN_CUDA_HOME,
        ),
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
        "no CUDA toolkit found: installing {} into {} (about 500 MB to download; pip shows its progress)",
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
            // pip's own download progress (drawn when stderr is a terminal): the wheels are large.
            "--progress-bar",
            "on",
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
