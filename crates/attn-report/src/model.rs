//! The evidence directory read into one in-memory model, and the views the report derives from it.

use std::collections::BTreeMap;
use std::path::Path;

use attn_evidence::{
    json_files, load_dir, read_evo_log, BenchEntry, BenchRun, Evidence, EvoCandidate, GateRun,
    Implementation, ShapeSpec, Timing,
};

use crate::ceilings::GpuFacts;
use crate::format::short_rev;
use crate::setup::Setup;
use crate::ReportError;

/// Seed and resample count of the bootstrap CIs of medians drawn in the progression chart. Fixed,
/// so the report is the same for the same evidence; stated in the report.
pub const MEDIAN_CI_SEED: u64 = 20_240_611;
/// See [`MEDIAN_CI_SEED`].
pub const MEDIAN_CI_RESAMPLES: usize = 2_000;

/// Everything under `evidence/` that the report shows.
#[derive(Debug, Clone)]
pub struct EvidenceSet {
    /// Whether the directory exists at all.
    pub dir_exists: bool,
    /// Gate and bench runs in time order (`provenance.date`, then path).
    pub runs: Vec<Run>,
    /// Nsight Compute summaries, one row per kernel found.
    pub ncu: Vec<NcuRow>,
    /// Search logs, `evo/<run>` in name order, then `micro/<target>`.
    pub searches: Vec<SearchLog>,
}

/// One gate or bench file.
#[derive(Debug, Clone)]
pub struct Run {
    /// Path relative to the evidence directory, `/`-separated.
    pub path: String,
    /// The file's content.
    pub evidence: Evidence,
}

impl Run {
    /// Whether the run's command overrode the candidate's knobs (`--config K=V`, not empty): an
    /// experiment, not the implementation as its registry tunes it.
    pub fn config_overridden(&self) -> bool {
        config_overrides(&self.evidence.provenance().command).is_some()
    }

    /// What this run's provenance says about its GPU.
    pub fn gpu_facts(&self) -> GpuFacts {
        let p = self.evidence.provenance();
        GpuFacts {
            name: p.gpu.clone(),
            recorded_peak_tflops: p.peak_tflops,
            sm_count: p.sm_count,
            max_sm_mhz: p.max_sm_mhz.map(f64::from),
            compute_capability: None,
        }
    }
}

/// The knobs a command overrode (`--config K=V,...` or `--config=K=V,...`), when not empty.
pub fn config_overrides(command: &[String]) -> Option<String> {
    let value =
        command
            .iter()
            .enumerate()
            .find_map(|(i, arg)| match arg.strip_prefix("--config") {
                Some("") => command.get(i + 1).map(String::as_str),
                Some(rest) => rest.strip_prefix('='),
                None => None,
            })?;
    Some(value.trim())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// A gate run's candidate as the report names it: its label, then the knobs the run's command
/// overrode in brackets (`hopper [LAZY_RESCALE=1]`), so that an experiment never reads as the
/// implementation as its registry tunes it, nor takes the tuned runs' place as a latest verdict.
pub fn gate_candidate_label(gate: &GateRun) -> String {
    let label = gate.candidate.label();
    match config_overrides(&gate.provenance.command) {
        Some(knobs) => format!("{label} [{knobs}]"),
        None => label,
    }
}

/// What a gate run's title adds to its pair: ` (backward)` for a backward gate, whose baseline
/// label (`sdpa:cudnn`, say) is otherwise the forward's.
pub fn gate_pass_suffix(gate: &GateRun) -> &'static str {
    if gate.cases.iter().any(|c| c.backward.is_some()) {
        " (backward)"
    } else {
        ""
    }
}

/// A bench run's prefill forward entries: a decode entry's metric is bandwidth, not TFLOP/s, so it
/// is shown in the decode section only, and a backward entry's TFLOP/s count other work.
pub fn prefill_entries(bench: &BenchRun) -> impl Iterator<Item = &BenchEntry> {
    (bench.entries.iter()).filter(|e| e.decode.is_none() && e.backward.is_none())
}

/// A bench entry's implementation as the report names it: its label, then the knobs the run's
/// command overrode in brackets, as [`gate_candidate_label`] names a gate's candidate.
pub fn bench_entry_label(run: &Run, entry: &BenchEntry) -> String {
    let label = entry.implementation.label();
    match config_overrides(&run.evidence.provenance().command) {
        Some(knobs) if !entry.implementation.is_reference() => format!("{label} [{knobs}]"),
        _ => label,
    }
}

/// What an implementation is to the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// One of the project's kernels (or a user's `src:` kernel).
    Ours,
    /// A PyTorch SDPA backend.
    Sdpa,
    /// The FlashAttention-3 anchor (`fa3`), the bar the best kernel is measured against.
    Anchor,
    /// Another reference library (`cublas`, attention through cuBLAS).
    OtherReference,
}

impl Role {
    /// The role of `implementation`.
    pub fn of(implementation: &Implementation) -> Role {
        match implementation.name.as_str() {
            "sdpa" => Role::Sdpa,
            "cublas" => Role::OtherReference,
            name if name == "fa3" || name.starts_with("fa3:") => Role::Anchor,
            _ => Role::Ours,
        }
    }
}

/// One kernel's Nsight Compute metrics, read loosely from `evidence/ncu/*.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct NcuRow {
    /// Path relative to the evidence directory.
    pub file: String,
    /// What was profiled (the evidence's label, e.g. `mma 2,16,4096,128`).
    pub label: String,
    /// Kernel name as ncu printed it.
    pub kernel: String,
    /// Short git revision the profile was taken at.
    pub git_rev: String,
    /// Median kernel duration in µs.
    pub time_us: Option<f64>,
    /// Achieved TFLOP/s.
    pub tflops: Option<f64>,
    /// `tflops` over the measured dense-matmul ceiling.
    pub tflops_fraction: Option<f64>,
    /// Tensor pipe utilisation, %.
    pub tensor_pct: Option<f64>,
    /// SM busy / throughput, %.
    pub sm_pct: Option<f64>,
    /// Achieved occupancy, %.
    pub warps_active_pct: Option<f64>,
    /// Registers per thread.
    pub registers: Option<f64>,
    /// What bounds the kernel, per attn-ncu.
    pub bound: Option<String>,
    /// What the counters suggest changing first.
    pub next_step: Option<String>,
    /// FLOPs of one launch (achieved TFLOP/s × duration).
    pub flops: Option<f64>,
    /// DRAM bytes read + written by one launch.
    pub dram_bytes: Option<f64>,
    /// The DRAM bandwidth (bytes/s) the profile was scored against (a measured copy rate).
    pub dram_roof_bytes_per_s: Option<f64>,
    /// The dense-matmul rate (TFLOP/s) the profile was scored against.
    pub matmul_roof_tflops: Option<f64>,
    /// The profiled GPU, from the device attributes ncu recorded.
    pub gpu: GpuFacts,
}

/// One search log.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchLog {
    /// `evo/<run>` or `micro/<target>`.
    pub name: String,
    /// The rows in file order.
    pub rows: Vec<EvoCandidate>,
}

/// One implementation timed on one shape in one run.
#[derive(Debug, Clone)]
pub struct Measurement {
    /// Index into [`EvidenceSet::runs`].
    pub run: usize,
    /// [`attn_evidence::Implementation::label`].
    pub label: String,
    /// Ours, SDPA, the FA3 anchor or another reference.
    pub role: Role,
    /// The problem size.
    pub shape: ShapeSpec,
    /// The GPU model and timing mode: only measurements of one setup are compared.
    pub setup: Setup,
    /// Median time per launch, µs.
    pub median_us: f64,
    /// Raw samples, µs.
    pub samples: Vec<f64>,
    /// Throughput at the median, TFLOP/s.
    pub tflops: f64,
    /// For a gate run's candidate: the bootstrap CI of its speedup over the run's baseline.
    pub speedup_ci: Option<(f64, f64)>,
}

impl EvidenceSet {
    /// Reads `dir`. A missing or empty directory gives an empty set (the report then says "no
    /// evidence yet"); a broken file is an error naming it.
    pub fn load(dir: &Path) -> Result<Self, ReportError> {
        if !dir.is_dir() {
            return Ok(EvidenceSet {
                dir_exists: false,
                runs: Vec::new(),
                ncu: Vec::new(),
                searches: Vec::new(),
            });
        }
        let runs = load_dir(dir)?
            .into_iter()
            .map(|(path, evidence)| Run {
                path: relative(dir, &path),
                evidence,
            })
            .collect();
        Ok(EvidenceSet {
            dir_exists: true,
            runs,
            ncu: load_ncu(dir)?,
            searches: load_searches(dir)?,
        })
    }

    /// Whether there is nothing to report.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.ncu.is_empty() && self.searches.is_empty()
    }

    /// Gate runs with their index in `runs`.
    pub fn gates(&self) -> impl Iterator<Item = (usize, &GateRun)> {
        self.runs
            .iter()
            .enumerate()
            .filter_map(|(i, run)| match &run.evidence {
                Evidence::Gate(gate) => Some((i, gate)),
                Evidence::Bench(_) => None,
            })
    }

    /// The latest gate run of each (candidate, baseline, suite or shape list, GPU, timing mode),
    /// ordered by candidate, baseline, suite, then setup: the seed and large suites each keep
    /// their latest verdict, and a pair timed in two modes shows both, one after the other.
    pub fn latest_gates(&self) -> Vec<(usize, &GateRun)> {
        type Key = (String, String, String, String, String);
        let mut latest: BTreeMap<Key, (usize, &GateRun)> = BTreeMap::new();
        for (index, gate) in self.gates() {
            // Runs are in time order, so later inserts win.
            latest.insert(
                (
                    gate_candidate_label(gate),
                    gate.baseline.label(),
                    gate_scope(gate),
                    gate.provenance.gpu.clone(),
                    crate::gate::run_modes(gate).unwrap_or_default(),
                ),
                (index, gate),
            );
        }
        latest.into_values().collect()
    }

    /// Every measurement in every run, in run order.
    pub fn measurements(&self) -> Vec<Measurement> {
        let mut out = Vec::new();
        for (run, file) in self.runs.iter().enumerate() {
            match &file.evidence {
                Evidence::Bench(bench) => {
                    for entry in prefill_entries(bench) {
                        out.push(Measurement {
                            run,
                            label: entry.implementation.label(),
                            role: Role::of(&entry.implementation),
                            shape: entry.shape.clone(),
                            setup: Setup::of_entry(file, entry),
                            median_us: entry.summary.median,
                            samples: entry.timing.samples.clone(),
                            tflops: entry.tflops,
                            speedup_ci: None,
                        });
                    }
                }
                Evidence::Gate(gate) => {
                    for case in &gate.cases {
                        let sides = [
                            (
                                &gate.candidate,
                                &case.candidate,
                                case.candidate_tflops,
                                true,
                            ),
                            (&gate.baseline, &case.baseline, case.baseline_tflops, false),
                        ];
                        for (implementation, timing, tflops, is_candidate) in sides {
                            let Some(timing) = timing else { continue };
                            let summary_median = case.comparison.as_ref().map(|c| {
                                if is_candidate {
                                    c.candidate.median
                                } else {
                                    c.baseline.median
                                }
                            });
                            let Some(median_us) = summary_median.or_else(|| median(timing)) else {
                                continue;
                            };
                            let label = if is_candidate {
                                gate_candidate_label(gate)
                            } else {
                                implementation.label()
                            };
                            out.push(Measurement {
                                run,
                                // A backward's times are not its forward's: never one series.
                                label: match case.backward {
                                    Some(_) => format!("{label} (backward)"),
                                    None => label,
                                },
                                role: Role::of(implementation),
                                shape: case.shape.clone(),
                                setup: Setup::new(&gate.provenance.gpu, timing.mode),
                                median_us,
                                samples: timing.samples.clone(),
                                tflops: tflops.unwrap_or_else(|| case.tflops(median_us)),
                                speedup_ci: case
                                    .comparison
                                    .as_ref()
                                    .filter(|_| is_candidate)
                                    .map(|c| (c.speedup.lower, c.speedup.upper)),
                            });
                        }
                    }
                }
            }
        }
        out
    }
}

/// Median of a timing's samples (the summary's when there is one is preferred by callers).
fn median(timing: &Timing) -> Option<f64> {
    let mut values: Vec<f64> = timing
        .samples
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .collect();
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

/// Bootstrap CI (percentile) of the median of `samples`, seeded with [`MEDIAN_CI_SEED`].
pub fn median_ci(samples: &[f64]) -> Option<(f64, f64)> {
    let sample = attn_stats::Sample::new(samples.to_vec()).ok()?;
    let options = attn_stats::BootstrapOptions {
        resamples: MEDIAN_CI_RESAMPLES,
        confidence: 0.95,
        seed: MEDIAN_CI_SEED,
        method: attn_stats::CiMethod::Percentile,
    };
    let estimate = attn_stats::bootstrap(&sample, &[attn_stats::statistic::median], &options)
        .ok()?
        .into_iter()
        .next()?;
    Some((estimate.lower, estimate.upper))
}

fn relative(root: &Path, path: &Path) -> String {
    let relative = path.strip_prefix(root).unwrap_or(path);
    relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

fn load_ncu(dir: &Path) -> Result<Vec<NcuRow>, ReportError> {
    let ncu_dir = dir.join("ncu");
    if !ncu_dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut rows = Vec::new();
    for path in json_files(&ncu_dir)? {
        let evidence = attn_ncu::NcuEvidence::read(&path)?;
        rows.push(ncu_row(relative(dir, &path), &evidence));
    }
    Ok(rows)
}

fn ncu_row(file: String, evidence: &attn_ncu::NcuEvidence) -> NcuRow {
    // Under the current rules (the next step and bound improve; the numbers are the stored ones).
    let explanation = evidence.explain_again();
    let e = explanation.as_ref();
    let field = |get: fn(&attn_ncu::Explanation) -> Option<f64>| e.and_then(get);
    NcuRow {
        file,
        label: evidence.provenance.label.clone(),
        kernel: evidence.kernel.clone(),
        git_rev: short_rev(evidence.provenance.git_rev.as_deref().unwrap_or("")),
        time_us: field(|e| e.duration_ns).map(|ns| ns / 1000.0),
        tflops: field(|e| e.tflops),
        tflops_fraction: field(|e| e.tflops_fraction),
        tensor_pct: field(|e| e.tensor_pipe_pct),
        sm_pct: field(|e| e.sm_busy_pct),
        warps_active_pct: field(|e| e.warps_active_pct),
        registers: field(|e| e.registers_per_thread),
        bound: e.map(|e| e.bound.to_string()),
        next_step: e.map(attn_ncu::Explanation::next_step),
        flops: field(|e| {
            e.tflops
                .zip(e.duration_ns)
                .map(|(t, ns)| t * 1e12 * ns * 1e-9)
        }),
        dram_bytes: field(|e| e.dram_bytes),
        dram_roof_bytes_per_s: field(|e| ratio(e.dram_bytes_per_s, e.dram_fraction)),
        matmul_roof_tflops: field(|e| ratio(e.tflops, e.tflops_fraction)),
        gpu: ncu_gpu_facts(evidence),
    }
}

/// `value / fraction`: the ceiling a fraction was computed against.
fn ratio(value: Option<f64>, fraction: Option<f64>) -> Option<f64> {
    let (value, fraction) = (value?, fraction?);
    (fraction > 0.0 && value.is_finite()).then(|| value / fraction)
}

/// The GPU as ncu's device attributes describe it.
fn ncu_gpu_facts(evidence: &attn_ncu::NcuEvidence) -> GpuFacts {
    let metric = |name: &str| evidence.metrics.get(name).and_then(|a| a.median);
    let whole = |name: &str| {
        metric(name)
            .filter(|v| *v >= 0.0 && v.fract() == 0.0)
            .map(|v| v as u32)
    };
    GpuFacts {
        name: evidence.provenance.device.clone().unwrap_or_default(),
        recorded_peak_tflops: None,
        sm_count: whole(attn_ncu::metrics::SM_COUNT),
        max_sm_mhz: metric(attn_ncu::metrics::SM_CLOCK_KHZ)
            .filter(|khz| *khz > 0.0)
            .map(|khz| khz / 1000.0),
        compute_capability: whole("device__attribute_compute_capability_major")
            .zip(whole("device__attribute_compute_capability_minor")),
    }
}

fn load_searches(dir: &Path) -> Result<Vec<SearchLog>, ReportError> {
    let mut logs = Vec::new();
    let evo = dir.join("evo");
    if evo.is_dir() {
        let mut runs: Vec<_> = std::fs::read_dir(&evo)
            .map_err(|source| ReportError::Read {
                path: evo.clone(),
                source,
            })?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.join("log.csv").is_file())
            .collect();
        runs.sort();
        for run in runs {
            logs.push(SearchLog {
                name: relative(dir, &run),
                rows: read_evo_log(&run.join("log.csv"))?,
            });
        }
    }
    // One micro log per target: `micro/<target>/log.csv`.
    let micro = dir.join("micro");
    if micro.is_dir() {
        let mut targets: Vec<_> = std::fs::read_dir(&micro)
            .map_err(|source| ReportError::Read {
                path: micro.clone(),
                source,
            })?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.join("log.csv").is_file())
            .collect();
        targets.sort();
        for target in targets {
            logs.push(SearchLog {
                name: relative(dir, &target),
                rows: read_evo_log(&target.join("log.csv"))?,
            });
        }
    }
    Ok(logs)
}

/// What a gate run covered: its suite, or for shapes given one by one their list. With the two
/// sides' labels it names the run's section (the latest run of each is shown) and its chart files.
pub fn gate_scope(gate: &GateRun) -> String {
    gate.suite.clone().unwrap_or_else(|| {
        gate.cases
            .iter()
            .map(|c| c.shape.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    })
}
