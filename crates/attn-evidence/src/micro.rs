//! The micro-benchmark's files (`cargo xtask micro`), one folder per target under
//! `evidence/micro/<target>/`: `log.csv` (one [`crate::EvoCandidate`] row per tile config),
//! `best.json` ([`MicroBest`], the ranking) and `correlation.json` ([`MicroCorrelation`], how well
//! the ranking predicted a search's measured one).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use attn_stats::{Kendall, Spearman};
use serde::{Deserialize, Serialize};

use crate::store::write_json_atomic;
use crate::{EvidenceError, Provenance, ShapeSpec};

/// Which kernel pipeline the micro-benchmark measures, and so which implementations its ranking
/// seeds.
///
/// ```
/// use attn_evidence::MicroTarget;
/// let target: MicroTarget = "hopper".parse()?;
/// assert_eq!(target.to_string(), "hopper");
/// assert_eq!(MicroTarget::for_implementation(Some("mma")), MicroTarget::CpAsync);
/// assert_eq!(
///     MicroTarget::CpAsync.dir(std::path::Path::new("evidence")),
///     std::path::Path::new("evidence/micro/cp-async")
/// );
/// assert!("tma".parse::<MicroTarget>().is_err());
/// # Ok::<(), attn_evidence::EvidenceError>(())
/// ```
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum MicroTarget {
    /// `kernels/micro.cu`: K and V tiles through a cp.async ring (the pipeline of `mma` and
    /// `tiled`). The default: the only target before there were two.
    #[default]
    CpAsync,
    /// `kernels/micro_hopper.cu`: `hopper`'s TMA producer, mbarrier ring and wgmma consumers.
    Hopper,
}

impl MicroTarget {
    /// Every target.
    pub const ALL: [MicroTarget; 2] = [MicroTarget::CpAsync, MicroTarget::Hopper];

    /// `"cp-async"` or `"hopper"`: the name on the command line and of its evidence folder.
    pub fn name(self) -> &'static str {
        match self {
            MicroTarget::CpAsync => "cp-async",
            MicroTarget::Hopper => "hopper",
        }
    }

    /// The knobs its ranking varies (its log's config columns), named as the implementations it
    /// seeds name them.
    pub fn knobs(self) -> &'static [&'static str] {
        match self {
            MicroTarget::CpAsync => &["BLOCK_N", "NUM_WARPS", "STAGES"],
            MicroTarget::Hopper => &["BLOCK_M", "BLOCK_N", "NUM_WARPS", "STAGES"],
        }
    }

    /// The target whose ranking seeds a search of `implementation`: hopper's own pipeline for
    /// `hopper`, the cp.async ring for the others (`mma`, `tiled`, a `--src` kernel: `None`).
    pub fn for_implementation(implementation: Option<&str>) -> MicroTarget {
        match implementation {
            Some("hopper") => MicroTarget::Hopper,
            _ => MicroTarget::CpAsync,
        }
    }

    /// Its folder under the evidence folder `evidence`: `<evidence>/micro/<name>`.
    pub fn dir(self, evidence: &Path) -> PathBuf {
        evidence.join("micro").join(self.name())
    }
}

impl fmt::Display for MicroTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for MicroTarget {
    type Err = EvidenceError;

    fn from_str(text: &str) -> Result<MicroTarget, EvidenceError> {
        MicroTarget::ALL
            .into_iter()
            .find(|t| t.name() == text)
            .ok_or_else(|| EvidenceError::MicroTarget(text.to_string()))
    }
}

fn one() -> u32 {
    1
}

/// One tile config of the micro-benchmark's ranking.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MicroRanked {
    /// The tile config's knobs ([`MicroTarget::knobs`]).
    pub config: BTreeMap<String, i64>,
    /// Median over blocks of `clock64()` cycles per tile.
    pub cycles_per_tile: f64,
    /// FLOPs per cycle per SM, as [`MicroBest::metric`] counts them: the ranking key.
    pub flops_per_cycle: f64,
    /// Blocks of the config one SM ran at once.
    #[serde(default = "one")]
    pub blocks_per_sm: u32,
}

/// `micro/<target>/best.json`: the micro-benchmark's top configs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MicroBest {
    /// Always [`crate::EvidenceKind::MicroBest`].
    pub kind: crate::EvidenceKind,
    /// The pipeline measured.
    #[serde(default)]
    pub target: MicroTarget,
    /// GPU name.
    pub gpu: String,
    /// The head dim of the tiles (the configs, and their ranking, depend on it).
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// Seed of the streamed data.
    pub seed: u64,
    /// Tiles each block streamed.
    pub tiles: usize,
    /// SMs the blocks were spread over: a config launched this many × its `blocks_per_sm`.
    pub blocks: usize,
    /// Configs measured.
    pub configs: usize,
    /// What `flops_per_cycle` counts.
    #[serde(default)]
    pub metric: String,
    /// The best, best first.
    pub top: Vec<MicroRanked>,
    /// What the ranking can and cannot predict.
    pub scope: String,
    /// Where it ran.
    pub provenance: Provenance,
}

impl MicroBest {
    /// The `"kind"` of `micro/<target>/best.json`.
    pub const KIND: crate::EvidenceKind = crate::EvidenceKind::MicroBest;

    /// Reads `micro/<target>/best.json`, refusing another kind of file; errors name the file.
    pub fn read(path: &Path) -> Result<MicroBest, EvidenceError> {
        <MicroBest as crate::Kinded>::read(path)
    }

    /// Writes `best.json` atomically.
    pub fn write(&self, path: &Path) -> Result<(), EvidenceError> {
        write_json_atomic(path, self)
    }
}

/// One config measured by both the micro-benchmark and a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MicroPair {
    /// Its micro knobs ([`MicroTarget::knobs`]).
    pub config: BTreeMap<String, i64>,
    /// Micro's score (FLOPs per cycle per SM).
    pub micro_score: f64,
    /// The search's best measured speedup over its baseline among its configs with these knobs.
    pub evo_speedup: f64,
    /// The search's configs with these knobs (measured and valid).
    pub evo_configs: usize,
    /// Rank in micro's ranking among the pairs (1 = best; ties share the mean rank).
    pub micro_rank: f64,
    /// Rank in the search's measured ranking among the pairs (1 = fastest).
    pub evo_rank: f64,
}

/// `micro/<target>/correlation.json`: how well the micro ranking predicted the ranking a search
/// measured, over the configs both measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MicroCorrelation {
    /// Always [`crate::EvidenceKind::MicroCorrelation`].
    pub kind: crate::EvidenceKind,
    /// The micro target.
    pub target: MicroTarget,
    /// When it was computed (RFC 3339, UTC).
    pub date: String,
    /// The micro log read.
    pub micro_log: PathBuf,
    /// The search's folder (`evo/<run>`) whose `log.csv` was read.
    pub evo_run: PathBuf,
    /// What the search tuned ([`crate::SearchSpec::target`]).
    pub evo_target: String,
    /// The problem the search tuned for.
    pub shape: ShapeSpec,
    /// The knobs configs were matched by.
    pub knobs: Vec<String>,
    /// Configs ranked in micro's log.
    pub micro_configs: usize,
    /// Distinct micro-knob configs the search measured validly.
    pub evo_configs: usize,
    /// The configs both measured, in micro's order.
    pub pairs: Vec<MicroPair>,
    /// Spearman's ρ of micro's scores against the search's speedups, its p-value and n.
    pub spearman: Spearman,
    /// The 95% confidence interval of ρ (Fisher's z; `None` under 4 pairs).
    pub spearman_ci95: Option<[f64; 2]>,
    /// Kendall's τ-b and its p-value.
    pub kendall: Kendall,
    /// The result in one sentence.
    pub reading: String,
    /// What micro cannot predict.
    pub scope: String,
}

impl MicroCorrelation {
    /// The `"kind"` of `correlation.json`.
    pub const KIND: crate::EvidenceKind = crate::EvidenceKind::MicroCorrelation;

    /// Reads `correlation.json`, refusing another kind of file; errors name the file.
    pub fn read(path: &Path) -> Result<MicroCorrelation, EvidenceError> {
        <MicroCorrelation as crate::Kinded>::read(path)
    }

    /// Writes `correlation.json` atomically.
    pub fn write(&self, path: &Path) -> Result<(), EvidenceError> {
        write_json_atomic(path, self)
    }
}

impl crate::Kinded for MicroBest {
    const KIND: crate::EvidenceKind = crate::EvidenceKind::MicroBest;

    fn kind(&self) -> crate::EvidenceKind {
        self.kind
    }
}

impl crate::Kinded for MicroCorrelation {
    const KIND: crate::EvidenceKind = crate::EvidenceKind::MicroCorrelation;

    fn kind(&self) -> crate::EvidenceKind {
        self.kind
    }
}
