//! The JSON files of a search: `evo/<run>/search.json` (what is searched, read back by
//! `--resume`) and `evo/<run>/best.json` (the winner).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::store::{read_json, write_json_atomic};
use crate::{EvidenceError, Provenance, ShapeSpec};

/// What a search searches: written when a run starts, read back by `--resume`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchSpec {
    /// What is tuned: a registered implementation's name, `src:<file name>` or `synthetic`.
    pub target: String,
    /// The registered implementation, when the target is one.
    pub implementation: Option<String>,
    /// The kernel file, when the target is a `--src` kernel.
    pub src: Option<PathBuf>,
    /// The `--src` kernel's entry point, when not the default.
    pub entry: Option<String>,
    /// Defines every candidate gets (`--src`'s `--define`s).
    pub defines: BTreeMap<String, i64>,
    /// Each knob and the values searched.
    pub knobs: BTreeMap<String, Vec<i64>>,
    /// The problem tuned for.
    pub shape: ShapeSpec,
    /// What speedups are measured against.
    pub baseline: String,
    /// Seed of the search and of the inputs.
    pub seed: u64,
    /// Survivors per generation.
    pub population: usize,
    /// Generations at most.
    pub generations: u32,
}

impl SearchSpec {
    /// Reads `search.json`; errors name the file.
    pub fn read(path: &Path) -> Result<SearchSpec, EvidenceError> {
        read_json(path)
    }

    /// Writes `search.json` atomically.
    pub fn write(&self, path: &Path) -> Result<(), EvidenceError> {
        write_json_atomic(path, self)
    }
}

/// `evo/<run>/best.json`: the best config a search found, its numbers and the `gate` command that
/// confirms it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvoBest {
    /// Always [`EvoBest::KIND`].
    pub kind: String,
    /// The run's folder name.
    pub run: String,
    /// [`SearchSpec::target`].
    pub target: String,
    /// The problem tuned for.
    pub shape: ShapeSpec,
    /// What speedups were measured against.
    pub baseline: String,
    /// Seed of the search.
    pub seed: u64,
    /// The best config, as in the log.
    pub config: BTreeMap<String, String>,
    /// [`SearchSpec::defines`].
    #[serde(default)]
    pub fixed_defines: BTreeMap<String, i64>,
    /// The generation that found it.
    pub generation: u32,
    /// Its median time, µs.
    pub median_us: Option<f64>,
    /// Its speedup over the baseline.
    pub speedup: Option<f64>,
    /// Lower end of the speedup's confidence interval.
    pub speedup_lower: Option<f64>,
    /// Upper end of the speedup's confidence interval.
    pub speedup_upper: Option<f64>,
    /// Its fitness.
    pub score: Option<f64>,
    /// Candidates measured in all.
    pub candidates: usize,
    /// Of which invalid.
    pub invalid: usize,
    /// The GPUs that measured, `"<ordinal> <name>"`.
    #[serde(default)]
    pub devices: Vec<String>,
    /// The `cargo xtask gate` command that confirms the config independently.
    pub reproduce: String,
    /// A note on Nsight Compute scoring (empty when not asked for).
    #[serde(default)]
    pub ncu: String,
    /// Where it ran (absent for synthetic searches).
    #[serde(default)]
    pub provenance: Option<Provenance>,
}

impl EvoBest {
    /// The `"kind"` of `best.json`.
    pub const KIND: &'static str = "evo-best";

    /// Reads `best.json`; errors name the file.
    pub fn read(path: &Path) -> Result<EvoBest, EvidenceError> {
        read_json(path)
    }

    /// Writes `best.json` atomically.
    pub fn write(&self, path: &Path) -> Result<(), EvidenceError> {
        write_json_atomic(path, self)
    }
}
