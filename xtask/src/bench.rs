//! `cargo xtask bench`: times implementations and SDPA backends over a suite's shapes and writes
//! `evidence/bench/<date>-<gpu>-<rev>.json` and a same-name `.csv`.

use std::path::PathBuf;

use attn_evidence::{BenchEntry, BenchRun, Implementation};
use attn_kernels::{Candidate, Config, Gpu, TimingMode, TimingOptions};
use attn_stats::Sample;

use crate::gate::{sdpa::Sdpa, suites};
use crate::measure::{self, PreparedCache};

/// Arguments of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Implementations to time, comma-separated (`cargo xtask kernels` lists them).
    #[arg(long = "impl", default_value = "tiled,mma", value_delimiter = ',')]
    pub implementations: Vec<String>,
    /// SDPA backends to time alongside, comma-separated (empty for none).
    #[arg(long, default_value = "default,flash", value_delimiter = ',')]
    pub sdpa_backends: Vec<String>,
    /// Suite: seed, large, sweep.
    #[arg(long, default_value = "large")]
    pub suite: String,
    /// fp16 or bf16.
    #[arg(long, default_value = "fp16")]
    pub dtype: String,
    /// Timed samples per implementation and shape.
    #[arg(long, default_value_t = 50)]
    pub samples: usize,
    /// Untimed launches first.
    #[arg(long, default_value_t = 5)]
    pub warmup: usize,
    /// Evidence folder (the run goes to <DIR>/bench/).
    #[arg(long, default_value = "evidence")]
    pub evidence: PathBuf,
    /// Base seed of the timing inputs.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Runs the subcommand; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let shapes = suites::suite(&args.suite, &args.dtype)?;
    let candidates: Vec<Candidate> = args
        .implementations
        .iter()
        .filter(|n| !n.is_empty())
        .map(|n| Candidate::registered(n, Config::default()))
        .collect::<Result<_, _>>()?;
    let gpu = Gpu::open(0)?;
    let backends: Vec<String> = args
        .sdpa_backends
        .iter()
        .filter(|b| !b.is_empty())
        .cloned()
        .collect();
    let sdpa = if backends.is_empty() {
        None
    } else {
        match Sdpa::detect() {
            Ok(s) => Some(s),
            Err(err) => {
                println!(
                    "PyTorch SDPA is unavailable ({}): timing our implementations only",
                    crate::one_line(&err)
                );
                None
            }
        }
    };
    let torch = sdpa.as_ref().map(|s| s.info.clone());
    let opts = TimingOptions {
        warmup: args.warmup,
        samples: args.samples,
        mode: TimingMode::Graph,
        ..TimingOptions::default()
    };
    let total = shapes.len() * (candidates.len() + if sdpa.is_some() { backends.len() } else { 0 });
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .expect("valid template"),
    );
    let mut cache = PreparedCache::default();
    let mut entries = Vec::new();
    let before = attn_kernels::telemetry::read_clocks(0);
    for spec in &shapes {
        let (shape, dtype, _) = measure::problem(spec)?;
        for candidate in &candidates {
            let candidate = &candidate.for_shape(&shape);
            bar.set_message(format!("{} {spec}", candidate.label()));
            let prepared = cache.get(&gpu, &candidate.label(), candidate, dtype, spec.head_dim)?;
            match measure::time_prepared(&gpu, prepared, spec, &opts, args.seed, None) {
                Ok((timings, _, _)) => entries.push(entry(
                    measure::candidate_implementation(candidate, Some(prepared.config())),
                    spec,
                    &timings,
                )?),
                Err(err) => bar.println(format!(
                    "  skipped {} on {spec}: {}",
                    candidate.label(),
                    crate::one_line(&err)
                )),
            }
            bar.inc(1);
        }
        if let Some(sdpa) = &sdpa {
            for backend in &backends {
                bar.set_message(format!("sdpa:{backend} {spec}"));
                match measure::time_sdpa(sdpa, backend, &gpu, spec, &opts, args.seed) {
                    Ok(timings) => entries.push(entry(
                        measure::sdpa_implementation(backend),
                        spec,
                        &timings,
                    )?),
                    Err(err) => bar.println(format!(
                        "  skipped sdpa:{backend} on {spec}: {}",
                        crate::one_line(&err)
                    )),
                }
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    let after = attn_kernels::telemetry::read_clocks(0);
    let run = BenchRun {
        schema: attn_evidence::SCHEMA_VERSION,
        kind: "bench".into(),
        provenance: crate::provenance::collect(&gpu, torch.as_ref(), before, after),
        suite: Some(args.suite.clone()),
        entries,
    };
    let mut table = attn_report::table::Table::new(&[
        "implementation",
        "shape",
        "median µs",
        "p10–p90 µs",
        "TFLOP/s",
    ])
    .numeric(&[2, 4]);
    for e in &run.entries {
        table.push(vec![
            e.implementation.label(),
            e.shape.to_string(),
            attn_report::format::micros(e.summary.median),
            format!(
                "{}–{}",
                attn_report::format::micros(e.summary.p10),
                attn_report::format::micros(e.summary.p90)
            ),
            attn_report::format::tflops(e.tflops),
        ]);
    }
    println!("{}", table.to_markdown());
    let p = &run.provenance;
    let path = attn_evidence::evidence_path(&args.evidence, "bench", &p.date, &p.gpu, &p.git_rev);
    attn_evidence::write_json_atomic(&path, &run)?;
    attn_evidence::write_bytes_atomic(&path.with_extension("csv"), run.to_csv()?.as_bytes())?;
    println!("evidence: {} (+ .csv)", path.display());
    Ok(0)
}

fn entry(
    implementation: Implementation,
    spec: &attn_evidence::ShapeSpec,
    timings: &attn_kernels::Timings,
) -> anyhow::Result<BenchEntry> {
    let summary = Sample::new(timings.samples_us.clone())?.summary();
    Ok(BenchEntry {
        implementation,
        shape: spec.clone(),
        timing: measure::timing_evidence(timings),
        tflops: spec.tflops(summary.median),
        summary,
    })
}
