//! Reading and writing evidence files: atomic writes, kind dispatch, directory loading, file names.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::{BenchRun, EvidenceError, GateRun, Provenance, SCHEMA_VERSION};

/// One evidence file: a gate run or a bench run, told apart by its `"kind"` field.
// A handful of these live at once; unboxed variants keep matching on them simple.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Evidence {
    /// `"kind": "gate"`.
    Gate(GateRun),
    /// `"kind": "bench"`.
    Bench(BenchRun),
}

impl Evidence {
    /// [`crate::EvidenceKind::Gate`] or [`crate::EvidenceKind::Bench`].
    pub fn kind(&self) -> crate::EvidenceKind {
        match self {
            Evidence::Gate(_) => crate::EvidenceKind::Gate,
            Evidence::Bench(_) => crate::EvidenceKind::Bench,
        }
    }

    /// Where and when the evidence was produced.
    pub fn provenance(&self) -> &Provenance {
        match self {
            Evidence::Gate(run) => &run.provenance,
            Evidence::Bench(run) => &run.provenance,
        }
    }
}

/// Writes `value` as compact JSON (one line, with a final newline) to `path` atomically: a
/// temporary file in the same directory is written, synced and renamed over `path`, so a reader
/// never sees half a file. Creates missing parent directories.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), EvidenceError> {
    let mut bytes = serde_json::to_vec(value).map_err(|source| EvidenceError::Encode {
        what: path.display().to_string(),
        source,
    })?;
    bytes.push(b'\n');
    write_bytes_atomic(path, &bytes)
}

/// Writes `bytes` to `path` atomically (temporary file in the same directory, then rename); creates
/// missing parent directories. For the CSV and text files written beside the JSON.
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<(), EvidenceError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let fail = |source| EvidenceError::Write {
        path: path.to_owned(),
        source,
    };
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    fs::create_dir_all(dir).map_err(fail)?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "evidence".into());
    // Dot-prefixed so that directory scans skip it; pid + counter so concurrent writers don't collide.
    let temp = dir.join(format!(
        ".{file_name}.tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)
    })();
    if result.is_err() {
        // Best effort: the write already failed, and the temp file is hidden from scans anyway.
        let _ = fs::remove_file(&temp);
    }
    result.map_err(fail)
}

/// Reads a JSON file of type `T` (a search's files), refusing a newer schema. Errors name the
/// file.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, EvidenceError> {
    let text = fs::read_to_string(path).map_err(|source| EvidenceError::Read {
        path: path.to_owned(),
        source,
    })?;
    let value = parse_value(path, &text)?;
    check_schema(path, &value)?;
    serde_json::from_value(value).map_err(|source| EvidenceError::Json {
        path: path.to_owned(),
        source,
    })
}

fn check_schema(path: &Path, value: &serde_json::Value) -> Result<(), EvidenceError> {
    match value.get("schema").and_then(|s| s.as_u64()) {
        Some(found) if found > u64::from(SCHEMA_VERSION) => Err(EvidenceError::SchemaTooNew {
            path: path.to_owned(),
            found,
            supported: SCHEMA_VERSION,
        }),
        _ => Ok(()),
    }
}

/// Reads one gate or bench file. Errors name the file: unreadable, not JSON, an unknown `"kind"`,
/// a newer schema, or a field that does not match the schema.
pub fn read(path: &Path) -> Result<Evidence, EvidenceError> {
    let text = fs::read_to_string(path).map_err(|source| EvidenceError::Read {
        path: path.to_owned(),
        source,
    })?;
    let value = parse_value(path, &text)?;
    from_value(path, value)
}

fn parse_value(path: &Path, text: &str) -> Result<serde_json::Value, EvidenceError> {
    serde_json::from_str(text).map_err(|source| EvidenceError::Json {
        path: path.to_owned(),
        source,
    })
}

fn kind_of(value: &serde_json::Value) -> &str {
    value.get("kind").and_then(|k| k.as_str()).unwrap_or("")
}

fn from_value(path: &Path, value: serde_json::Value) -> Result<Evidence, EvidenceError> {
    let json_error = |source| EvidenceError::Json {
        path: path.to_owned(),
        source,
    };
    check_schema(path, &value)?;
    match kind_of(&value) {
        "gate" => serde_json::from_value(value)
            .map(Evidence::Gate)
            .map_err(json_error),
        "bench" => serde_json::from_value(value)
            .map(Evidence::Bench)
            .map_err(json_error),
        other => Err(EvidenceError::UnknownKind {
            path: path.to_owned(),
            kind: other.to_owned(),
        }),
    }
}

impl<'de> Deserialize<'de> for Evidence {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        from_value(Path::new("<input>"), value).map_err(serde::de::Error::custom)
    }
}

/// Every `*.json` file under `dir`, recursively, sorted by path; hidden files (temporaries) skipped.
pub fn json_files(dir: &Path) -> Result<Vec<PathBuf>, EvidenceError> {
    let mut found = Vec::new();
    collect_json(dir, &mut found)?;
    found.sort();
    Ok(found)
}

fn collect_json(dir: &Path, found: &mut Vec<PathBuf>) -> Result<(), EvidenceError> {
    let read_error = |source| EvidenceError::Read {
        path: dir.to_owned(),
        source,
    };
    for entry in fs::read_dir(dir).map_err(read_error)? {
        let entry = entry.map_err(read_error)?;
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let file_type = entry.file_type().map_err(|source| EvidenceError::Read {
            path: path.clone(),
            source,
        })?;
        if file_type.is_dir() {
            collect_json(&path, found)?;
        } else if path.extension().is_some_and(|ext| ext == "json") {
            found.push(path);
        }
    }
    Ok(())
}

/// Loads every gate and bench file under `dir` (recursively), sorted by (`provenance.date`, path).
///
/// JSON files whose `"kind"` is neither `"gate"` nor `"bench"` (ncu summaries, search results) are
/// skipped, as are non-JSON files (README.md, CSV) and hidden files. A file that claims to be a gate
/// or bench run but does not parse is an error naming the file, never silently skipped. A missing
/// `dir` is an error; an empty one gives an empty list.
pub fn load_dir(dir: &Path) -> Result<Vec<(PathBuf, Evidence)>, EvidenceError> {
    let mut loaded = Vec::new();
    for path in json_files(dir)? {
        let text = fs::read_to_string(&path).map_err(|source| EvidenceError::Read {
            path: path.clone(),
            source,
        })?;
        let value = parse_value(&path, &text)?;
        if matches!(kind_of(&value), "gate" | "bench") {
            let evidence = from_value(&path, value)?;
            loaded.push((path, evidence));
        }
    }
    loaded.sort_by(|(path_a, a), (path_b, b)| {
        (&a.provenance().date, path_a).cmp(&(&b.provenance().date, path_b))
    });
    Ok(loaded)
}

/// File name for a new evidence file: `"<date>-<gpu-slug>-<rev7>.json"`, e.g.
/// `"2025-11-22T14-19-00Z-nvidia-h100-80gb-hbm3-1f367d0.json"`. Colons in the date become dashes
/// (portable file names that still sort by time). The kind is not repeated in the name: it is the
/// folder (`evidence/<kind>/`, see [`evidence_path`]); the parameter only keeps call sites explicit.
///
/// ```
/// use attn_evidence::evidence_file_name;
/// assert_eq!(
///     evidence_file_name("gate", "2025-11-22T14:19:00Z", "NVIDIA H100 80GB HBM3", "1f367d0c0ffee"),
///     "2025-11-22T14-19-00Z-nvidia-h100-80gb-hbm3-1f367d0.json"
/// );
/// ```
pub fn evidence_file_name(_kind: &str, date: &str, gpu: &str, git_rev: &str) -> String {
    let date = date.replace(':', "-");
    let rev: String = git_rev.chars().take(7).collect();
    let rev = if rev.is_empty() {
        "norev".into()
    } else {
        slug(&rev)
    };
    format!("{date}-{}-{rev}.json", slug(gpu))
}

/// `<root>/<kind>/<evidence_file_name(..)>`, e.g. `evidence/gate/2025-...-1f367d0.json`.
pub fn evidence_path(root: &Path, kind: &str, date: &str, gpu: &str, git_rev: &str) -> PathBuf {
    root.join(slug(kind))
        .join(evidence_file_name(kind, date, gpu, git_rev))
}

/// Lowercase ASCII letters and digits, runs of anything else collapsed to one `-`, trimmed;
/// `"unknown"` when nothing is left. Past [`SLUG_MAX`] characters (a gate over a dozen shapes
/// named one by one: file systems refuse names over 255 bytes) the first part is kept and a
/// hash of the whole appended, so that two long texts still get two names.
pub fn slug(text: &str) -> String {
    let full = full_slug(text);
    if full.len() <= SLUG_MAX {
        return full;
    }
    // FNV-1a, 64-bit: stable across runs and platforms (the standard hasher is not).
    let hash = full.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let head = full[..SLUG_MAX - 17].trim_end_matches('-');
    format!("{head}-{hash:016x}")
}

/// The longest [`slug`].
pub const SLUG_MAX: usize = 96;

fn full_slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        "unknown".into()
    } else {
        out
    }
}

#[cfg(test)]
mod slug_tests {
    use super::{slug, SLUG_MAX};

    #[test]
    fn slugs_are_short_enough_for_a_file_name_and_long_texts_stay_apart() {
        assert_eq!(
            slug("hopper vs FA3: 2,16,8192,128 causal"),
            "hopper-vs-fa3-2-16-8192-128-causal"
        );
        assert_eq!(slug("  --  "), "unknown");
        let shapes = |last: &str| {
            let mut text = "hopper vs fa3".to_string();
            for s in 0..12 {
                text.push_str(&format!(
                    " 2,32/8,{},128 causal window=4096,-1",
                    1024 << (s % 5)
                ));
            }
            text + last
        };
        let (a, b) = (slug(&shapes("x")), slug(&shapes("y")));
        assert!(a.len() <= SLUG_MAX && b.len() <= SLUG_MAX, "{a}");
        assert!(a.starts_with("hopper-vs-fa3-2-32-8-1024-128-causal"), "{a}");
        assert_ne!(a, b);
        assert_eq!(a, slug(&shapes("x")));
    }
}
