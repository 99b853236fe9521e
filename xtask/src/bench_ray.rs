//! `cargo xtask bench --on ray[=ADDRESS]`: a suite as a matrix on a Ray cluster. One task per
//! problem (each `--shape`, or each shape of the suite), each this program's own `bench` of that
//! problem with the same options on one GPU of one model, which prints its run
//! (`--print-run`) instead of writing it; attn-measure's `matrix` runs the tasks on the Ray
//! pool's GPUs. Each run is written here as bench evidence when it comes back, one file per task,
//! and `<evidence>/matrix/<date>-bench-<model>-<rev>.json` (attn-evidence's `MatrixRun`) records
//! every task's arguments, GPU and outcome after each one; `--resume-matrix FILE` runs again
//! the tasks it does not mark done.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context};
use attn_evidence::{BenchRun, Kinded, MatrixOutcome, MatrixRun, MatrixTask};
use attn_measure::matrix::{run_on_pool, Outcome};
use attn_measure::search::ray::RayPool;

use crate::bench::Args;

/// Runs the matrix; returns the process exit code (failed tasks: [`crate::EXIT_FAILED`]).
pub fn run(args: &Args) -> anyhow::Result<u8> {
    if args.time_budget.is_some() {
        bail!("--time-budget bounds a run on one machine: on Ray each task is bounded by --task-timeout");
    }
    if args.print_run {
        bail!("--print-run is a matrix task's own option: not with --on");
    }
    let address = crate::args::ray_address(args.on.as_deref().unwrap_or("ray"))?;
    let resumed = match &args.resume_matrix {
        Some(file) => {
            let matrix = MatrixRun::read(file).with_context(|| "--resume-matrix".to_string())?;
            if matrix.command != "bench" {
                bail!(
                    "--resume-matrix {}: a matrix of `{}`, not of bench",
                    file.display(),
                    matrix.command
                );
            }
            Some((matrix, file.clone()))
        }
        None => None,
    };
    // Every task's arguments, checked here before the cluster is asked for anything.
    let tasks = match &resumed {
        Some(_) => Vec::new(),
        None => tasks(args)?,
    };
    let program = std::env::current_exe().context("finding this executable")?;
    let cwd = std::env::current_dir().context("the working folder")?;
    let pool = RayPool::start(&address, &program, args.ray_model.as_deref())?;
    for other in &pool.others {
        println!(
            "ray: {} {} GPU(s) not used: their timings would not compare",
            other.gpus, other.model
        );
    }
    let model = pool
        .slots
        .first()
        .map(|s| s.model.clone())
        .unwrap_or_default();
    let slots: Vec<String> = pool.slots.iter().map(|s| s.to_string()).collect();
    let (mut matrix, path) = match resumed {
        Some((matrix, file)) => {
            if matrix.model != model {
                bail!("--resume-matrix: its tasks ran on {} GPUs, this cluster's are {model}: give --ray-model {}", matrix.model, matrix.model);
            }
            (matrix, file)
        }
        None => {
            let (git_rev, git_dirty) = crate::provenance::git_revision();
            let started = attn_evidence::utc_now_rfc3339();
            let label = format!("bench-{model}");
            let path =
                attn_evidence::evidence_path(&args.evidence, "matrix", &started, &label, &git_rev);
            let matrix = MatrixRun {
                schema: attn_evidence::SCHEMA_VERSION,
                kind: MatrixRun::KIND,
                command: "bench".into(),
                cluster: address.clone(),
                model: model.clone(),
                slots: vec![],
                git_rev,
                git_dirty,
                updated: started.clone(),
                started,
                tasks,
            };
            (matrix, path)
        }
    };
    matrix.slots = slots;
    attn_evidence::write_json_atomic(&path, &matrix)?;
    let undone: Vec<(usize, Vec<String>)> =
        matrix.undone().map(|(i, t)| (i, t.args.clone())).collect();
    println!(
        "matrix: {} task(s) of {} on {} {model} GPU(s) at {address}; record: {}",
        undone.len(),
        matrix.tasks.len(),
        pool.slots.len(),
        path.display()
    );
    let state = Mutex::new(matrix);
    let evidence = &args.evidence;
    let done = |outcome: Outcome<'_>| {
        let mut matrix = state.lock().unwrap_or_else(|e| e.into_inner());
        let task = &mut matrix.tasks[outcome.index];
        let written = outcome.line.and_then(|line| {
            write_task_run(evidence, outcome.index, &line).map_err(|e| format!("{e:#}"))
        });
        task.outcome = match written {
            Ok(file) => MatrixOutcome::Done { evidence: file },
            Err(reason) => MatrixOutcome::Failed { reason },
        };
        task.slot = Some(outcome.slot.to_string());
        task.seconds = Some(outcome.elapsed.as_secs_f64());
        let said = match &task.outcome {
            MatrixOutcome::Done { evidence } => format!("done: {evidence}"),
            MatrixOutcome::Failed { reason } => format!("FAILED: {reason}"),
            MatrixOutcome::Pending => "pending".into(),
        };
        println!(
            "  {} on GPU {}: {said} ({:.1} s)",
            task.problem,
            outcome.slot,
            outcome.elapsed.as_secs_f64()
        );
        matrix.updated = attn_evidence::utc_now_rfc3339();
        if let Err(e) = attn_evidence::write_json_atomic(&path, &*matrix) {
            println!("  could not write {}: {e}", path.display());
        }
    };
    let timeout = Duration::from_secs_f64(args.task_timeout);
    run_on_pool(&pool, &undone, &cwd, timeout, &done);
    let matrix = state.into_inner().unwrap_or_else(|e| e.into_inner());
    let failed = matrix.undone().count();
    println!(
        "matrix: {} of {} task(s) done, {failed} not; record: {}",
        matrix.tasks.len() - failed,
        matrix.tasks.len(),
        path.display()
    );
    Ok(if failed == 0 { 0 } else { crate::EXIT_FAILED })
}

/// One pending task per problem the arguments name, each with its `bench` arguments.
fn tasks(args: &Args) -> anyhow::Result<Vec<MatrixTask>> {
    let problems: Vec<String> = match args.problems.decode_problems()? {
        Some(specs) => specs.iter().map(|s| s.to_string()).collect(),
        None => (args.problems.problems("large")?.iter())
            .map(|p| p.to_string())
            .collect(),
    };
    Ok(problems
        .into_iter()
        .map(|problem| MatrixTask {
            args: task_args(args, &problem),
            problem,
            outcome: MatrixOutcome::Pending,
            slot: None,
            seconds: None,
        })
        .collect())
}

/// The `bench` arguments of the task on `problem`: this run's options, its one shape, the run
/// printed.
fn task_args(args: &Args, problem: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![
        "bench".into(),
        "--print-run".into(),
        "--shape".into(),
        problem.into(),
    ];
    let mut push = |flag: &str, value: String| {
        out.push(flag.into());
        out.push(value);
    };
    if !args.implementations.is_empty() {
        push("--impl", args.implementations.join(","));
    }
    push("--config", args.config.clone());
    for t in &args.triton {
        push("--triton", t.clone());
    }
    for p in &args.py {
        push("--py", p.clone());
    }
    for d in &args.defines {
        push("--define", d.clone());
    }
    push("--sdpa-backends", args.sdpa_backends.join(","));
    push("--dtype", args.problems.dtype.to_string());
    push("--samples", args.samples.to_string());
    push("--warmup", args.warmup.to_string());
    push("--seed", args.seed.to_string());
    push("--mode", args.mode.to_string());
    push("--batch-launches", args.batch_launches.to_string());
    if args.synthetic {
        out.push("--synthetic".into());
    }
    out
}

/// Writes the run a task printed (`line`) as bench evidence, `-t<index>` after the usual name so
/// that two tasks of one second on one model keep two files; the file relative to `evidence`.
fn write_task_run(evidence: &Path, index: usize, line: &str) -> anyhow::Result<String> {
    let run: BenchRun = serde_json::from_str(line).context("the task's run")?;
    let p = &run.provenance;
    let usual = attn_evidence::evidence_path(evidence, "bench", &p.date, &p.gpu, &p.git_rev);
    let stem = usual.file_stem().unwrap_or_default().to_string_lossy();
    let path: PathBuf = usual.with_file_name(format!("{stem}-t{index:03}.json"));
    crate::bench::write_bench_files(&path, &run)?;
    let relative = path.strip_prefix(evidence).unwrap_or(&path);
    Ok(relative.display().to_string())
}
