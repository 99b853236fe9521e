//! `cargo xtask sanitize`: compute-sanitizer on a candidate at small shapes, running this binary
//! in its hidden target mode (as `ncu` does). Exit 0 clean, 1 findings, 2 could not run.

use std::path::{Path, PathBuf};

use attn_kernels::{Candidate, Gpu};
use attn_measure::sanitize::{Tool, GATE_TOOLS};
use attn_measure::{profile::Target, sanitize, Problem};

/// Arguments of `cargo xtask sanitize`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub candidate: crate::args::CandidateArgs,
    #[command(flatten)]
    pub problems: crate::args::ProblemArgs,
    /// memcheck, racecheck, synccheck or initcheck.
    #[arg(long, default_value = "memcheck")]
    pub tool: Tool,
    /// compute-sanitizer (a bare name: on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin).
    #[arg(long, default_value = sanitize::SANITIZER)]
    pub compute_sanitizer: PathBuf,
    /// Write no evidence file (else one in evidence/sanitize/).
    #[arg(long)]
    pub no_evidence: bool,
}

/// Runs the subcommand; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let shapes: Vec<&str> = args.problems.shapes.iter().map(String::as_str).collect();
    crate::args::refuse_decode("sanitize", &shapes, args.problems.suite.as_deref())?;
    let mut problems = args.problems.problems("seed")?;
    if args.problems.shapes.is_empty() {
        problems = sanitize::small_problems(&problems)?;
    }
    // The GPU opened for the device's best implementation is closed again: the sanitizer's
    // target process opens its own.
    let (candidate, _) = args.candidate.candidate_for(&problems)?;
    // The request is whole: now the tool.
    let sanitizer = sanitize::find(&args.compute_sanitizer)?;
    let evidence = (!args.no_evidence).then_some(Path::new("evidence"));
    let clean = check(&sanitizer, &candidate, &problems, &[args.tool], evidence)?;
    Ok(if clean { 0 } else { crate::EXIT_FAILED })
}

/// `tools` on `candidate` at `problems` (`gate --sanitize` too): a line per finding and a verdict
/// per tool, evidence under `evidence`; whether every tool was clean.
pub fn check(
    sanitizer: &Path,
    candidate: &Candidate,
    problems: &[Problem],
    tools: &[Tool],
    evidence: Option<&Path>,
) -> anyhow::Result<bool> {
    let shapes: Vec<_> = problems.iter().map(|p| p.spec.clone()).collect();
    let target = Target::new(candidate, shapes, 0)?;
    let implementation = attn_measure::baseline::candidate_implementation(candidate, None);
    run_target(sanitizer, &target, implementation, tools, evidence)
}

/// The gate's sanitizer pass before any timing (`--sanitize`): [`GATE_TOOLS`] on `target` (the
/// candidate, forward or backward, at small shapes), its FAILED line printed when a tool finds
/// something; whether the gate goes on.
pub fn before_timing(
    sanitizer: &Path,
    target: &Target,
    implementation: attn_evidence::Implementation,
    evidence: Option<&Path>,
) -> anyhow::Result<bool> {
    let clean = run_target(sanitizer, target, implementation, &GATE_TOOLS, evidence)?;
    if !clean {
        println!("\n**attn gate: FAILED** (compute-sanitizer's findings above; nothing timed)");
    }
    Ok(clean)
}

/// `tools` on `target`, this binary in its hidden target mode; its reports printed and written as
/// `implementation`'s evidence.
fn run_target(
    sanitizer: &Path,
    target: &Target,
    implementation: attn_evidence::Implementation,
    tools: &[Tool],
    evidence: Option<&Path>,
) -> anyhow::Result<bool> {
    let shown: Vec<String> = target.shapes.iter().map(ToString::to_string).collect();
    let (label, shown) = (implementation.label(), shown.join(", "));
    let provenance = crate::provenance::collect(&Gpu::open(0)?, None, None, None);
    println!("compute-sanitizer: {label} on {shown}");
    let (program, args) = (
        std::env::current_exe()?,
        ["target".into(), target.to_json()],
    );
    let reports = sanitize::run_tools(sanitizer, tools, &program, &args, |r| print!("{r}"))?;
    if let Some(root) = evidence {
        for report in &reports {
            let run = report.evidence(provenance.clone(), implementation.clone(), &target.shapes);
            println!("evidence: {}", run.write_in(root)?.display());
        }
    }
    Ok(reports.iter().all(sanitize::Report::clean))
}
