//! The search log of `cargo xtask evo` / `micro`: one CSV row per evaluated candidate.
//!
//! Columns are the fixed fields of [`EvoCandidate`] plus one column per config key (the union of
//! keys over all rows, sorted), so the log opens cleanly in a spreadsheet. Any column that is not a
//! fixed field is read back as a config key; empty cells are `None` (or an absent key).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::store::write_bytes_atomic;
use crate::EvidenceError;

/// One evaluated configuration in a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvoCandidate {
    /// Generation (0 for the seed population).
    pub generation: u32,
    /// The configuration, as `-D` defines.
    pub config: BTreeMap<String, String>,
    /// `"ok"`, or `"invalid: <why>"` (did not compile, wrong result, too much shared memory...).
    pub status: String,
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

impl EvoCandidate {
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
/// use attn_evidence::{read_evo_log, write_evo_log, EvoCandidate};
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("evo/run1/log.csv");
/// let row = EvoCandidate {
///     generation: 0,
///     config: [("BLOCK_M".to_string(), "128".to_string())].into(),
///     status: "ok".into(),
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
    let keys: BTreeSet<&str> = rows
        .iter()
        .flat_map(|row| row.config.keys().map(String::as_str))
        .collect();
    let mut writer = csv::Writer::from_writer(Vec::new());
    let header = std::iter::once("generation")
        .chain(keys.iter().copied())
        .chain(FIXED_AFTER_CONFIG);
    writer
        .write_record(header)
        .map_err(|e| fail(e.to_string()))?;
    for row in rows {
        let mut record = vec![row.generation.to_string()];
        record.extend(
            keys.iter()
                .map(|k| row.config.get(*k).cloned().unwrap_or_default()),
        );
        record.push(row.status.clone());
        record.extend(
            row.optional_fields()
                .iter()
                .map(|v| v.map(|x| x.to_string()).unwrap_or_default()),
        );
        writer
            .write_record(&record)
            .map_err(|e| fail(e.to_string()))?;
    }
    let bytes = writer.into_inner().map_err(|e| fail(e.to_string()))?;
    write_bytes_atomic(path, &bytes)
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
        let mut config = BTreeMap::new();
        for (name, value) in header.iter().zip(record.iter()) {
            if name == "generation" || FIXED_AFTER_CONFIG.contains(&name.as_str()) {
                fields.insert(name, value);
            } else if !value.is_empty() {
                config.insert(name.clone(), value.to_owned());
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
            config,
            status: cell("status").to_owned(),
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
