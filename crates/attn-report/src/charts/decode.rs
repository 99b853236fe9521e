//! Decode bandwidth against new tokens per sequence for one GPU and timing mode: one set of points
//! per implementation (references as triangles), with the device-to-device copy bandwidth measured
//! in the same run as the points drawn across.

use plotters::prelude::*;

use super::{
    bounds, color, draw_legend_panel, frame, render_svg, tick_decimals, LegendEntry, Mark,
    TickedAxis, FONT, RULE_RED,
};
use crate::ReportError;

/// Data of one decode bandwidth chart.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeChart {
    /// Caption, naming the GPU and timing mode.
    pub title: String,
    /// One series per implementation.
    pub series: Vec<DecodeSeries>,
    /// The copy bandwidth of each run the points come from.
    pub copy_lines: Vec<CopyLine>,
}

/// One implementation's decode batches.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeSeries {
    /// Legend label.
    pub label: String,
    /// Reference libraries are drawn as triangles.
    pub reference: bool,
    /// One point per batch, by new tokens per sequence.
    pub points: Vec<DecodePoint>,
}

/// One decode batch of a series.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodePoint {
    /// New (query) tokens per sequence; a ragged batch's mean.
    pub tokens: f64,
    /// Whether the batch's sequences take different numbers of new tokens (drawn hollow).
    pub ragged: bool,
    /// Bandwidth at the median time, GB/s.
    pub gbs: f64,
}

/// A run's measured device-to-device copy bandwidth.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyLine {
    /// Legend label, naming the run.
    pub label: String,
    /// GB/s.
    pub gbs: f64,
}

/// How far apart the series' points at one x are drawn, in log2 units, so none hides another.
const DODGE: f64 = 0.06;

/// Draws one decode bandwidth chart as SVG; `file` names it in errors.
pub fn decode_bandwidth(file: &str, chart: &DecodeChart) -> Result<String, ReportError> {
    render_svg(file, |root| {
        let (area, panel) = frame(root, &chart.title)?;
        let points = || chart.series.iter().flat_map(|s| s.points.iter());
        let x_of = |tokens: f64| tokens.max(1.0).log2();
        // Ticks at the whole batches' token counts; a ragged batch's mean sits between them.
        let mut ticks: Vec<f64> = points()
            .filter(|p| !p.ragged || points().all(|q| q.ragged))
            .map(|p| x_of(p.tokens))
            .collect();
        ticks.sort_by(f64::total_cmp);
        ticks.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
        let (x_lo, x_hi) = bounds(points().map(|p| x_of(p.tokens))).unwrap_or((0.0, 4.0));
        let (x_lo, x_hi) = (x_lo - 0.4, x_hi + 0.4);
        let (_, y_hi) = bounds(
            points()
                .map(|p| p.gbs)
                .chain(chart.copy_lines.iter().map(|l| l.gbs)),
        )
        .unwrap_or((0.0, 1.0));
        let y_hi = y_hi.max(1e-6) * 1.1;
        let y_decimals = tick_decimals(y_hi, 10);
        let mut plot = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(TickedAxis::new(x_lo..x_hi, ticks), 0.0..y_hi)?;
        plot.configure_mesh()
            .x_desc("new tokens per sequence (log scale; ragged batches at their mean, hollow)")
            .y_desc("bandwidth (GB/s)")
            .x_label_formatter(&|v| tokens_label(2f64.powf(*v)))
            .y_labels(10)
            .y_label_formatter(&|v| format!("{v:.y_decimals$}"))
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 17))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()?;
        let mut legend = Vec::new();
        let middle = (chart.series.len().max(1) - 1) as f64 / 2.0;
        for (index, series) in chart.series.iter().enumerate() {
            let style = color(index);
            let dodge = (index as f64 - middle) * DODGE;
            for point in &series.points {
                let at = (x_of(point.tokens) + dodge, point.gbs);
                let fill = if point.ragged {
                    style.stroke_width(2)
                } else {
                    style.filled()
                };
                if series.reference {
                    plot.draw_series(std::iter::once(TriangleMarker::new(at, 6, fill)))?;
                } else {
                    plot.draw_series(std::iter::once(Circle::new(at, 5, fill)))?;
                }
            }
            legend.push(LegendEntry::new(&series.label, Mark::Dot(style)));
        }
        for copy in &chart.copy_lines {
            let span = [(x_lo, copy.gbs), (x_hi, copy.gbs)];
            plot.draw_series(DashedLineSeries::new(span, 10, 4, RULE_RED.stroke_width(2)))?;
            legend.push(LegendEntry::new(&copy.label, Mark::Dashed(RULE_RED)));
        }
        draw_legend_panel(&panel, &legend)
    })
}

/// `4` for a whole token count, `4.25` for a ragged batch's mean.
fn tokens_label(tokens: f64) -> String {
    match super::whole_tick(tokens) {
        Some(whole) => whole.to_string(),
        None => format!("{tokens:.2}"),
    }
}
