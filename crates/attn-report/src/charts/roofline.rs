//! The roofline of the Nsight Compute profiles: achieved TFLOP/s against arithmetic intensity (FLOP
//! per DRAM byte), both on log scales, under the DRAM roof and the GPU's physical lines.

use plotters::prelude::*;

use super::{
    bounds, color, draw_legend_panel, frame, log10_label, log10_ticks, render_svg, LegendEntry,
    Mark, TickedAxis, FONT, RULE_RED,
};
use crate::ceilings::{PhysicalLine, PEAK_LINE};
use crate::format::significant;
use crate::ReportError;

/// Colour of the device-peak line.
const PEAK_COLOR: RGBColor = RGBColor(90, 0, 0);
/// Colour of the DRAM roof.
const DRAM_COLOR: RGBColor = RGBColor(90, 90, 90);

/// Data of the roofline chart.
#[derive(Debug, Clone, PartialEq)]
pub struct RooflineChart {
    /// Caption.
    pub title: String,
    /// One point per profiled kernel.
    pub points: Vec<RooflinePoint>,
    /// The DRAM bandwidth roof, bytes/s, and where it comes from.
    pub dram_roof: Option<(f64, String)>,
    /// Compute roofs (dense matmul rate, device peak).
    pub lines: Vec<PhysicalLine>,
}

/// One profiled kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct RooflinePoint {
    /// Legend label (the profile).
    pub label: String,
    /// FLOP per DRAM byte.
    pub intensity: f64,
    /// Achieved TFLOP/s.
    pub tflops: f64,
}

/// Draws the roofline as SVG.
pub fn roofline(chart: &RooflineChart) -> Result<String, ReportError> {
    render_svg("roofline.svg", |root| {
        let (area, panel) = frame(root, &chart.title)?;
        let top = chart.lines.iter().map(|l| l.tflops).fold(0.0, f64::max);
        let bandwidth_tb = chart.dram_roof.as_ref().map(|(b, _)| b / 1e12);
        // The ridge: where the DRAM roof meets the highest compute roof.
        let ridge = bandwidth_tb.filter(|_| top > 0.0).map(|b| top / b);
        let (x_min, x_max) = bounds(
            chart
                .points
                .iter()
                .map(|p| p.intensity)
                .chain(ridge)
                .filter(|v| *v > 0.0),
        )
        .unwrap_or((1.0, 1000.0));
        let (x_lo, x_hi) = ((x_min / 4.0).log10(), (x_max * 4.0).log10());
        let floor = bandwidth_tb.map(|b| b * 10f64.powf(x_lo));
        let (y_min, y_max) = bounds(
            chart
                .points
                .iter()
                .map(|p| p.tflops)
                .chain(chart.lines.iter().map(|l| l.tflops))
                .chain(floor)
                .filter(|v| *v > 0.0),
        )
        .unwrap_or((1.0, 1000.0));
        let (y_lo, y_hi) = ((y_min / 1.5).log10(), (y_max * 2.0).log10());
        let mut plot = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(
                TickedAxis::new(x_lo..x_hi, log10_ticks(x_lo, x_hi)),
                TickedAxis::new(y_lo..y_hi, log10_ticks(y_lo, y_hi)),
            )?;
        plot.configure_mesh()
            .x_desc("arithmetic intensity (FLOP per DRAM byte, log scale)")
            .y_desc("throughput (TFLOP/s, log scale)")
            .x_label_formatter(&|v| log10_label(*v))
            .y_label_formatter(&|v| log10_label(*v))
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 17))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()?;
        let mut legend = Vec::new();
        if let (Some((bytes_per_s, source)), Some(bandwidth)) = (&chart.dram_roof, bandwidth_tb) {
            let end = ridge.map_or(x_hi, f64::log10).min(x_hi);
            let roof = |x: f64| (bandwidth * 10f64.powf(x)).log10();
            plot.draw_series(LineSeries::new(
                [(x_lo, roof(x_lo)), (end, roof(end))],
                DRAM_COLOR.stroke_width(2),
            ))?;
            legend.push(LegendEntry::new(
                format!(
                    "DRAM roof {} TB/s ({source})",
                    significant(bytes_per_s / 1e12, 2)
                ),
                Mark::Line(DRAM_COLOR),
            ));
        }
        for line in &chart.lines {
            let start = bandwidth_tb.map_or(x_lo, |b| (line.tflops / b).log10().max(x_lo));
            let span = [(start, line.tflops.log10()), (x_hi, line.tflops.log10())];
            if line.name == PEAK_LINE {
                plot.draw_series(LineSeries::new(span, PEAK_COLOR.stroke_width(2)))?;
                legend.push(LegendEntry::new(line.label(), Mark::Line(PEAK_COLOR)));
            } else {
                plot.draw_series(DashedLineSeries::new(span, 10, 4, RULE_RED.stroke_width(2)))?;
                legend.push(LegendEntry::new(line.label(), Mark::Dashed(RULE_RED)));
            }
        }
        for (index, point) in chart.points.iter().enumerate() {
            let style = color(index);
            let at = (point.intensity.log10(), point.tflops.log10());
            plot.draw_series(std::iter::once(Circle::new(at, 6, style.filled())))?;
            legend.push(LegendEntry::new(
                format!(
                    "{}: {} TFLOP/s at {} FLOP/B",
                    point.label,
                    significant(point.tflops, 3),
                    significant(point.intensity, 3)
                ),
                Mark::Dot(style),
            ));
        }
        draw_legend_panel(&panel, &legend)
    })
}
