//! PyTorch SDPA through an embedded Python helper, run with `python3` (or `ATTN_PYTHON`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use serde_json::{json, Value};

const HELPER: &str = include_str!("sdpa_helper.py");

/// Versions the helper reports.
#[derive(Debug, Clone)]
pub struct SdpaInfo {
    pub torch: String,
    pub cuda: String,
    pub cudnn: String,
}

/// A working directory with the helper script, and the interpreter to run it.
#[derive(Debug)]
pub struct Sdpa {
    python: String,
    dir: PathBuf,
    pub info: SdpaInfo,
}

impl Drop for Sdpa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Sdpa {
    /// Starts the helper once to read versions. `Err` carries the one-line reason PyTorch is not usable.
    pub fn detect() -> anyhow::Result<Sdpa> {
        let python = std::env::var("ATTN_PYTHON").unwrap_or_else(|_| "python3".into());
        let dir = std::env::temp_dir().join(format!("attn-sdpa-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("sdpa_helper.py"), HELPER)?;
        let mut sdpa = Sdpa {
            python,
            dir,
            info: SdpaInfo {
                torch: String::new(),
                cuda: String::new(),
                cudnn: String::new(),
            },
        };
        let info = sdpa.run_jobs(&[json!({"kind": "info"})])?.remove(0);
        let text = |k: &str| info[k].as_str().unwrap_or("?").to_string();
        sdpa.info = SdpaInfo {
            torch: text("torch"),
            cuda: text("cuda"),
            cudnn: text("cudnn"),
        };
        Ok(sdpa)
    }

    /// A scratch path inside the helper's directory.
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Runs a batch of jobs in one Python process; one result per job (an error there is per job).
    pub fn run_jobs(&self, jobs: &[Value]) -> anyhow::Result<Vec<Value>> {
        let jobs_path = self.dir.join("jobs.json");
        let results_path = self.dir.join("results.json");
        let _ = std::fs::remove_file(&results_path);
        std::fs::write(&jobs_path, serde_json::to_vec(&json!({ "jobs": jobs }))?)?;
        let output = Command::new(&self.python)
            .arg(self.dir.join("sdpa_helper.py"))
            .arg(&jobs_path)
            .arg(&results_path)
            .output()
            .with_context(|| {
                format!(
                    "no Python to run PyTorch SDPA (`{}`; set ATTN_PYTHON)",
                    self.python
                )
            })?;
        if !results_path.is_file() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no output");
            bail!("the PyTorch helper failed: {last}");
        }
        let results: Value = serde_json::from_slice(&std::fs::read(&results_path)?)?;
        if let Some(fatal) = results["fatal"].as_str() {
            bail!("{fatal}");
        }
        Ok(results["results"].as_array().cloned().unwrap_or_default())
    }
}

/// A job that times SDPA with the harness's protocol.
#[allow(clippy::too_many_arguments)]
pub fn time_job(
    shape: &attn_evidence::ShapeSpec,
    scale: f64,
    backend: &str,
    opts: &attn_kernels::TimingOptions,
    sets: usize,
    seed: u64,
    flush_bytes: usize,
) -> Value {
    json!({
        "kind": "time",
        "shape": [shape.batch, shape.heads, shape.seq_q, shape.seq_kv, shape.head_dim],
        "dtype": shape.dtype, "causal": shape.causal, "scale": scale, "backend": backend,
        "warmup": opts.warmup, "samples": opts.samples,
        "mode": match opts.mode {
            attn_kernels::TimingMode::Flushed => "flushed",
            attn_kernels::TimingMode::Graph => "graph",
            attn_kernels::TimingMode::Batch => "batch",
        },
        "batch_launches": opts.batch_launches, "guard_launches": opts.guard_launches,
        "sets": sets, "seed": seed, "flush_bytes": flush_bytes,
    })
}

/// A job that computes SDPA's output on `.npy` inputs `[q, k, v]` of shape `spec`.
pub fn run_job(
    qkv: [&Path; 3],
    out: &Path,
    spec: &attn_evidence::ShapeSpec,
    scale: f64,
    backend: &str,
) -> Value {
    let [q, k, v] = qkv;
    json!({"kind": "run", "q": q, "k": k, "v": v, "out": out, "dtype": spec.dtype, "causal": spec.causal, "scale": scale, "backend": backend})
}

/// The per-job error, if the job failed.
pub fn job_error(result: &Value) -> Option<String> {
    result["error"].as_str().map(str::to_string)
}

/// Floats of a JSON array field.
pub fn floats(result: &Value, key: &str) -> Vec<f64> {
    result[key]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}
