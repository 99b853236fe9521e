//! `report.md` (GitHub markdown, charts linked beside it) and `pr-comment.md`.

use super::{blocks, outline, Block, RenderedChart, TITLE};
use crate::sections::{GateSection, Sections};
use crate::table::escape_html;

/// `report.md`: GitHub markdown, charts referenced as `charts/<file>.svg` beside it.
pub fn markdown(sections: &Sections, charts: &[RenderedChart]) -> String {
    let blocks = blocks(sections, charts);
    let outline = outline(&blocks);
    let mut out = format!("# {TITLE}\n\n");
    let mut toc = Vec::new();
    for (text, id, subsections) in &outline.toc {
        toc.push(format!("- [{text}](#{id})\n"));
        toc.extend(
            subsections
                .iter()
                .map(|(text, id)| format!("  - [{text}](#{id})\n")),
        );
    }
    let mut anchors = outline.anchors.iter();
    // The summary line first, then the contents, then the sections.
    let (summary, body) = blocks.split_at(1);
    render(summary, &mut anchors, &mut out);
    out.push_str(&format!("**Contents**\n\n{}\n", toc.concat()));
    render(body, &mut anchors, &mut out);
    out
}

fn render<'a>(
    blocks: &[Block<'_>],
    anchors: &mut impl Iterator<Item = &'a String>,
    out: &mut String,
) {
    for block in blocks {
        match block {
            // GitHub gives every heading its anchor; the outline spells the same ones.
            Block::Heading(text) => {
                anchors.next();
                out.push_str(&format!("## {text}\n\n"));
            }
            Block::Subheading(text, _) => {
                anchors.next();
                out.push_str(&format!("### {text}\n\n"));
            }
            Block::Text(text) => out.push_str(&format!("{text}\n\n")),
            Block::Table(table) => out.push_str(&format!("{}\n", table.to_markdown())),
            Block::Details(summary, table) => out.push_str(&format!(
                "<details><summary>{}</summary>\n\n{}\n</details>\n\n",
                escape_html(summary),
                table.to_markdown()
            )),
            Block::Fold(summary, inner) => {
                out.push_str(&format!(
                    "<details><summary>{}</summary>\n\n",
                    escape_html(summary)
                ));
                render(inner, anchors, out);
                out.push_str("</details>\n\n");
            }
            Block::Chart(chart) => {
                out.push_str(&format!("![{}](charts/{})\n\n", chart.caption, chart.file))
            }
            Block::List(items) => {
                out.extend(items.iter().map(|item| format!("- {item}\n")));
                out.push('\n');
            }
        }
    }
}

/// `pr-comment.md`: the latest gate run as a pull-request comment (verdict line, medians and speedup
/// per shape, gate rule), plus Nsight Compute metrics when present.
pub fn pr_comment(sections: &Sections) -> String {
    let Some(gate) = sections.latest_gate.and_then(|i| sections.gates.get(i)) else {
        return format!(
            "**attn gate**: no gate run in the evidence yet. {}\n",
            sections.summary
        );
    };
    let mut out = pr_gate(gate);
    if let Some(table) = &sections.ncu {
        out.push_str(&format!(
            "\n<details><summary>Nsight Compute</summary>\n\n{}\n</details>\n",
            table.to_markdown()
        ));
    }
    out
}

fn pr_gate(gate: &GateSection) -> String {
    let mut out = format!(
        "{}\n\n{}\n{}\n",
        gate.verdict,
        gate.table.to_markdown(),
        gate.rule
    );
    if !gate.flags.is_empty() {
        out.push_str("\nFlags:\n");
        out.extend(gate.flags.iter().map(|f| format!("- {f}\n")));
    }
    out.push_str(&format!("\nEvidence: `{}`\n", gate.file));
    out
}
