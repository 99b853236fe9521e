//! `cargo xtask bench --on ray[=ADDRESS]` and `gate --on ray[=ADDRESS]`: a suite as a matrix on a
//! Ray cluster. One task per problem (each `--shape`, or each shape of the suite), each this
//! program's own command with the arguments it was given, on that one problem and one GPU of one
//! model, printing its run (`--print-run`) instead of writing it; attn-measure's `matrix` runs the
//! tasks on the Ray pool's GPUs. Each run is written here as the command's evidence when it comes
//! back, one file per task, and `<evidence>/matrix/<date>-<command>-<model>-<rev>.json`
//! (attn-evidence's `MatrixRun`) records every task's arguments, GPU and outcome after each one;
//! `--resume-matrix FILE` runs again the tasks it does not mark done.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context};
use attn_evidence::{BenchRun, GateRun, Kinded, MatrixOutcome, MatrixRun, MatrixTask};
use attn_measure::matrix::{run_on_pool, Outcome};
use attn_measure::search::ray::RayPool;

use crate::args::ProblemArgs;

/// The options of a command that runs as a matrix on Ray (bench's and gate's).
#[derive(Debug, Clone, clap::Args)]
pub struct MatrixArgs {
    /// Run as a matrix on a Ray cluster, `ray[=ADDRESS]` (default `auto`: the local one): one task
    /// per problem, each this program's same command on that problem on one GPU of one model (the
    /// bundle and the checkout at the same paths on every node); each task's run is written here
    /// as it comes back, and `<evidence>/matrix/` records every task.
    #[arg(long, value_name = "ray[=ADDRESS]")]
    pub on: Option<String>,
    /// With --on ray: the GPU model to run on (default the model with the most GPUs).
    #[arg(long, requires = "on")]
    pub ray_model: Option<String>,
    /// With --on ray: seconds a task may take before it is recorded as failed.
    #[arg(long, requires = "on", default_value_t = 1800.0, value_name = "SECONDS", value_parser = crate::args::seconds)]
    pub task_timeout: f64,
    /// With --on ray: run again the tasks of this matrix file (`<evidence>/matrix/*.json`) that
    /// are not done, with the arguments it records; the file is updated.
    #[arg(long, requires = "on", conflicts_with_all = ["shapes", "suite"])]
    pub resume_matrix: Option<PathBuf>,
    /// Print the run as one JSON line instead of writing evidence (a matrix task's answer).
    #[arg(long, hide = true)]
    pub print_run: bool,
}

/// The options a task does not take from its driver's command line: the matrix's own, the
/// problems (each task gets one) and what the driver writes (evidence, markdown, the budget).
const DRIVER_ONLY: [&str; 9] = [
    "--on",
    "--ray-model",
    "--task-timeout",
    "--resume-matrix",
    "--shape",
    "--suite",
    "--evidence",
    "--markdown",
    "--time-budget",
];

/// Runs `command`'s matrix (`bench` or `gate`) of `problems` (its default suite `default_suite`)
/// as `matrix` asks; returns the process exit code: [`crate::EXIT_FAILED`] when a task failed (or,
/// for gate, a run did not pass).
pub fn run(
    command: &str,
    matrix_args: &MatrixArgs,
    problems: &ProblemArgs,
    default_suite: &str,
    evidence: &Path,
) -> anyhow::Result<u8> {
    if matrix_args.print_run {
        bail!("--print-run is a matrix task's own option: not with --on");
    }
    let address = crate::args::ray_address(matrix_args.on.as_deref().unwrap_or("ray"))?;
    let resumed = match &matrix_args.resume_matrix {
        Some(file) => {
            let matrix = MatrixRun::read(file).context("--resume-matrix")?;
            if matrix.command != command {
                bail!(
                    "--resume-matrix {}: a matrix of `{}`, not of {command}",
                    file.display(),
                    matrix.command
                );
            }
            Some((matrix, file.clone()))
        }
        None => None,
    };
    // Every task's problem, checked here before the cluster is asked for anything.
    let tasks = match &resumed {
        Some(_) => Vec::new(),
        None => {
            let raw: Vec<String> = std::env::args().skip(1).collect();
            (problem_texts(problems, default_suite)?.into_iter())
                .map(|problem| MatrixTask {
                    args: task_args(&raw, &problem),
                    problem,
                    outcome: MatrixOutcome::Pending,
                    slot: None,
                    seconds: None,
                })
                .collect()
        }
    };
    let program = std::env::current_exe().context("finding this executable")?;
    let cwd = std::env::current_dir().context("the working folder")?;
    let model_wanted = matrix_args.ray_model.as_deref();
    let pool = RayPool::start(&address, &program, model_wanted)?;
    for other in &pool.others {
        let (gpus, model) = (other.gpus, &other.model);
        println!("ray: {gpus} {model} GPU(s) not used: their timings would not compare");
    }
    let model = pool
        .slots
        .first()
        .map(|s| s.model.clone())
        .unwrap_or_default();
    let (mut matrix, path) = match resumed {
        Some((matrix, file)) if matrix.model != model => bail!(
            "--resume-matrix {}: its tasks ran on {} GPUs, this cluster's are {model}: give --ray-model {}",
            file.display(),
            matrix.model,
            matrix.model
        ),
        Some(resumed) => resumed,
        None => {
            let (git_rev, git_dirty) = crate::provenance::git_revision();
            let started = attn_evidence::utc_now_rfc3339();
            let label = format!("{command}-{model}");
            let path = attn_evidence::evidence_path(evidence, "matrix", &started, &label, &git_rev);
            let matrix = MatrixRun {
                schema: attn_evidence::SCHEMA_VERSION,
                kind: MatrixRun::KIND,
                command: command.into(),
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
    matrix.slots = pool.slots.iter().map(|s| s.to_string()).collect();
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
    let state = Mutex::new((matrix, 0usize));
    let done = |outcome: Outcome<'_>| {
        let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
        let (matrix, not_passed) = &mut *state;
        let task = &mut matrix.tasks[outcome.index];
        let written = (outcome.line).and_then(|line| {
            write_task_run(command, evidence, outcome.index, &line).map_err(|e| format!("{e:#}"))
        });
        let said = match written {
            Ok((file, passed)) => {
                *not_passed += usize::from(!passed);
                let verdict = if passed { "" } else { " (did not pass)" };
                let said = format!("done: {file}{verdict}");
                task.outcome = MatrixOutcome::Done { evidence: file };
                said
            }
            Err(reason) => {
                let said = format!("FAILED: {reason}");
                task.outcome = MatrixOutcome::Failed { reason };
                said
            }
        };
        let seconds = outcome.elapsed.as_secs_f64();
        task.slot = Some(outcome.slot.to_string());
        task.seconds = Some(seconds);
        println!(
            "  {} on GPU {}: {said} ({seconds:.1} s)",
            task.problem, outcome.slot
        );
        matrix.updated = attn_evidence::utc_now_rfc3339();
        if let Err(e) = attn_evidence::write_json_atomic(&path, &*matrix) {
            println!("  could not write {}: {e}", path.display());
        }
    };
    let timeout = Duration::from_secs_f64(matrix_args.task_timeout);
    run_on_pool(&pool, &undone, &cwd, timeout, &done);
    let (matrix, not_passed) = state.into_inner().unwrap_or_else(|e| e.into_inner());
    let failed = matrix.undone().count();
    println!(
        "matrix: {} of {} task(s) done ({not_passed} of them not passing), {failed} not; record: {}",
        matrix.tasks.len() - failed,
        matrix.tasks.len(),
        path.display()
    );
    Ok(if failed + not_passed == 0 {
        0
    } else {
        crate::EXIT_FAILED
    })
}

/// The problems as text, one task each: the decode batches, else the prefill problems (the
/// suite `default_suite` when neither --shape nor --suite is given).
fn problem_texts(problems: &ProblemArgs, default_suite: &str) -> anyhow::Result<Vec<String>> {
    Ok(match problems.decode_problems()? {
        Some(specs) => specs.iter().map(|s| s.to_string()).collect(),
        None => (problems.problems(default_suite)?.iter())
            .map(|p| p.to_string())
            .collect(),
    })
}

/// A task's arguments: the driver's own (`raw`, the command first) without [`DRIVER_ONLY`]'s,
/// then its one problem, the run printed.
fn task_args(raw: &[String], problem: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = raw.iter();
    while let Some(arg) = args.next() {
        let flag = arg.split_once('=').map_or(arg.as_str(), |(f, _)| f);
        if DRIVER_ONLY.contains(&flag) {
            if !arg.contains('=') {
                args.next();
            }
            continue;
        }
        out.push(arg.clone());
    }
    out.extend(["--shape".into(), problem.into(), "--print-run".into()]);
    out
}

/// Writes the run a task printed (`line`) as `command`'s evidence, `-t<index>` after the usual
/// name so that two tasks of one second on one model keep two files: the file relative to
/// `evidence`, and whether the run passed (a bench run always does).
fn write_task_run(
    command: &str,
    evidence: &Path,
    index: usize,
    line: &str,
) -> anyhow::Result<(String, bool)> {
    let indexed = |usual: PathBuf| {
        let stem = usual.file_stem().unwrap_or_default().to_string_lossy();
        usual.with_file_name(format!("{stem}-t{index:03}.json"))
    };
    let (path, passed) = if command == "gate" {
        let run: GateRun = serde_json::from_str(line).context("the task's gate run")?;
        let p = &run.provenance;
        let path = indexed(attn_evidence::evidence_path(
            evidence, "gate", &p.date, &p.gpu, &p.git_rev,
        ));
        attn_evidence::write_json_atomic(&path, &run)?;
        println!("evidence: {}", path.display());
        (path, run.passed)
    } else {
        let run: BenchRun = serde_json::from_str(line).context("the task's bench run")?;
        let p = &run.provenance;
        let path = indexed(attn_evidence::evidence_path(
            evidence, "bench", &p.date, &p.gpu, &p.git_rev,
        ));
        crate::bench::write_bench_files(&path, &run)?;
        (path, true)
    };
    let relative = path.strip_prefix(evidence).unwrap_or(&path);
    Ok((relative.display().to_string(), passed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tasks_gate_run_is_written_as_gate_evidence_with_its_verdict() {
        // A real gate run of the repository's evidence, as a task would print it.
        let stored = Path::new(env!("CARGO_MANIFEST_DIR")).join("../evidence/gate");
        let file = attn_evidence::json_files(&stored).unwrap().pop().unwrap();
        let attn_evidence::Evidence::Gate(run) = attn_evidence::read(&file).unwrap() else {
            panic!("{}: not a gate run", file.display());
        };
        let dir = tempfile::tempdir().unwrap();
        let line = serde_json::to_string(&run).unwrap();
        let (written, passed) = write_task_run("gate", dir.path(), 7, &line).unwrap();
        assert!(
            written.starts_with("gate/") && written.ends_with("-t007.json"),
            "{written}"
        );
        assert_eq!(passed, run.passed);
        let attn_evidence::Evidence::Gate(back) =
            attn_evidence::read(&dir.path().join(&written)).unwrap()
        else {
            panic!("{written}: not a gate run");
        };
        assert_eq!(serde_json::to_string(&back).unwrap(), line);
        // A line that is not the command's run is the task's failure, in one line.
        let err = write_task_run("bench", dir.path(), 8, &line).unwrap_err();
        assert!(
            format!("{err:#}").contains("the task's bench run"),
            "{err:#}"
        );
    }

    #[test]
    fn a_task_keeps_the_drivers_options_but_its_own_problem_and_none_of_the_matrixs() {
        let raw: Vec<String> = [
            "gate",
            "--impl",
            "mma",
            "--on=ray=10.0.0.1:6379",
            "--ray-model",
            "H100",
            "--shape",
            "2,8,1024,64",
            "--suite=seed",
            "--samples",
            "30",
            "--evidence",
            "ev",
            "--causal",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            task_args(&raw, "1,8,512,64 causal"),
            [
                "gate",
                "--impl",
                "mma",
                "--samples",
                "30",
                "--causal",
                "--shape",
                "1,8,512,64 causal",
                "--print-run",
            ]
        );
    }
}
