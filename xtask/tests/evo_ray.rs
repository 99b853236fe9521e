//! CPU: `cargo xtask evo --on ray` against a real local Ray cluster (`ray start --head` with two
//! logical GPUs of a made-up model, synthetic workers): the search on Ray ends where the plain
//! search does, a worker lost mid-job is restarted and its job retried, a worker that keeps dying
//! is recorded as invalid candidates (never dropped), a search stopped and resumed on Ray ends
//! where an uninterrupted one does, and a cluster without the asked model is one line; and
//! `bench --on ray` (synthetic runs): a suite matrix whose workers are all lost records every task
//! as failed, and resumed it runs exactly those again, each run written as bench evidence; and a
//! search of a registered implementation has every candidate compiled by compile tasks on the
//! cluster's CPUs.
//! Skipped when Ray does not import (the test command installs it, and sets ATTN_RAY_TEST=required
//! so that it fails instead).

mod common;
use common::{output_text, xtask};

use std::path::{Path, PathBuf};
use std::process::Command;

use attn_evidence::{read_evo_log, EvoBest, Kinded, MatrixOutcome, MatrixRun};

/// The Python path that imports Ray: `ATTN_RAY_PYTHONPATH` where set, else python3's own.
fn ray_path() -> Option<Option<PathBuf>> {
    let extra = std::env::var_os("ATTN_RAY_PYTHONPATH").map(PathBuf::from);
    let mut python = Command::new("python3");
    python.args(["-c", "import ray"]);
    if let Some(p) = &extra {
        python.env("PYTHONPATH", p);
    }
    let imports = python.output().is_ok_and(|o| o.status.success());
    if !imports {
        let required = std::env::var("ATTN_RAY_TEST").as_deref() == Ok("required");
        assert!(!required, "ATTN_RAY_TEST=required but Ray does not import");
        eprintln!("skipped: Ray does not import (pip install ray, or ATTN_RAY_PYTHONPATH)");
        return None;
    }
    Some(extra)
}

/// A local Ray cluster in its own folder and port, stopped when dropped.
struct Cluster {
    address: String,
    python_path: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    fn start(python_path: Option<PathBuf>) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let out = ray(&python_path)
            .args(["start", "--head", "--port", &port.to_string()])
            .args(["--num-cpus", "4", "--num-gpus", "2"])
            .args(["--resources", r#"{"accelerator_type:synthetic": 1}"#])
            .args(["--include-dashboard", "false", "--disable-usage-stats"])
            .arg(format!("--temp-dir={}", dir.path().display()))
            .output()
            .expect("ray start runs");
        assert!(out.status.success(), "ray start: {}", output_text(&out));
        Cluster {
            address: format!("127.0.0.1:{port}"),
            python_path,
            _dir: dir,
        }
    }

    /// `xtask evo` on this cluster with `extra` arguments and `env`.
    fn evo(&self, extra: &[&str], evidence: &Path, env: &[(&str, &str)]) -> std::process::Output {
        let mut args = search_args(evidence);
        args.extend(extra.iter().map(|s| s.to_string()));
        self.xtask(&args, env)
    }

    /// xtask with `args`, then `--on` this cluster, and `env`.
    fn xtask(&self, args: &[String], env: &[(&str, &str)]) -> std::process::Output {
        let mut cmd = Command::new(xtask());
        cmd.args(args)
            .args(["--on", &format!("ray={}", self.address)]);
        if let Some(p) = &self.python_path {
            cmd.env("ATTN_RAY_PYTHONPATH", p);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("xtask runs")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = ray(&self.python_path).args(["stop", "--force"]).output();
    }
}

/// Ray's command line through python3 (its `ray` script may not be on PATH).
fn ray(python_path: &Option<PathBuf>) -> Command {
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()",
    ]);
    if let Some(p) = python_path {
        cmd.env("PYTHONPATH", p);
    }
    cmd
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A synthetic search of 16 configs, 12 candidates, seed 11.
fn search_args(evidence: &Path) -> Vec<String> {
    [
        "evo",
        "--synthetic",
        "--baseline",
        "synthetic",
        "--knob",
        "A=1,2,3,4",
        "--knob",
        "B=1,2,4,8",
        "--timeout",
        "20",
        "--population",
        "4",
        "--generations",
        "3",
        "--seed",
        "11",
        "--evidence",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([evidence.display().to_string()])
    .collect()
}

fn best(evidence: &Path, run: &str) -> EvoBest {
    let path = evidence.join("evo").join(run).join("best.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// `bench --on ray` of three synthetic shapes: every worker lost, then resumed.
fn check_the_suite_matrix(cluster: &Cluster, evidence: &Path) {
    let shapes = ["1,8,512,64", "2,8,1024,64 causal", "2,32/8,256,128"];
    let mut args: Vec<String> = ["bench", "--synthetic", "--impl", "a,b", "--samples", "5"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for shape in shapes {
        args.extend(["--shape".to_string(), shape.to_string()]);
    }
    args.extend(["--evidence".to_string(), evidence.display().to_string()]);
    let lost = cluster.xtask(&args, &[("ATTN_RAY_LOSE", "always")]);
    let text = output_text(&lost);
    assert!(
        !lost.status.success(),
        "failed tasks must fail the run: {text}"
    );
    let files = attn_evidence::json_files(&evidence.join("matrix")).unwrap();
    assert_eq!(files.len(), 1, "{text}");
    let read = || -> MatrixRun { MatrixRun::read(&files[0]).unwrap() };
    let matrix = read();
    assert_eq!(
        (matrix.command.as_str(), matrix.model.as_str()),
        ("bench", "synthetic")
    );
    let problems: Vec<&str> = matrix.tasks.iter().map(|t| t.problem.as_str()).collect();
    assert_eq!(problems, shapes);
    for task in &matrix.tasks {
        let MatrixOutcome::Failed { reason } = &task.outcome else {
            panic!(
                "not recorded as failed: {task:?}
{text}"
            );
        };
        assert!(reason.contains("Ray worker was lost"), "{reason}");
    }
    let resume = [
        "bench",
        "--resume-matrix",
        files[0].to_str().unwrap(),
        "--evidence",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([evidence.display().to_string()])
    .collect::<Vec<_>>();
    let resumed = cluster.xtask(&resume, &[]);
    let text = output_text(&resumed);
    assert!(resumed.status.success(), "{text}");
    let matrix = read();
    for task in &matrix.tasks {
        let MatrixOutcome::Done { evidence: file } = &task.outcome else {
            panic!(
                "not done: {task:?}
{text}"
            );
        };
        let run = attn_evidence::read(&evidence.join(file)).unwrap();
        let attn_evidence::Evidence::Bench(run) = run else {
            panic!("{file}: not bench")
        };
        let names: Vec<String> = run
            .entries
            .iter()
            .map(|e| e.implementation.name.clone())
            .collect();
        assert_eq!(names, ["a", "b"], "{file}");
        assert_eq!(run.entries[0].shape.to_string(), task.problem, "{file}");
        assert!(
            task.slot
                .as_deref()
                .is_some_and(|s| s.contains("synthetic")),
            "{task:?}"
        );
    }
}

#[test]
fn a_local_ray_cluster_runs_the_search_and_a_suite_matrix() {
    let Some(python_path) = ray_path() else {
        return;
    };
    let cluster = Cluster::start(python_path);
    let dir = tempfile::tempdir().unwrap();
    let evidence = dir.path();

    // The plain search, on this machine's synthetic worker.
    let plain = Command::new(xtask())
        .args(search_args(evidence))
        .args(["--run", "plain", "--budget", "12"])
        .output()
        .unwrap();
    assert!(plain.status.success(), "{}", output_text(&plain));

    // On Ray, with one worker lost mid-job: restarted, its job retried, nothing lost.
    let marker = dir.path().join("lost-once");
    let lose = format!("once:{}", marker.display());
    let on_ray = cluster.evo(
        &["--run", "ray", "--budget", "12"],
        evidence,
        &[("ATTN_RAY_LOSE", &lose)],
    );
    let text = output_text(&on_ray);
    assert!(on_ray.status.success(), "{text}");
    assert!(
        text.contains("ray: GPU 0 (synthetic") && text.contains("ray: GPU 1 (synthetic"),
        "{text}"
    );
    assert!(marker.exists(), "the planted loss never happened: {text}");
    let rows = read_evo_log(&evidence.join("evo/ray/log.csv")).unwrap();
    assert_eq!(rows.len(), 12, "{text}");
    assert!(
        rows.iter().all(|r| r.status.is_ok()),
        "a retried job lost: {rows:?}"
    );
    let (p, r) = (best(evidence, "plain"), best(evidence, "ray"));
    assert_eq!(p.config, r.config, "{text}");
    assert_eq!(p.devices.len(), 1);
    // Where the search on Ray measured: one of its GPUs' provenance.
    let gpu = r.provenance.as_ref().map(|p| p.gpu.as_str());
    assert_eq!(gpu, Some("synthetic"), "{text}");
    assert_eq!(
        r.devices.len(),
        2,
        "both Ray GPUs measured: {:?}",
        r.devices
    );

    // Stopped after 6 candidates and resumed on Ray: where the uninterrupted search ends.
    let first = cluster.evo(&["--run", "resumed", "--budget", "6"], evidence, &[]);
    assert!(first.status.success(), "{}", output_text(&first));
    let run_dir = evidence.join("evo/resumed");
    let resume = ["--resume", run_dir.to_str().unwrap(), "--budget", "12"];
    let second = cluster.evo(&resume, evidence, &[]);
    assert!(second.status.success(), "{}", output_text(&second));
    let resumed = read_evo_log(&run_dir.join("log.csv")).unwrap();
    assert_eq!(resumed.len(), 12);
    assert_eq!(best(evidence, "resumed").config, p.config);

    // A worker that dies on every candidate: each recorded invalid with why, none dropped.
    let always = cluster.evo(
        &["--run", "lost", "--budget", "4"],
        evidence,
        &[("ATTN_RAY_LOSE", "always")],
    );
    let text = output_text(&always);
    let rows =
        read_evo_log(&evidence.join("evo/lost/log.csv")).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(rows.len(), 4, "{text}");
    for row in &rows {
        let why = row.status.to_string();
        assert!(why.contains("Ray worker was lost"), "{why}\n{text}");
    }

    // A model the cluster lacks: one line, before any search.
    let missing = cluster.evo(&["--run", "h100", "--ray-model", "H100"], evidence, &[]);
    let text = output_text(&missing);
    assert!(!missing.status.success());
    assert!(
        text.contains("has no H100 GPU") && text.contains("synthetic"),
        "{text}"
    );

    // A search of a registered implementation: each generation compiled by compile tasks on
    // the cluster's CPUs (NVRTC, no GPU), the kernels shipped to the GPU workers.
    let args: Vec<String> = [
        "evo",
        "--synthetic",
        "--baseline",
        "synthetic",
        "--impl",
        "mma",
        "--knob",
        "BLOCK_M=64,128",
        "--knob",
        "STAGES=1,2",
        "--population",
        "2",
        "--generations",
        "2",
        "--budget",
        "4",
        "--seed",
        "3",
        "--timeout",
        "60",
        "--run",
        "compiled",
        "--evidence",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([evidence.display().to_string()])
    .collect();
    let compiled = cluster.xtask(&args, &[]);
    let text = output_text(&compiled);
    assert!(compiled.status.success(), "{text}");
    let lines: Vec<&str> = (text.lines())
        .filter(|l| l.contains("compiled on the cluster's CPU workers"))
        .collect();
    assert!(!lines.is_empty(), "{text}");
    for line in lines {
        let (done, of) = line
            .trim_start_matches("ray: ")
            .split_once(" of ")
            .unwrap_or_else(|| panic!("{line}"));
        let of = of.split_whitespace().next().unwrap();
        assert_eq!(done, of, "every candidate compiled: {line}\n{text}");
    }

    check_the_suite_matrix(&cluster, evidence);
}
