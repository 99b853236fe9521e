//! Chart 1: median time of each implementation across evidence runs, log scale, with CIs and the
//! reference libraries as horizontal lines.

use plotters::prelude::*;

use super::{color, draw_legend, log_bounds, render_svg, tick, FONT};
use crate::ReportError;

/// Data of the progression chart.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressionChart {
    /// Caption, naming the shape followed.
    pub title: String,
    /// One label per run on the x axis, e.g. `"abc1234 11-22"`.
    pub runs: Vec<String>,
    /// Our implementations.
    pub series: Vec<ProgressionSeries>,
    /// Reference libraries: label and latest median (µs), drawn as dashed horizontal lines.
    pub references: Vec<(String, f64)>,
}

/// One implementation's medians over runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressionSeries {
    /// Legend label.
    pub label: String,
    /// One point per run that measured it.
    pub points: Vec<ProgressionPoint>,
}

/// One median on the progression chart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProgressionPoint {
    /// Index into [`ProgressionChart::runs`].
    pub run: usize,
    /// Median time per call, µs.
    pub median_us: f64,
    /// 95% CI of the median, µs.
    pub ci: Option<(f64, f64)>,
}

/// Draws the progression chart as SVG.
pub fn progression(chart: &ProgressionChart) -> Result<String, ReportError> {
    render_svg("progression.svg", |root| {
        let values = chart
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .flat_map(|p| [Some(p.median_us), p.ci.map(|c| c.0), p.ci.map(|c| c.1)])
            .flatten()
            .chain(chart.references.iter().map(|r| r.1));
        let (lo, hi) = log_bounds(values).unwrap_or((1.0, 10.0));
        // Segments 0..=last: one per run.
        let last = chart.runs.len().max(1) as i32 - 1;
        let mut plot = ChartBuilder::on(root)
            .caption(&chart.title, (FONT, 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(90)
            .build_cartesian_2d((0..last).into_segmented(), (lo..hi).log_scale())?;
        let run_labels = &chart.runs;
        plot.configure_mesh()
            .x_desc("evidence run (commit, date), oldest first")
            .y_desc("median time per call (µs, log scale)")
            .x_labels(run_labels.len().clamp(1, 12))
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => {
                    run_labels.get(*i as usize).cloned().unwrap_or_default()
                }
                _ => String::new(),
            })
            .y_labels(12)
            .y_label_formatter(&|v| tick(*v))
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()?;
        for (index, series) in chart.series.iter().enumerate() {
            let style = color(index);
            let at = |run: usize| SegmentValue::CenterOf(run as i32);
            plot.draw_series(LineSeries::new(
                series.points.iter().map(|p| (at(p.run), p.median_us)),
                style.stroke_width(2),
            ))?
            .label(series.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], style.stroke_width(2))
            });
            plot.draw_series(
                series
                    .points
                    .iter()
                    .map(|p| Circle::new((at(p.run), p.median_us), 4, style.filled())),
            )?;
            // Log-scale ticks are sparse (powers of ten), so each point carries its value.
            plot.draw_series(series.points.iter().map(|p| {
                EmptyElement::at((at(p.run), p.median_us))
                    + Text::new(
                        format!("{} µs", tick(p.median_us)),
                        (7, -18),
                        (FONT, 13).into_font().color(&style),
                    )
            }))?;
            plot.draw_series(series.points.iter().filter_map(|p| {
                let (low, high) = p.ci?;
                Some(PathElement::new(
                    vec![(at(p.run), low), (at(p.run), high)],
                    style.stroke_width(2),
                ))
            }))?;
        }
        for (index, (label, median)) in chart.references.iter().enumerate() {
            let style = color(chart.series.len() + index);
            let line = [
                (SegmentValue::Exact(0), *median),
                (SegmentValue::Exact(last + 1), *median),
            ];
            plot.draw_series(DashedLineSeries::new(line, 8, 5, style.stroke_width(2)))?
                .label(format!("{label} (latest, {} µs)", tick(*median)))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], style.stroke_width(2))
                });
        }
        draw_legend(&mut plot, SeriesLabelPosition::UpperRight)?;
        Ok(())
    })
}
