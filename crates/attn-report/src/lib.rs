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
//!    ([`progress`]), decode bandwidth against the same run's copy bandwidth, verdict lines, [`Table`]s and the data of each chart. Both outputs render these
//!    same sections, so markdown and HTML cannot disagree.
//! 3. [`charts`] (plotters → SVG strings, text kept as `<text>`) and [`pages`] (markdown, PR comment,
//!    an HTML page that links its charts from `charts/`).
//!
//! The result is a map of file name → content, written with [`Report::write`] or compared with
//! what is on disk by [`Report::stale_files`] (`--check`). Output depends only on the evidence:
//! stable ordering, fixed bootstrap seeds, no clock reads.
//!
//! Numbers are only divided, joined by a line or set side by side within one [`setup::Setup`]
//! (GPU model and timing mode), and every chart and table names its setup.
//!
//! A missing or empty evidence directory is an error ([`ReportError::NoEvidence`]): a report
//! from it would only replace a real one.
//!
//! ```
//! use attn_report::{Report, ReportError, ReportOptions};
//! let evidence = tempfile::tempdir()?; // empty
//! let refused = Report::build(evidence.path(), &ReportOptions::default());
//! assert!(matches!(refused, Err(ReportError::NoEvidence { .. })));
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
pub mod setup;
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
    /// Also draw each gate verdict's speedup bars and bootstrap histogram (two charts per gate
    /// run: many, and read rarely, so not part of the committed report).
    pub gate_charts: bool,
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
        let refuse = |reason| ReportError::NoEvidence {
            path: evidence_dir.to_owned(),
            reason,
        };
        if !evidence.dir_exists {
            return Err(refuse("the directory does not exist"));
        }
        if evidence.is_empty() {
            return Err(refuse("no gate, bench, ncu or search results in it"));
        }
        let sections = Sections::build(&evidence, options);
        let charts = render_charts(&sections, options)?;
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

    /// Writes every file under `out_dir` atomically (a temporary file renamed over the old one),
    /// charts first and the pages that link them last; then removes chart files the evidence no
    /// longer produces (so `charts/` never shows a stale picture).
    pub fn write(&self, out_dir: &Path) -> Result<(), ReportError> {
        // Charts first, so that no page ever links a chart not yet written.
        let (charts, pages): (Vec<_>, Vec<_>) = self
            .files
            .iter()
            .partition(|(name, _)| name.starts_with("charts/"));
        for (name, content) in charts.into_iter().chain(pages) {
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

fn render_charts(
    sections: &Sections,
    options: &ReportOptions,
) -> Result<Vec<RenderedChart>, ReportError> {
    let mut charts = Vec::new();
    let mut add = |file: String, caption: String, svg: String| {
        charts.push(RenderedChart { file, caption, svg });
    };
    for view in sections.glance.iter().flat_map(|suite| &suite.views) {
        add(
            view.file.clone(),
            view.chart.title.clone(),
            charts::versus(&view.file, &view.chart)?,
        );
    }
    for gate in sections.gates.iter().filter(|_| options.gate_charts) {
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
    for decode in &sections.decode {
        add(
            decode.file.clone(),
            decode.chart.title.clone(),
            charts::decode_bandwidth(&decode.file, &decode.chart)?,
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
