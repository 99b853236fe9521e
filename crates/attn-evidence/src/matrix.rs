//! `evidence/matrix/*.json`: a suite matrix run on a Ray cluster (`bench --on ray`): every task
//! (one problem of the suite, on one GPU of one model), the exact arguments it ran with, where it
//! ran and what became of it: the evidence file it wrote, or why it has none. The driver writes
//! it again after each task, so a matrix stopped mid-way says what it measured, and
//! `--resume-matrix` runs again exactly the tasks not done.

use serde::{Deserialize, Serialize};

use crate::EvidenceKind;

/// A suite matrix: its tasks and where they ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixRun {
    /// [`crate::SCHEMA_VERSION`] at writing.
    pub schema: u32,
    /// Always [`EvidenceKind::Matrix`].
    pub kind: EvidenceKind,
    /// The command every task runs (`bench`).
    pub command: String,
    /// The Ray cluster's address as given (`auto`: the local one).
    pub cluster: String,
    /// The GPU model every task ran on (timings of different models never mix).
    pub model: String,
    /// The GPUs of that model, one line each (`0 (H100 GPU 3 on 10.0.0.2)`).
    pub slots: Vec<String>,
    /// The driver's git revision and dirty flag.
    pub git_rev: String,
    /// Whether the driver's tree had changes.
    pub git_dirty: bool,
    /// When the matrix first started (RFC 3339).
    pub started: String,
    /// When this file was last written.
    pub updated: String,
    /// Every task, in the suite's order.
    pub tasks: Vec<MatrixTask>,
}

/// One task of a matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixTask {
    /// The problem as text (its `--shape`).
    pub problem: String,
    /// The arguments the task's program runs with.
    pub args: Vec<String>,
    /// What became of it.
    pub outcome: MatrixOutcome,
    /// The GPU that ran it last, as [`MatrixRun::slots`] names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// Seconds it took, its retries included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
}

/// What became of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum MatrixOutcome {
    /// Not run yet (a matrix stopped before it, or just started).
    Pending,
    /// Ran and wrote its evidence here (relative to the evidence folder).
    Done {
        /// The evidence file.
        evidence: String,
    },
    /// Ran and failed, or its worker was lost after Ray's retries: why.
    Failed {
        /// One line.
        reason: String,
    },
}

impl MatrixRun {
    /// The tasks not done (pending or failed): what a resumed matrix runs.
    pub fn undone(&self) -> impl Iterator<Item = (usize, &MatrixTask)> {
        (self.tasks.iter().enumerate())
            .filter(|(_, t)| !matches!(t.outcome, MatrixOutcome::Done { .. }))
    }
}

impl crate::Kinded for MatrixRun {
    const KIND: EvidenceKind = EvidenceKind::Matrix;

    fn kind(&self) -> EvidenceKind {
        self.kind
    }
}
