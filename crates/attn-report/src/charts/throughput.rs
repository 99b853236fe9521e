//! Throughput against sequence length for one family of shapes (same GPU, B, H, D, causality and
//! dtype): one curve per implementation (references dashed), with the GPU's physical lines: the
//! measured dense-matmul rate and the device's dense tensor peak.

use plotters::prelude::*;

use super::{
    bounds, color, draw_legend_panel, frame, render_svg, tick_decimals, LegendEntry, Mark,
    TickedAxis, FONT, RULE_RED,
};
use crate::ceilings::{PhysicalLine, PEAK_LINE};
use crate::ReportError;

/// Colour of the device-peak line (the matmul line is [`RULE_RED`], dashed).
const PEAK_COLOR: RGBColor = RGBColor(90, 0, 0);

/// Data of one throughput chart.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputChart {
    /// Caption, naming the family.
    pub title: String,
    /// One curve per implementation.
    pub series: Vec<ThroughputSeries>,
    /// Physical lines (dense matmul rate, device peak) that could be justified for this GPU.
    pub lines: Vec<PhysicalLine>,
}

/// One implementation's throughput over sequence lengths.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputSeries {
    /// Legend label.
    pub label: String,
    /// Reference libraries are drawn dashed.
    pub reference: bool,
    /// `(sequence length, TFLOP/s)`, by sequence length.
    pub points: Vec<(usize, f64)>,
}

/// Draws one throughput chart as SVG; `file` names it in errors.
pub fn throughput(file: &str, chart: &ThroughputChart) -> Result<String, ReportError> {
    render_svg(file, |root| {
        let (area, panel) = frame(root, &chart.title)?;
        let points = || chart.series.iter().flat_map(|s| s.points.iter());
        // x is log2(S), ticked and labelled at the sequence lengths measured.
        let mut lengths: Vec<usize> = points().map(|p| p.0.max(1)).collect();
        lengths.sort_unstable();
        lengths.dedup();
        let ticks: Vec<f64> = lengths.iter().map(|s| (*s as f64).log2()).collect();
        let (x_lo, x_hi) =
            bounds(points().map(|p| (p.0.max(1) as f64).log2())).unwrap_or((9.0, 14.0));
        let (x_lo, x_hi) = (x_lo - 0.4, x_hi + 0.4);
        let (_, y_hi) = bounds(
            points()
                .map(|p| p.1)
                .chain(chart.lines.iter().map(|l| l.tflops)),
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
            .x_desc("sequence length S (tokens, log scale)")
            .y_desc("throughput (TFLOP/s)")
            .x_label_formatter(&|v| format!("{:.0}", 2f64.powf(*v)))
            .y_labels(10)
            .y_label_formatter(&|v| format!("{v:.y_decimals$}"))
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 17))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()?;
        let mut legend = Vec::new();
        for (index, series) in chart.series.iter().enumerate() {
            let style = color(index);
            let line = series
                .points
                .iter()
                .map(|(s, t)| ((*s.max(&1) as f64).log2(), *t));
            if series.reference {
                plot.draw_series(DashedLineSeries::new(
                    line.clone(),
                    8,
                    5,
                    style.stroke_width(2),
                ))?;
                legend.push(LegendEntry::new(&series.label, Mark::Dashed(style)));
            } else {
                plot.draw_series(LineSeries::new(line.clone(), style.stroke_width(2)))?;
                legend.push(LegendEntry::new(&series.label, Mark::Line(style)));
            }
            plot.draw_series(line.map(|p| Circle::new(p, 4, style.filled())))?;
        }
        for physical in &chart.lines {
            let span = [(x_lo, physical.tflops), (x_hi, physical.tflops)];
            if physical.name == PEAK_LINE {
                plot.draw_series(LineSeries::new(span, PEAK_COLOR.stroke_width(2)))?;
                legend.push(LegendEntry::new(physical.label(), Mark::Line(PEAK_COLOR)));
            } else {
                plot.draw_series(DashedLineSeries::new(span, 10, 4, RULE_RED.stroke_width(2)))?;
                legend.push(LegendEntry::new(physical.label(), Mark::Dashed(RULE_RED)));
            }
        }
        draw_legend_panel(&panel, &legend)
    })
}
