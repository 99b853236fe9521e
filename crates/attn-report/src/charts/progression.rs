//! The progression of one shape: each run's speedup of our implementations over that same run's
//! baseline median (so that a baseline that moved between runs does not read as our progress), with
//! the gate's bootstrap CI where the run has one.

use plotters::prelude::*;

use super::{
    bounds, color, draw_legend_panel, frame, render_svg, tick_decimals, LegendEntry, Mark, FONT,
};
use crate::ReportError;

/// Data of one progression chart.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressionChart {
    /// Caption, naming the shape.
    pub title: String,
    /// One distinct label per run on the x axis, oldest first (e.g. `"16:47 a2756d0"`).
    pub runs: Vec<String>,
    /// Description of the x axis (says the date when every run shares it).
    pub x_desc: String,
    /// One series per (implementation, baseline) pair.
    pub series: Vec<ProgressionSeries>,
}

/// One implementation's speedups over runs, against one baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressionSeries {
    /// Legend label, e.g. `"hopper vs sdpa:default"`.
    pub label: String,
    /// One point per run that measured it.
    pub points: Vec<ProgressionPoint>,
}

/// One run's speedup on the progression chart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProgressionPoint {
    /// Index into [`ProgressionChart::runs`].
    pub run: usize,
    /// The run's baseline median / this implementation's median.
    pub speedup: f64,
    /// 95% CI of the speedup (gate runs).
    pub ci: Option<(f64, f64)>,
}

/// Draws one progression chart as SVG; `file` names it in errors.
pub fn progression(file: &str, chart: &ProgressionChart) -> Result<String, ReportError> {
    render_svg(file, |root| {
        let (area, panel) = frame(root, &chart.title)?;
        let values = chart
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .flat_map(|p| [Some(p.speedup), p.ci.map(|c| c.1)])
            .flatten()
            .chain([1.0]);
        let (_, hi) = bounds(values).unwrap_or((0.0, 1.0));
        let y_hi = hi * 1.15;
        let y_decimals = tick_decimals(y_hi, 10);
        // One segment per run (at least two: plotters draws nothing on a single segment).
        let segments = chart.runs.len().max(2) as i32;
        let mut plot = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d((0..segments - 1).into_segmented(), 0.0..y_hi)?;
        let runs = &chart.runs;
        plot.configure_mesh()
            .disable_x_mesh()
            .x_desc(chart.x_desc.as_str())
            .y_desc("speedup over the run's own baseline")
            .x_labels(runs.len().clamp(1, 16))
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => runs.get(*i as usize).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .y_labels(10)
            .y_label_formatter(&|v| format!("{v:.y_decimals$}×"))
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 17))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()?;
        let whole = [
            (SegmentValue::Exact(0), 1.0),
            (SegmentValue::Exact(segments), 1.0),
        ];
        plot.draw_series(LineSeries::new(whole, BLACK.stroke_width(1)))?;
        let mut legend = vec![LegendEntry::new(
            "1.0× = as fast as the run's baseline",
            Mark::Line(BLACK),
        )];
        let at = |run: usize| SegmentValue::CenterOf(run as i32);
        for (index, series) in chart.series.iter().enumerate() {
            let style = color(index);
            let line = series.points.iter().map(|p| (at(p.run), p.speedup));
            plot.draw_series(LineSeries::new(line.clone(), style.stroke_width(2)))?;
            plot.draw_series(line.map(|p| Circle::new(p, 5, style.filled())))?;
            plot.draw_series(series.points.iter().filter_map(|p| {
                let (low, high) = p.ci?;
                Some(PathElement::new(
                    vec![(at(p.run), low), (at(p.run), high)],
                    style.stroke_width(2),
                ))
            }))?;
            let latest = series
                .points
                .last()
                .map(|p| format!(" (latest {:.2}×)", p.speedup))
                .unwrap_or_default();
            legend.push(LegendEntry::new(
                format!("{}{latest}", series.label),
                Mark::Line(style),
            ));
        }
        legend.push(LegendEntry::new(
            "whisker: 95% bootstrap CI of the speedup (gate runs)",
            Mark::Line(RGBColor(120, 120, 120)),
        ));
        draw_legend_panel(&panel, &legend)
    })
}
