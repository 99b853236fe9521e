//! `index.html`: one page, inline CSS, no script, no network; charts are `<img>` links to the
//! SVG files under `charts/` beside it.

use super::{blocks, outline, Block, RenderedChart, TITLE};
use crate::sections::{verdict_class, Sections};
use crate::table::escape_html;

/// The page's style. Tables never scroll sideways or hide columns: text cells wrap between words
/// (inside a word only when it is wider than the page allows), numbers stay on one line.
const CSS: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;max-width:1320px;padding:16px 24px;color:#1b1b1b;line-height:1.45}
h1{font-size:1.6em;margin:.4em 0}h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}h3{font-size:1.05em;margin:1.2em 0 .3em}
table{border-collapse:collapse;margin:.6em 0;font-size:13px;max-width:100%}
th,td{border:1px solid #d0d0d0;padding:3px 6px;text-align:left;vertical-align:top;overflow-wrap:break-word}th{background:#f3f3f3}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}td.num{white-space:nowrap}td.good{color:#0a6b2d;font-weight:600}td.bad{color:#b3141b;font-weight:600}
figure{margin:1em 0}figure img{display:block;width:100%;max-width:1040px;height:auto;border:1px solid #eee}figcaption{font-size:13px;color:#555}
details{margin:.4em 0 1em}summary{cursor:pointer;color:#333}
code{background:#f3f3f3;padding:1px 4px;border-radius:3px;overflow-wrap:break-word}p.verdict{font-size:1.1em;padding:6px 10px;border-left:6px solid}
p.verdict.good{border-color:#0a6b2d;background:#eaf6ee}p.verdict.bad{border-color:#b3141b;background:#fbecec}ul{margin-top:.2em}
nav.toc{font-size:14px;background:#f7f7f7;padding:6px 12px;border-radius:4px}nav.toc ul{margin:.2em 0;padding-left:1.2em}nav.toc li{display:inline;margin-right:.9em}nav.toc ul ul{padding-left:.6em}nav.toc ul ul li{font-size:13px}
details.fold>summary{font-weight:600}";

/// `index.html`: one page, inline CSS, charts linked from `charts/`, no script, no network.
pub fn html(sections: &Sections, charts: &[RenderedChart]) -> String {
    let blocks = blocks(sections, charts);
    let outline = outline(&blocks);
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{TITLE}</title>\n<style>\n{CSS}\n</style>\n</head>\n<body>\n<h1>{TITLE}</h1>\n"
    );
    let mut anchors = outline.anchors.iter();
    let (summary, body) = blocks.split_at(1);
    render(summary, &mut anchors, &mut out);
    out.push_str("<nav class=\"toc\">\n<ul>\n");
    for (text, id, subsections) in &outline.toc {
        out.push_str(&format!("<li><a href=\"#{id}\">{}</a>", escape_html(text)));
        if !subsections.is_empty() {
            out.push_str("\n<ul>\n");
            for (text, id) in subsections {
                out.push_str(&format!(
                    "<li><a href=\"#{id}\">{}</a></li>\n",
                    escape_html(text)
                ));
            }
            out.push_str("</ul>\n");
        }
        out.push_str("</li>\n");
    }
    out.push_str("</ul>\n</nav>\n");
    render(body, &mut anchors, &mut out);
    out.push_str("</body>\n</html>\n");
    out
}

fn render<'a>(
    blocks: &[Block<'_>],
    anchors: &mut impl Iterator<Item = &'a String>,
    out: &mut String,
) {
    for block in blocks {
        match block {
            Block::Heading(text) => out.push_str(&format!(
                "<h2 id=\"{}\">{}</h2>\n",
                anchors.next().map_or("", String::as_str),
                escape_html(text)
            )),
            Block::Subheading(text, _) => out.push_str(&format!(
                "<h3 id=\"{}\">{}</h3>\n",
                anchors.next().map_or("", String::as_str),
                escape_html(text)
            )),
            Block::Text(text) => out.push_str(&paragraph(text)),
            Block::Table(table) => out.push_str(&table.to_html(verdict_class)),
            Block::Details(summary, table) => out.push_str(&format!(
                "<details>\n<summary>{}</summary>\n{}</details>\n",
                escape_html(summary),
                table.to_html(verdict_class)
            )),
            Block::Fold(summary, inner) => {
                out.push_str(&format!(
                    "<details class=\"fold\">\n<summary>{}</summary>\n",
                    escape_html(summary)
                ));
                render(inner, anchors, out);
                out.push_str("</details>\n");
            }
            Block::Chart(chart) => out.push_str(&format!(
                "<figure>\n<img src=\"charts/{}\" alt=\"{}\">\n<figcaption>{}</figcaption>\n</figure>\n",
                escape_html(&chart.file),
                escape_html(&chart.caption),
                escape_html(&chart.caption)
            )),
            Block::List(items) => {
                out.push_str("<ul>\n");
                out.extend(
                    items
                        .iter()
                        .map(|item| format!("<li>{}</li>\n", inline_markdown(item))),
                );
                out.push_str("</ul>\n");
            }
        }
    }
}

/// A paragraph; a verdict line's emoji becomes a coloured badge (emoji fonts are not everywhere).
fn paragraph(text: &str) -> String {
    for (emoji, class) in [("✅ ", "good"), ("❌ ", "bad")] {
        if let Some(rest) = text.strip_prefix(emoji) {
            return format!(
                "<p class=\"verdict {class}\">{}</p>\n",
                inline_markdown(rest)
            );
        }
    }
    format!("<p>{}</p>\n", inline_markdown(text))
}

/// HTML for the two inline markdown forms the report's sentences use: `**bold**` and `` `code` ``.
fn inline_markdown(text: &str) -> String {
    let escaped = escape_html(text);
    let mut out = String::new();
    let (mut bold, mut code) = (false, false);
    let mut rest = escaped.as_str();
    while let Some(c) = rest.chars().next() {
        if !code && rest.starts_with("**") {
            out.push_str(if bold { "</strong>" } else { "<strong>" });
            bold = !bold;
            rest = &rest[2..];
        } else if c == '`' {
            out.push_str(if code { "</code>" } else { "<code>" });
            code = !code;
            rest = &rest[1..];
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}
