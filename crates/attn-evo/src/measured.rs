//! What measuring a candidate gave, and the log row it becomes.

use attn_evidence::{CandidateStatus, EvoCandidate};
use attn_stats::{CompareOptions, Sample};
use serde::{Deserialize, Serialize};

use crate::log::knobs_to_strings;
use crate::space::Knobs;

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

    /// The last JSON line of a worker's stdout, if it printed one.
    pub fn from_output(stdout: &str) -> Option<Measurement> {
        stdout
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .and_then(|l| serde_json::from_str(l).ok())
    }

    /// The log row of this candidate, scored by its speedup over `baseline` (a candidate whose
    /// samples cannot be compared is invalid).
    pub fn log_row(
        &self,
        generation: u32,
        knobs: &Knobs,
        baseline: &Sample,
        options: &CompareOptions,
        compile_s: Option<f64>,
        run_s: f64,
    ) -> EvoCandidate {
        let mut row = EvoCandidate {
            generation,
            config: knobs_to_strings(knobs),
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
