//! What measuring a candidate gave, and the log row it becomes.

use attn_evidence::{CandidateStatus, EvoBest, EvoCandidate, ImplConfig, Provenance, SearchSpec};
use attn_stats::{CompareOptions, Sample};
use serde::{Deserialize, Serialize};

use crate::plan::{gate_command, split_row};
use crate::space::Knobs;
use crate::EvoError;

/// One candidate (or the baseline) measured: what a worker process prints as its last stdout line,
/// as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Measured, or invalid and why.
    pub status: CandidateStatus,
    /// Timed samples, µs.
    #[serde(default)]
    pub samples_us: Vec<f64>,
    /// Seconds to prepare (compile or cache hit, load).
    #[serde(default)]
    pub prepare_s: Option<f64>,
}

impl Measurement {
    /// Timed samples.
    pub fn ok(samples_us: Vec<f64>, prepare_s: Option<f64>) -> Measurement {
        Measurement {
            status: CandidateStatus::Ok,
            samples_us,
            prepare_s,
        }
    }

    /// Nothing measured, because of `reason`.
    pub fn invalid(reason: impl Into<String>) -> Measurement {
        Measurement {
            status: CandidateStatus::invalid(reason),
            samples_us: vec![],
            prepare_s: None,
        }
    }

    /// Timed samples, or why there are none.
    pub fn from_result(
        samples_us: Result<Vec<f64>, String>,
        prepare_s: Option<f64>,
    ) -> Measurement {
        let (status, samples_us) = match samples_us {
            Ok(samples) => (CandidateStatus::Ok, samples),
            Err(why) => (CandidateStatus::invalid(why), vec![]),
        };
        Measurement {
            status,
            samples_us,
            prepare_s,
        }
    }

    /// The baseline's samples measured on GPU `device`; failing there is an error.
    pub fn baseline_sample(self, name: &str, device: usize) -> crate::Result<Sample> {
        if !self.status.is_ok() {
            let status = self.status.to_string();
            let name = name.to_string();
            return Err(EvoError::Baseline {
                name,
                device,
                status,
            });
        }
        Ok(Sample::new(self.samples_us)?)
    }

    /// The log row of this candidate (its `config` as the log holds it, see
    /// [`crate::Space::to_row`]), scored by its speedup over `baseline` (a candidate whose
    /// samples cannot be compared is invalid).
    pub fn log_row(
        &self,
        generation: u32,
        config: ImplConfig,
        baseline: &Sample,
        options: &CompareOptions,
        compile_s: Option<f64>,
        run_s: f64,
    ) -> EvoCandidate {
        let mut row = EvoCandidate {
            generation,
            config,
            status: self.status.clone(),
            median_us: None,
            speedup: None,
            speedup_lower: None,
            speedup_upper: None,
            score: None,
            compile_s: compile_s.or(self.prepare_s),
            run_s: Some(run_s),
        };
        if !self.status.is_ok() {
            return row;
        }
        let compared = Sample::new(self.samples_us.clone())
            .and_then(|c| attn_stats::compare(baseline, &c, options));
        match compared {
            Ok(c) => {
                row.median_us = Some(c.candidate.median);
                row.speedup = Some(c.speedup.point);
                row.speedup_lower = Some(c.speedup.lower);
                row.speedup_upper = Some(c.speedup.upper);
                row.score = Some(c.speedup.point);
            }
            Err(err) => row.status = CandidateStatus::invalid(err.to_string()),
        }
        row
    }
}

/// The valid row with the highest score.
pub fn best_row(rows: &[EvoCandidate]) -> Option<&EvoCandidate> {
    rows.iter()
        .filter(|r| r.status.is_ok() && r.score.is_some())
        .max_by(|a, b| a.score.unwrap_or(0.0).total_cmp(&b.score.unwrap_or(0.0)))
}

/// `best.json` of a finished search: `winner` (its best row, or the composite winner of
/// [`crate::rank_finalists`]) with the run's counts, and how it was chosen when not by speedup
/// (`ncu`, `fitness`).
pub fn evo_best(
    spec: &SearchSpec,
    run: &str,
    rows: &[EvoCandidate],
    winner: &EvoCandidate,
    devices: Vec<String>,
    provenance: Option<Provenance>,
) -> EvoBest {
    let ImplConfig {
        implementation,
        knobs,
    } = split_row(spec, winner);
    let reproduce = gate_command(spec, implementation.as_deref(), &knobs);
    EvoBest {
        kind: EvoBest::KIND,
        run: run.into(),
        target: spec.target.clone(),
        implementation,
        shape: spec.shape.clone(),
        decode: spec.decode.clone(),
        baseline: spec.baseline.clone(),
        seed: spec.seed,
        config: knobs,
        fixed_defines: spec.defines.clone(),
        generation: winner.generation,
        median_us: winner.median_us,
        speedup: winner.speedup,
        speedup_lower: winner.speedup_lower,
        speedup_upper: winner.speedup_upper,
        score: winner.score,
        candidates: rows.len(),
        invalid: rows.iter().filter(|r| !r.status.is_ok()).count(),
        devices,
        reproduce,
        ncu: String::new(),
        fitness: None,
        provenance,
    }
}

/// What a synthetic worker reports (tests without a GPU; times from [`synthetic_samples`]). In
/// this process: `MODE=1` dies the way a faulting kernel's worker does, `MODE=2` hangs;
/// `ATTN_EVO_SYNTHETIC_DELAY_MS` slows every candidate down (to kill a run mid-way in tests).
pub fn synthetic_measurement(
    knobs: &Knobs,
    baseline: bool,
    seed: u64,
    samples: usize,
) -> Measurement {
    match knobs.get("MODE") {
        Some(1) => {
            eprintln!("error: CUDA cuStreamSynchronize failed: DriverError(CUDA_ERROR_ILLEGAL_ADDRESS, \"an illegal memory access was encountered\")");
            std::process::abort();
        }
        Some(2) => loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        },
        _ => {}
    }
    if let Some(ms) = std::env::var("ATTN_EVO_SYNTHETIC_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    Measurement::ok(synthetic_samples(knobs, baseline, seed, samples), None)
}

/// Samples of a synthetic measurement (tests without a GPU): 100 µs for the baseline; for a
/// candidate, faster the larger the sum of its knobs; with a tiny seeded wobble.
pub fn synthetic_samples(knobs: &Knobs, baseline: bool, seed: u64, samples: usize) -> Vec<f64> {
    let base = if baseline {
        100.0
    } else {
        100.0 / (1.0 + 0.05 * knobs.values().sum::<i64>() as f64)
    };
    // A linear congruential sequence from the seed.
    let mut state = seed | 1;
    (0..samples)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            base * (1.0 + 1e-3 * ((state >> 33) as f64 / (1u64 << 31) as f64))
        })
        .collect()
}
