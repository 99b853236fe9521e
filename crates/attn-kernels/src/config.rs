//! Typed kernel configs: knobs with domains, turned into `-D` defines.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// One tunable of an implementation: a compile-time define with the values it may take.
#[derive(Debug, Clone, Copy)]
pub struct Knob {
    /// The define's name, e.g. `BLOCK_M`.
    pub name: &'static str,
    /// The values it may take.
    pub domain: &'static [i64],
    /// What it does, in a few words.
    pub doc: &'static str,
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
    /// A config from `(name, value)` pairs.
    pub fn from_pairs(pairs: &[(&str, i64)]) -> Config {
        Config(pairs.iter().map(|(k, v)| ((*k).to_string(), *v)).collect())
    }

    /// The value of a knob, if set.
    pub fn get(&self, name: &str) -> Option<i64> {
        self.0.get(name).copied()
    }

    /// `self` with every knob of `overrides` replaced.
    pub fn merged(&self, overrides: &Config) -> Config {
        let mut out = self.clone();
        out.0
            .extend(overrides.0.iter().map(|(k, v)| (k.clone(), *v)));
        out
    }

    /// The knobs as strings, for evidence files.
    pub fn to_strings(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect()
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&parts.join(","))
    }
}

impl FromStr for Config {
    type Err = String;

    /// Parses `K=V,K=V` (knob names are upper-cased; values are integers).
    fn from_str(s: &str) -> Result<Config, String> {
        let mut map = BTreeMap::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not KNOB=VALUE"))?;
            let value: i64 = value
                .trim()
                .parse()
                .map_err(|_| format!("`{part}`: the value must be an integer"))?;
            map.insert(key.trim().to_ascii_uppercase(), value);
        }
        Ok(Config(map))
    }
}
