//! Which code was measured.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One implementation of attention: one of our kernels with its config, or a reference library.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Implementation {
    /// `"tiled"`, `"mma"`, `"sdpa"`, `"cublas"`, or `"src:<file>"` for an ad-hoc source file.
    pub name: String,
    /// For `sdpa`: `"default"`, `"flash"`, `"efficient"`, `"cudnn"` or `"math"`.
    #[serde(default)]
    pub backend: Option<String>,
    /// Compile-time config as written to `-D` defines (`BLOCK_M` → 128), sorted by key (files
    /// written before knobs were typed hold the values as strings, which read the same).
    #[serde(default, deserialize_with = "crate::search::knob_values")]
    pub config: BTreeMap<String, i64>,
    /// SHA-256 of the kernel source that ran, hex; pins the version of a kernel across commits.
    #[serde(default)]
    pub source_sha256: Option<String>,
    /// The git commit the source was read from, when it is not the run's own (a ratchet's
    /// baseline: the candidate as committed at an earlier revision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

impl Implementation {
    /// An implementation with no backend, config or source hash.
    pub fn named(name: impl Into<String>) -> Self {
        Implementation {
            name: name.into(),
            backend: None,
            config: BTreeMap::new(),
            source_sha256: None,
            revision: None,
        }
    }

    /// Short label for tables and legends: the name, then `:backend` when there is one, or
    /// `@commit` (7 characters) when the source came from another revision.
    ///
    /// ```
    /// use attn_evidence::Implementation;
    /// let mut sdpa = Implementation::named("sdpa");
    /// assert_eq!(sdpa.label(), "sdpa");
    /// sdpa.backend = Some("flash".into());
    /// assert_eq!(sdpa.label(), "sdpa:flash");
    /// let mut before = Implementation::named("hopper");
    /// before.revision = Some("8bbe183c0ffee".into());
    /// assert_eq!(before.label(), "hopper@8bbe183");
    /// ```
    pub fn label(&self) -> String {
        let mut label = match &self.backend {
            Some(backend) => format!("{}:{backend}", self.name),
            None => self.name.clone(),
        };
        if let Some(rev) = &self.revision {
            label.push('@');
            label.extend(rev.chars().take(7));
        }
        label
    }

    /// The config as `"BLOCK_M=128,BLOCK_N=64"` (empty when there is none).
    pub fn config_string(&self) -> String {
        self.config
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Whether this is a reference library (`sdpa`, `cublas`, FlashAttention-3 as `fa3`) rather
    /// than one of our kernels.
    pub fn is_reference(&self) -> bool {
        matches!(self.name.as_str(), "sdpa" | "cublas" | "fa3")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defines_read_as_integers_from_old_string_files_and_are_written_as_integers() {
        let old: Implementation =
            serde_json::from_str(r#"{"name": "mma", "config": {"BLOCK_M": "64", "STAGES": " 2"}}"#)
                .unwrap();
        let new: Implementation =
            serde_json::from_str(r#"{"name": "mma", "config": {"BLOCK_M": 64, "STAGES": 2}}"#)
                .unwrap();
        assert_eq!(old, new);
        assert_eq!(old.config_string(), "BLOCK_M=64,STAGES=2");
        let written = serde_json::to_string(&new).unwrap();
        assert!(written.contains(r#""BLOCK_M":64"#), "{written}");
        let bad =
            serde_json::from_str::<Implementation>(r#"{"name": "mma", "config": {"X": "wide"}}"#);
        assert!(bad.unwrap_err().to_string().contains('X'));
    }
}
