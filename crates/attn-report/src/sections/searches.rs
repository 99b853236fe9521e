//! Configuration searches: the best candidate of each log and its convergence chart.

use std::collections::BTreeMap;

use attn_evidence::slug;

use crate::charts::ConvergenceChart;
use crate::format::{micros, significant, speedup, speedup_ci};
use crate::model::EvidenceSet;
use crate::table::Table;

pub(super) fn search_table(evidence: &EvidenceSet) -> Option<Table> {
    if evidence.searches.is_empty() {
        return None;
    }
    let mut table = Table::new(&[
        "search",
        "candidates",
        "valid",
        "generations",
        "best score",
        "best median (µs)",
        "best speedup [CI]",
        "best config",
    ])
    .numeric(&[1, 2, 3, 4, 5, 6]);
    for log in &evidence.searches {
        let valid: Vec<_> = log.rows.iter().filter(|r| r.status.is_ok()).collect();
        let best = valid.iter().filter(|r| r.score.is_some()).max_by(|a, b| {
            a.score
                .unwrap_or(f64::MIN)
                .total_cmp(&b.score.unwrap_or(f64::MIN))
        });
        let generations = log
            .rows
            .iter()
            .map(|r| r.generation)
            .max()
            .map_or(0, |g| g + 1);
        let dash = || "–".to_string();
        table.push(vec![
            log.name.clone(),
            log.rows.len().to_string(),
            valid.len().to_string(),
            generations.to_string(),
            best.and_then(|b| b.score)
                .map(|s| significant(s, 4))
                .unwrap_or_else(dash),
            best.and_then(|b| b.median_us)
                .map(micros)
                .unwrap_or_else(dash),
            best.and_then(|b| match (b.speedup, b.speedup_lower, b.speedup_upper) {
                (Some(p), Some(l), Some(u)) => Some(speedup_ci(p, l, u)),
                (Some(p), _, _) => Some(speedup(p)),
                _ => None,
            })
            .unwrap_or_else(dash),
            best.map(|b| {
                // The knobs and, in a search over several implementations, the implementation
                // under its log column's name, all in name order.
                let implementation = b.config.implementation.iter();
                let mut cells: Vec<(&str, String)> = implementation
                    .map(|name| (attn_evidence::IMPL_KNOB, name.clone()))
                    .chain(
                        b.config
                            .knobs
                            .iter()
                            .map(|(k, v)| (k.as_str(), v.to_string())),
                    )
                    .collect();
                cells.sort();
                cells
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(dash),
        ]);
    }
    Some(table)
}

pub(super) fn convergence(evidence: &EvidenceSet) -> Vec<(String, ConvergenceChart)> {
    evidence
        .searches
        .iter()
        .filter_map(|log| {
            let mut per_generation: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
            for row in log.rows.iter().filter(|r| r.status.is_ok()) {
                if let Some(score) = row.score.filter(|s| s.is_finite()) {
                    per_generation
                        .entry(row.generation)
                        .or_default()
                        .push(score);
                }
            }
            if per_generation.is_empty() {
                return None;
            }
            let mut best = f64::NEG_INFINITY;
            let generations = per_generation
                .into_iter()
                .map(|(generation, mut scores)| {
                    scores.sort_by(f64::total_cmp);
                    best = scores.iter().copied().fold(best, f64::max);
                    let mid = scores.len() / 2;
                    let median = if scores.len() % 2 == 1 {
                        scores[mid]
                    } else {
                        (scores[mid - 1] + scores[mid]) / 2.0
                    };
                    (generation, best, median)
                })
                .collect();
            Some((
                format!("convergence-{}.svg", slug(&log.name)),
                ConvergenceChart {
                    title: format!("Search convergence: {}", log.name),
                    generations,
                },
            ))
        })
        .collect()
}
