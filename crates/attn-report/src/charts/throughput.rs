//! Chart 3: TFLOP/s against sequence length per implementation, references dashed, and the GPU's
//! dense matmul rate as the ceiling.

use plotters::prelude::*;

use super::{bounds, color, draw_legend, render_svg, tick, FONT, RULE_RED};
use crate::ReportError;

/// Data of the throughput chart.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputChart {
    /// Caption, naming the fixed dimensions.
    pub title: String,
    /// One line per implementation.
    pub series: Vec<ThroughputSeries>,
    /// The ceiling (TFLOP/s) and where it comes from.
    pub ceiling: Option<(f64, String)>,
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

/// Draws the throughput chart as SVG.
pub fn throughput(chart: &ThroughputChart) -> Result<String, ReportError> {
    render_svg("tflops.svg", |root| {
        let points = || chart.series.iter().flat_map(|s| s.points.iter());
        let (x_lo, x_hi) = bounds(points().map(|p| p.0 as f64)).unwrap_or((128.0, 4096.0));
        let (x_lo, x_hi) = (x_lo / 1.4, x_hi * 1.4);
        let (_, y_hi) = bounds(
            points()
                .map(|p| p.1)
                .chain(chart.ceiling.as_ref().map(|c| c.0)),
        )
        .unwrap_or((0.0, 1.0));
        let mut plot = ChartBuilder::on(root)
            .caption(&chart.title, (FONT, 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(90)
            .build_cartesian_2d((x_lo..x_hi).log_scale().base(2.0), 0.0..y_hi * 1.12)?;
        plot.configure_mesh()
            .x_desc("sequence length (tokens, log scale)")
            .y_desc("throughput (TFLOP/s)")
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| format!("{v:.0}"))
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()?;
        for (index, series) in chart.series.iter().enumerate() {
            let style = color(index);
            let line = series.points.iter().map(|(s, t)| (*s as f64, *t));
            if series.reference {
                plot.draw_series(DashedLineSeries::new(line, 8, 5, style.stroke_width(2)))?
            } else {
                plot.draw_series(LineSeries::new(line, style.stroke_width(2)))?
            }
            .label(series.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], style.stroke_width(2))
            });
            plot.draw_series(
                series
                    .points
                    .iter()
                    .map(|(s, t)| Circle::new((*s as f64, *t), 4, style.filled())),
            )?;
        }
        if let Some((ceiling, source)) = &chart.ceiling {
            let line = [(x_lo, *ceiling), (x_hi, *ceiling)];
            plot.draw_series(DashedLineSeries::new(line, 10, 4, RULE_RED.stroke_width(2)))?
                .label(format!("ceiling {ceiling:.0} TFLOP/s ({source})"))
                .legend(|(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], RULE_RED.stroke_width(2))
                });
        }
        draw_legend(&mut plot, SeriesLabelPosition::UpperLeft)?;
        Ok(())
    })
}
