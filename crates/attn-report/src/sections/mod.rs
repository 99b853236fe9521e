//! What the report says: tables and chart data derived from the [`EvidenceSet`]. Markdown and HTML
//! both render these, so the two outputs cannot disagree.

mod comparisons;
mod decode;
mod gates;
mod profiles;
mod searches;

pub use comparisons::FA3_DEVICE_SPAN_SINCE;
pub use decode::DecodeSection;
pub use gates::GateSection;

use crate::charts::{ConvergenceChart, RooflineChart};
use crate::format::{short_date, short_rev};
use crate::headline::{headlines, SuiteHeadline};
use crate::model::EvidenceSet;
use crate::progress::{progressions, ShapeProgress};
use crate::setup::Setup;
use crate::sweep::{sweep_charts, SweepChart};
use crate::table::Table;
use crate::ReportOptions;

/// Everything the report shows, in page order.
#[derive(Debug, Clone)]
pub struct Sections {
    /// One line summing up the evidence.
    pub summary: String,
    /// Latest gate verdict per (candidate, baseline).
    pub gates: Vec<GateSection>,
    /// Index of the latest gate run overall within `gates` (for the PR comment).
    pub latest_gate: Option<usize>,
    /// Per suite: the fastest of ours against SDPA's backends and the FA3 anchor.
    pub glance: Vec<SuiteHeadline>,
    /// Throughput against sequence length, one chart per family of shapes.
    pub sweeps: Vec<SweepChart>,
    /// Per shape: speedup over each run's own baseline, run by run.
    pub progressions: Vec<ShapeProgress>,
    /// Per setup: every implementation against SDPA's backends, shape by shape (latest bench
    /// entries).
    pub implementations: Vec<(Setup, Table)>,
    /// Per setup: varlen batches against the dense batch at their mean length (latest entry of
    /// each).
    pub varlen: Vec<(Setup, Table)>,
    /// Per setup: `hopper` against FlashAttention-3 and cuDNN, each row from one run (latest of
    /// each shape).
    pub against_fa3: Vec<(Setup, Table)>,
    /// Per setup: decode batches' bandwidth against the same run's copy bandwidth (newest entry of
    /// each implementation and batch); empty without decode entries.
    pub decode: Vec<DecodeSection>,
    /// The latest bench run's entries, with the file's name and the setups of its entries.
    pub bench: Option<(String, Vec<Setup>, Table)>,
    /// Nsight Compute metrics.
    pub ncu: Option<Table>,
    /// The Nsight Compute profiles on a roofline.
    pub roofline: Option<RooflineChart>,
    /// Best candidate of each search.
    pub searches: Option<Table>,
    /// Convergence charts, one per search log with scores, with their file names.
    pub convergence: Vec<(String, ConvergenceChart)>,
    /// Every evidence file with its provenance.
    pub files: Table,
}

/// CSS class of a verdict cell, for colouring in HTML.
pub fn verdict_class(cell: &str) -> Option<&'static str> {
    match cell {
        "pass" | "faster" => Some("good"),
        "FAIL" | "slower" => Some("bad"),
        _ => None,
    }
}

impl Sections {
    /// Derives every section from the evidence.
    pub fn build(evidence: &EvidenceSet, options: &ReportOptions) -> Self {
        let gates: Vec<GateSection> = evidence
            .latest_gates()
            .into_iter()
            .map(|(index, gate)| gates::gate_section(&evidence.runs[index], gate))
            .collect();
        let latest_run = evidence.latest_gates().into_iter().map(|(i, _)| i).max();
        let latest_gate = latest_run.and_then(|run| {
            let file = &evidence.runs[run].path;
            gates.iter().position(|g| &g.file == file)
        });
        Sections {
            summary: summary(evidence),
            latest_gate,
            glance: headlines(evidence),
            sweeps: sweep_charts(evidence, options),
            progressions: progressions(evidence),
            implementations: comparisons::implementations_tables(evidence),
            varlen: comparisons::varlen_tables(evidence),
            against_fa3: comparisons::against_fa3_tables(evidence),
            decode: decode::decode_sections(evidence),
            bench: comparisons::bench_table(evidence),
            ncu: profiles::ncu_table(evidence),
            roofline: profiles::roofline(evidence),
            searches: searches::search_table(evidence),
            convergence: searches::convergence(evidence),
            files: files_table(evidence),
            gates,
        }
    }
}

fn summary(evidence: &EvidenceSet) -> String {
    let gates = evidence.gates().count();
    let benches = evidence.runs.len() - gates;
    let mut line = format!(
        "{gates} gate run(s), {benches} bench run(s), {} ncu kernel summary(ies), {} search log(s).",
        evidence.ncu.len(),
        evidence.searches.len()
    );
    if let Some(last) = evidence.runs.last() {
        let p = last.evidence.provenance();
        line.push_str(&format!(
            " Latest: {} UTC on {} at {}{}.",
            short_date(&p.date),
            p.gpu,
            short_rev(&p.git_rev),
            if p.git_dirty {
                " (uncommitted changes)"
            } else {
                ""
            }
        ));
    }
    line
}

fn files_table(evidence: &EvidenceSet) -> Table {
    let mut table = Table::new(&[
        "file",
        "kind",
        "date (UTC)",
        "GPU",
        "commit",
        "driver",
        "PyTorch",
        "SM clock (MHz)",
    ]);
    let dash = || "–".to_string();
    for run in &evidence.runs {
        let p = run.evidence.provenance();
        let clocks = match (p.clocks.sm_mhz_before, p.clocks.sm_mhz_after) {
            (Some(b), Some(a)) if a != b => format!("{b} → {a}"),
            (Some(b), _) => b.to_string(),
            (None, Some(a)) => a.to_string(),
            (None, None) => dash(),
        };
        table.push(vec![
            run.path.clone(),
            run.evidence.kind().to_string(),
            short_date(&p.date),
            p.gpu.clone(),
            format!(
                "{}{}",
                short_rev(&p.git_rev),
                if p.git_dirty { " (dirty)" } else { "" }
            ),
            p.driver.clone().unwrap_or_else(dash),
            p.pytorch.clone().unwrap_or_else(dash),
            clocks,
        ]);
    }
    table
}
