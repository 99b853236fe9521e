//! The charts, drawn with plotters into SVG strings. Text stays `<text>` elements (no font files);
//! every chart takes prepared data, so what it shows is decided (and tested) elsewhere.
//!
//! Every chart has the same frame: the title across the top, the plot on the left, and the legend in
//! a panel on the right ([`LEGEND_WIDTH`]), outside the data. Tick labels are formatted with just
//! enough decimals that no two ticks of an axis read the same ([`tick_decimals`]).

mod axis;
mod bootstrap;
mod convergence;
mod decode;
mod legend;
mod progression;
mod roofline;
mod speedup;
mod throughput;
mod versus;

pub use bootstrap::{bootstrap_histogram, BootstrapChart};
pub use convergence::{convergence, ConvergenceChart};
pub use decode::{decode_bandwidth, CopyLine, DecodeChart, DecodePoint, DecodeSeries};
pub use legend::{LegendEntry, Mark};
pub use progression::{progression, ProgressionChart, ProgressionPoint, ProgressionSeries};
pub use roofline::{roofline, RooflineChart, RooflinePoint};
pub use speedup::{speedup_bars, SpeedupBar, SpeedupChart};
pub use throughput::{throughput, ThroughputChart, ThroughputSeries};
pub use versus::{versus, VersusChart, VersusSeries};

pub(crate) use axis::TickedAxis;
pub(crate) use legend::{draw_legend_panel, frame};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::ReportError;

/// Width and height of every chart, px: wide enough for shape labels and the legend panel, short
/// enough that two fit on a laptop screen.
pub const CHART_SIZE: (u32, u32) = (1040, 470);

/// Width of the legend panel at the right of every chart, px.
pub const LEGEND_WIDTH: u32 = 300;

/// Font family of all chart text.
pub(crate) const FONT: &str = "sans-serif";

/// Colour-blind-friendly palette (Okabe–Ito), cycled by series index.
pub(crate) const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(120, 120, 120),
    RGBColor(0, 0, 0),
];

/// The palette colour of series `index`.
pub(crate) fn color(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

/// Colour of ceilings and thresholds.
pub(crate) const RULE_RED: RGBColor = RGBColor(200, 30, 30);

pub(crate) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
pub(crate) type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Runs `draw` on a white [`CHART_SIZE`] SVG canvas and returns the SVG text.
pub(crate) fn render_svg(
    name: &str,
    draw: impl FnOnce(&Area<'_>) -> DrawResult,
) -> Result<String, ReportError> {
    render_svg_sized(name, CHART_SIZE, draw)
}

/// [`render_svg`] on a canvas of `size` px.
pub(crate) fn render_svg_sized(
    name: &str,
    size: (u32, u32),
    draw: impl FnOnce(&Area<'_>) -> DrawResult,
) -> Result<String, ReportError> {
    let fail = |message: String| ReportError::Chart {
        chart: name.to_owned(),
        message,
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
        draw(&root).map_err(|e| fail(e.to_string()))?;
        root.present().map_err(|e| fail(e.to_string()))?;
    }
    Ok(svg)
}

/// Min and max of the finite values; `None` if there are none.
pub(crate) fn bounds(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((f64::min(lo, v), f64::max(hi, v))),
        })
}

/// Decimals for the tick labels of a linear axis spanning `span` with at most `labels` ticks, so
/// that no two ticks read the same. Plotters places ticks at least `span / labels` apart; values at
/// least `10^-d` apart never round to the same `d`-decimal text.
pub(crate) fn tick_decimals(span: f64, labels: usize) -> usize {
    let step = span.abs() / labels.max(1) as f64;
    if !step.is_finite() || step <= 0.0 {
        return 0;
    }
    (-step.log10()).ceil().clamp(0.0, 9.0) as usize
}

/// A tick label showing only whole values (counts, generations, log exponents): `""` elsewhere, so
/// a fractional tick never repeats its neighbour's text.
pub(crate) fn whole_tick(value: f64) -> Option<i64> {
    let rounded = value.round();
    ((value - rounded).abs() < 1e-6).then_some(rounded as i64)
}

/// Tick positions of a log-scale axis drawn in log10 coordinates over `lo..hi`: the exponents of
/// 1, 2 and 5 × 10^k in range, or of the powers of ten alone when those are many.
pub(crate) fn log10_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && lo < hi) {
        return Vec::new();
    }
    let decades = (lo.floor() as i32)..=(hi.ceil() as i32);
    let in_range = |v: &f64| *v >= lo && *v <= hi;
    let powers: Vec<f64> = decades.clone().map(f64::from).filter(in_range).collect();
    if powers.len() >= 4 {
        return powers;
    }
    decades
        .flat_map(|k| [1.0f64, 2.0, 5.0].map(|m| f64::from(k) + m.log10()))
        .filter(in_range)
        .collect()
}

/// The label of a [`log10_ticks`] position: `200`, `0.5`, `1000`.
pub(crate) fn log10_label(exponent: f64) -> String {
    crate::format::significant(10f64.powf(exponent), 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_decimals_keep_neighbouring_ticks_apart() {
        assert_eq!(tick_decimals(0.06, 10), 3);
        assert_eq!(tick_decimals(1.5, 10), 1);
        assert_eq!(tick_decimals(700.0, 10), 0);
        assert_eq!(tick_decimals(0.0, 10), 0);
        assert_eq!(whole_tick(3.0000001), Some(3));
        assert_eq!(whole_tick(2.5), None);
    }

    #[test]
    fn log_ticks_are_one_two_five_within_a_few_decades() {
        let labels: Vec<String> = log10_ticks(2.25, 3.33)
            .into_iter()
            .map(log10_label)
            .collect();
        assert_eq!(labels, ["200", "500", "1000", "2000"]);
        let wide: Vec<String> = log10_ticks(-0.5, 4.2)
            .into_iter()
            .map(log10_label)
            .collect();
        assert_eq!(wide, ["1", "10", "100", "1000", "10000"]);
    }
}
