//! Markdown, HTML and SVG progression reports from `evidence/`.
//!
//! # Bird's-eye view
//!
//! `cargo xtask report` calls [`Report::build`], which runs three stages:
//!
//! 1. [`model`]: read `evidence/` (gate and bench runs via `attn-evidence`, `ncu/*.json` loosely,
//!    search `log.csv` files) into an [`EvidenceSet`], and derive measurements from it.
//! 2. [`sections`]: decide what to say: the headline per suite ([`headline`]), throughput curves per
//!    family of shapes ([`sweep`]) with the physical lines of [`ceilings`], the progression per shape
//!    ([`progress`]), verdict lines, [`Table`]s and the data of each chart. Both outputs render these
//!    same sections, so markdown and HTML cannot disagree.
//! 3. [`charts`] (plotters → SVG strings, text kept as `<text>`) and [`pages`] (markdown, PR comment,
//!    self-contained HTML with the SVGs inlined).
//!
//! The result is a map of file name → content, written with [`Report::write`] or compared with
//! what is on disk by [`Report::stale_files`] (`--check`). Output depends only on the evidence:
//! stable ordering, fixed bootstrap seeds, no clock reads.
//!
//! An empty or missing evidence directory is not an error: the report says "No evidence yet".
//!
//! ```
//! use attn_report::{Report, ReportOptions};
//! let evidence = tempfile::tempdir()?; // empty
//! let out = tempfile::tempdir()?;
//! let report = Report::build(evidence.path(), &ReportOptions::default())?;
//! assert!(report.files()["report.md"].contains("No evidence yet"));
//! report.write(out.path())?;
//! assert!(report.stale_files(out.path())?.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod ceilings;
pub mod charts;
mod error;
pub mod format;
pub mod gate;
pub mod headline;
pub mod model;
pub mod pages;
pub mod progress;
pub mod sections;
pub mod sweep;
pub mod table;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

pub use error::ReportError;
pub use model::EvidenceSet;
pub use sections::Sections;
pub use table::Table;

use pages::RenderedChart;

/// Options of a report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReportOptions {
    /// The GPU's dense fp16 matmul rate (TFLOP/s), drawn on the throughput charts (e.g. 891 for
    /// cuBLAS 8192³ measured on an H100). `None`: the measured value of a known GPU
    /// ([`ceilings::KNOWN_GPUS`]), else no matmul line. Never an attention implementation's rate.
    pub matmul_tflops: Option<f64>,
}

/// A rendered report: relative file name (`index.html`, `report.md`, `pr-comment.md`,
/// `charts/<name>.svg`) → content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    files: BTreeMap<String, String>,
}

/// Why a report on disk does not match the evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Staleness {
    /// The file should exist and does not.
    Missing(String),
    /// The file exists with other content.
    Differs(String),
    /// A chart file that the current evidence no longer produces.
    Extra(String),
}

impl fmt::Display for Staleness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Staleness::Missing(file) => write!(f, "{file}: missing"),
            Staleness::Differs(file) => write!(f, "{file}: out of date"),
            Staleness::Extra(file) => write!(f, "{file}: no longer produced by the evidence"),
        }
    }
}

impl Report {
    /// Reads `evidence_dir` and renders every output in memory.
    pub fn build(evidence_dir: &Path, options: &ReportOptions) -> Result<Report, ReportError> {
        let evidence = EvidenceSet::load(evidence_dir)?;
        let sections = Sections::build(&evidence, options);
        let charts = render_charts(&sections)?;
        let mut files = BTreeMap::new();
        files.insert("report.md".to_owned(), pages::markdown(&sections, &charts));
        files.insert("pr-comment.md".to_owned(), pages::pr_comment(&sections));
        files.insert("index.html".to_owned(), pages::html(&sections, &charts));
        for chart in charts {
            files.insert(format!("charts/{}", chart.file), chart.svg);
        }
        Ok(Report { files })
    }

    /// The rendered files by relative name.
    pub fn files(&self) -> &BTreeMap<String, String> {
        &self.files
    }

    /// Writes every file under `out_dir` atomically, and removes chart files the evidence no longer
    /// produces (so `charts/` never shows a stale picture).
    pub fn write(&self, out_dir: &Path) -> Result<(), ReportError> {
        for (name, content) in &self.files {
            attn_evidence::write_bytes_atomic(&out_dir.join(name), content.as_bytes())?;
        }
        for extra in self.extra_charts(out_dir)? {
            let path = out_dir.join(&extra);
            std::fs::remove_file(&path).map_err(|source| ReportError::Read { path, source })?;
        }
        Ok(())
    }

    /// Differences between this report and the one under `out_dir`; empty when it is up to date.
    pub fn stale_files(&self, out_dir: &Path) -> Result<Vec<Staleness>, ReportError> {
        let mut stale = Vec::new();
        for (name, content) in &self.files {
            let path = out_dir.join(name);
            match std::fs::read(&path) {
                Ok(bytes) if bytes == content.as_bytes() => {}
                Ok(_) => stale.push(Staleness::Differs(name.clone())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    stale.push(Staleness::Missing(name.clone()))
                }
                Err(source) => return Err(ReportError::Read { path, source }),
            }
        }
        stale.extend(
            self.extra_charts(out_dir)?
                .into_iter()
                .map(Staleness::Extra),
        );
        Ok(stale)
    }

    fn extra_charts(&self, out_dir: &Path) -> Result<Vec<String>, ReportError> {
        let dir = out_dir.join("charts");
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(ReportError::Read { path: dir, source }),
        };
        let mut extra: Vec<String> = entries
            .filter_map(|entry| entry.ok())
            .map(|entry| format!("charts/{}", entry.file_name().to_string_lossy()))
            .filter(|name| name.ends_with(".svg") && !self.files.contains_key(name))
            .collect();
        extra.sort();
        Ok(extra)
    }
}

fn render_charts(sections: &Sections) -> Result<Vec<RenderedChart>, ReportError> {
    let mut charts = Vec::new();
    let mut add = |file: String, caption: String, svg: String| {
        charts.push(RenderedChart { file, caption, svg });
    };
    for gate in &sections.gates {
        if !gate.speedup.bars.is_empty() {
            add(
                format!("speedup-{}.svg", gate.slug),
                gate.speedup.title.clone(),
                charts::speedup_bars(&gate.speedup)?,
            );
        }
        if let Some(chart) = &gate.bootstrap {
            add(
                format!("bootstrap-{}.svg", gate.slug),
                chart.title.clone(),
                charts::bootstrap_histogram(chart)?,
            );
        }
    }
    for sweep in &sections.sweeps {
        add(
            sweep.file.clone(),
            sweep.chart.title.clone(),
            charts::throughput(&sweep.file, &sweep.chart)?,
        );
    }
    for progress in &sections.progressions {
        add(
            progress.file.clone(),
            progress.chart.title.clone(),
            charts::progression(&progress.file, &progress.chart)?,
        );
    }
    if let Some(chart) = &sections.roofline {
        add(
            "roofline.svg".into(),
            chart.title.clone(),
            charts::roofline(chart)?,
        );
    }
    for (file, chart) in &sections.convergence {
        add(
            file.clone(),
            chart.title.clone(),
            charts::convergence(file, chart)?,
        );
    }
    Ok(charts)
}
