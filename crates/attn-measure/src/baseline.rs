//! What a candidate is compared with, and the evidence descriptions of both sides.

use attn_evidence::{Implementation, Timing};
use attn_kernels::{registry::Engine, Candidate, Config, Timings};

use crate::sdpa::{Backend, Sdpa};
use crate::Result;

/// The baseline of a comparison.
#[derive(Debug)]
pub enum Baseline {
    /// PyTorch SDPA through the helper, with a backend.
    Sdpa {
        /// The running helper.
        sdpa: Sdpa,
        /// The backend asked for.
        backend: Backend,
    },
    /// A registered implementation (`cublas`, or any other, the candidate itself included).
    Registered(Candidate),
}

impl Baseline {
    /// `--baseline NAME`: `sdpa` (the `cublas` math path when PyTorch is unusable: the second
    /// value says so, one line), `cublas`, or any registered implementation.
    pub fn from_name(name: &str, backend: Backend) -> Result<(Baseline, Option<String>)> {
        if name == "sdpa" {
            return Ok(match Sdpa::detect() {
                Ok(sdpa) => (Baseline::Sdpa { sdpa, backend }, None),
                Err(err) => (
                    Baseline::Registered(Candidate::registered("cublas", Config::default())?),
                    Some(format!(
                        "PyTorch SDPA is unavailable ({err}); the baseline is the cublas math path"
                    )),
                ),
            });
        }
        Ok((
            Baseline::Registered(Candidate::registered(name, Config::default())?),
            None,
        ))
    }

    /// The evidence description.
    pub fn implementation(&self) -> Implementation {
        match self {
            Baseline::Sdpa { backend, .. } => sdpa_implementation(*backend),
            Baseline::Registered(c) => candidate_implementation(c, None),
        }
    }

    /// The SDPA helper, when the baseline is SDPA.
    pub fn sdpa(&self) -> Option<&Sdpa> {
        match self {
            Baseline::Sdpa { sdpa, .. } => Some(sdpa),
            Baseline::Registered(_) => None,
        }
    }
}

/// The evidence description of SDPA with a backend.
pub fn sdpa_implementation(backend: Backend) -> Implementation {
    let mut imp = Implementation::named("sdpa");
    imp.backend = Some(backend.to_string());
    imp
}

/// The evidence description of a candidate (with its resolved config when prepared).
pub fn candidate_implementation(
    candidate: &Candidate,
    resolved: Option<&Config>,
) -> Implementation {
    let mut imp = Implementation::named(candidate.label());
    let source = match candidate {
        Candidate::Registered {
            implementation,
            overrides,
        } => {
            imp.config = resolved.unwrap_or(overrides).to_strings();
            match implementation.engine {
                Engine::Kernel { source, .. } => Some(source.to_string()),
                Engine::Cublas => None,
            }
        }
        Candidate::Source {
            source, defines, ..
        } => {
            imp.config = defines.to_strings();
            Some(source.clone())
        }
    };
    imp.source_sha256 = source.map(|s| attn_kernels::compile::sha256_hex(s.as_bytes()));
    imp
}

/// The evidence form of harness timings.
pub fn timing_evidence(t: &Timings) -> Timing {
    let mode = match t.mode {
        attn_kernels::TimingMode::Flushed => attn_evidence::TimingMode::Flushed,
        attn_kernels::TimingMode::Graph => attn_evidence::TimingMode::Graph,
        attn_kernels::TimingMode::Batch => attn_evidence::TimingMode::Batch,
    };
    Timing::new(mode, t.warmup, t.samples_us.clone(), t.launches_per_sample)
}

/// The median of a slice (NaN when empty).
pub fn median(values: &[f64]) -> f64 {
    attn_stats::Sample::new(values.to_vec())
        .map(|s| s.median())
        .unwrap_or(f64::NAN)
}
