//! The search log of `cargo xtask evo` / `micro`: one CSV row per evaluated candidate.
//!
//! Columns are the fixed fields of [`EvoCandidate`] plus one column per config key (the union of
//! knobs over all rows, sorted; a search over several implementations has the implementation's
//! column, [`IMPL_KNOB`], first), so the log opens cleanly in a spreadsheet. Any column that is
//! not a fixed field is read back as a knob (an integer), [`IMPL_KNOB`]'s as the
//! `implementation` of [`EvoCandidate::config`]; empty cells are `None` (or an absent knob).
//! Only this module's reader and writer know the implementation's column: rows hold it typed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::store::write_bytes_atomic;
use crate::{EvidenceError, ImplConfig, IMPL_KNOB};

/// One evaluated configuration in a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvoCandidate {
    /// Generation (0 for the seed population).
    pub generation: u32,
    /// The configuration: its knobs, as `-D` defines, and the implementation it runs in a
    /// search over several (the log's [`IMPL_KNOB`] column); `implementation` is `None` in any
    /// other search's rows (the search's own implementation, if any, is in its `search.json`).
    pub config: ImplConfig,
    /// Measured, or invalid and why (did not compile, wrong result, too much shared memory...).
    pub status: CandidateStatus,
    /// Median time per launch, µs.
    pub median_us: Option<f64>,
    /// Speedup over the baseline (baseline time / candidate time; above 1 is faster).
    pub speedup: Option<f64>,
    /// Lower end of the speedup's confidence interval.
    pub speedup_lower: Option<f64>,
    /// Upper end of the speedup's confidence interval.
    pub speedup_upper: Option<f64>,
    /// Fitness the search maximises.
    pub score: Option<f64>,
    /// Seconds spent compiling.
    pub compile_s: Option<f64>,
    /// Seconds spent checking and timing.
    pub run_s: Option<f64>,
}

/// How a candidate ended: measured, or invalid and why. Files hold the text `ok` or
/// `invalid: <why>` ([`std::fmt::Display`] writes it, [`std::str::FromStr`] reads it back).
///
/// ```
/// use attn_evidence::CandidateStatus;
/// let status: CandidateStatus = "invalid: timeout after 10 s".parse()?;
/// assert_eq!(status, CandidateStatus::invalid("timeout after 10 s"));
/// assert_eq!(status.to_string(), "invalid: timeout after 10 s");
/// assert!("ok".parse::<CandidateStatus>()?.is_ok());
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum CandidateStatus {
    /// Compiled, correct and timed.
    Ok,
    /// Not measured: why, on one line.
    Invalid {
        /// What went wrong.
        reason: String,
    },
}

impl CandidateStatus {
    /// An invalid candidate.
    pub fn invalid(reason: impl Into<String>) -> CandidateStatus {
        CandidateStatus::Invalid {
            reason: reason.into(),
        }
    }

    /// Whether the candidate was measured.
    pub fn is_ok(&self) -> bool {
        matches!(self, CandidateStatus::Ok)
    }
}

impl std::fmt::Display for CandidateStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CandidateStatus::Ok => f.write_str("ok"),
            CandidateStatus::Invalid { reason } => write!(f, "invalid: {reason}"),
        }
    }
}

impl std::str::FromStr for CandidateStatus {
    type Err = String;

    fn from_str(text: &str) -> Result<CandidateStatus, String> {
        if text == "ok" {
            return Ok(CandidateStatus::Ok);
        }
        match text.strip_prefix("invalid") {
            Some(rest) if rest.is_empty() || rest.starts_with(':') => {
                Ok(CandidateStatus::invalid(rest[rest.len().min(1)..].trim()))
            }
            _ => Err(format!(
                "status {text:?} is neither `ok` nor `invalid: <why>`"
            )),
        }
    }
}

impl From<CandidateStatus> for String {
    fn from(status: CandidateStatus) -> String {
        status.to_string()
    }
}

impl TryFrom<String> for CandidateStatus {
    type Error = String;

    fn try_from(text: String) -> Result<CandidateStatus, String> {
        text.parse()
    }
}

/// The fixed columns, in file order; config columns go between `generation` and `status`.
const FIXED_AFTER_CONFIG: [&str; 8] = [
    "status",
    "median_us",
    "speedup",
    "speedup_lower",
    "speedup_upper",
    "score",
    "compile_s",
    "run_s",
];

/// The config columns of `keys`: sorted and without repeats, [`IMPL_KNOB`] (the implementation's
/// name) first.
fn config_columns<'k>(keys: impl IntoIterator<Item = &'k str>) -> Vec<&'k str> {
    let mut columns: Vec<&str> = keys
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    columns.sort_by_key(|k| *k != IMPL_KNOB);
    columns
}

impl EvoCandidate {
    /// The row's config columns: [`IMPL_KNOB`] when it has an implementation, then its knobs.
    /// A knob may not take the implementation's column.
    fn config_keys(&self) -> Result<impl Iterator<Item = &str>, String> {
        if self.config.knobs.contains_key(IMPL_KNOB) {
            return Err(format!(
                "knob {IMPL_KNOB} takes the implementation's column"
            ));
        }
        let implementation = self.config.implementation.as_ref().map(|_| IMPL_KNOB);
        Ok(implementation
            .into_iter()
            .chain(self.config.knobs.keys().map(String::as_str)))
    }

    /// The row's cell in the config column `key`: the implementation's name for [`IMPL_KNOB`],
    /// else the knob's value; empty when the row has none.
    fn config_cell(&self, key: &str) -> String {
        if key == IMPL_KNOB {
            self.config.implementation.clone().unwrap_or_default()
        } else {
            self.config
                .knobs
                .get(key)
                .map(i64::to_string)
                .unwrap_or_default()
        }
    }

    /// The row's cells for the config columns `keys` (in order).
    fn record<'k>(&self, keys: impl Iterator<Item = &'k str>) -> Vec<String> {
        let mut record = vec![self.generation.to_string()];
        record.extend(keys.map(|k| self.config_cell(k)));
        record.push(self.status.to_string());
        record.extend(
            self.optional_fields()
                .iter()
                .map(|v| v.map(|x| x.to_string()).unwrap_or_default()),
        );
        record
    }

    fn optional_fields(&self) -> [Option<f64>; 7] {
        [
            self.median_us,
            self.speedup,
            self.speedup_lower,
            self.speedup_upper,
            self.score,
            self.compile_s,
            self.run_s,
        ]
    }
}

/// Writes a whole search log atomically (rewrite it after each generation; logs are small).
///
/// ```
/// use attn_evidence::{read_evo_log, write_evo_log, CandidateStatus, EvoCandidate, ImplConfig};
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("evo/run1/log.csv");
/// let row = EvoCandidate {
///     generation: 0,
///     config: ImplConfig {
///         implementation: None,
///         knobs: [("BLOCK_M".to_string(), 128)].into(),
///     },
///     status: CandidateStatus::Ok,
///     median_us: Some(31.5), speedup: Some(0.85), speedup_lower: Some(0.84), speedup_upper: Some(0.86),
///     score: Some(0.84), compile_s: Some(1.2), run_s: None,
/// };
/// write_evo_log(&path, &[row.clone()])?;
/// assert_eq!(read_evo_log(&path)?, vec![row]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_evo_log(path: &Path, rows: &[EvoCandidate]) -> Result<(), EvidenceError> {
    let fail = |message: String| EvidenceError::Csv {
        path: path.to_owned(),
        message,
    };
    let mut keys = Vec::new();
    for row in rows {
        keys.extend(row.config_keys().map_err(&fail)?);
    }
    let keys = config_columns(keys);
    let mut writer = csv::Writer::from_writer(Vec::new());
    let header = std::iter::once("generation")
        .chain(keys.iter().copied())
        .chain(FIXED_AFTER_CONFIG);
    writer
        .write_record(header)
        .map_err(|e| fail(e.to_string()))?;
    for row in rows {
        writer
            .write_record(row.record(keys.iter().copied()))
            .map_err(|e| fail(e.to_string()))?;
    }
    let bytes = writer.into_inner().map_err(|e| fail(e.to_string()))?;
    write_bytes_atomic(path, &bytes)
}

/// Appends rows to a search log one at a time, each written whole and flushed to disk before
/// [`EvoLogAppender::append`] returns: a search killed at any moment keeps every row it finished.
/// The config columns are fixed when the file is created (a search's knobs are known up front).
///
/// ```
/// use attn_evidence::{read_evo_log, CandidateStatus, EvoCandidate, EvoLogAppender, ImplConfig};
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("evo/run1/log.csv");
/// let row = |generation, status: CandidateStatus| EvoCandidate {
///     generation,
///     config: ImplConfig { implementation: None, knobs: [("STAGES".to_string(), 2)].into() },
///     status,
///     median_us: None, speedup: None, speedup_lower: None, speedup_upper: None, score: None,
///     compile_s: None, run_s: Some(10.0),
/// };
/// let keys = vec!["STAGES".to_string()];
/// let timeout = CandidateStatus::invalid("timeout after 10 s");
/// EvoLogAppender::open(&path, &keys)?.append(&row(0, CandidateStatus::Ok))?;
/// // Reopened (a resumed search): rows are added after the ones already there.
/// EvoLogAppender::open(&path, &keys)?.append(&row(1, timeout.clone()))?;
/// assert_eq!(read_evo_log(&path)?, vec![row(0, CandidateStatus::Ok), row(1, timeout)]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct EvoLogAppender {
    path: std::path::PathBuf,
    file: std::fs::File,
    keys: Vec<String>,
}

impl EvoLogAppender {
    /// Opens `path` for appending rows with the config columns `keys`. A new (or empty) file gets
    /// the header; an existing one must have exactly these columns. A partial last line (the
    /// process was killed while writing it) is cut off.
    pub fn open(path: &Path, keys: &[String]) -> Result<EvoLogAppender, EvidenceError> {
        use std::io::Write;
        let keys: Vec<String> = config_columns(keys.iter().map(String::as_str))
            .into_iter()
            .map(str::to_owned)
            .collect();
        let write_err = |source| EvidenceError::Write {
            path: path.to_owned(),
            source,
        };
        let header = {
            let mut w = csv::Writer::from_writer(Vec::new());
            let cells = std::iter::once("generation")
                .chain(keys.iter().map(String::as_str))
                .chain(FIXED_AFTER_CONFIG);
            w.write_record(cells).map_err(|e| EvidenceError::Csv {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
            w.into_inner().map_err(|e| EvidenceError::Csv {
                path: path.to_owned(),
                message: e.to_string(),
            })?
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(write_err)?;
        }
        let existing = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                return Err(EvidenceError::Read {
                    path: path.to_owned(),
                    source,
                })
            }
        };
        let complete = existing
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        if complete > 0 && !existing.starts_with(&header) {
            let found = String::from_utf8_lossy(
                &existing[..existing.iter().position(|b| *b == b'\n').unwrap_or(0)],
            )
            .into_owned();
            return Err(EvidenceError::Csv {
                path: path.to_owned(),
                message: format!(
                    "line 1: columns {found:?} differ from this search's {:?}",
                    String::from_utf8_lossy(&header).trim_end()
                ),
            });
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(path)
            .map_err(write_err)?;
        file.set_len(complete as u64).map_err(write_err)?;
        let mut file = {
            use std::io::Seek;
            file.seek(std::io::SeekFrom::End(0)).map_err(write_err)?;
            file
        };
        if complete == 0 {
            file.write_all(&header).map_err(write_err)?;
            file.sync_data().map_err(write_err)?;
        }
        Ok(EvoLogAppender {
            path: path.to_owned(),
            file,
            keys,
        })
    }

    /// Appends one row (one write) and flushes it to disk.
    pub fn append(&mut self, row: &EvoCandidate) -> Result<(), EvidenceError> {
        use std::io::Write;
        let fail = |message: String| EvidenceError::Csv {
            path: self.path.clone(),
            message,
        };
        let mut row_keys = row.config_keys().map_err(fail)?;
        if let Some(extra) = row_keys.find(|k| !self.keys.iter().any(|c| c == k)) {
            return Err(fail(format!(
                "config key {extra} is not a column of this log"
            )));
        }
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(row.record(self.keys.iter().map(String::as_str)))
            .map_err(|e| fail(e.to_string()))?;
        let line = w.into_inner().map_err(|e| fail(e.to_string()))?;
        let write_err = |source| EvidenceError::Write {
            path: self.path.clone(),
            source,
        };
        self.file.write_all(&line).map_err(write_err)?;
        self.file.sync_data().map_err(write_err)
    }
}

/// Reads a search log written by [`write_evo_log`]. Errors name the file and line.
pub fn read_evo_log(path: &Path) -> Result<Vec<EvoCandidate>, EvidenceError> {
    let text = std::fs::read_to_string(path).map_err(|source| EvidenceError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_evo_log(path, &text)
}

fn parse_evo_log(path: &Path, text: &str) -> Result<Vec<EvoCandidate>, EvidenceError> {
    let fail = |line: u64, message: String| EvidenceError::Csv {
        path: path.to_owned(),
        message: format!("line {line}: {message}"),
    };
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| fail(1, e.to_string()))?
        .iter()
        .map(str::to_owned)
        .collect();
    for required in std::iter::once("generation").chain(FIXED_AFTER_CONFIG) {
        if !header.iter().any(|h| h == required) {
            return Err(fail(1, format!("missing column {required:?}")));
        }
    }
    let mut rows = Vec::new();
    for record in reader.records() {
        let record =
            record.map_err(|e| fail(e.position().map_or(0, |p| p.line()), e.to_string()))?;
        let line = record.position().map_or(0, |p| p.line());
        let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
        let mut implementation = None;
        let mut knobs = BTreeMap::new();
        for (name, value) in header.iter().zip(record.iter()) {
            if name == "generation" || FIXED_AFTER_CONFIG.contains(&name.as_str()) {
                fields.insert(name, value);
            } else if value.is_empty() {
                continue;
            } else if name == IMPL_KNOB {
                implementation = Some(value.to_owned());
            } else {
                let knob = value
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| fail(line, format!("{name} = {value:?} is not an integer")))?;
                knobs.insert(name.clone(), knob);
            }
        }
        let cell = |name: &str| fields.get(name).copied().unwrap_or("");
        let number = |name: &str| -> Result<Option<f64>, EvidenceError> {
            match cell(name) {
                "" => Ok(None),
                text => text
                    .parse::<f64>()
                    .map(Some)
                    .map_err(|_| fail(line, format!("{name} = {text:?} is not a number"))),
            }
        };
        let generation = cell("generation").parse::<u32>().map_err(|_| {
            fail(
                line,
                format!(
                    "generation = {:?} is not a whole number",
                    cell("generation")
                ),
            )
        })?;
        rows.push(EvoCandidate {
            generation,
            config: ImplConfig {
                implementation,
                knobs,
            },
            status: cell("status").parse().map_err(|e| fail(line, e))?,
            median_us: number("median_us")?,
            speedup: number("speedup")?,
            speedup_lower: number("speedup_lower")?,
            speedup_upper: number("speedup_upper")?,
            score: number("score")?,
            compile_s: number("compile_s")?,
            run_s: number("run_s")?,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod appender_tests {
    use super::*;

    fn row(generation: u32) -> EvoCandidate {
        EvoCandidate {
            generation,
            config: ImplConfig {
                implementation: None,
                knobs: [("A".to_string(), i64::from(generation))].into(),
            },
            status: CandidateStatus::Ok,
            median_us: Some(1.5),
            speedup: None,
            speedup_lower: None,
            speedup_upper: None,
            score: Some(0.5),
            compile_s: None,
            run_s: None,
        }
    }

    #[test]
    fn the_implementation_column_comes_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.csv");
        let mut cublas = row(0);
        cublas.config = ImplConfig {
            implementation: Some("cublas".into()),
            knobs: BTreeMap::new(),
        };
        let mut mma = row(1);
        mma.config.implementation = Some("mma".into());
        let keys = ["A".to_string(), IMPL_KNOB.to_string()];
        let mut log = EvoLogAppender::open(&path, &keys).unwrap();
        log.append(&cublas).unwrap();
        log.append(&mma).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("generation,impl,A,status"), "{text}");
        assert!(text.contains("\n0,cublas,,ok,"), "{text}");
        assert_eq!(read_evo_log(&path).unwrap(), vec![cublas.clone(), mma]);
        write_evo_log(&path, &[cublas]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("generation,impl,status"), "{text}");
    }

    #[test]
    fn a_partial_last_line_is_cut_off_and_other_columns_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.csv");
        let keys = ["A".to_string()];
        let mut log = EvoLogAppender::open(&path, &keys).unwrap();
        log.append(&row(0)).unwrap();
        log.append(&row(1)).unwrap();
        drop(log);
        // A kill in the middle of the third row's write.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"2,2,o");
        std::fs::write(&path, &bytes).unwrap();
        assert!(read_evo_log(&path).is_err(), "the torn row is unreadable");
        EvoLogAppender::open(&path, &keys)
            .unwrap()
            .append(&row(2))
            .unwrap();
        assert_eq!(read_evo_log(&path).unwrap(), vec![row(0), row(1), row(2)]);
        // The same file as the log of a search over other knobs: refused, not mixed.
        let err = EvoLogAppender::open(&path, &["B".to_string()]).unwrap_err();
        assert!(err.to_string().contains("differ"), "{err}");
        let mut unknown = row(3);
        unknown.config.knobs.insert("C".into(), 1);
        let mut log = EvoLogAppender::open(&path, &keys).unwrap();
        assert!(log.append(&unknown).is_err());
    }
}
