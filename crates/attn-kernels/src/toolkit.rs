//! Finding NVRTC, ptxas and the CUDA headers at run time: the one toolkit finder. [`Toolkit`]
//! and [`preload`] serve `cargo xtask` (which installs [`PINNED_WHEELS`] where there is none);
//! the compiler looks in the same places.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{KernelError, Result};

/// The variable through which `cargo xtask` hands the toolkit it found to this crate (headers,
/// ptxas) in its process and its children; see [`Toolkit::apply`] for why not `CUDA_HOME`.
pub const ATTN_CUDA_HOME: &str = "ATTN_CUDA_HOME";

/// The wheels `cargo xtask test` installs (into [`WHEELS_DIR`], with `--no-deps`) when no toolkit
/// is found: CUDA 13.0, every one at an exact version, nvcc's dependencies included, since an
/// unpinned `nvidia-nvvm` brings a newer NVVM than nvcc's. Their `nvidia/cu13/` folder has a
/// CUDA install's `include/`, `lib/` and `bin/`.
pub const PINNED_WHEELS: [&str; 5] = [
    "nvidia-cuda-nvrtc==13.0.88",
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-nvvm==13.0.88",
];

/// Where [`PINNED_WHEELS`] are installed, under a workspace.
pub const WHEELS_DIR: &str = "target/cuda-wheels";

/// The toolkit root inside the wheels installed under `workspace`.
pub fn wheel_root(workspace: &Path) -> PathBuf {
    workspace.join(WHEELS_DIR).join("nvidia/cu13")
}

/// Toolkit roots the environment names, then `/usr/local/cuda`, each with where it came from:
/// `ATTN_CUDA_HOME` (the toolkit `cargo xtask` found, handed down without touching `CUDA_HOME`,
/// whose change would make cargo rebuild cudarc), `CUDA_HOME`, `CUDA_PATH`.
fn named_roots() -> Vec<(PathBuf, &'static str)> {
    let mut roots: Vec<(PathBuf, &'static str)> = [ATTN_CUDA_HOME, "CUDA_HOME", "CUDA_PATH"]
        .into_iter()
        .filter_map(|var| std::env::var_os(var).map(|root| (PathBuf::from(root), var)))
        .collect();
    roots.push((PathBuf::from("/usr/local/cuda"), "/usr/local/cuda"));
    roots
}

/// Candidate toolkit roots, in order: [`named_roots`], then NVIDIA's pip wheels where `cargo xtask
/// test` installs them, looked for above the current folder and above this executable.
fn roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = named_roots().into_iter().map(|(root, _)| root).collect();
    let exe = std::env::current_exe().ok();
    for start in [std::env::current_dir().ok(), exe].into_iter().flatten() {
        for dir in start.ancestors() {
            let wheels = wheel_root(dir);
            if !roots.contains(&wheels) {
                roots.push(wheels);
            }
        }
    }
    roots
}

/// A CUDA toolkit root with `include/cuda_fp16.h` and an NVRTC library.
#[derive(Debug, Clone)]
pub struct Toolkit {
    /// The root folder.
    pub root: PathBuf,
    /// Where it was found, in words (`CUDA_HOME`, `pip wheels in target/cuda-wheels`, ...).
    pub origin: &'static str,
}

impl Toolkit {
    /// Looks for a toolkit in `ATTN_CUDA_HOME`, `CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda` and
    /// the wheels under `workspace`.
    pub fn find(workspace: &Path) -> Option<Toolkit> {
        let wheels = (wheel_root(workspace), "pip wheels in target/cuda-wheels");
        named_roots()
            .into_iter()
            .chain([wheels])
            .find(|(root, _)| is_toolkit(root))
            .map(|(root, origin)| Toolkit { root, origin })
    }

    /// The folders holding `libnvrtc.so*` (and, in the wheels, `libnvrtc-builtins`).
    pub fn lib_dirs(&self) -> Vec<PathBuf> {
        ["lib64", "lib"]
            .iter()
            .map(|d| self.root.join(d))
            .filter(|d| d.is_dir())
            .collect()
    }

    /// The environment a child process needs to compile kernels with this toolkit; an error when
    /// a folder cannot go into a search path (a name with `:`).
    pub fn apply(&self, cmd: &mut Command) -> crate::Result<()> {
        let prepend = |mut paths: Vec<PathBuf>, var: &str| {
            if let Some(old) = std::env::var_os(var) {
                paths.extend(std::env::split_paths(&old));
            }
            std::env::join_paths(paths).map_err(|e| crate::KernelError::Io {
                path: format!("{var} with {}", self.root.display()),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
            })
        };
        // Not CUDA_HOME: cudarc's build script reruns when CUDA_HOME changes, so a `cargo` child
        // given it would rebuild cudarc (and everything above it) for `cargo xtask test`, then
        // again for the next plain `cargo xtask`. This crate reads ATTN_CUDA_HOME first.
        cmd.env(ATTN_CUDA_HOME, &self.root)
            .env(
                "LD_LIBRARY_PATH",
                prepend(self.lib_dirs(), "LD_LIBRARY_PATH")?,
            )
            .env("PATH", prepend(vec![self.root.join("bin")], "PATH")?);
        Ok(())
    }
}

fn is_toolkit(root: &Path) -> bool {
    let has_nvrtc = ["lib64", "lib"].iter().any(|d| {
        std::fs::read_dir(root.join(d)).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("libnvrtc.so"))
        })
    });
    root.join("include/cuda_fp16.h").is_file() && has_nvrtc
}

/// Makes the toolkit that [`Toolkit::find`] finds usable in this very process, whatever
/// `LD_LIBRARY_PATH` says: NVRTC and its builtins are loaded by full path (cudarc's later
/// `dlopen("libnvrtc.so.13")` then finds the library already loaded under that soname), and
/// `ATTN_CUDA_HOME` names the root for the headers and ptxas. Without it `cargo xtask kernels
/// --ptxas` failed after `cargo xtask test` had fetched the wheels unless `LD_LIBRARY_PATH` was
/// set by hand. Does nothing when NVRTC already loads or no toolkit is found (compiling then
/// fails with its own one-line error).
///
/// Call it at the start of `main`, before any thread is spawned (it sets an environment variable).
pub fn preload(workspace: &Path) {
    let Some(toolkit) = Toolkit::find(workspace) else {
        return;
    };
    if std::env::var_os(ATTN_CUDA_HOME).is_none() {
        std::env::set_var(ATTN_CUDA_HOME, &toolkit.root);
    }
    if nvrtc_available() {
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

/// The folder with `cuda_fp16.h`.
pub fn cuda_include_dir() -> Result<PathBuf> {
    let roots = roots();
    roots
        .iter()
        .map(|r| r.join("include"))
        .find(|inc| inc.join("cuda_fp16.h").is_file())
        .ok_or_else(|| KernelError::NoHeaders {
            searched: roots
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// `ptxas` from `PATH` or a toolkit root.
pub fn ptxas_path() -> Option<PathBuf> {
    let from_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("ptxas"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    from_path
        .into_iter()
        .chain(roots().into_iter().map(|r| r.join("bin/ptxas")))
        .find(|p| p.is_file())
}

/// True if `libnvrtc.so` can be loaded.
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to dlopen the library; no symbol is called.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// NVRTC's version, e.g. `13.0`.
pub fn nvrtc_version() -> Result<String> {
    if !nvrtc_available() {
        return Err(KernelError::NoNvrtc);
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present (checked above); the two out-pointers are valid locals.
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if status != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(KernelError::NoNvrtc);
    }
    Ok(format!("{major}.{minor}"))
}

/// True if `libcuda.so` can be loaded.
pub fn driver_available() -> bool {
    // SAFETY: only tries to dlopen the library; no symbol is called.
    unsafe { cudarc::driver::sys::is_culib_present() }
}
