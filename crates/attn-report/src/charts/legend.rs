//! The frame every chart shares: a title across the top, the plot on the left, and the legend in a
//! panel on the right, so that no legend ever covers a data point.

use plotters::prelude::*;

use super::{Area, DrawResult, FONT, LEGEND_WIDTH};

/// How a legend entry is marked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mark {
    /// A solid line.
    Line(RGBColor),
    /// A dashed line (references, ceilings).
    Dashed(RGBColor),
    /// A filled box (bars).
    Box(RGBColor),
    /// A dot (scattered points).
    Dot(RGBColor),
}

/// One legend entry.
#[derive(Debug, Clone, PartialEq)]
pub struct LegendEntry {
    /// The text, wrapped to the panel's width.
    pub label: String,
    /// Its mark.
    pub mark: Mark,
}

impl LegendEntry {
    /// An entry.
    pub fn new(label: impl Into<String>, mark: Mark) -> Self {
        LegendEntry {
            label: label.into(),
            mark,
        }
    }
}

/// Characters per legend line (16 px sans-serif, drawn at 13 px in a [`LEGEND_WIDTH`] panel).
const CHARS_PER_LINE: usize = 34;
/// Height of one legend text line, px.
const LINE_HEIGHT: i32 = 17;
/// Where the text starts in the panel, px (after the mark).
const TEXT_X: i32 = 44;

/// Draws `title` across the top of `root` and returns the plot area (left) and the legend panel
/// (right).
pub(crate) fn frame<'a>(
    root: &Area<'a>,
    title: &str,
) -> Result<(Area<'a>, Area<'a>), Box<dyn std::error::Error>> {
    let body = root.titled(title, (FONT, 22))?;
    let (width, _) = body.dim_in_pixel();
    let (plot, legend) = body.split_horizontally(width.saturating_sub(LEGEND_WIDTH));
    Ok((plot, legend))
}

/// Draws `entries` top to bottom in the legend panel.
pub(crate) fn draw_legend_panel(panel: &Area<'_>, entries: &[LegendEntry]) -> DrawResult {
    let font = (FONT, 16).into_font().color(&BLACK);
    let mut y = 20;
    for entry in entries {
        draw_mark(panel, entry.mark, y + 8)?;
        let lines = wrap(&entry.label, CHARS_PER_LINE);
        for (i, line) in lines.iter().enumerate() {
            let top = y + i as i32 * LINE_HEIGHT;
            panel.draw(&Text::new(line.clone(), (TEXT_X, top), font.clone()))?;
        }
        y += lines.len() as i32 * LINE_HEIGHT + 8;
    }
    Ok(())
}

fn draw_mark(panel: &Area<'_>, mark: Mark, y: i32) -> DrawResult {
    let (left, right) = (8, 36);
    match mark {
        Mark::Line(color) => {
            panel.draw(&PathElement::new(
                vec![(left, y), (right, y)],
                color.stroke_width(2),
            ))?;
        }
        Mark::Dashed(color) => {
            for start in [left, left + 11, left + 22] {
                panel.draw(&PathElement::new(
                    vec![(start, y), (start + 6, y)],
                    color.stroke_width(2),
                ))?;
            }
        }
        Mark::Box(color) => {
            panel.draw(&Rectangle::new(
                [(left, y - 6), (right, y + 6)],
                color.mix(0.75).filled(),
            ))?;
        }
        Mark::Dot(color) => {
            panel.draw(&Circle::new(((left + right) / 2, y), 5, color.filled()))?;
        }
    }
    Ok(())
}

/// `text` broken into lines of at most `width` characters at spaces (a longer word gets its own
/// line).
pub(crate) fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let needed = line.chars().count() + 1 + word.chars().count();
        if !line.is_empty() && needed > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::wrap;

    #[test]
    fn wrap_breaks_at_spaces_within_the_width() {
        assert_eq!(
            wrap("device peak 1070 TFLOP/s (132 SMs)", 16),
            ["device peak 1070", "TFLOP/s (132", "SMs)"]
        );
        assert_eq!(wrap("", 10), [""]);
        assert_eq!(
            wrap("averyveryverylongword x", 5),
            ["averyveryverylongword", "x"]
        );
    }
}
