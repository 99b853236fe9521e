//! Progression per shape: every run that timed one of our implementations on a shape, read against
//! that same run's baseline median (the gate's baseline, or SDPA's default backend in a bench run), so that
//! a baseline moving between runs cannot pass for progress. tiled → mma → hopper show up as
//! separate series over time.

use std::collections::BTreeMap;

use attn_evidence::{slug, Evidence, ShapeSpec};

use crate::charts::{ProgressionChart, ProgressionPoint, ProgressionSeries};
use crate::format::{micros, short_date, short_rev, speedup, tflops};
use crate::headline::SDPA_ORDER;
use crate::model::{
    median_ci, EvidenceSet, Measurement, Role, MEDIAN_CI_RESAMPLES, MEDIAN_CI_SEED,
};
use crate::table::Table;

/// The progression of one shape.
#[derive(Debug, Clone)]
pub struct ShapeProgress {
    /// The shape.
    pub shape: ShapeSpec,
    /// `progression-<shape>.svg`.
    pub file: String,
    /// Every measurement of ours with its run's baseline.
    pub table: Table,
    /// Speedup over the run's own baseline, run by run.
    pub chart: ProgressionChart,
}

/// One of our measurements with its run's baseline.
struct Point<'a> {
    ours: &'a Measurement,
    baseline: &'a Measurement,
}

/// One progression per shape that two or more runs timed against a baseline, the shapes with the
/// most runs first.
pub fn progressions(evidence: &EvidenceSet) -> Vec<ShapeProgress> {
    let measurements = evidence.measurements();
    let mut by_shape: BTreeMap<ShapeSpec, Vec<Point<'_>>> = BTreeMap::new();
    for ours in measurements.iter().filter(|m| m.role == Role::Ours) {
        if let Some(baseline) = baseline_of(evidence, &measurements, ours) {
            by_shape
                .entry(ours.shape.clone())
                .or_default()
                .push(Point { ours, baseline });
        }
    }
    let mut shapes: Vec<(ShapeSpec, Vec<Point<'_>>)> = by_shape
        .into_iter()
        .filter(|(_, points)| runs_of(points).len() >= 2)
        .collect();
    shapes.sort_by(|a, b| {
        runs_of(&b.1)
            .len()
            .cmp(&runs_of(&a.1).len())
            .then(a.0.cmp(&b.0))
    });
    shapes
        .into_iter()
        .map(|(shape, points)| progress(evidence, shape, &points))
        .collect()
}

/// The baseline measurement of `ours`'s run on its shape: the gate's baseline, or in a bench run
/// the first SDPA backend of [`SDPA_ORDER`] measured there (`sdpa:default` when present: the one
/// PyTorch users get).
fn baseline_of<'a>(
    evidence: &EvidenceSet,
    measurements: &'a [Measurement],
    ours: &Measurement,
) -> Option<&'a Measurement> {
    let same_case = |m: &&Measurement| {
        m.run == ours.run && m.shape == ours.shape && m.setup == ours.setup && m.role != Role::Ours
    };
    match &evidence.runs[ours.run].evidence {
        Evidence::Gate(gate) => {
            let label = gate.baseline.label();
            measurements
                .iter()
                .filter(same_case)
                .find(|m| m.label == label)
        }
        Evidence::Bench(_) => SDPA_ORDER.iter().find_map(|label| {
            measurements
                .iter()
                .filter(same_case)
                .find(|m| m.label == *label)
        }),
    }
}

fn runs_of(points: &[Point<'_>]) -> Vec<usize> {
    let mut runs: Vec<usize> = points.iter().map(|p| p.ours.run).collect();
    runs.dedup();
    runs
}

fn progress(evidence: &EvidenceSet, shape: ShapeSpec, points: &[Point<'_>]) -> ShapeProgress {
    let runs = runs_of(points);
    let (labels, x_desc) = run_labels(evidence, &runs);
    let mut series: BTreeMap<String, ProgressionSeries> = BTreeMap::new();
    for p in points {
        // One line per GPU and timing mode: a speedup on one never continues one on another.
        let label = format!(
            "{} vs {} ({})",
            p.ours.label,
            p.baseline.label,
            p.ours.setup.short()
        );
        series
            .entry(label.clone())
            .or_insert_with(|| ProgressionSeries {
                label,
                points: Vec::new(),
            })
            .points
            .push(ProgressionPoint {
                run: runs.iter().position(|r| *r == p.ours.run).unwrap_or(0),
                speedup: p.baseline.median_us / p.ours.median_us,
                ci: p.ours.speedup_ci,
            });
    }
    let mut series: Vec<ProgressionSeries> = series.into_values().collect();
    series.sort_by(|a, b| first_run(a).cmp(&first_run(b)).then(a.label.cmp(&b.label)));
    ShapeProgress {
        file: format!("progression-{}.svg", slug(&shape.to_string())),
        table: table(evidence, points),
        chart: ProgressionChart {
            title: format!("{shape}: speedup over each run's own baseline, per GPU and timing"),
            runs: labels,
            x_desc,
            series,
        },
        shape,
    }
}

/// Text under the progression table saying how its CIs were computed.
pub fn progression_note() -> String {
    format!(
        "Each point is one run: the run's baseline median / our median on the same shape in the same run (the gate's baseline; in a bench run sdpa:default, else the first SDPA backend measured), so a baseline that moved between runs does not read as progress; above 1× is faster. One line per GPU and timing mode. CIs of medians: percentile bootstrap over the raw samples, {MEDIAN_CI_RESAMPLES} resamples, seed {MEDIAN_CI_SEED}; CIs of speedups: the gate's BCa bootstrap."
    )
}

fn first_run(series: &ProgressionSeries) -> usize {
    series.points.first().map_or(usize::MAX, |p| p.run)
}

/// Distinct x labels (`HH:MM commit`, with the month and day when runs span several days) and the
/// axis description.
fn run_labels(evidence: &EvidenceSet, runs: &[usize]) -> (Vec<String>, String) {
    let dates: Vec<(String, String)> = runs
        .iter()
        .map(|r| {
            let p = evidence.runs[*r].evidence.provenance();
            (short_date(&p.date), short_rev(&p.git_rev))
        })
        .collect();
    let days: Vec<&str> = dates
        .iter()
        .map(|(d, _)| d.get(..10).unwrap_or(d))
        .collect();
    let one_day = days.windows(2).all(|w| w[0] == w[1]);
    let mut labels: Vec<String> = dates
        .iter()
        .map(|(date, rev)| {
            let when = if one_day {
                date.get(11..).unwrap_or(date)
            } else {
                date.get(5..).unwrap_or(date)
            };
            format!("{when} {rev}")
        })
        .collect();
    disambiguate(&mut labels);
    let x_desc = match (one_day, days.first()) {
        (true, Some(day)) => format!("evidence run on {day} (UTC time, commit), oldest first"),
        _ => "evidence run (UTC date and time, commit), oldest first".to_owned(),
    };
    (labels, x_desc)
}

/// Appends ` #2`, ` #3` … to repeated labels so that every tick reads differently.
fn disambiguate(labels: &mut [String]) {
    // Counted over the labels as they were: a renamed "X #2" no longer reads as an "X".
    let original = labels.to_vec();
    for (i, label) in labels.iter_mut().enumerate() {
        let repeats = original[..i].iter().filter(|l| **l == original[i]).count();
        if repeats > 0 {
            *label = format!("{} #{}", original[i], repeats + 1);
        }
    }
}

fn table(evidence: &EvidenceSet, points: &[Point<'_>]) -> Table {
    let mut table = Table::new(&[
        "run (UTC)",
        "commit",
        "GPU, timing",
        "implementation",
        "median (µs) [95% CI]",
        "TFLOP/s",
        "baseline of the run",
        "baseline median (µs)",
        "speedup [95% CI]",
    ])
    .numeric(&[4, 5, 7, 8]);
    for p in points {
        let provenance = evidence.runs[p.ours.run].evidence.provenance();
        let median = match median_ci(&p.ours.samples) {
            Some((lo, hi)) => format!(
                "{} [{}, {}]",
                micros(p.ours.median_us),
                micros(lo),
                micros(hi)
            ),
            None => micros(p.ours.median_us),
        };
        let ratio = p.baseline.median_us / p.ours.median_us;
        let ratio = match p.ours.speedup_ci {
            Some((lo, hi)) => format!("{} [{lo:.2}, {hi:.2}]", speedup(ratio)),
            None => speedup(ratio),
        };
        table.push(vec![
            short_date(&provenance.date),
            short_rev(&provenance.git_rev),
            p.ours.setup.to_string(),
            p.ours.label.clone(),
            median,
            tflops(p.ours.tflops),
            p.baseline.label.clone(),
            micros(p.baseline.median_us),
            ratio,
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::disambiguate;

    #[test]
    fn repeated_run_labels_are_numbered() {
        let mut labels = vec![
            "16:47 a2756d0".to_owned(),
            "16:47 a2756d0".into(),
            "17:14 b".into(),
            "16:47 a2756d0".into(),
        ];
        disambiguate(&mut labels);
        assert_eq!(
            labels,
            [
                "16:47 a2756d0",
                "16:47 a2756d0 #2",
                "17:14 b",
                "16:47 a2756d0 #3"
            ]
        );
    }
}
