//! `cargo xtask`: the one runner of the attn workspace.
//!
//! Every subcommand lives in its own module with a `clap::Args` struct and a `run` function that
//! returns the process exit code. Errors reach `main` as `anyhow::Error` and are printed as one line
//! (with their causes joined by ": "), never as a panic or backtrace.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod args;
mod bench;
mod bench_backward;
mod bench_decode;
mod budget;
mod bundle;
mod evo;
mod gate;
mod gate_backward;
mod gate_decode;
mod gate_py;
mod kernels;
mod matrix;
mod micro;
mod ncu;
mod progress;
mod provenance;
mod report;
mod run;
mod sanitize;
mod stats;
mod test;

/// Exit code for "ran, and the answer is no" (a failed gate, a stale report).
pub const EXIT_FAILED: u8 = 1;
/// Exit code for "could not run" (bad arguments, no GPU, compile error).
pub const EXIT_CANNOT_RUN: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    version = env!("ATTN_BUILD_VERSION"),
    about = "attn: write, prove and measure attention kernels"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The hard gate: is the candidate correct and statistically faster than PyTorch SDPA?
    Gate(gate::Args),
    /// Time implementations and SDPA backends over a suite; writes evidence/bench/.
    Bench(bench::Args),
    /// Compare two files of timings: summaries, bootstrap CIs, Mann-Whitney, verdict.
    Stats(stats::Args),
    /// Summarise Nsight Compute CSV output, or profile one of our kernels.
    Ncu(ncu::Args),
    /// compute-sanitizer on a candidate at small shapes (without --shape: the suite's with batch
    /// and heads ≤ 2, sequences ≤ 197, each also causal); exit 0 clean, 1 findings, 2 could not run.
    Sanitize(sanitize::Args),
    /// Render evidence/ into reports/ (HTML, markdown, SVG charts).
    Report(report::Args),
    /// List implementations, knobs and defaults; --ptxas reports registers and spills.
    Kernels(kernels::Args),
    /// Run one implementation on your own .npy tensors (or `--impl reference`).
    Run(run::Args),
    /// Run the whole test suite (installs NVRTC/ptxas wheels when no CUDA toolkit is found).
    Test(test::Args),
    /// Build release test executables and xtask into target/bundle/ for a GPU machine.
    Bundle(bundle::Args),
    /// Evolutionary search over a kernel's knobs; writes evidence/evo/<run>/.
    Evo(evo::Args),
    /// clock64() micro-benchmark of tile configs; ranks them into evidence/micro/<target>/
    /// (--compare-evo RUN: how well the ranking predicted a search).
    Micro(micro::Args),
    /// One search candidate in an isolated process (used by `evo`): an
    /// `attn_measure::search::WorkerJob` (JSON).
    #[command(hide = true)]
    EvoWorker { job: String },
    /// Print what GPU 0 is (or a synthetic one), `attn_measure::search::ray::GpuFacts` as one
    /// JSON line: what a search on Ray asks of one of its GPUs.
    #[command(hide = true)]
    EvoGpu {
        #[arg(long)]
        synthetic: bool,
    },
    /// Compile one candidate of a search (an `attn_measure::search::precompile::CompileJob`,
    /// JSON) and print its cache entry: a search on Ray's compile task on a CPU worker.
    #[command(hide = true)]
    EvoCompile { job: String },
    /// Launch an `attn_measure::profile::Target` (JSON), exit: what ncu and compute-sanitizer run.
    #[command(hide = true)]
    Target { target: String },
}

impl Command {
    /// Whether the command may compile kernels with NVRTC (and so needs the toolkit loaded).
    fn compiles_kernels(&self) -> bool {
        match self {
            Command::Kernels(args) => args.ptxas,
            Command::Gate(args) => args.replay.is_none(),
            Command::Micro(args) => args.compare_evo.is_none(),
            Command::Bench(_)
            | Command::Ncu(_)
            | Command::Run(_)
            | Command::Evo(_)
            | Command::EvoWorker { .. }
            | Command::EvoGpu { .. }
            | Command::EvoCompile { .. }
            | Command::Sanitize(_)
            | Command::Target { .. } => true,
            Command::Stats(_) | Command::Report(_) | Command::Test(_) | Command::Bundle(_) => false,
        }
    }
}

fn main() -> ExitCode {
    quiet_on_closed_pipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return parse_error(&err),
    };
    if cli.command.compiles_kernels() {
        // Before any thread: it may set an environment variable.
        attn_kernels::toolkit::preload(&workspace_root());
    }
    let result = match cli.command {
        Command::Gate(args) => gate::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Ncu(args) => ncu::run(args),
        Command::Report(args) => report::run(args),
        Command::Kernels(args) => kernels::run(args),
        Command::Run(args) => run::run(args),
        Command::Test(args) => test::run(args),
        Command::Bundle(args) => bundle::run(args),
        Command::Evo(args) => evo::run(args),
        Command::Micro(args) => micro::run(args),
        Command::EvoWorker { job } => attn_measure::search::worker::serve(&job)
            .map(|()| 0)
            .map_err(Into::into),
        Command::EvoGpu { synthetic } => evo::print_gpu(synthetic),
        Command::EvoCompile { job } => attn_measure::search::precompile::serve_compile(&job)
            .map(|()| 0)
            .map_err(Into::into),
        Command::Sanitize(args) => sanitize::run(args),
        Command::Target { target } => attn_measure::profile::Target::from_json(&target)
            .and_then(|t| t.launch())
            .map(|()| 0)
            .map_err(Into::into),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("error: {}", one_line(&err));
            ExitCode::from(EXIT_CANNOT_RUN)
        }
    }
}

/// Prints clap's answer to arguments it refused, or to `--help` and `--version`. A value that a
/// value parser refused (`--timeout nan`) is one line, as the commands' own errors are; clap's
/// usage errors keep its usage text.
fn parse_error(err: &clap::Error) -> ExitCode {
    if err.kind() != clap::error::ErrorKind::ValueValidation {
        err.exit();
    }
    let text = err.render().to_string();
    eprintln!("{}", text.lines().next().unwrap_or_default());
    ExitCode::from(EXIT_CANNOT_RUN)
}

/// A reader that closes the pipe early (`cargo xtask kernels --configs hopper | head`) ends the
/// process quietly, as it does any Unix tool, rather than a panic in `println!` (Rust ignores
/// SIGPIPE, so a write to the closed pipe fails and `println!` panics with a backtrace).
fn quiet_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: called first in main, before any thread exists; SIG_DFL is a valid disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// An error and its causes on one line: "reading a.txt: line 3: not a number". A cause whose
/// text its parent already shows (errors that print their source) is not repeated.
pub fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(text.as_str()) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// The workspace root: the folder above xtask's own manifest when built by cargo here, else the
/// current directory (a bundle copied to a GPU machine runs from the checkout's root).
pub fn workspace_root() -> std::path::PathBuf {
    let built_in = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if built_in.join("Cargo.toml").is_file() {
        built_in.canonicalize().unwrap_or(built_in)
    } else {
        std::env::current_dir().unwrap_or_else(|_| ".".into())
    }
}
