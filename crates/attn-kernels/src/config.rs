//! Typed kernel configs: knobs with domains, turned into `-D` defines.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// A knob's name: the define it sets. The registry names its knobs through [`names`]; a config
/// read from text keeps its names as text, compared with these by [`KnobName::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KnobName(&'static str);

impl KnobName {
    /// The define's name, e.g. `BLOCK_M`.
    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

impl AsRef<str> for KnobName {
    fn as_ref(&self) -> &str {
        self.0
    }
}

impl fmt::Display for KnobName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.0)
    }
}

impl PartialEq<str> for KnobName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for KnobName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for KnobName {
    fn eq(&self, other: &String) -> bool {
        self.0 == other
    }
}

/// Every knob name of the registered implementations, defined once.
pub mod names {
    use super::KnobName;

    macro_rules! knob_names {
        ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
            $($(#[$doc])* pub const $name: KnobName = KnobName(stringify!($name));)*
        };
    }

    knob_names! {
        /// naive: query rows (warps) per block.
        ROWS_PER_BLOCK,
        /// backward-mma: dQ added in key-tile order (bitwise stable gradients).
        DETERMINISTIC,
        /// Query rows per block.
        BLOCK_M,
        /// Keys per K/V tile.
        BLOCK_N,
        /// Warps per block (hopper: consumer warps).
        NUM_WARPS,
        /// K/V pipeline depth.
        STAGES,
        /// mma: query rows per warp.
        WARP_M,
        /// mma: warps sharing a row group's keys.
        KV_SPLIT,
        /// mma: Q's fragments held in registers.
        Q_IN_REGS,
        /// mma: the min blocks per SM hint of `__launch_bounds__`.
        MIN_BLOCKS,
        /// hopper: S(j+1) issued before P(j)·V(j).
        OVERLAP,
        /// hopper: consumer warpgroups taking turns.
        PINGPONG,
        /// hopper: the work order (grid or persistent).
        SCHEDULE,
        /// hopper: Q·Kᵀ's A operand from registers.
        Q_REGS,
        /// hopper: N of the P·V wgmma.
        PV_N,
        /// hopper: conditional rescaling of O.
        LAZY_RESCALE,
        /// hopper: Q tiles of the persistent loop.
        Q_STAGES,
        /// hopper: blocks per thread-block cluster.
        CLUSTER,
        /// hopper: when the one Q tile goes back to the producer.
        Q_RELEASE,
        /// hopper: a persistent cluster's blocks take two heads.
        CLUSTER_HEADS,
        /// hopper: the stream-K tail.
        STREAM_K,
        /// hopper: items chained in the persistent loop.
        CHAIN,
        /// decode: splits of each sequence's keys (0: auto, the host's choice for the GPU).
        SPLITS,
        /// decode: the most warps of a block that take distinct rows.
        ROW_WARPS,
        /// decode: block-table entries read a tile before their rows are gathered.
        PAGE_AHEAD,
    }
}

/// Why a config cannot be read or cannot be valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A part of `K=V,K=V` text without `=`.
    #[error("`{0}` is not KNOB=VALUE")]
    NotKnobValue(String),
    /// A value that is neither an integer nor a name of its knob's values.
    #[error("`{0}`: the value must be an integer")]
    NotInteger(String),
    /// A knob the implementation does not have.
    #[error("unknown knob {name} (knobs: {known})")]
    UnknownKnob {
        /// The knob asked for.
        name: String,
        /// The implementation's knobs, comma-separated, or `none`.
        known: String,
    },
    /// A value outside its knob's domain.
    #[error("{name}={value} is outside its domain {domain:?}")]
    OutsideDomain {
        /// The knob.
        name: String,
        /// The value asked for.
        value: i64,
        /// The values it may take.
        domain: &'static [i64],
    },
    /// More threads per block than the device has.
    #[error("{threads} threads per block > the device's {limit}")]
    TooManyThreads {
        /// The config's threads per block.
        threads: u32,
        /// The device's.
        limit: u32,
    },
    /// More dynamic shared memory per block than the device has.
    #[error("{bytes} bytes of shared memory per block > the device's {limit}")]
    TooMuchSharedMemory {
        /// The config's bytes.
        bytes: u32,
        /// The device's.
        limit: u32,
    },
    /// A combination of knobs (or of knobs and head dim) the implementation rules out; the reason
    /// says what to change.
    #[error("{0}")]
    Rule(String),
}

/// One tunable of an implementation: a compile-time define with the values it may take.
#[derive(Debug, Clone, Copy)]
pub struct Knob {
    /// The define's name, e.g. `BLOCK_M`.
    pub name: KnobName,
    /// The values it may take.
    pub domain: &'static [i64],
    /// What it does, in a few words.
    pub doc: &'static str,
}

/// Knob values that also have a name on the command line (`SCHEDULE=persistent`): the knob, then
/// each name and the integer it stands for (the define the kernel sees). A config keeps the integer.
pub const NAMED_VALUES: &[(KnobName, &[(&str, i64)])] = &[
    (names::SCHEDULE, &[("grid", 0), ("persistent", 1)]),
    (names::SPLITS, &[("auto", 0)]),
];

/// The integer a named value of `knob` stands for ([`NAMED_VALUES`]).
fn named_value(knob: &str, name: &str) -> Option<i64> {
    NAMED_VALUES
        .iter()
        .find(|(k, _)| *k == knob)
        .and_then(|(_, names)| names.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)))
        .map(|(_, v)| *v)
}

/// A config: a value for each knob. Displays and parses as `BLOCK_M=64,BLOCK_N=64`.
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Config(pub BTreeMap<String, i64>);

impl Config {
    /// That every knob this config sets is one of `knobs` and within its domain: the first check
    /// of both registries' `resolve` (prefill and decode), one copy so that their errors agree.
    pub(crate) fn check_domains(&self, knobs: &[Knob]) -> Result<(), ConfigError> {
        for (name, &value) in &self.0 {
            let knob = knobs.iter().find(|k| k.name == *name).ok_or_else(|| {
                let known: Vec<&str> = knobs.iter().map(|k| k.name.as_str()).collect();
                ConfigError::UnknownKnob {
                    name: name.clone(),
                    known: if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    },
                }
            })?;
            if !knob.domain.contains(&value) {
                return Err(ConfigError::OutsideDomain {
                    name: name.clone(),
                    value,
                    domain: knob.domain,
                });
            }
        }
        Ok(())
    }

    /// A config from `(name, value)` pairs.
    pub fn from_pairs<K: AsRef<str>>(pairs: &[(K, i64)]) -> Config {
        Config(
            pairs
                .iter()
                .map(|(k, v)| (k.as_ref().to_string(), *v))
                .collect(),
        )
    }

    /// The value of a knob, if set.
    pub fn get(&self, name: impl AsRef<str>) -> Option<i64> {
        self.0.get(name.as_ref()).copied()
    }

    /// `self` with every knob of `overrides` replaced.
    pub fn merged(&self, overrides: &Config) -> Config {
        let mut out = self.clone();
        out.0
            .extend(overrides.0.iter().map(|(k, v)| (k.clone(), *v)));
        out
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&parts.join(","))
    }
}

impl FromStr for Config {
    type Err = ConfigError;

    /// Parses `K=V,K=V` (knob names are upper-cased; values are integers, or a name of
    /// [`NAMED_VALUES`] such as `SCHEDULE=persistent`).
    fn from_str(s: &str) -> Result<Config, ConfigError> {
        let mut map = BTreeMap::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| ConfigError::NotKnobValue(part.to_string()))?;
            let key = key.trim().to_ascii_uppercase();
            let value: i64 = match value.trim().parse() {
                Ok(v) => v,
                Err(_) => named_value(&key, value.trim())
                    .ok_or_else(|| ConfigError::NotInteger(part.to_string()))?,
            };
            map.insert(key, value);
        }
        Ok(Config(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_values_parse_to_their_integers_and_others_are_refused() {
        let cfg: Config = "schedule=persistent,STAGES=2".parse().unwrap();
        assert_eq!(cfg, Config::from_pairs(&[("SCHEDULE", 1), ("STAGES", 2)]));
        assert_eq!(cfg.to_string(), "SCHEDULE=1,STAGES=2");
        let grid: Config = "SCHEDULE=Grid".parse().unwrap();
        assert_eq!(grid.get("SCHEDULE"), Some(0));
        let err = "SCHEDULE=sometimes".parse::<Config>().unwrap_err();
        assert!(err.to_string().contains("must be an integer"), "{err}");
        // A name belongs to its knob only.
        assert!("STAGES=persistent".parse::<Config>().is_err());
    }
}
