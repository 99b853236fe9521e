//! Parsing ncu's `--csv` output, `--page details` and `--page raw`.
//!
//! Real output is not clean CSV: ncu interleaves `==PROF==`/`==WARNING==` lines, and the profiled
//! program's own stdout lands in the same stream. We find the header (the first line starting with
//! `"ID"`), keep only lines that look like quoted CSV rows after it, and remember each kept line's
//! original number so errors point at the input.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{NcuError, Value};

/// One kernel launch as ncu reported it, with every metric it printed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// ncu's launch ID (the `ID` column), unique within one ncu run.
    pub id: u32,
    /// The kernel name as printed (demangled, possibly very long).
    pub kernel: String,
    /// Block size as printed, e.g. `(384, 1, 1)`.
    pub block: Option<String>,
    /// Grid size as printed, e.g. `(32, 1, 1)`.
    pub grid: Option<String>,
    /// CUDA device index.
    pub device: Option<u32>,
    /// Compute capability as printed, e.g. `9.0`.
    pub compute_capability: Option<String>,
    /// CUDA stream ID.
    pub stream: Option<u32>,
    /// Every metric of this launch, by ncu metric name, in base units.
    pub metrics: BTreeMap<String, Value>,
}

impl Launch {
    /// The metric's number in base units, if present and not `n/a`.
    pub fn value(&self, metric: &str) -> Option<f64> {
        self.metrics.get(metric).and_then(|v| v.value)
    }
}

/// Which ncu CSV page a text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Page {
    /// `--page details`: one row per (launch, metric).
    Details,
    /// `--page raw`: a names row, a units row, then one row per launch.
    Raw,
    /// `--page source --print-source sass`: one row per SASS instruction of one launch
    /// ([`crate::source`]; not a page of launches: [`parse`] never finds it).
    Source,
}

impl Page {
    /// The value ncu's `--page` option takes.
    pub fn as_arg(self) -> &'static str {
        match self {
            Page::Details => "details",
            Page::Raw => "raw",
            Page::Source => "source",
        }
    }
}

/// Columns that identify a launch rather than measure it; on the raw page everything else is a
/// metric.
const IDENTITY_COLUMNS: [&str; 11] = [
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
];

/// Parses either page, telling them apart by the header.
///
/// ```
/// let csv = concat!(
///     "==PROF== Connected to process 1 (/bin/app)\n",
///     "\"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n",
///     "\"0\",\"flash_fwd\",\"gpu__time_duration.sum\",\"usecond\",\"9.44\"\n",
/// );
/// let launches = attn_ncu::parse(csv)?;
/// assert_eq!(launches[0].value("gpu__time_duration.sum"), Some(9440.0));
/// # Ok::<(), attn_ncu::NcuError>(())
/// ```
pub fn parse(text: &str) -> Result<Vec<Launch>, NcuError> {
    let table = Table::read(text)?;
    match table.page()? {
        Page::Details => details(&table),
        Page::Raw | Page::Source => raw(&table),
    }
}

/// Detects which page a text is, without parsing the rows.
pub fn detect_page(text: &str) -> Result<Page, NcuError> {
    Table::read(text)?.page()
}

/// Parses `ncu --csv --page details` output.
pub fn parse_details(text: &str) -> Result<Vec<Launch>, NcuError> {
    details(&Table::read(text)?)
}

/// Parses `ncu --csv --page raw` output.
pub fn parse_raw(text: &str) -> Result<Vec<Launch>, NcuError> {
    raw(&Table::read(text)?)
}

/// The CSV rows of an ncu output, with their original line numbers.
struct Table {
    header_line: usize,
    header: Vec<String>,
    rows: Vec<(usize, Vec<String>)>,
}

impl Table {
    fn read(text: &str) -> Result<Self, NcuError> {
        let lines: Vec<&str> = text.lines().collect();
        let header_index = lines
            .iter()
            .position(|l| l.starts_with("\"ID\","))
            .ok_or(NcuError::NoHeader)?;
        let header_line = header_index + 1;
        let header = split_row(lines[header_index], header_line)?;
        let mut rows = Vec::new();
        for (index, line) in lines.iter().enumerate().skip(header_index + 1) {
            // ncu's own messages and the program's stdout never start with a quote; CSV rows do.
            if !line.starts_with('"') {
                continue;
            }
            let line_number = index + 1;
            let mut fields = split_row(line, line_number)?;
            // A metric row of a section with rules ends before the rule columns (ncu 2025.3
            // writes a trailing comma, then nothing): those columns are empty, not missing.
            if fields.len() < header.len()
                && header[fields.len()..]
                    .iter()
                    .all(|h| RULE_COLUMNS.contains(&h.as_str()))
            {
                fields.resize(header.len(), String::new());
            }
            if fields.len() != header.len() {
                return Err(NcuError::MalformedRow {
                    line: line_number,
                    message: format!("{} fields, header has {}", fields.len(), header.len()),
                });
            }
            rows.push((line_number, fields));
        }
        Ok(Self {
            header_line,
            header,
            rows,
        })
    }

    fn page(&self) -> Result<Page, NcuError> {
        let has = |name: &str| self.header.iter().any(|h| h == name);
        if has("Metric Name") && has("Metric Value") {
            Ok(Page::Details)
        } else if has("Kernel Name") {
            Ok(Page::Raw)
        } else {
            Err(self.missing("Kernel Name"))
        }
    }

    fn column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    fn required(&self, name: &str) -> Result<usize, NcuError> {
        self.column(name).ok_or_else(|| self.missing(name))
    }

    fn missing(&self, name: &str) -> NcuError {
        NcuError::UnrecognisedHeader {
            line: self.header_line,
            missing: name.to_owned(),
        }
    }
}

/// The columns ncu's details page adds after the metric's when a profiled section carries rules
/// (`--section SpeedOfLight` and the like): a rule's own row fills them and leaves the metric
/// columns empty, a metric's row leaves them out.
const RULE_COLUMNS: &[&str] = &[
    "Rule Name",
    "Rule Type",
    "Rule Description",
    "Estimated Speedup Type",
    "Estimated Speedup",
];

/// Splits one CSV line into fields (quotes, embedded commas and doubled quotes handled).
pub(crate) fn split_row(line: &str, line_number: usize) -> Result<Vec<String>, NcuError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(line.as_bytes());
    let mut record = csv::StringRecord::new();
    match reader.read_record(&mut record) {
        Ok(true) => Ok(record.iter().map(str::to_owned).collect()),
        Ok(false) => Ok(Vec::new()),
        Err(e) => Err(NcuError::MalformedRow {
            line: line_number,
            message: e.to_string(),
        }),
    }
}

/// The launch-identity columns of a table, located once.
struct Identity {
    id: usize,
    kernel: usize,
    block: Option<usize>,
    grid: Option<usize>,
    device: Option<usize>,
    cc: Option<usize>,
    stream: Option<usize>,
}

impl Identity {
    fn locate(table: &Table) -> Result<Self, NcuError> {
        Ok(Self {
            id: table.required("ID")?,
            kernel: table.required("Kernel Name")?,
            block: table.column("Block Size"),
            grid: table.column("Grid Size"),
            device: table.column("Device"),
            cc: table.column("CC"),
            stream: table.column("Stream"),
        })
    }

    fn launch(&self, line: usize, fields: &[String]) -> Result<Launch, NcuError> {
        let text = |column: Option<usize>| {
            column
                .map(|c| fields[c].trim())
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let number =
            |column: Option<usize>| text(column).and_then(|s| s.replace(',', "").parse().ok());
        let id_text = fields[self.id].trim();
        let id = id_text
            .replace(',', "")
            .parse()
            .map_err(|_| NcuError::BadLaunchId {
                line,
                value: id_text.to_owned(),
            })?;
        Ok(Launch {
            id,
            kernel: fields[self.kernel].clone(),
            block: text(self.block),
            grid: text(self.grid),
            device: number(self.device),
            compute_capability: text(self.cc),
            stream: number(self.stream),
            metrics: BTreeMap::new(),
        })
    }
}

fn details(table: &Table) -> Result<Vec<Launch>, NcuError> {
    let identity = Identity::locate(table)?;
    let name = table.required("Metric Name")?;
    let value = table.required("Metric Value")?;
    let unit = table.column("Metric Unit");
    let mut launches: Vec<Launch> = Vec::new();
    for (line, fields) in &table.rows {
        // A rule's row (its advice in the rule columns) names no metric.
        if fields[name].trim().is_empty() {
            continue;
        }
        let launch = identity.launch(*line, fields)?;
        // Rows of one launch are contiguous in practice; searching from the back keeps that fast
        // and still copes with interleaving.
        let index = match launches.iter().rposition(|l| l.id == launch.id) {
            Some(index) => index,
            None => {
                launches.push(launch);
                launches.len() - 1
            }
        };
        let unit_text = unit.map_or("", |u| fields[u].as_str());
        // A metric listed by two sections appears twice with the same value: keep the first.
        launches[index]
            .metrics
            .entry(fields[name].clone())
            .or_insert_with(|| Value::parse(&fields[value], unit_text));
    }
    Ok(launches)
}

fn raw(table: &Table) -> Result<Vec<Launch>, NcuError> {
    let identity = Identity::locate(table)?;
    let mut rows = table.rows.as_slice();
    // The units row has an empty ID; ncu always prints it, but tolerate its absence.
    let units: Vec<String> = match rows.first() {
        Some((_, fields)) if fields[identity.id].trim().is_empty() => {
            let units = fields.clone();
            rows = &rows[1..];
            units
        }
        _ => vec![String::new(); table.header.len()],
    };
    let metric_columns: Vec<usize> = (0..table.header.len())
        .filter(|&c| !IDENTITY_COLUMNS.contains(&table.header[c].as_str()))
        .collect();
    rows.iter()
        .map(|(line, fields)| {
            let mut launch = identity.launch(*line, fields)?;
            launch.metrics = metric_columns
                .iter()
                .map(|&c| (table.header[c].clone(), Value::parse(&fields[c], &units[c])))
                .collect();
            Ok(launch)
        })
        .collect()
}
