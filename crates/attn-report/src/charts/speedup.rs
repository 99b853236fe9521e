//! Chart 2: speedup over the baseline per shape, bars with CI whiskers, lines at 1.0 and at the
//! gate threshold.

use plotters::prelude::*;

use super::{
    bounds, color, draw_legend_panel, frame, render_svg, tick_decimals, LegendEntry, Mark, FONT,
    RULE_RED,
};
use crate::ReportError;

/// Data of the speedup chart.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedupChart {
    /// Caption.
    pub title: String,
    /// One bar per shape.
    pub bars: Vec<SpeedupBar>,
    /// The smallest speedup the gate accepts (1 / the gate's bound on candidate/baseline median),
    /// when known.
    pub threshold: Option<f64>,
}

/// One shape's speedup.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedupBar {
    /// The shape, as [`attn_evidence::ShapeSpec`] displays it.
    pub shape: String,
    /// Point estimate (baseline time / candidate time).
    pub point: f64,
    /// CI lower end.
    pub lower: f64,
    /// CI upper end.
    pub upper: f64,
    /// Whether the case passed the gate (colours the bar).
    pub passed: bool,
}

/// Draws the speedup chart as SVG.
pub fn speedup_bars(chart: &SpeedupChart) -> Result<String, ReportError> {
    render_svg("speedup.svg", |root| {
        let (area, panel) = frame(root, &chart.title)?;
        let values = chart
            .bars
            .iter()
            .flat_map(|b| [b.point, b.lower, b.upper])
            .chain([1.0])
            .chain(chart.threshold);
        let (_, hi) = bounds(values).unwrap_or((0.0, 1.0));
        // Segments 0..=last: one per shape (at least two: plotters draws nothing on a range of
        // one segment, so a single shape gets an empty neighbour).
        let count = chart.bars.len().max(2) as i32;
        let y_hi = hi * 1.2;
        let y_decimals = tick_decimals(y_hi, 10);
        let mut plot = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d((0..count - 1).into_segmented(), 0.0..y_hi)?;
        let shapes = &chart.bars;
        plot.configure_mesh()
            .disable_x_mesh()
            .x_desc("shape (B,H,S,D)")
            .y_desc("speedup (baseline / candidate time)")
            .x_labels(shapes.len().clamp(1, 16))
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => shapes
                    .get(*i as usize)
                    .map(|b| b.shape.clone())
                    .unwrap_or_default(),
                _ => String::new(),
            })
            .y_labels(10)
            .y_label_formatter(&|v| format!("{v:.y_decimals$}×"))
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 17))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()?;
        let (pass, fail) = (color(2), color(1));
        plot.draw_series(chart.bars.iter().enumerate().map(|(i, bar)| {
            let fill = if bar.passed { pass } else { fail };
            let mut rect = Rectangle::new(
                [
                    (SegmentValue::Exact(i as i32), 0.0),
                    (SegmentValue::Exact(i as i32 + 1), bar.point),
                ],
                fill.mix(0.75).filled(),
            );
            rect.set_margin(0, 0, 18, 18);
            rect
        }))?;
        plot.draw_series(chart.bars.iter().enumerate().map(|(i, bar)| {
            let x = SegmentValue::CenterOf(i as i32);
            PathElement::new(
                vec![(x.clone(), bar.lower), (x, bar.upper)],
                BLACK.stroke_width(2),
            )
        }))?;
        let whole = |y: f64| [(SegmentValue::Exact(0), y), (SegmentValue::Exact(count), y)];
        plot.draw_series(LineSeries::new(whole(1.0), BLACK.stroke_width(1)))?;
        let mut legend = vec![LegendEntry::new(
            "1.0× = as fast as the baseline",
            Mark::Line(BLACK),
        )];
        if let Some(threshold) = chart.threshold {
            plot.draw_series(DashedLineSeries::new(
                whole(threshold),
                8,
                5,
                RULE_RED.stroke_width(2),
            ))?;
            legend.push(LegendEntry::new(
                format!("gate: speedup ≥ {threshold:.3}×"),
                Mark::Dashed(RULE_RED),
            ));
        }
        legend.push(LegendEntry::new(
            "passed (whisker: 95% CI)",
            Mark::Box(pass),
        ));
        legend.push(LegendEntry::new("failed", Mark::Box(fail)));
        draw_legend_panel(&panel, &legend)
    })
}
