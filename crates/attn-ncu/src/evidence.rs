//! Profiling results as JSON files under `evidence/ncu/`, for the report and the search.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::group::Aggregate;
use crate::{Ceilings, Explanation, Fitness, KernelSummary, NcuError};

/// Version of the [`NcuEvidence`] layout; bumped on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// Where the numbers came from. Every field is the caller's to fill; this crate does not guess.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// Which implementation and shape, e.g. `v3 B=4 H=16 N=4096 D=128 causal`.
    pub label: String,
    /// When, as the caller formats it (RFC 3339 recommended).
    pub created: Option<String>,
    /// Source revision (git commit) of the kernel.
    pub git_rev: Option<String>,
    /// GPU name, driver and ncu version, as the caller knows them.
    pub device: Option<String>,
    /// The ncu command line (see [`crate::Profile::command_line`]).
    pub command_line: Vec<String>,
    /// Clock and cache control used (see [`crate::ProfileOptions::clock_note`]).
    pub clock_note: Option<String>,
    /// Seed of the input data.
    pub seed: Option<u64>,
}

/// One profiled kernel: provenance, aggregated metrics in base units, the human summary and,
/// when scored, the fitness with its inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcuEvidence {
    /// [`SCHEMA_VERSION`] at the time of writing.
    pub schema: u32,
    /// Where the numbers came from.
    pub provenance: Provenance,
    /// Kernel name as ncu printed it.
    pub kernel: String,
    /// Launches aggregated.
    pub launches: usize,
    /// Their ncu launch IDs.
    pub launch_ids: Vec<u32>,
    /// Median (and min/max) of every metric, in base units.
    pub metrics: BTreeMap<String, Aggregate>,
    /// The explanation's numbers, if computed.
    pub explanation: Option<Explanation>,
    /// The explanation as text (its `Display`), if computed.
    pub summary: Option<String>,
    /// The composite score with its inputs and weights, if scored.
    pub fitness: Option<Fitness>,
}

impl NcuEvidence {
    /// Evidence for a kernel summary, with nothing explained or scored yet.
    pub fn new(provenance: Provenance, kernel: &KernelSummary) -> Self {
        Self {
            schema: SCHEMA_VERSION,
            provenance,
            kernel: kernel.kernel.clone(),
            launches: kernel.launches,
            launch_ids: kernel.launch_ids.clone(),
            metrics: kernel.metrics.clone(),
            explanation: None,
            summary: None,
            fitness: None,
        }
    }

    /// Adds an explanation (numbers and text).
    pub fn with_explanation(mut self, explanation: Explanation) -> Self {
        self.summary = Some(explanation.to_string());
        self.explanation = Some(explanation);
        self
    }

    /// The explanation under the current rules, recomputed from the stored metrics with the FLOP
    /// count and ceilings the profile was explained with; the stored one where the metrics lack a
    /// duration. Reports use it so that files profiled before a rule changed read like new ones.
    pub fn explain_again(&self) -> Option<Explanation> {
        let stored = self.explanation.as_ref()?;
        let seconds = stored.duration_ns.map(|ns| ns * 1e-9);
        let flops = stored.tflops.zip(seconds).map(|(t, s)| t * 1e12 * s);
        let measured = Ceilings::H100_MEASURED;
        let ceilings = Ceilings {
            tensor_tflops: stored
                .tflops
                .zip(stored.tflops_fraction)
                .filter(|(_, f)| *f > 0.0)
                .map_or(measured.tensor_tflops, |(t, f)| t / f),
            dram_bytes_per_s: stored
                .dram_bytes_per_s
                .zip(stored.dram_fraction)
                .filter(|(_, f)| *f > 0.0)
                .map_or(measured.dram_bytes_per_s, |(b, f)| b / f),
        };
        let summary = KernelSummary {
            kernel: self.kernel.clone(),
            block: None,
            grid: None,
            launches: self.launches,
            launch_ids: self.launch_ids.clone(),
            metrics: self.metrics.clone(),
        };
        let again = crate::explain(&summary, flops, &ceilings);
        Some(if again.duration_ns.is_some() {
            again
        } else {
            stored.clone()
        })
    }

    /// Adds a score.
    pub fn with_fitness(mut self, fitness: Fitness) -> Self {
        self.fitness = Some(fitness);
        self
    }

    /// A file name derived from the label: lowercase letters, digits and `-`, plus `.json`.
    pub fn file_name(&self) -> String {
        let source = if self.provenance.label.is_empty() {
            &self.kernel
        } else {
            &self.provenance.label
        };
        let mut slug = String::new();
        for c in source.chars() {
            if c.is_ascii_alphanumeric() {
                slug.push(c.to_ascii_lowercase());
            } else if !slug.ends_with('-') {
                slug.push('-');
            }
        }
        let slug: String = slug.trim_matches('-').chars().take(80).collect();
        let slug = slug.trim_end_matches('-');
        format!("{}.json", if slug.is_empty() { "kernel" } else { slug })
    }

    /// Writes the evidence into `dir` (created if needed) as [`NcuEvidence::file_name`],
    /// atomically; returns the path.
    ///
    /// ```
    /// use attn_ncu::{group, parse_raw, NcuEvidence, Provenance};
    /// let launches = parse_raw(include_str!("../tests/fixtures/h100_sdpa_cudnn_raw.csv"))?;
    /// let kernel = &group(&launches, None)[1];
    /// let provenance = Provenance { label: "sdpa cudnn B·H=8 N=512 D=64".into(), ..Provenance::default() };
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = NcuEvidence::new(provenance, kernel).write_in(dir.path())?;
    /// assert!(path.ends_with("sdpa-cudnn-b-h-8-n-512-d-64.json"));
    /// assert_eq!(NcuEvidence::read(&path)?.launch_ids, [3, 4]);
    /// # Ok::<(), attn_ncu::NcuError>(())
    /// ```
    pub fn write_in(&self, dir: &Path) -> Result<PathBuf, NcuError> {
        let path = dir.join(self.file_name());
        self.write_to(&path)?;
        Ok(path)
    }

    /// Writes the evidence to `path` atomically: a temporary file in the same directory, then a
    /// rename, so readers never see half a file.
    pub fn write_to(&self, path: &Path) -> Result<(), NcuError> {
        let io = |source| NcuError::Io {
            path: path.to_owned(),
            source,
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let json = serde_json::to_vec_pretty(self).map_err(|source| NcuError::Json {
            path: path.to_owned(),
            source,
        })?;
        let mut file = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
        file.write_all(&json)
            .and_then(|()| file.write_all(b"\n"))
            .map_err(io)?;
        file.as_file().sync_all().map_err(io)?;
        file.persist(path).map_err(|e| io(e.error))?;
        Ok(())
    }

    /// Reads evidence written by [`NcuEvidence::write_to`].
    pub fn read(path: &Path) -> Result<Self, NcuError> {
        let text = std::fs::read_to_string(path).map_err(|source| NcuError::Io {
            path: path.to_owned(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| NcuError::Json {
            path: path.to_owned(),
            source,
        })
    }
}
