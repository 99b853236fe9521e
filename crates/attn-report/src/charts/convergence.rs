//! Chart 5: search convergence, best and median fitness per generation.

use plotters::prelude::*;

use super::{
    bounds, color, draw_legend_panel, frame, render_svg, tick_decimals, whole_tick, LegendEntry,
    Mark, FONT,
};
use crate::ReportError;

/// Data of one convergence chart.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvergenceChart {
    /// Caption, naming the search log.
    pub title: String,
    /// `(generation, best score so far, median score of the generation)`.
    pub generations: Vec<(u32, f64, f64)>,
}

/// Draws one convergence chart as SVG; `file` names it in errors.
pub fn convergence(file: &str, chart: &ConvergenceChart) -> Result<String, ReportError> {
    render_svg(file, |root| {
        let (area, panel) = frame(root, &chart.title)?;
        let (g_lo, g_hi) =
            bounds(chart.generations.iter().map(|g| f64::from(g.0))).unwrap_or((0.0, 1.0));
        let (y_lo, y_hi) =
            bounds(chart.generations.iter().flat_map(|g| [g.1, g.2])).unwrap_or((0.0, 1.0));
        let pad = ((y_hi - y_lo) * 0.1).max(1e-6);
        let y_decimals = tick_decimals(y_hi - y_lo + 2.0 * pad, 10);
        let mut plot = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d((g_lo - 0.5)..(g_hi + 0.5), (y_lo - pad)..(y_hi + pad))?;
        plot.configure_mesh()
            .x_desc("generation")
            .y_desc("fitness (score, higher is better)")
            .x_label_formatter(&|v| whole_tick(*v).map(|g| g.to_string()).unwrap_or_default())
            .y_labels(10)
            .y_label_formatter(&|v| format!("{v:.y_decimals$}"))
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 17))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()?;
        let lines = [("best so far", 0usize), ("median of generation", 1)];
        let mut legend = Vec::new();
        for (label, which) in lines {
            let style = color(which);
            let points = chart
                .generations
                .iter()
                .map(move |g| (f64::from(g.0), if which == 0 { g.1 } else { g.2 }));
            plot.draw_series(LineSeries::new(points.clone(), style.stroke_width(2)))?;
            legend.push(LegendEntry::new(label, Mark::Line(style)));
            plot.draw_series(points.map(|p| Circle::new(p, 3, style.filled())))?;
        }
        draw_legend_panel(&panel, &legend)
    })
}
