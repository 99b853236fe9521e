//! Finding NVRTC, ptxas and the CUDA headers at run time.

use std::path::PathBuf;

use crate::error::{KernelError, Result};

/// Candidate toolkit roots, in order: `ATTN_CUDA_HOME` (the toolkit `cargo xtask` found, handed
/// down without touching `CUDA_HOME`, whose change would make cargo rebuild cudarc), `CUDA_HOME`,
/// `CUDA_PATH`, `/usr/local/cuda`, and NVIDIA's pip wheels (`nvidia/cu13`) where `cargo xtask
/// test` installs them, looked for above the current folder and above this executable.
fn roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["ATTN_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    let exe = std::env::current_exe().ok();
    for start in [std::env::current_dir().ok(), exe].into_iter().flatten() {
        for dir in start.ancestors() {
            let wheels = dir.join("target/cuda-wheels/nvidia/cu13");
            if !roots.contains(&wheels) {
                roots.push(wheels);
            }
        }
    }
    roots
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
