//! What an evidence file is: its `"kind"` field, typed.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::store::read_json;
use crate::EvidenceError;

/// The `"kind"` of an evidence file, written as before (`"gate"`, `"evo-best"`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EvidenceKind {
    /// `evidence/gate/*.json`: a [`crate::GateRun`].
    Gate,
    /// `evidence/bench/*.json`: a [`crate::BenchRun`].
    Bench,
    /// `evidence/sanitize/*.json`: a [`crate::SanitizeRun`].
    Sanitize,
    /// `evo/<run>/best.json`: an [`crate::EvoBest`].
    EvoBest,
    /// `evo/<run>/finalists.json`: an [`crate::EvoFinalists`].
    EvoFinalists,
    /// `micro/<target>/best.json`: a [`crate::MicroBest`].
    MicroBest,
    /// `micro/<target>/correlation.json`: a [`crate::MicroCorrelation`].
    MicroCorrelation,
    /// `evidence/matrix/*.json`: a [`crate::MatrixRun`].
    Matrix,
}

impl EvidenceKind {
    /// As written in files.
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceKind::Gate => "gate",
            EvidenceKind::Bench => "bench",
            EvidenceKind::Sanitize => "sanitize",
            EvidenceKind::EvoBest => "evo-best",
            EvidenceKind::EvoFinalists => "evo-finalists",
            EvidenceKind::MicroBest => "micro-best",
            EvidenceKind::MicroCorrelation => "micro-correlation",
            EvidenceKind::Matrix => "matrix",
        }
    }
}

impl std::fmt::Display for EvidenceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A file type that says what it is in its `"kind"` field.
pub trait Kinded: serde::de::DeserializeOwned {
    /// The kind every file of this type carries.
    const KIND: EvidenceKind;

    /// The kind this value carries.
    fn kind(&self) -> EvidenceKind;

    /// Reads a file of this type, refusing a newer schema or another kind of file; errors name
    /// the file.
    fn read(path: &Path) -> Result<Self, EvidenceError> {
        let value: Self = read_json(path)?;
        if value.kind() != Self::KIND {
            return Err(EvidenceError::WrongKind {
                path: path.to_owned(),
                expected: Self::KIND,
                found: value.kind(),
            });
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::{EvidenceKind, Kinded};
    use crate::EvidenceError;

    #[derive(serde::Deserialize)]
    struct Best {
        kind: EvidenceKind,
    }

    impl Kinded for Best {
        const KIND: EvidenceKind = EvidenceKind::EvoBest;
        fn kind(&self) -> EvidenceKind {
            self.kind
        }
    }

    #[test]
    fn a_file_of_another_kind_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("best.json");
        std::fs::write(&path, r#"{"kind":"evo-finalists"}"#).unwrap();
        let err = Best::read(&path).err().unwrap();
        assert!(matches!(err, EvidenceError::WrongKind { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("a file of kind evo-finalists, not evo-best"),
            "{err}"
        );
        std::fs::write(&path, r#"{"kind":"evo-best"}"#).unwrap();
        assert_eq!(Best::read(&path).unwrap().kind, EvidenceKind::EvoBest);
    }

    #[test]
    fn kinds_are_written_as_before() {
        for kind in [
            EvidenceKind::Gate,
            EvidenceKind::Bench,
            EvidenceKind::Sanitize,
            EvidenceKind::EvoBest,
            EvidenceKind::EvoFinalists,
            EvidenceKind::MicroBest,
            EvidenceKind::MicroCorrelation,
        ] {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{kind}\""));
            assert_eq!(serde_json::from_str::<EvidenceKind>(&json).unwrap(), kind);
        }
        assert!(serde_json::from_str::<EvidenceKind>("\"ncu\"").is_err());
    }
}
