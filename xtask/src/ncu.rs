//! `cargo xtask ncu`: Nsight Compute on our kernels, or on a CSV captured elsewhere.
//!
//! - `--from-csv FILE`: summarise either ncu page (`details` or `raw`), no GPU needed: each kernel's
//!   launches and metrics in base units; or a source page (`--page source --print-source sass`
//!   with the WarpStateStats and SourceCounters sections): where the warps' samples fall by how
//!   often the code runs (per tile, per item, per block) and the hottest instructions.
//! - `--impl NAME --shape B,H,S,D --source [--save-csv FILE]`: the source page of one of our
//!   kernels, summarised as `--from-csv` does (no evidence file: a page is a listing, not metrics).
//! - `--impl NAME --shape B,H,S,D`: profile one of our kernels. ncu runs this same binary in its
//!   hidden target mode (`target`) that launches only the candidate; ncu is filtered to its
//!   entry point, skips the first (warm-up) launch, leaves the clocks alone and flushes caches. The
//!   summary, the explanation against the H100's measured ceilings and the composite fitness are
//!   printed and stored in `evidence/ncu/`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use attn_kernels::Candidate;
use attn_ncu::metrics::Purpose;

/// Arguments of `cargo xtask ncu`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("shape", |a| a.required(false).default_value("2,16,4096,128")))]
pub struct Args {
    /// An `ncu --csv` capture (`--page details`, `--page raw` or `--page source --print-source
    /// sass`); messy output is fine.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["implementation", "src"])]
    pub from_csv: Option<PathBuf>,
    /// Keep only kernels whose name contains PATTERN (or matches it, as `regex:PATTERN`).
    #[arg(long, value_name = "PATTERN")]
    pub kernel: Option<String>,
    /// Print JSON (one object per kernel, full names, medians and ranges) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Profile this registered implementation (see `cargo xtask kernels`) or kernel file.
    #[command(flatten)]
    pub candidate: crate::args::CandidateArgs,
    /// The problem to profile.
    #[command(flatten)]
    pub problem: crate::args::ShapeArgs,
    /// Profiled launches (after one unprofiled warm-up launch).
    #[arg(long, default_value_t = 3)]
    pub launches: u32,
    /// Metric set: overview, tensor, memory, occupancy, bank-conflicts, spills, all (those six), or
    /// stalls (where warps wait: every stall reason per issued instruction).
    #[arg(long, default_value = "all")]
    pub purpose: attn_ncu::metrics::Purpose,
    /// Speedup against the baseline (from a gate run), an input of the fitness score.
    #[arg(long, default_value_t = 1.0, value_parser = crate::args::positive)]
    pub speedup: f64,
    /// Barriers per K/V tile in the kernel's main loop, an input of the fitness score.
    #[arg(long, default_value_t = 1.0, value_parser = crate::args::non_negative)]
    pub syncs_per_tile: f64,
    /// The ncu executable.
    #[arg(long, default_value = "ncu")]
    pub ncu: PathBuf,
    /// Evidence folder (the result goes to <DIR>/ncu/).
    #[arg(long, default_value = "evidence")]
    pub evidence: PathBuf,
    /// Write no evidence file.
    #[arg(long)]
    pub no_evidence: bool,
    /// With --impl: ncu's source page instead of metrics (one launch after a warm-up): the warps'
    /// samples by how often the code runs, and the hottest SASS instructions.
    #[arg(long)]
    pub source: bool,
    /// With --source: also write the page as ncu printed it (`--from-csv` reads it back).
    #[arg(long, value_name = "FILE", requires = "source")]
    pub save_csv: Option<PathBuf>,
}

/// Runs the subcommand; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    if args.candidate.implementation.is_some() || args.candidate.src.is_some() {
        return profile_impl(&args);
    }
    let Some(path) = args.from_csv else {
        anyhow::bail!("nothing to do: pass --from-csv FILE, or --impl NAME --shape B,H,S,D to profile one of our kernels");
    };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    if attn_ncu::source::is_source_page(&text) {
        return print_source_page(&text, &path, args.kernel.as_deref());
    }
    let launches = attn_ncu::parse(&text).with_context(|| format!("parsing {}", path.display()))?;
    let source = path.display().to_string();
    let kernels = attn_ncu::matching_kernels(&launches, args.kernel.as_deref(), &source)?;
    let text = if args.json {
        serde_json::to_string_pretty(&kernels)? + "\n"
    } else {
        attn_ncu::render_text(&kernels)
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // `| head` closing the pipe early is the reader's choice, not a failure.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(0),
    }
}

/// A source page's kernels (those whose name contains `kernel`, or matches `regex:...`): samples by
/// execution count, then the hottest instructions.
fn print_source_page(
    text: &str,
    path: &std::path::Path,
    kernel: Option<&str>,
) -> anyhow::Result<u8> {
    let profiles = attn_ncu::source::parse_source(text)
        .with_context(|| format!("parsing {}", path.display()))?;
    let filter = kernel.map(attn_ncu::KernelFilter::parse).transpose()?;
    let chosen: Vec<_> = profiles
        .iter()
        .filter(|p| filter.as_ref().is_none_or(|f| f.matches(&p.kernel)))
        .collect();
    if chosen.is_empty() {
        let names: Vec<&str> = profiles.iter().map(|p| p.kernel.as_str()).collect();
        anyhow::bail!(
            "no kernel in {} matches {:?}; kernels there: {}",
            path.display(),
            kernel.unwrap_or(""),
            names.join(" | ")
        );
    }
    print_source_profiles(chosen);
    Ok(0)
}

/// Each source profile as `--from-csv` and `--source` print it: its execution-count classes, then
/// its hottest instructions.
fn print_source_profiles<'a>(
    profiles: impl IntoIterator<Item = &'a attn_ncu::source::SourceProfile>,
) {
    const CLASSES: usize = 8;
    const HOTTEST: usize = 15;
    for profile in profiles {
        print!(
            "{}",
            attn_ncu::source::render_source(profile, CLASSES, HOTTEST)
        );
    }
}

/// The evidence's label, whose slug names its file: the candidate, its knobs, the problem, and the
/// purpose unless the overview, so that other knobs or another purpose's profile of the same
/// problem are another file, not a replacement.
fn evidence_label(candidate: &Candidate, spec: &str, purpose: Purpose) -> String {
    let knobs = candidate.knobs();
    let mut label = if knobs.0.is_empty() {
        format!("{} {spec}", candidate.label())
    } else {
        format!("{} [{knobs}] {spec}", candidate.label())
    };
    if purpose != Purpose::Overview {
        label = format!("{label} {}", purpose.name());
    }
    label
}

fn profile_impl(args: &Args) -> anyhow::Result<u8> {
    let spec = args.problem.spec_for("ncu")?;
    let problem = attn_measure::Problem::new(spec.clone())?;
    // Under ncu only its target process holds the GPU.
    let (candidate, _) = args
        .candidate
        .candidate_for(std::slice::from_ref(&problem))?;
    let entry = attn_measure::profile::profiled_entry(&candidate);
    let ncu = attn_measure::profile::find_ncu(&args.ncu)?;
    let program = std::env::current_exe().context("locating this program for ncu to run")?;
    // A bound for a hung target; a full metric set on a large shape takes a minute or two.
    let bound = std::time::Duration::from_secs(600);
    if args.source {
        println!(
            "source page of {} on {spec} with ncu (one launch after a warm-up)",
            candidate.label()
        );
        let (command_line, profiles, page) =
            attn_measure::profile::ncu_source(&ncu, &program, &candidate, spec.clone(), bound)?;
        println!("{}", command_line.join(" "));
        if let Some(path) = &args.save_csv {
            attn_oracle::npy::write_bytes_atomic(path, page.as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
            println!("page: {}", path.display());
        }
        print_source_profiles(&profiles);
        return Ok(0);
    }
    let (label, n) = (candidate.label(), args.launches);
    println!("profiling {label} on {spec} with ncu ({n} launches after a warm-up)");
    let (purpose, shape) = (args.purpose, spec.clone());
    let profile = attn_measure::profile::ncu(&ncu, &program, &candidate, shape, purpose, n, bound)?;
    println!("{}", profile.clock_note);
    let kernels = attn_ncu::group(&profile.launches, None);
    if kernels.is_empty() {
        anyhow::bail!("ncu profiled no launch of `{entry}`");
    }
    print!("{}", attn_ncu::render_text(&kernels));
    let (git_rev, _) = crate::provenance::git_revision();
    for kernel in &kernels {
        let provenance = attn_ncu::Provenance {
            label: evidence_label(&candidate, &spec.to_string(), purpose),
            created: Some(attn_evidence::utc_now_rfc3339()),
            git_rev: Some(git_rev.clone()),
            device: None,
            command_line: profile.command_line.clone(),
            clock_note: Some(profile.clock_note.clone()),
            seed: Some(1),
        };
        let (speedup, syncs) = (args.speedup, args.syncs_per_tile);
        let assessed = attn_ncu::assess(kernel, provenance, spec.flops(), speedup, syncs);
        println!("\n{}", assessed.explanation);
        match &assessed.fitness {
            Ok(fitness) => println!("{}", attn_ncu::fitness_line(fitness)),
            Err(err) => {
                println!("no fitness score: {err} (profile with --purpose all or overview)")
            }
        }
        if !args.no_evidence {
            let path = assessed.evidence.write_in(&args.evidence.join("ncu"))?;
            println!("evidence: {}", path.display());
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_of_other_knobs_or_purposes_is_another_file() {
        let file = |config: &str, purpose: Purpose| {
            let candidate = Candidate::registered("hopper", config.parse().unwrap()).unwrap();
            let label = evidence_label(&candidate, "2,32/8,2048,128", purpose);
            let provenance = attn_ncu::Provenance {
                label,
                ..Default::default()
            };
            let evidence = attn_ncu::NcuEvidence {
                schema: 1,
                provenance,
                kernel: "attn_fwd".into(),
                launches: 0,
                launch_ids: Vec::new(),
                metrics: Default::default(),
                explanation: None,
                summary: None,
                fitness: None,
            };
            evidence.file_name()
        };
        assert_eq!(file("", Purpose::Overview), "hopper-2-32-8-2048-128.json");
        assert_eq!(
            file("", Purpose::Stalls),
            "hopper-2-32-8-2048-128-stalls.json"
        );
        assert_eq!(
            file("CHAIN=1", Purpose::Overview),
            "hopper-chain-1-2-32-8-2048-128.json"
        );
    }
}
