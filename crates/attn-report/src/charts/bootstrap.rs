//! Chart 4: the bootstrap distribution of the speedup for one gate case, with its CI marked.

use plotters::prelude::*;

use super::{
    bounds, color, draw_legend_panel, frame, render_svg, tick_decimals, whole_tick, LegendEntry,
    Mark, FONT, RULE_RED,
};
use crate::ReportError;

/// Bins of the histogram.
const BINS: usize = 40;

/// Data of the bootstrap histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct BootstrapChart {
    /// Caption.
    pub title: String,
    /// The bootstrap replicates of the speedup.
    pub replicates: Vec<f64>,
    /// Point estimate, CI lower and upper end (as recorded in the evidence).
    pub point: f64,
    /// CI lower end.
    pub lower: f64,
    /// CI upper end.
    pub upper: f64,
    /// The smallest speedup the gate accepts, when known.
    pub threshold: Option<f64>,
}

/// Draws the bootstrap histogram as SVG.
pub fn bootstrap_histogram(chart: &BootstrapChart) -> Result<String, ReportError> {
    render_svg("bootstrap.svg", |root| {
        let (area, panel) = frame(root, &chart.title)?;
        let marks = [chart.point, chart.lower, chart.upper];
        let (lo, hi) = bounds(chart.replicates.iter().copied().chain(marks)).unwrap_or((0.0, 1.0));
        let width = ((hi - lo) / BINS as f64).max(1e-9);
        let mut counts = vec![0usize; BINS];
        for value in chart.replicates.iter().filter(|v| v.is_finite()) {
            let bin = (((value - lo) / width) as usize).min(BINS - 1);
            counts[bin] += 1;
        }
        let tallest = counts.iter().copied().max().unwrap_or(1).max(1) as f64;
        let pad = (hi - lo) * 0.05 + 1e-9;
        // Widen the axis to show the threshold only when it is near the data; far away it would
        // squash the histogram into one bar, so it is named in the legend instead.
        let threshold_on_scale = chart
            .threshold
            .filter(|t| *t >= lo - (hi - lo) && *t <= hi + (hi - lo));
        let x_range = match threshold_on_scale {
            Some(t) => (lo.min(t) - pad)..(hi.max(t) + pad),
            None => (lo - pad)..(hi + pad),
        };
        // Enough decimals that no two ticks read the same, and at least two for the legend.
        let x_labels = 8;
        let decimals = tick_decimals(x_range.end - x_range.start, x_labels);
        let legend_decimals = decimals.max(2);
        let mut plot = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(x_range, 0.0..tallest * 1.15)?;
        plot.configure_mesh()
            .x_desc("speedup replicate (baseline time / candidate time)")
            .y_desc("number of resamples")
            .x_labels(x_labels)
            .x_label_formatter(&|v| format!("{v:.decimals$}"))
            .y_label_formatter(&|v| whole_tick(*v).map(|c| c.to_string()).unwrap_or_default())
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 17))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()?;
        let bar = color(0);
        plot.draw_series(counts.iter().enumerate().map(|(i, count)| {
            let left = lo + i as f64 * width;
            Rectangle::new(
                [(left, 0.0), (left + width, *count as f64)],
                bar.mix(0.6).filled(),
            )
        }))?;
        let mut legend = vec![LegendEntry::new(
            format!("{} bootstrap resamples", chart.replicates.len()),
            Mark::Box(bar),
        )];
        let vertical = |x: f64| [(x, 0.0), (x, tallest * 1.05)];
        let ci = color(1);
        plot.draw_series(LineSeries::new(
            vertical(chart.point),
            BLACK.stroke_width(2),
        ))?;
        legend.push(LegendEntry::new(
            format!("point estimate {:.legend_decimals$}×", chart.point),
            Mark::Line(BLACK),
        ));
        plot.draw_series(DashedLineSeries::new(
            vertical(chart.lower),
            6,
            4,
            ci.stroke_width(2),
        ))?;
        legend.push(LegendEntry::new(
            format!(
                "95% CI [{:.legend_decimals$}, {:.legend_decimals$}]",
                chart.lower, chart.upper
            ),
            Mark::Dashed(ci),
        ));
        plot.draw_series(DashedLineSeries::new(
            vertical(chart.upper),
            6,
            4,
            ci.stroke_width(2),
        ))?;
        if let Some(threshold) = threshold_on_scale {
            plot.draw_series(DashedLineSeries::new(
                vertical(threshold),
                10,
                4,
                RULE_RED.stroke_width(2),
            ))?;
            legend.push(LegendEntry::new(
                format!("gate: speedup ≥ {threshold:.3}×"),
                Mark::Dashed(RULE_RED),
            ));
        } else if let Some(threshold) = chart.threshold {
            legend.push(LegendEntry::new(
                format!("gate: speedup ≥ {threshold:.3}× (off scale)"),
                Mark::Dashed(RULE_RED),
            ));
        }
        draw_legend_panel(&panel, &legend)
    })
}
