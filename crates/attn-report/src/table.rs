//! One table model rendered to both GitHub markdown and HTML, so both outputs show the same numbers.

/// A table: a header row and rows of already formatted cells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// Column headers.
    pub headers: Vec<String>,
    /// Rows; each has as many cells as there are headers.
    pub rows: Vec<Vec<String>>,
    /// Columns (by index) holding numbers, right-aligned.
    pub numeric: Vec<usize>,
    /// Longer text of a cell (row, column), shown in HTML as its tooltip; markdown and text
    /// show the cell alone.
    pub titles: std::collections::BTreeMap<(usize, usize), String>,
}

impl Table {
    /// A table with these headers and no rows.
    pub fn new(headers: &[&str]) -> Self {
        Table {
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
            numeric: Vec::new(),
            titles: Default::default(),
        }
    }

    /// Marks columns as numeric (right-aligned).
    pub fn numeric(mut self, columns: &[usize]) -> Self {
        self.numeric = columns.to_vec();
        self
    }

    /// Appends a row.
    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// Gives the last row's cell in `column` a tooltip (HTML only).
    pub fn title_last(&mut self, column: usize, title: String) {
        if let Some(row) = self.rows.len().checked_sub(1) {
            self.titles.insert((row, column), title);
        }
    }

    /// GitHub-flavoured markdown, pipes in cells escaped.
    pub fn to_markdown(&self) -> String {
        let escape = |cell: &str| cell.replace('|', "\\|").replace('\n', " ");
        let mut out = format!(
            "| {} |\n",
            self.headers
                .iter()
                .map(|h| escape(h))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let rule: Vec<&str> = (0..self.headers.len())
            .map(|i| {
                if self.numeric.contains(&i) {
                    "---:"
                } else {
                    "---"
                }
            })
            .collect();
        out.push_str(&format!("| {} |\n", rule.join(" | ")));
        for row in &self.rows {
            out.push_str(&format!(
                "| {} |\n",
                row.iter()
                    .map(|c| escape(c))
                    .collect::<Vec<_>>()
                    .join(" | ")
            ));
        }
        out
    }

    /// Plain text for a terminal: every column as wide as its widest cell (in characters), numbers
    /// right-aligned, two spaces between columns, no trailing spaces (so a long last column, a
    /// config, pushes nothing out of line).
    pub fn to_text(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (cell, &width))| match self.numeric.contains(&i) {
                    true => format!("{cell:>width$}"),
                    false => format!("{cell:<width$}"),
                })
                .collect();
            padded.join("  ").trim_end().to_string() + "\n"
        };
        let mut out = line(&self.headers);
        for row in &self.rows {
            out.push_str(&line(row));
        }
        out
    }

    /// An HTML `<table>`; cells are escaped. `classes` maps a cell's text to a CSS class (verdict
    /// colouring), or `None`.
    pub fn to_html(&self, classes: fn(&str) -> Option<&'static str>) -> String {
        let mut out = String::from("<table>\n<thead><tr>");
        for (i, header) in self.headers.iter().enumerate() {
            out.push_str(&format!(
                "<th{}>{}</th>",
                self.align(i),
                breakable_html(header)
            ));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for (r, row) in self.rows.iter().enumerate() {
            out.push_str("<tr>");
            for (i, cell) in row.iter().enumerate() {
                let names: Vec<&str> = [self.numeric.contains(&i).then_some("num"), classes(cell)]
                    .into_iter()
                    .flatten()
                    .collect();
                let class = if names.is_empty() {
                    String::new()
                } else {
                    format!(" class=\"{}\"", names.join(" "))
                };
                let title = self
                    .titles
                    .get(&(r, i))
                    .map_or_else(String::new, |t| format!(" title=\"{}\"", escape_html(t)));
                out.push_str(&format!("<td{class}{title}>{}</td>", breakable_html(cell)));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody>\n</table>\n");
        out
    }

    fn align(&self, column: usize) -> &'static str {
        if self.numeric.contains(&column) {
            " class=\"num\""
        } else {
            ""
        }
    }
}

/// Escaped cell text that may wrap after `,` and `:` (`<wbr>`): shape labels such as
/// `varlen=512,3072,…` and headers such as `sdpa:efficient` have no spaces, and unbroken they
/// widen a many-column table past the window.
fn breakable_html(text: &str) -> String {
    escape_html(text)
        .replace(',', ",<wbr>")
        .replace(':', ":<wbr>")
}

/// Escapes `&`, `<`, `>` and `"` for HTML text and attribute values.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_and_html_show_the_same_cells() {
        let mut table = Table::new(&["shape", "median (µs)"]).numeric(&[1]);
        table.push(vec!["a|b,c".into(), "<1>".into()]);
        assert_eq!(
            table.to_markdown(),
            "| shape | median (µs) |\n| --- | ---: |\n| a\\|b,c | <1> |\n"
        );
        let html = table.to_html(|_| None);
        assert!(
            html.contains("<td>a|b,<wbr>c</td><td class=\"num\">&lt;1&gt;</td>"),
            "{html}"
        );
        table.title_last(1, "one \"x\"".into());
        let html = table.to_html(|_| None);
        assert!(
            html.contains("<td class=\"num\" title=\"one &quot;x&quot;\">&lt;1&gt;</td>"),
            "{html}"
        );
        assert!(!table.to_markdown().contains("one"));
    }

    #[test]
    fn text_columns_line_up_whatever_the_last_cell_length() {
        let mut table = Table::new(&["impl", "regs", "config"]).numeric(&[1]);
        table.push(vec!["naive".into(), "27".into(), "ROWS_PER_BLOCK=4".into()]);
        let config = "BLOCK_M=128,BLOCK_N=96,KV_SPLIT=1,MIN_BLOCKS=1,NUM_WARPS=4";
        table.push(vec!["mma".into(), "255".into(), config.into()]);
        let text = table.to_text();
        let lines: Vec<&str> = text.lines().collect();
        let at = |line: &str, word: &str| line.find(word).unwrap();
        assert_eq!(at(lines[0], "config"), at(lines[1], "ROWS"));
        assert_eq!(at(lines[1], "ROWS"), at(lines[2], "BLOCK_M"));
        assert_eq!(at(lines[0], "regs") + 4, at(lines[2], "255") + 3);
        assert!(text.lines().all(|l| !l.ends_with(' ')), "{text}");
    }
}
