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

/// Knob values that also have a name on the command line (`SCHEDULE=persistent`): the knob, then
/// each name and the integer it stands for (the define the kernel sees). A config keeps the integer.
pub const NAMED_VALUES: &[(&str, &[(&str, i64)])] =
    &[("SCHEDULE", &[("grid", 0), ("persistent", 1)])];

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
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&parts.join(","))
    }
}

impl FromStr for Config {
    type Err = String;

    /// Parses `K=V,K=V` (knob names are upper-cased; values are integers, or a name of
    /// [`NAMED_VALUES`] such as `SCHEDULE=persistent`).
    fn from_str(s: &str) -> Result<Config, String> {
        let mut map = BTreeMap::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not KNOB=VALUE"))?;
            let key = key.trim().to_ascii_uppercase();
            let value: i64 = match value.trim().parse() {
                Ok(v) => v,
                Err(_) => named_value(&key, value.trim())
                    .ok_or_else(|| format!("`{part}`: the value must be an integer"))?,
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
        assert!(err.contains("must be an integer"), "{err}");
        // A name belongs to its knob only.
        assert!("STAGES=persistent".parse::<Config>().is_err());
    }
}
