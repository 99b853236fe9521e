//! The Triton front end: a Triton kernel written to the forward ABI of kernels/README.md, compiled
//! ahead of time to PTX by `kernels/triton_aot.py` (run with `python3`, no GPU needed), so that it
//! is loaded and launched as a `--src` kernel's PTX is.
//!
//! The user's defines split as the script takes them: `NUM_WARPS` (default 4) and `STAGES`
//! (default 2) become Triton's `num_warps` and `num_stages`, `VARIANTS=1` asks for the variant
//! parameters, and every other define is a `tl.constexpr` of the kernel (`BLOCK_M`, which also sizes
//! the grid, among them); `HEAD_DIM` is the ABI's.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use attn_oracle::DType;
use serde::Deserialize;

use crate::config::Config;
use crate::error::{KernelError, Result};

/// The compile script, embedded so that no kernel folder has to exist at run time.
const SCRIPT: &str = include_str!("../../../kernels/triton_aot.py");

/// Python to run the script with: `ATTN_PYTHON`, else `python3`.
pub const PYTHON_VAR: &str = "ATTN_PYTHON";
/// A folder put first on the script's `PYTHONPATH` (where `cargo xtask test` installs Triton).
pub const PYTHONPATH_VAR: &str = "ATTN_TRITON_PYTHONPATH";

/// Seconds a Triton build may take (default [`DEFAULT_TIMEOUT_S`]).
pub const TIMEOUT_VAR: &str = "ATTN_TRITON_TIMEOUT";
/// A first build of a large kernel takes tens of seconds; a hang is ended at this bound.
pub const DEFAULT_TIMEOUT_S: u64 = 300;

/// The bound of one build: [`TIMEOUT_VAR`] in seconds, else [`DEFAULT_TIMEOUT_S`].
fn compile_timeout() -> std::time::Duration {
    let seconds = std::env::var(TIMEOUT_VAR)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&s| s > 0)
        .unwrap_or(DEFAULT_TIMEOUT_S);
    std::time::Duration::from_secs(seconds)
}

/// Triton's `num_warps` when `NUM_WARPS` is not defined.
pub const DEFAULT_NUM_WARPS: i64 = 4;
/// Triton's `num_stages` when `STAGES` is not defined.
pub const DEFAULT_STAGES: i64 = 2;

/// Defines that set the `--src` launch ABI and mean nothing to a Triton kernel.
const NOT_FOR_TRITON: [&str; 4] = ["SHARED_BYTES", "PRODUCER_WARPS", "TENSOR_MAPS", "CLUSTER"];

/// What to compile: `kernel` of the Python file `path`, for one dtype and head dim.
#[derive(Debug, Clone)]
pub struct TritonRequest<'a> {
    /// The `.py` file.
    pub path: &'a Path,
    /// The `@triton.jit` function.
    pub kernel: &'a str,
    /// Element type of Q, K, V and O.
    pub dtype: DType,
    /// The ABI's head dim (the `HEAD_DIM` constexpr).
    pub head_dim: usize,
    /// The user's defines.
    pub defines: &'a Config,
    /// Compute capability, e.g. 90.
    pub arch: u32,
}

/// A compiled Triton kernel.
#[derive(Debug, Clone, Deserialize)]
pub struct TritonBuild {
    /// Its entry point in the PTX.
    pub name: String,
    /// The PTX.
    pub ptx: String,
    /// Warps per program: the block is `num_warps · 32` threads.
    pub num_warps: u32,
    /// Dynamic shared memory per program, bytes.
    pub shared: u32,
    /// Parameters of the entry: the ABI's, then Triton's two scratch pointers (passed as null).
    pub params: u32,
    /// The Triton that compiled it.
    pub triton: String,
}

/// Whether `name` can name a Python function (ASCII letters, digits and `_`, not starting with a
/// digit): what `--triton FILE.py:KERNEL` and `--baseline py:FILE.py:FUNCTION` check before any
/// Python runs.
pub fn is_python_name(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Refuses, in one line, defines a Triton kernel cannot take (the `--src` launch ABI's).
pub fn check_defines(defines: &Config) -> Result<()> {
    for name in NOT_FOR_TRITON {
        if defines.get(name).is_some() {
            return Err(KernelError::Triton(format!(
                "--define {name} sets the launch of a CUDA --src kernel; Triton sizes a Triton kernel's shared memory and launch itself"
            )));
        }
    }
    Ok(())
}

/// The Python the script runs with ([`PYTHON_VAR`], else `python3`), with [`PYTHONPATH_VAR`]
/// first on its `PYTHONPATH`.
fn python() -> Result<(String, Command)> {
    let python = std::env::var(PYTHON_VAR).unwrap_or_else(|_| "python3".into());
    let mut cmd = Command::new(&python);
    prepend_python_path(&mut cmd, PYTHONPATH_VAR).map_err(KernelError::Triton)?;
    Ok((python, cmd))
}

/// Puts the folders of the variable `var` (one or several, as PYTHONPATH lists them) ahead of
/// `cmd`'s PYTHONPATH, when `var` is set; why not, in one line.
pub fn prepend_python_path(cmd: &mut Command, var: &str) -> std::result::Result<(), String> {
    let Some(extra) = std::env::var_os(var) else {
        return Ok(());
    };
    let mut paths: Vec<std::path::PathBuf> = std::env::split_paths(&extra).collect();
    if let Some(old) = std::env::var_os("PYTHONPATH") {
        paths.extend(std::env::split_paths(&old));
    }
    let joined =
        std::env::join_paths(paths).map_err(|e| format!("{var} cannot join PYTHONPATH: {e}"))?;
    cmd.env("PYTHONPATH", joined);
    Ok(())
}

/// Whether that Python imports Triton (what the front end's tests skip on, unless required).
pub fn importable() -> bool {
    python().is_ok_and(|(_, mut cmd)| {
        cmd.args(["-c", "import triton"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The script's request for `req`, as JSON.
fn request_json(req: &TritonRequest<'_>) -> Result<serde_json::Value> {
    check_defines(req.defines)?;
    let dtype = match req.dtype {
        DType::F16 => "fp16",
        DType::Bf16 => "bf16",
        other => {
            return Err(KernelError::Triton(format!(
                "{other}: a Triton kernel is built for fp16 or bf16"
            )))
        }
    };
    let mut constexprs = serde_json::Map::new();
    for (name, value) in &req.defines.0 {
        if !matches!(name.as_str(), "NUM_WARPS" | "STAGES" | "VARIANTS") {
            constexprs.insert(name.clone(), (*value).into());
        }
    }
    Ok(serde_json::json!({
        "file": req.path.display().to_string(),
        "kernel": req.kernel,
        "dtype": dtype,
        "head_dim": req.head_dim,
        "constexprs": constexprs,
        "num_warps": req.defines.get("NUM_WARPS").unwrap_or(DEFAULT_NUM_WARPS),
        "num_stages": req.defines.get("STAGES").unwrap_or(DEFAULT_STAGES),
        "variants": req.defines.get("VARIANTS") == Some(1),
        "arch": req.arch,
    }))
}

/// Builds made in this process, by request and the file's text: a Python start and Triton's
/// import cost about a second, and the gate prepares one kernel for many problems.
static BUILDS: OnceLock<Mutex<HashMap<String, TritonBuild>>> = OnceLock::new();

/// Compiles `req` with Triton: the PTX and what the launch needs, or the script's one-line reason.
/// A request made before in this process, of the same file text, is answered from memory.
pub fn compile(req: &TritonRequest<'_>) -> Result<TritonBuild> {
    let request = request_json(req)?;
    let text = std::fs::read(req.path).map_err(|source| KernelError::Io {
        path: req.path.display().to_string(),
        source,
    })?;
    let key = format!("{}\u{1f}{request}", crate::compile::sha256_hex(&text));
    let builds = BUILDS.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(build) = builds.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(build.clone());
    }
    let build = run_script(req, &request, compile_timeout())?;
    builds
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, build.clone());
    Ok(build)
}

/// One build of `req`, not remembered, ended after `limit` ([`compile`] bounds it by
/// [`TIMEOUT_VAR`]).
pub fn build_within(req: &TritonRequest<'_>, limit: std::time::Duration) -> Result<TritonBuild> {
    run_script(req, &request_json(req)?, limit)
}

/// One run of the compile script on `request`, within `limit`.
fn run_script(
    req: &TritonRequest<'_>,
    request: &serde_json::Value,
    limit: std::time::Duration,
) -> Result<TritonBuild> {
    let (python, mut cmd) = python()?;
    let mut child = cmd
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            KernelError::Triton(format!(
                "cannot run `{python}` ({e}): set {PYTHON_VAR} to a Python with Triton"
            ))
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(request.to_string().as_bytes())
            .map_err(|e| KernelError::Triton(format!("writing to `{python}`: {e}")))?;
    }
    // The user's module runs at import: a hang there must end in a line, not hang the caller.
    // The pipes are drained on their own threads, so that a chatty child cannot block on them.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let started = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < limit => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(KernelError::Triton(format!(
                    "{}:{}: the compile did not finish within {} s (importing the file or Triton's build hung; {TIMEOUT_VAR} sets the bound)",
                    req.path.display(),
                    req.kernel,
                    limit.as_secs()
                )));
            }
            Err(e) => return Err(KernelError::Triton(format!("waiting for `{python}`: {e}"))),
        }
    };
    let output = std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        // The script's own refusals are one line; a crash's traceback ends with what happened.
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        return Err(KernelError::Triton(format!(
            "{}:{}: {}",
            req.path.display(),
            req.kernel,
            last.unwrap_or("the compile script failed with no message")
        )));
    }
    serde_json::from_slice(&output.stdout).map_err(|e| {
        KernelError::Triton(format!(
            "{}:{}: the compile script's answer is not what it should be ({e})",
            req.path.display(),
            req.kernel
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(defines: &Config) -> serde_json::Value {
        let req = TritonRequest {
            path: Path::new("k.py"),
            kernel: "attn_fwd",
            dtype: DType::Bf16,
            head_dim: 128,
            defines,
            arch: 90,
        };
        request_json(&req).unwrap()
    }

    #[test]
    fn defines_become_triton_options_and_constexprs() {
        let json = request(
            &"BLOCK_M=128,NUM_WARPS=8,STAGES=3,VARIANTS=1"
                .parse()
                .unwrap(),
        );
        assert_eq!(json["num_warps"], 8);
        assert_eq!(json["num_stages"], 3);
        assert_eq!(json["variants"], true);
        assert_eq!(json["dtype"], "bf16");
        assert_eq!(json["constexprs"], serde_json::json!({"BLOCK_M": 128}));
        let plain = request(&Config::default());
        assert_eq!(plain["num_warps"], DEFAULT_NUM_WARPS);
        assert_eq!(plain["num_stages"], DEFAULT_STAGES);
        assert_eq!(plain["variants"], false);
    }

    #[test]
    fn the_cuda_launch_defines_are_refused_in_one_line() {
        let err = check_defines(&"SHARED_BYTES=1024".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("SHARED_BYTES") && !err.contains('\n'), "{err}");
        assert!(check_defines(&"BLOCK_M=64,BLOCK_N=32".parse().unwrap()).is_ok());
    }

    #[test]
    fn a_triton_candidate_is_labelled_and_never_sent_to_nvrtc() {
        use crate::compile::Arch;
        use crate::registry::Limits;
        use crate::Candidate;
        let starter =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../kernels/examples/starter_triton.py");
        let defines: Config = "BLOCK_M=64,BLOCK_N=64".parse().unwrap();
        let candidate = Candidate::from_triton(&starter, "attn_fwd", defines).unwrap();
        assert_eq!(candidate.label(), "triton:starter_triton.py:attn_fwd");
        assert_eq!(candidate.knobs().get("BLOCK_M"), Some(64));
        let err = candidate
            .variant(DType::F16, 64, &Arch("compute_90a".into()), &Limits::H100)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("Triton compiles `attn_fwd`, not NVRTC"),
            "{err}"
        );
        let shared: Config = "SHARED_BYTES=4096".parse().unwrap();
        assert!(Candidate::from_triton(&starter, "attn_fwd", shared).is_err());
        assert!(
            Candidate::from_triton(Path::new("/no/such.py"), "attn_fwd", Config::default())
                .is_err()
        );
    }
}
