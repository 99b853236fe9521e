//! Search logs: [`Evaluation`]s from and to rows of `attn_evidence`'s search log.

use attn_evidence::EvoCandidate;

use crate::error::{EvoError, Result};
use crate::search::Evaluation;
use crate::space::Space;

/// The evaluations recorded in a search log of `space`, for [`crate::Search::resume`]: the
/// fitness of a row is its score when it was measured, nothing otherwise.
pub fn evaluations_from_log(rows: &[EvoCandidate], space: &Space) -> Result<Vec<Evaluation>> {
    rows.iter()
        .enumerate()
        .map(|(i, row)| {
            let knobs = space
                .from_row(&row.config)
                .map_err(|reason| EvoError::LogRow { row: i + 1, reason })?;
            Ok(Evaluation {
                generation: row.generation,
                knobs,
                fitness: if row.status.is_ok() { row.score } else { None },
            })
        })
        .collect()
}
