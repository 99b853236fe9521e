//! The five charts, drawn with plotters into SVG strings. Text stays `<text>` elements (no font
//! files); every chart takes prepared data, so what it shows is decided (and tested) elsewhere.

mod bootstrap;
mod convergence;
mod progression;
mod speedup;
mod throughput;

pub use bootstrap::{bootstrap_histogram, BootstrapChart};
pub use convergence::{convergence, ConvergenceChart};
pub use progression::{progression, ProgressionChart, ProgressionPoint, ProgressionSeries};
pub use speedup::{speedup_bars, SpeedupBar, SpeedupChart};
pub use throughput::{throughput, ThroughputChart, ThroughputSeries};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::ReportError;

/// Width and height of every chart, px: wide enough for shape labels, short enough that two fit on
/// a laptop screen.
pub const CHART_SIZE: (u32, u32) = (960, 460);

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

/// Draws the series legend the same way on every chart, at `position`.
pub(crate) fn draw_legend<'a, CT: plotters::coord::CoordTranslate>(
    plot: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    position: SeriesLabelPosition,
) -> DrawResult {
    plot.configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .label_font((FONT, 14))
        .draw()?;
    Ok(())
}

/// Runs `draw` on a white [`CHART_SIZE`] SVG canvas and returns the SVG text.
pub(crate) fn render_svg(
    name: &str,
    draw: impl FnOnce(&Area<'_>) -> DrawResult,
) -> Result<String, ReportError> {
    let fail = |message: String| ReportError::Chart {
        chart: name.to_owned(),
        message,
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, CHART_SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
        draw(&root).map_err(|e| fail(e.to_string()))?;
        root.present().map_err(|e| fail(e.to_string()))?;
    }
    Ok(svg)
}

/// A log-scale axis range covering `values` with some headroom; `None` if there are none.
pub(crate) fn log_bounds(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) = bounds(values.into_iter().filter(|v| *v > 0.0))?;
    Some((lo / 1.5, hi * 1.5))
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

/// Tick label for a value on a log axis: three significant digits, no exponent.
pub(crate) fn tick(value: f64) -> String {
    crate::format::significant(value, 3)
}
