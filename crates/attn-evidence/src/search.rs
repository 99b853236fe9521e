//! The JSON files of a search: `evo/<run>/search.json` (what is searched, read back by
//! `--resume`), `evo/<run>/best.json` (the winner) and `evo/<run>/finalists.json` (the finalists
//! of a composite-fitness search, profiled and ranked).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

use crate::store::{read_json, write_json_atomic};
use crate::{DecodeSpec, EvidenceError, Provenance, ShapeSpec};

/// The config key (and log column) that names a config's implementation in a search over
/// several (`--impl a,b,c`). Lower case, so that no knob (upper case) can take it. In a search's
/// own configs its value is the implementation's index in [`SearchSpec::implementations`]; in
/// the log's column it is the implementation's name, which rows hold typed
/// ([`crate::EvoCandidate::config`]): only the log's reader and writer read the column.
pub const IMPL_KNOB: &str = "impl";

/// A config of a search as it crosses from the search to what measures it, and as its log's
/// rows hold it: the registered implementation it runs (`None` for a `--src` kernel) and its
/// knobs, without the implementation's choice among them. The search resolves its own configs (in a search over
/// several implementations, [`IMPL_KNOB`]) into one of these once; nothing downstream reads
/// [`IMPL_KNOB`].
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ImplConfig {
    /// The registered implementation, `None` for a `--src` kernel (or a synthetic target). In a
    /// search log's row ([`crate::EvoCandidate::config`]) it is only there in a search over
    /// several implementations (the log's [`IMPL_KNOB`] column): `None` in any other.
    pub implementation: Option<String>,
    /// Each knob's value.
    pub knobs: BTreeMap<String, i64>,
}

impl ImplConfig {
    /// The config on one line as a search's summaries show it: `K=V,K=V` in name order, after
    /// the implementation's name when it has one (`mma BLOCK_M=64,STAGES=2`, or just `cublas`).
    ///
    /// ```
    /// let config = attn_evidence::ImplConfig {
    ///     implementation: Some("mma".into()),
    ///     knobs: [("STAGES".to_string(), 2), ("BLOCK_M".to_string(), 64)].into(),
    /// };
    /// assert_eq!(config.describe(), "mma BLOCK_M=64,STAGES=2");
    /// ```
    pub fn describe(&self) -> String {
        let knobs: Vec<String> = self.knobs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let knobs = knobs.join(",");
        match &self.implementation {
            Some(name) if knobs.is_empty() => name.clone(),
            Some(name) => format!("{name} {knobs}"),
            None => knobs,
        }
    }
}

/// One implementation of a search over several, and the values searched of each of its knobs
/// (none for an implementation without knobs, e.g. `cublas`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchImplementation {
    /// The registered implementation.
    pub name: String,
    /// Each knob and the values searched.
    pub knobs: BTreeMap<String, Vec<i64>>,
}

/// Whether a search's source file is a Triton kernel (`evo --triton`: a `.py` file) rather than a
/// CUDA one (`--src`).
pub fn is_triton_source(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "py")
}

/// What a search searches: written when a run starts, read back by `--resume`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchSpec {
    /// What is tuned: a registered implementation's name, several joined by commas (`hopper,mma`),
    /// `src:<file name>` or `synthetic`.
    pub target: String,
    /// The registered implementation, when the target is one.
    pub implementation: Option<String>,
    /// The implementations searched, in order, when the search chooses among several: the
    /// implementation is then a knob ([`IMPL_KNOB`]) with each one's knobs beneath it, and
    /// [`SearchSpec::knobs`] is empty. Empty for any other search (and in files from before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub implementations: Vec<SearchImplementation>,
    /// The kernel file, when the target is a `--src` kernel.
    pub src: Option<PathBuf>,
    /// The `--src` kernel's entry point, when not the default.
    pub entry: Option<String>,
    /// Defines every candidate gets (`--src`'s `--define`s).
    pub defines: BTreeMap<String, i64>,
    /// Each knob and the values searched (a search over several implementations: see
    /// [`SearchSpec::implementations`]).
    pub knobs: BTreeMap<String, Vec<i64>>,
    /// The problem tuned for (a decode search's: the prefill batch over its rows,
    /// [`crate::decode_shape`]).
    pub shape: ShapeSpec,
    /// The decode batch tuned for, when the target is a decode implementation (absent in any
    /// other search, and in files from before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<DecodeSpec>,
    /// What speedups are measured against.
    pub baseline: String,
    /// The SDPA backend of an `sdpa` baseline (`flashinfer` among them for decode); absent in
    /// files from before, whose searches used the command line's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdpa_backend: Option<String>,
    /// Seed of the search and of the inputs.
    pub seed: u64,
    /// Survivors per generation.
    pub population: usize,
    /// Generations at most.
    pub generations: u32,
}

impl SearchSpec {
    /// The problem as text: the decode batch's (`decode B=16 q=1 ...`), else the shape's.
    pub fn problem_text(&self) -> String {
        match &self.decode {
            Some(decode) => decode.to_string(),
            None => self.shape.to_string(),
        }
    }

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
    /// Always [`crate::EvidenceKind::EvoBest`].
    pub kind: crate::EvidenceKind,
    /// The run's folder name.
    pub run: String,
    /// [`SearchSpec::target`].
    pub target: String,
    /// The registered implementation of the best config (in a search over several, the one it
    /// chose); absent for a `--src` kernel or a synthetic search, and in files from before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<String>,
    /// The problem tuned for.
    pub shape: ShapeSpec,
    /// [`SearchSpec::decode`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<DecodeSpec>,
    /// What speedups were measured against.
    pub baseline: String,
    /// Seed of the search.
    pub seed: u64,
    /// The best config's knobs (without the implementation: see `implementation`), each an
    /// integer; files written before knobs were typed hold them as strings (`"64"`), which read
    /// the same.
    #[serde(deserialize_with = "knob_values")]
    pub config: BTreeMap<String, i64>,
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
    /// Its fitness during the search (its speedup).
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
    /// How Nsight Compute chose the winner, in a line (empty when it did not: `--fitness speedup`).
    #[serde(default)]
    pub ncu: String,
    /// How the winner was chosen when not by speedup alone (`--fitness composite`): the
    /// composite's formula and the winner's terms; every finalist's are in `finalists.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitness: Option<EvoFitness>,
    /// Where it ran (absent for synthetic searches).
    #[serde(default)]
    pub provenance: Option<Provenance>,
}

/// Reads a map of knob values (`best.json`'s and `finalists.json`'s `config`, an
/// implementation's or a gate case's defines): each value an integer (as they are written) or a
/// string holding one (`"64"`, as files written before knobs were typed hold them); any other
/// value is an error that names the knob.
pub(crate) fn knob_values<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, i64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Value {
        Integer(i64),
        Text(String),
    }
    BTreeMap::<String, Value>::deserialize(d)?
        .into_iter()
        .map(|(knob, value)| match value {
            Value::Integer(v) => Ok((knob, v)),
            Value::Text(text) => match text.trim().parse::<i64>() {
                Ok(v) => Ok((knob, v)),
                Err(_) => Err(serde::de::Error::custom(format!(
                    "knob {knob} = {text:?} is not an integer"
                ))),
            },
        })
        .collect()
}

/// `best.json`'s `fitness` section: the winner of a composite-fitness search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvoFitness {
    /// Always `composite`.
    pub method: String,
    /// The composite's formula with its weights ([`attn_ncu::formula`]).
    pub formula: String,
    /// Finalists profiled (the fastest valid candidates).
    pub finalists: usize,
    /// Of which scored (profiled with every counter the formula reads).
    pub scored: usize,
    /// The winner's score with its inputs, weights and penalty; `None` when no finalist could be
    /// scored (the winner is then the fastest).
    pub winner: Option<attn_ncu::Fitness>,
    /// The winner's place among the finalists by speedup alone (1: the fastest).
    pub speedup_rank: usize,
    /// The file with every finalist's terms, beside `best.json`.
    pub details: String,
}

/// One finalist of a composite-fitness search: its search numbers, what Nsight Compute measured
/// and its composite score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvoFinalist {
    /// Its place by composite score (1: the winner); finalists that could not be scored come
    /// after those that were, by speedup.
    pub rank: usize,
    /// Its place by speedup alone (1: the fastest).
    pub speedup_rank: usize,
    /// The registered implementation, when the target is one.
    pub implementation: Option<String>,
    /// Its knobs, as in the log (without the implementation), each an integer; files written
    /// before knobs were typed hold them as strings (`"64"`), which read the same.
    #[serde(deserialize_with = "knob_values")]
    pub config: BTreeMap<String, i64>,
    /// The generation that found it.
    pub generation: u32,
    /// Its median time in the search, µs.
    pub median_us: Option<f64>,
    /// Its speedup over the baseline in the search (the formula's speedup).
    pub speedup: Option<f64>,
    /// Lower end of the speedup's confidence interval.
    pub speedup_lower: Option<f64>,
    /// Upper end of the speedup's confidence interval.
    pub speedup_upper: Option<f64>,
    /// Profiled and scored, or why not (ncu failed, timed out, a counter was missing).
    pub status: crate::CandidateStatus,
    /// The kernels ncu profiled for it (one, or several for a path like cuBLAS's), with the
    /// metrics asked for, aggregated over the profiled launches, in base units.
    pub kernels: Vec<attn_ncu::KernelSummary>,
    /// Its composite score with every input, the weights and the penalty; `None` when not scored.
    pub fitness: Option<attn_ncu::Fitness>,
}

/// `evo/<run>/finalists.json`: the finalists of a composite-fitness search, ranked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvoFinalists {
    /// Always [`crate::EvidenceKind::EvoFinalists`].
    pub kind: crate::EvidenceKind,
    /// The run's folder name.
    pub run: String,
    /// The composite's formula with its weights ([`attn_ncu::formula`]).
    pub formula: String,
    /// The weights.
    pub weights: attn_ncu::FitnessWeights,
    /// Barriers per K/V tile every finalist was scored with.
    pub syncs_per_tile: f64,
    /// Where that number comes from.
    pub syncs_per_tile_source: String,
    /// How ncu ran: metric set, launches, clock and cache control.
    pub profiling: String,
    /// The finalists, best composite first.
    pub finalists: Vec<EvoFinalist>,
    /// Where it ran (absent for synthetic searches).
    #[serde(default)]
    pub provenance: Option<Provenance>,
}

impl EvoFinalists {
    /// The `"kind"` of `finalists.json`.
    pub const KIND: crate::EvidenceKind = crate::EvidenceKind::EvoFinalists;

    /// Reads `finalists.json`, refusing another kind of file; errors name the file.
    pub fn read(path: &Path) -> Result<EvoFinalists, EvidenceError> {
        <EvoFinalists as crate::Kinded>::read(path)
    }

    /// Writes `finalists.json` atomically.
    pub fn write(&self, path: &Path) -> Result<(), EvidenceError> {
        write_json_atomic(path, self)
    }
}

impl EvoBest {
    /// The `"kind"` of `best.json`.
    pub const KIND: crate::EvidenceKind = crate::EvidenceKind::EvoBest;

    /// Reads `best.json`, refusing another kind of file; errors name the file.
    pub fn read(path: &Path) -> Result<EvoBest, EvidenceError> {
        <EvoBest as crate::Kinded>::read(path)
    }

    /// Writes `best.json` atomically.
    pub fn write(&self, path: &Path) -> Result<(), EvidenceError> {
        write_json_atomic(path, self)
    }
}

impl crate::Kinded for EvoBest {
    const KIND: crate::EvidenceKind = crate::EvidenceKind::EvoBest;

    fn kind(&self) -> crate::EvidenceKind {
        self.kind
    }
}

impl crate::Kinded for EvoFinalists {
    const KIND: crate::EvidenceKind = crate::EvidenceKind::EvoFinalists;

    fn kind(&self) -> crate::EvidenceKind {
        self.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finalist() -> EvoFinalist {
        EvoFinalist {
            rank: 1,
            speedup_rank: 2,
            implementation: Some("hopper".into()),
            config: [("BLOCK_N".to_string(), 128), ("STAGES".to_string(), 2)].into(),
            generation: 3,
            median_us: Some(10.0),
            speedup: Some(1.5),
            speedup_lower: Some(1.4),
            speedup_upper: Some(1.6),
            status: crate::CandidateStatus::Ok,
            kernels: vec![],
            fitness: None,
        }
    }

    /// Knobs are written as integers, and read back from integers and from the strings that
    /// files written before knobs were typed hold (`"128"`).
    #[test]
    fn knobs_are_written_as_integers_and_read_from_integers_or_strings() {
        let typed = finalist();
        let new = serde_json::to_value(&typed).unwrap();
        assert_eq!(
            new["config"],
            serde_json::json!({"BLOCK_N": 128, "STAGES": 2})
        );
        assert_eq!(
            serde_json::from_value::<EvoFinalist>(new.clone()).unwrap(),
            typed
        );

        let mut old = new.clone();
        old["config"] = serde_json::json!({"BLOCK_N": "128", "STAGES": "2"});
        assert_eq!(serde_json::from_value::<EvoFinalist>(old).unwrap(), typed);

        let mut best = serde_json::json!({
            "kind": "evo-best", "run": "r", "target": "hopper", "implementation": "hopper",
            "shape": serde_json::to_value("2,8,1024,64".parse::<ShapeSpec>().unwrap()).unwrap(),
            "baseline": "sdpa", "seed": 1, "config": {"BLOCK_N": "128", "STAGES": 2},
            "generation": 0, "median_us": null, "speedup": null, "speedup_lower": null,
            "speedup_upper": null, "score": null, "candidates": 1, "invalid": 0,
            "reproduce": "cargo xtask gate"
        });
        let read: EvoBest = serde_json::from_value(best.clone()).unwrap();
        assert_eq!(read.config, typed.config);
        let written = serde_json::to_value(&read).unwrap();
        assert_eq!(
            written["config"],
            serde_json::json!({"BLOCK_N": 128, "STAGES": 2})
        );

        best["config"] = serde_json::json!({"BLOCK_N": "wide"});
        let err = serde_json::from_value::<EvoBest>(best).unwrap_err();
        assert!(err.to_string().contains("BLOCK_N"), "{err}");
    }
}
