//! A linear `f64` axis whose ticks the chart chooses (plotters' own choice of "nice" values is right
//! for linear scales, wrong for log scales drawn in log coordinates and for measured positions such
//! as sequence lengths).

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};

/// `lo..hi` with ticks at `ticks` (values outside the range are dropped).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TickedAxis {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl TickedAxis {
    /// The axis `range` ticked at `ticks`.
    pub(crate) fn new(range: Range<f64>, ticks: Vec<f64>) -> Self {
        let (lo, hi) = (range.start, range.end);
        let ticks = ticks.into_iter().filter(|t| *t >= lo && *t <= hi).collect();
        TickedAxis { lo, hi, ticks }
    }
}

impl Ranged for TickedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.hi - self.lo;
        if span == 0.0 || !span.is_finite() {
            return (limit.0 + limit.1) / 2;
        }
        let fraction = (value - self.lo) / span;
        // As plotters maps its own f64 ranges.
        limit.0 + (f64::from(limit.1 - limit.0) * fraction + 1e-3).floor() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}
