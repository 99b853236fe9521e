//! A search's workers on a Ray cluster (`evo --on ray[=ADDRESS]`): `ray_pool.py`, run with
//! Python as this process's child, joins the cluster, starts one actor per GPU of one model
//! (`num_gpus=1`, placed by Ray's `accelerator_type` resource, so that timings of different models
//! never mix) and runs each [`WorkerJob`] as the bundle's `evo-worker` on its actor's GPU. The
//! driver stays this program: the search, its log, `--resume` and the evidence are the local
//! search's. A worker that dies is restarted and its job retried by Ray; a job that still fails
//! comes back as an invalid measurement with its reason, never dropped.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use attn_evo::Measurement;
use serde::{Deserialize, Serialize};

use super::worker::WorkerJob;
use crate::{MeasureError, Result};

const POOL: &str = include_str!("ray_pool.py");

/// Where the pool finds Ray besides the Python's own packages (the test command's install).
pub const PYTHONPATH_VAR: &str = "ATTN_RAY_PYTHONPATH";

/// Beyond a job's own timeout, how long the pool may take to answer before the job is recorded
/// as lost (Ray's retries and restarts included).
const ANSWER_MARGIN: Duration = Duration::from_secs(300);

/// One GPU of the cluster a search measures on.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RaySlot {
    /// Its index in the search (the device ordinal the search knows it by).
    pub slot: usize,
    /// Its model (Ray's `accelerator_type`).
    pub model: String,
    /// Its node's address.
    pub node: String,
    /// Its GPU on that node.
    pub gpu: String,
}

impl std::fmt::Display for RaySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({} GPU {} on {})",
            self.slot, self.model, self.gpu, self.node
        )
    }
}

/// What a search on Ray learns of its GPUs from the first (the hidden `evo-gpu`): where it
/// measures, for the evidence, and what candidates are validated and compiled for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuFacts {
    /// Its provenance.
    pub provenance: attn_evidence::Provenance,
    /// Its limits.
    pub limits: attn_kernels::registry::Limits,
    /// Its architecture (`compute_90a`).
    pub arch: String,
}

impl GpuFacts {
    /// The facts of `gpu`, under `provenance`.
    pub fn of(gpu: &attn_kernels::Gpu, provenance: attn_evidence::Provenance) -> GpuFacts {
        GpuFacts {
            provenance,
            limits: gpu.limits(),
            arch: gpu.arch().0,
        }
    }

    /// A made-up H100's (test mode without a GPU).
    pub fn synthetic(provenance: attn_evidence::Provenance) -> GpuFacts {
        GpuFacts {
            provenance,
            limits: attn_kernels::registry::Limits::H100,
            arch: "compute_90a".into(),
        }
    }
}

/// Where a program runs on the cluster ([`RayPool::run_program`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// On a slot's GPU, as a task (a suite matrix's).
    Gpu(usize),
    /// On a slot's GPU, as a question about it, which a test's planted losses (`ATTN_RAY_LOSE`)
    /// leave alone.
    Probe(usize),
    /// On one CPU of the cluster, no GPU, wherever Ray places it (a search's compile task).
    Cpu,
}

/// A model of the cluster that the search leaves out.
#[derive(Debug, Clone, Deserialize)]
pub struct OtherModel {
    /// The model.
    pub model: String,
    /// Its GPUs.
    pub gpus: usize,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Hello {
    Slots {
        slots: Vec<RaySlot>,
        others: Vec<OtherModel>,
    },
    Fatal {
        fatal: String,
    },
}

#[derive(Debug, Deserialize)]
struct Answer {
    id: u64,
    line: Option<String>,
    error: Option<String>,
}

type Answers = Arc<(Mutex<(HashMap<u64, Answer>, bool)>, Condvar)>;

/// The pool process and its GPU slots.
pub struct RayPool {
    child: Mutex<Child>,
    stdin: Mutex<ChildStdin>,
    answers: Answers,
    next: AtomicU64,
    /// The GPUs of the model measured on, in slot order.
    pub slots: Vec<RaySlot>,
    /// The models left out.
    pub others: Vec<OtherModel>,
    dir: std::path::PathBuf,
}

impl std::fmt::Debug for RayPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RayPool")
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl Drop for RayPool {
    fn drop(&mut self) {
        if let Ok(mut child) = self.child.lock() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl RayPool {
    /// Joins the cluster at `address` (`auto`: the local one) with `program` as every worker's
    /// command (the bundle's xtask, at the same path on every node), on the GPUs of `model` or of
    /// the model with the most GPUs; errors are one line.
    pub fn start(address: &str, program: &Path, model: Option<&str>) -> Result<RayPool> {
        let python = std::env::var("ATTN_PYTHON").unwrap_or_else(|_| "python3".into());
        let (dir, script) = crate::supervise::script_folder("ray", "ray_pool.py", POOL)?;
        let io = |what: &str| {
            let what = what.to_string();
            move |source| MeasureError::Io { what, source }
        };
        let mut command = Command::new(&python);
        command.arg(&script).arg(address).arg(program);
        command.args(model);
        attn_kernels::triton::prepend_python_path(&mut command, PYTHONPATH_VAR)
            .map_err(MeasureError::Invalid)?;
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io(&format!("starting {python} for the Ray pool")))?;
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut first = String::new();
        let read = stdout.read_line(&mut first);
        let hello = match read {
            Ok(n) if n > 0 => serde_json::from_str::<Hello>(&first).map_err(|e| {
                MeasureError::Invalid(format!("the Ray pool's first line ({e}): {}", first.trim()))
            })?,
            _ => {
                let _ = child.kill();
                return Err(MeasureError::Invalid(format!(
                    "the Ray pool ({python}) exited before it answered"
                )));
            }
        };
        let (slots, others) = match hello {
            Hello::Slots { slots, others } => (slots, others),
            Hello::Fatal { fatal } => {
                let _ = child.wait();
                return Err(MeasureError::Invalid(format!("ray: {fatal}")));
            }
        };
        let answers: Answers = Arc::new((Mutex::new((HashMap::new(), false)), Condvar::new()));
        let sink = Arc::clone(&answers);
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                if let Ok(answer) = serde_json::from_str::<Answer>(&line) {
                    let (lock, cond) = &*sink;
                    let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
                    state.0.insert(answer.id, answer);
                    cond.notify_all();
                }
            }
            let (lock, cond) = &*sink;
            lock.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
            cond.notify_all();
        });
        Ok(RayPool {
            child: Mutex::new(child),
            stdin: Mutex::new(stdin),
            answers,
            next: AtomicU64::new(0),
            slots,
            others,
            dir,
        })
    }

    /// `job` on slot `slot` within `timeout`: the worker's measurement, or why there is none as an
    /// invalid one (a lost worker after Ray's retries, a timeout, the pool gone).
    pub fn run(&self, job: &WorkerJob, slot: usize, timeout: Duration) -> Measurement {
        self.try_run(job, slot, timeout)
            .unwrap_or_else(|why| Measurement::invalid(format!("ray: {why}")))
    }

    fn try_run(
        &self,
        job: &WorkerJob,
        slot: usize,
        timeout: Duration,
    ) -> std::result::Result<Measurement, String> {
        let job = serde_json::to_string(job).map_err(|e| e.to_string())?;
        let request =
            serde_json::json!({"slot": slot, "job": job, "timeout_s": timeout.as_secs_f64()});
        let line = self.ask(request, timeout)?;
        serde_json::from_str(&line).map_err(|e| format!("a malformed measurement ({e})"))
    }

    /// `program ARGS` run in `cwd` at `place` within `timeout` (a suite matrix's task, a
    /// question to a GPU, a compile task): the last JSON line it printed, or why there is none
    /// (its last error line, a timeout, a worker lost after Ray's retries, the pool gone).
    pub fn run_program(
        &self,
        args: &[String],
        cwd: &Path,
        place: Place,
        timeout: Duration,
    ) -> std::result::Result<String, String> {
        let mut request = serde_json::json!({
            "args": args, "cwd": cwd, "timeout_s": timeout.as_secs_f64(),
        });
        match place {
            Place::Gpu(slot) => request["slot"] = slot.into(),
            Place::Probe(slot) => {
                request["slot"] = slot.into();
                request["probe"] = true.into();
            }
            Place::Cpu => request["cpu"] = true.into(),
        }
        self.ask(request, timeout)
    }

    /// What GPU 0 of the pool is (the hidden `evo-gpu`; with `synthetic`, a made-up one's).
    pub fn gpu_facts(&self, synthetic: bool) -> std::result::Result<GpuFacts, String> {
        let mut args = vec!["evo-gpu".to_string()];
        if synthetic {
            args.push("--synthetic".into());
        }
        let cwd = std::env::current_dir().map_err(|e| e.to_string())?;
        let line = self.run_program(&args, &cwd, Place::Probe(0), Duration::from_secs(120))?;
        serde_json::from_str(&line).map_err(|e| format!("its answer: {e}"))
    }

    /// Sends `request` (its id added) and waits for its answer's line.
    fn ask(
        &self,
        mut request: serde_json::Value,
        timeout: Duration,
    ) -> std::result::Result<String, String> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        request["id"] = id.into();
        {
            let mut stdin = self.stdin.lock().unwrap_or_else(|e| e.into_inner());
            writeln!(stdin, "{request}")
                .and_then(|()| stdin.flush())
                .map_err(|e| format!("the pool stopped listening ({e})"))?;
        }
        let deadline = Instant::now() + timeout + ANSWER_MARGIN;
        let (lock, cond) = &*self.answers;
        let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(answer) = state.0.remove(&id) {
                return match (answer.line, answer.error) {
                    (Some(line), _) => Ok(line),
                    (None, Some(error)) => Err(error),
                    (None, None) => Err("an empty answer".into()),
                };
            }
            if state.1 {
                return Err("the pool exited".into());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "no answer within {:.0} s",
                    (timeout + ANSWER_MARGIN).as_secs_f64()
                ));
            }
            state = cond
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}
