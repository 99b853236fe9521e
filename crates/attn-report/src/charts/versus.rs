//! The first picture of a suite: per shape, horizontal bars of the TFLOP/s of the fastest of our
//! implementations and of each comparator, all timed in one bench run (one GPU, one timing mode).

use plotters::prelude::*;

use super::{
    color, draw_legend_panel, frame, render_svg_sized, tick_decimals, LegendEntry, Mark,
    TickedAxis, CHART_SIZE, FONT,
};
use crate::ReportError;

/// Data of one versus chart.
#[derive(Debug, Clone, PartialEq)]
pub struct VersusChart {
    /// Caption, naming the suite, the GPU and the timing mode.
    pub title: String,
    /// One group of bars per shape, top to bottom.
    pub shapes: Vec<String>,
    /// One bar per shape and series; the first series is ours.
    pub series: Vec<VersusSeries>,
}

/// One implementation's (or comparator's) TFLOP/s per shape.
#[derive(Debug, Clone, PartialEq)]
pub struct VersusSeries {
    /// Legend label, e.g. `"fastest of ours (hopper)"`.
    pub label: String,
    /// TFLOP/s per shape of [`VersusChart::shapes`]; `None` where it was not timed.
    pub values: Vec<Option<f64>>,
}

/// Characters of a shape label before it is cut short (the table below the chart has it whole).
const LABEL_CHARS: usize = 34;
/// Height of one bar, px.
const BAR_PX: u32 = 13;

/// The chart's height: the common one, or taller when many shapes need room for their bars.
fn height(chart: &VersusChart) -> u32 {
    let bars = chart.shapes.len() as u32 * (chart.series.len().max(1) as u32 * BAR_PX + 10);
    CHART_SIZE.1.max(bars + 140)
}

/// `text` cut to [`LABEL_CHARS`] characters, its middle replaced by `…` (the start names the
/// batch, the end its heads, mask and dtype).
fn cut(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= LABEL_CHARS {
        return text.to_owned();
    }
    let tail = LABEL_CHARS / 2;
    let head = LABEL_CHARS - 1 - tail;
    let (start, end) = (&chars[..head], &chars[chars.len() - tail..]);
    format!(
        "{}…{}",
        start.iter().collect::<String>(),
        end.iter().collect::<String>()
    )
}

/// The shapes cut to fit, numbered ` (2)`, ` (3)` … where two would read the same.
fn labels(shapes: &[String]) -> Vec<String> {
    let cut: Vec<String> = shapes.iter().map(|s| cut(s)).collect();
    cut.iter()
        .enumerate()
        .map(
            |(i, label)| match cut[..i].iter().filter(|l| *l == label).count() {
                0 => label.clone(),
                n => format!("{label} ({})", n + 1),
            },
        )
        .collect()
}

/// Draws one versus chart as SVG; `file` names it in errors.
pub fn versus(file: &str, chart: &VersusChart) -> Result<String, ReportError> {
    render_svg_sized(file, (CHART_SIZE.0, height(chart)), |root| {
        let (area, panel) = frame(root, &chart.title)?;
        let groups = chart.shapes.len().max(1);
        let values = || chart.series.iter().flat_map(|s| s.values.iter().flatten());
        let x_hi = values().copied().fold(0.0, f64::max).max(1e-6) * 1.15;
        let x_decimals = tick_decimals(x_hi, 8);
        // Group i spans [n-1-i, n-i] so that the first shape is on top; its label sits mid-group.
        let n = groups as f64;
        let ticks: Vec<f64> = (0..groups).map(|i| n - 0.5 - i as f64).collect();
        let shapes = labels(&chart.shapes);
        let mut plot = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(250)
            .build_cartesian_2d(0.0..x_hi, TickedAxis::new(0.0..n, ticks))?;
        plot.configure_mesh()
            .disable_y_mesh()
            .x_desc("throughput at the median time (TFLOP/s)")
            .y_desc("shape")
            .x_labels(8)
            .x_label_formatter(&|v| format!("{v:.x_decimals$}"))
            .y_label_formatter(&|v| {
                let index = (n - v).floor() as usize;
                shapes.get(index).cloned().unwrap_or_default()
            })
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 17))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()?;
        let bars = chart.series.len().max(1) as f64;
        let width = 0.8 / bars;
        let mut legend = Vec::new();
        for (j, series) in chart.series.iter().enumerate() {
            let style = color(j);
            for (i, value) in series.values.iter().enumerate() {
                let Some(value) = value else { continue };
                let top = n - i as f64 - 0.1 - j as f64 * width;
                let bottom = top - width;
                plot.draw_series([Rectangle::new(
                    [(0.0, bottom), (*value, top)],
                    style.mix(0.85).filled(),
                )])?;
                plot.draw_series([Text::new(
                    format!("{value:.0}"),
                    (*value, top),
                    (FONT, 12).into_font().color(&BLACK),
                )])?;
            }
            legend.push(LegendEntry::new(&series.label, Mark::Box(style)));
        }
        draw_legend_panel(&panel, &legend)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_shapes_are_cut_and_many_shapes_make_a_taller_chart() {
        assert_eq!(
            cut("2,32/8,8192,128 causal bf16"),
            "2,32/8,8192,128 causal bf16"
        );
        let long = "varlen=512,3072,1024,2048,4096,8192 H=16 D=128";
        assert_eq!(cut(long).chars().count(), LABEL_CHARS);
        assert!(cut(long).ends_with("H=16 D=128"), "{}", cut(long));
        let twins = [format!("{long} x"), format!("{long} x"), "s".into()];
        assert_eq!(labels(&twins)[1], format!("{} (2)", cut(&twins[0])));
        let chart = |shapes: usize| VersusChart {
            title: String::new(),
            shapes: vec!["s".into(); shapes],
            series: vec![
                VersusSeries {
                    label: "a".into(),
                    values: vec![Some(1.0); shapes],
                };
                3
            ],
        };
        assert_eq!(height(&chart(4)), CHART_SIZE.1);
        assert!(height(&chart(14)) > CHART_SIZE.1);
    }
}
