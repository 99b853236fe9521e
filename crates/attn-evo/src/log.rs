//! Search logs: [`Evaluation`]s from and to rows of `attn_evidence`'s search log.

use attn_evidence::EvoCandidate;

use crate::error::{EvoError, Result};
use crate::search::Evaluation;
use crate::space::{Knobs, Space};

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

/// Parses a config as `best.json` and `finalists.json` hold it (`"BLOCK_M" -> "64"`) into knobs.
pub fn knobs_from_strings(
    config: &std::collections::BTreeMap<String, String>,
) -> std::result::Result<Knobs, String> {
    config
        .iter()
        .map(|(k, v)| {
            v.trim()
                .parse::<i64>()
                .map(|v| (k.clone(), v))
                .map_err(|_| format!("{k} = {v:?} is not an integer"))
        })
        .collect()
}

/// Knobs as `best.json` and `finalists.json` hold them.
pub fn knobs_to_strings(knobs: &Knobs) -> std::collections::BTreeMap<String, String> {
    knobs
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect()
}
