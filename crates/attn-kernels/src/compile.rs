//! NVRTC compilation with an on-disk cache, and the ptxas resource report.
//!
//! Sources and headers are embedded in the binary; the headers are written to a folder on NVRTC's
//! include path (named by their hash), so no kernel folder has to exist at run time and users'
//! kernels include `attn_common.cuh` by name. The cache key covers the source, every option (defines included), the architecture and the
//! NVRTC version: an unchanged kernel loads without compiling.

use std::path::{Path, PathBuf};
use std::process::Command;

use attn_oracle::DType;
use sha2::{Digest, Sha256};

use crate::error::{KernelError, Result};
use crate::toolkit;

/// Headers that kernels may include by name.
pub const HEADERS: [(&str, &str); 10] = [
    (
        "attn_common.cuh",
        include_str!("../../../kernels/attn_common.cuh"),
    ),
    (
        "hopper_common.cuh",
        include_str!("../../../kernels/hopper_common.cuh"),
    ),
    (
        "hopper_pipeline.cuh",
        include_str!("../../../kernels/hopper_pipeline.cuh"),
    ),
    (
        "hopper_schedule.cuh",
        include_str!("../../../kernels/hopper_schedule.cuh"),
    ),
    (
        "hopper_epilogue.cuh",
        include_str!("../../../kernels/hopper_epilogue.cuh"),
    ),
    (
        "hopper_consume.cuh",
        include_str!("../../../kernels/hopper_consume.cuh"),
    ),
    (
        "hybrid_common.cuh",
        include_str!("../../../kernels/hybrid_common.cuh"),
    ),
    ("mma_ptx.cuh", include_str!("../../../kernels/mma_ptx.cuh")),
    (
        "decode_common.cuh",
        include_str!("../../../kernels/decode_common.cuh"),
    ),
    (
        "backward_common.cuh",
        include_str!("../../../kernels/backward_common.cuh"),
    ),
];

/// A virtual architecture to compile for, e.g. `compute_90` (or `compute_90a` for wgmma).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Arch(pub String);

impl Arch {
    /// `compute_{major}{minor}`.
    pub fn from_capability(major: i32, minor: i32) -> Arch {
        Arch(format!("compute_{major}{minor}"))
    }
    /// The matching real architecture for ptxas, e.g. `sm_90`.
    pub fn sm(&self) -> String {
        self.0.replace("compute_", "sm_")
    }
    /// The compute capability as one number (`compute_90a` → 90), as Triton's targets take it;
    /// `None` for a name not of the form `compute_NN[a]`.
    pub fn capability(&self) -> Option<u32> {
        self.0
            .strip_prefix("compute_")?
            .trim_end_matches('a')
            .parse()
            .ok()
    }
}

/// What to compile: a source, its name for messages, and its defines.
#[derive(Debug, Clone)]
pub struct CompileRequest<'a> {
    /// Name for error messages (implementation name or file).
    pub name: String,
    /// The `.cu` source.
    pub source: &'a str,
    /// Extra folder for the user's own `#include`s, searched before the embedded headers.
    pub include_dir: Option<&'a Path>,
    /// `-D` defines, `NAME=VALUE` or `NAME`.
    pub defines: Vec<String>,
    /// Target.
    pub arch: Arch,
}

impl CompileRequest<'_> {
    /// The defines every kernel of the ABI needs: dtype and head dim.
    pub fn abi_defines(dtype: DType, head_dim: usize) -> Result<Vec<String>> {
        let dtype_define = match dtype {
            DType::F16 => "ATTN_DTYPE_F16",
            DType::Bf16 => "ATTN_DTYPE_BF16",
            other => {
                return Err(KernelError::Unsupported {
                    implementation: "every kernel".into(),
                    what: format!("dtype {other} (fp16 and bf16 only)"),
                })
            }
        };
        Ok(vec![
            dtype_define.to_string(),
            format!("HEAD_DIM={head_dim}"),
        ])
    }
}

/// A folder holding our embedded headers (written once per content), put on NVRTC's include path
/// so that kernels, and headers of users' kernels, `#include "attn_common.cuh"` by name.
fn embedded_include_dir() -> Result<PathBuf> {
    let headers: Vec<u8> = HEADERS
        .iter()
        .flat_map(|(name, text)| [name.as_bytes(), text.as_bytes()].concat())
        .collect();
    let tag = &sha256_hex(&headers)[..16];
    let base = cache_dir().unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("include-{tag}"));
    for (name, text) in HEADERS {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text) {
            write_atomic(&path, text.as_bytes())?;
        }
    }
    Ok(dir)
}

/// NVRTC's flags for every kernel beside its target, include path and defines: what `cargo xtask
/// kernels --nvrtc-flags` prints, so that the checking scripts in kernels/tools compile exactly as
/// the host does (one that added `-default-device` accepted a kernel the host rejects).
pub const LANGUAGE_FLAGS: &[&str] = &["-std=c++17"];

fn options(req: &CompileRequest<'_>) -> Result<Vec<String>> {
    let include = toolkit::cuda_include_dir()?;
    let mut opts = vec![format!("--gpu-architecture={}", req.arch.0)];
    opts.extend(LANGUAGE_FLAGS.iter().map(|f| f.to_string()));
    // The kernel's own folder first: its headers (a revision's `attn_common.cuh`, say) win over
    // the embedded ones of the same name.
    if let Some(dir) = req.include_dir {
        opts.push(format!("-I{}", dir.display()));
    }
    opts.push(format!("-I{}", embedded_include_dir()?.display()));
    opts.push(format!("-I{}", include.display()));
    opts.extend(req.defines.iter().map(|d| format!("-D{d}")));
    Ok(opts)
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("ATTN_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("attn").join("ptx"))
}

/// The cache key of a compile: source, options, arch and NVRTC version.
fn cache_key(source: &str, opts: &[String], nvrtc_version: &str) -> String {
    let mut bytes = Vec::new();
    for part in [source, &opts.join("\u{1f}"), nvrtc_version] {
        bytes.extend_from_slice(part.as_bytes());
        bytes.push(0);
    }
    sha256_hex(&bytes)
}

/// SHA-256 of `bytes`, lower-case hex: cache keys and the source hashes recorded in evidence.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A compiled kernel: PTX text, and whether it came from the cache.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The PTX.
    pub ptx: String,
    /// True if loaded from the on-disk cache.
    pub cached: bool,
}

/// A compile's cache entry as it travels between machines (a search's compile task on a CPU
/// worker, installed by the GPU worker that loads it): its cache key and its PTX.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CacheEntry {
    /// The cache key ([`cache_key`]'s: source, options, NVRTC version).
    pub key: String,
    /// The PTX.
    pub ptx: String,
}

/// Compiles `req` (through the cache) into the entry another machine installs.
pub fn compile_entry(req: &CompileRequest<'_>) -> Result<CacheEntry> {
    let (key, _) = keyed(req)?;
    let ptx = compile(req)?.ptx;
    Ok(CacheEntry { key, ptx })
}

/// Puts an entry compiled elsewhere into this machine's cache, unless it is there: a later
/// compile of the same request here (the same source, options and NVRTC version) is then a cache
/// hit, and an entry of another NVRTC or include folder is never looked up. Whether it was
/// written.
pub fn install(entry: &CacheEntry) -> Result<bool> {
    match cache_dir() {
        Some(dir) => install_into(&dir, entry),
        None => Ok(false),
    }
}

fn install_into(dir: &Path, entry: &CacheEntry) -> Result<bool> {
    let is_key = entry.key.len() == 64 && entry.key.bytes().all(|b| b.is_ascii_hexdigit());
    if !is_key {
        return Err(KernelError::CacheEntry(format!(
            "its key must be a SHA-256 in hex, not {:?}",
            entry.key
        )));
    }
    let path = dir.join(format!("{}.ptx", entry.key));
    if path.exists() {
        return Ok(false);
    }
    Ok(write_atomic(&path, entry.ptx.as_bytes()).is_ok())
}

/// The cache key of `req` and its NVRTC options.
fn keyed(req: &CompileRequest<'_>) -> Result<(String, Vec<String>)> {
    let version = toolkit::nvrtc_version()?;
    let opts = options(req)?;
    // The include folder's name carries a hash of our headers, so the options cover them.
    Ok((cache_key(req.source, &opts, &version), opts))
}

/// Compiles `req` to PTX with NVRTC, through the on-disk cache.
pub fn compile(req: &CompileRequest<'_>) -> Result<Compiled> {
    let source = req.source;
    let (key, opts) = keyed(req)?;
    let cached_path = cache_dir().map(|d| d.join(format!("{key}.ptx")));
    if let Some(ptx) = cached_path
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
    {
        return Ok(Compiled { ptx, cached: true });
    }
    let compile_opts = cudarc::nvrtc::CompileOptions {
        options: opts.clone(),
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(source, compile_opts).map_err(|err| {
        let log = match &err {
            cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                log.to_string_lossy().into_owned()
            }
            other => format!("{other:?}"),
        };
        KernelError::Compile {
            implementation: req.name.to_string(),
            config: req.defines.join(" "),
            arch: req.arch.0.clone(),
            log: log.trim_end().to_string(),
        }
    })?;
    let ptx = ptx.to_src();
    if let Some(path) = cached_path {
        // A cache that cannot be written only costs time next run.
        let _ = write_atomic(&path, ptx.as_bytes());
    }
    Ok(Compiled { ptx, cached: false })
}

/// Writes `bytes` to `path` atomically (`attn_oracle::npy::write_bytes_atomic`), creating its
/// folder.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|source| KernelError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    Ok(attn_oracle::npy::write_bytes_atomic(path, bytes)?)
}

/// What ptxas says a kernel uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Resources {
    /// Registers per thread.
    pub registers: u32,
    /// Static shared memory, bytes (dynamic shared memory is in the launch geometry).
    pub shared_bytes: u32,
    /// Stack frame, bytes.
    pub stack_bytes: u32,
    /// Bytes of spill stores.
    pub spill_stores: u32,
    /// Bytes of spill loads.
    pub spill_loads: u32,
}

impl Resources {
    /// True when the kernel spills registers or uses a stack frame (local memory).
    pub fn uses_local_memory(&self) -> bool {
        self.spill_stores > 0 || self.spill_loads > 0 || self.stack_bytes > 0
    }
}

/// Runs `ptxas -v` on `ptx` for `arch` and parses the resource lines of `entry`.
pub fn ptxas_resources(ptx: &str, arch: &Arch, entry: &str) -> Result<Resources> {
    let ptxas = toolkit::ptxas_path().ok_or_else(|| {
        KernelError::Ptxas(
            "ptxas not found: put a CUDA toolkit's bin folder on PATH or set CUDA_HOME".into(),
        )
    })?;
    // One folder per call: two threads of a process (parallel tests) must not share the files.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("attn-ptxas-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|source| KernelError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    let ptx_path = dir.join("kernel.ptx");
    std::fs::write(&ptx_path, ptx).map_err(|source| KernelError::Io {
        path: ptx_path.display().to_string(),
        source,
    })?;
    let output = Command::new(&ptxas)
        .arg(format!("-arch={}", arch.sm()))
        .arg("-v")
        .arg(&ptx_path)
        .arg("-o")
        .arg(dir.join("kernel.cubin"))
        .output()
        .map_err(|e| KernelError::Ptxas(format!("running {}: {e}", ptxas.display())))?;
    let _ = std::fs::remove_dir_all(&dir);
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        return Err(KernelError::Ptxas(log.trim().to_string()));
    }
    parse_ptxas(&log, entry)
        .ok_or_else(|| KernelError::Ptxas(format!("no resource report for `{entry}` in:\n{log}")))
}

/// Parses ptxas `-v` output for one entry point.
pub fn parse_ptxas(log: &str, entry: &str) -> Option<Resources> {
    let mut lines = log.lines().skip_while(|l| {
        !(l.contains("Compiling entry function") && l.contains(&format!("'{entry}'")))
    });
    lines.next()?;
    let mut res = Resources::default();
    let number_before = |line: &str, unit: &str| -> Option<u32> {
        let idx = line.find(unit)?;
        line[..idx].split_whitespace().last()?.parse().ok()
    };
    for line in lines {
        if line.contains("Compiling entry function") {
            break;
        }
        if line.contains("stack frame") {
            res.stack_bytes = number_before(line, "bytes stack frame").unwrap_or(0);
            res.spill_stores = number_before(line, "bytes spill stores").unwrap_or(0);
            res.spill_loads = number_before(line, "bytes spill loads").unwrap_or(0);
        }
        if line.contains("registers") {
            res.registers = number_before(line, "registers").unwrap_or(0);
            res.shared_bytes = number_before(line, "bytes smem").unwrap_or(0);
        }
    }
    Some(res)
}

/// Whether `ptx` defines the kernel `entry` (a `.entry NAME(` line), so that a misnamed entry
/// point is one clear error rather than a ptxas report without it.
pub fn ptx_has_entry(ptx: &str, entry: &str) -> bool {
    ptx.lines().any(|line| {
        let mut words = line.split_whitespace().skip_while(|w| *w != ".entry");
        words.next().is_some() && words.next().and_then(|w| w.split('(').next()) == Some(entry)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_headers_are_written_where_nvrtc_looks() {
        let dir = embedded_include_dir().unwrap();
        let text = std::fs::read_to_string(dir.join("attn_common.cuh")).unwrap();
        assert!(text.contains("typedef __half elem_t"));
    }

    #[test]
    fn parses_ptxas_report() {
        let log = "ptxas info    : 0 bytes gmem\n\
            ptxas info    : Compiling entry function 'other' for 'sm_90'\n\
            ptxas info    : Used 8 registers\n\
            ptxas info    : Compiling entry function 'attn_fwd' for 'sm_90'\n\
            ptxas info    : Function properties for attn_fwd\n\
            ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n\
            ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 412 bytes cmem[0]\n";
        let res = parse_ptxas(log, "attn_fwd").unwrap();
        assert_eq!(
            res,
            Resources {
                registers: 168,
                shared_bytes: 1024,
                stack_bytes: 24,
                spill_stores: 8,
                spill_loads: 12
            }
        );
        assert!(res.uses_local_memory());
        assert!(parse_ptxas(log, "missing").is_none());
    }

    #[test]
    fn finds_entry_points_in_ptx() {
        let ptx = "//\n.visible .entry attn_fwd(\n\t.param .u64 a\n)\n.entry other()\n";
        assert!(ptx_has_entry(ptx, "attn_fwd"));
        assert!(ptx_has_entry(ptx, "other"));
        assert!(!ptx_has_entry(ptx, "attn"));
        assert!(!ptx_has_entry(ptx, "missing"));
    }

    #[test]
    fn an_entry_from_elsewhere_is_written_once_into_the_cache_and_a_bad_key_is_refused() {
        let dir = std::env::temp_dir().join(format!("attn-install-{}", std::process::id()));
        let key = "ab".repeat(32);
        let entry = CacheEntry {
            key: key.clone(),
            ptx: "// ptx".into(),
        };
        assert!(install_into(&dir, &entry).unwrap());
        assert!(!install_into(&dir, &entry).unwrap(), "written once");
        let written = std::fs::read_to_string(dir.join(format!("{key}.ptx"))).unwrap();
        assert_eq!(written, "// ptx");
        for bad in ["../../etc/passwd", "short", &"g".repeat(64)] {
            let entry = CacheEntry {
                key: bad.to_string(),
                ptx: String::new(),
            };
            let err = install_into(&dir, &entry).unwrap_err().to_string();
            assert!(err.contains("SHA-256"), "{err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn cache_key_changes_with_every_input() {
        let base = cache_key("src", &["-DA=1".into()], "13.0");
        assert_ne!(base, cache_key("src2", &["-DA=1".into()], "13.0"));
        assert_ne!(base, cache_key("src", &["-DA=2".into()], "13.0"));
        assert_ne!(base, cache_key("src", &["-DA=1".into()], "13.1"));
        assert_eq!(base, cache_key("src", &["-DA=1".into()], "13.0"));
    }
}
