//! Assembles the outputs: `report.md`, `pr-comment.md` and the self-contained `index.html`.

use crate::sections::{progression_note, verdict_class, GateSection, Sections};
use crate::table::{escape_html, Table};

/// A chart ready to be written or inlined.
#[derive(Debug, Clone)]
pub struct RenderedChart {
    /// File name under `charts/`.
    pub file: String,
    /// Alt text / caption.
    pub caption: String,
    /// The SVG document.
    pub svg: String,
}

/// One block of the report, in page order; markdown and HTML render the same blocks.
enum Block<'a> {
    Heading(&'a str),
    Subheading(&'a str),
    Text(String),
    Table(&'a Table),
    /// A table folded away under a one-line summary (long detail).
    Details(String, &'a Table),
    Chart(&'a RenderedChart),
    List(&'a [String]),
}

fn blocks<'a>(sections: &'a Sections, charts: &'a [RenderedChart]) -> Vec<Block<'a>> {
    let mut out = vec![Block::Text(sections.summary.clone())];
    glance_blocks(sections, &mut out);
    sweep_blocks(sections, charts, &mut out);
    progression_blocks(sections, charts, &mut out);
    gate_blocks(sections, charts, &mut out);
    if let Some(table) = &sections.implementations {
        out.push(Block::Heading("Implementations against SDPA's backends"));
        out.push(Block::Text(
            "TFLOP/s at the median time (4·B·H·S_q·S_kv·D, halved when causal), from the latest bench \
             entry of each implementation and shape; the ratios compare the fastest of the project's \
             kernels with SDPA's default dispatch and its FlashAttention-2 backend (above 1× is faster)."
                .into(),
        ));
        out.push(Block::Table(table));
    }
    if let Some(table) = &sections.against_fa3 {
        out.push(Block::Heading(
            "hopper against FlashAttention-3 and cuDNN, one run each",
        ));
        out.push(Block::Text(
            "Each row from one run, the latest of each shape: a gate run of hopper as tuned (no \
             `--config`: runs of other knobs are experiments) against `--baseline fa3` (the two sides timed in interleaved blocks, the speedup with its 95% \
             CI) where there is one, else a bench run that timed hopper (its defaults), \
             FlashAttention-3 (`--sdpa-backends fa3`) and SDPA's default (cuDNN) on as many input \
             sets each. FlashAttention-3 is its prebuilt library through JAX, host clock around \
             many back-to-back calls, in batch mode (inputs resident, rotating over one input set \
             per call of a sample on both sides). A gate row's cuDNN columns come from the latest \
             batch-mode gate run of hopper against SDPA's default on that shape on the same GPU \
             model, its own interleaved ratio (both runs named; none from another GPU). Ratios are speed (the other's median time over \
             hopper's; above 1× hopper is faster). SM MHz: the mean clock of each side's kept \
             blocks in a gate run, or over each entry's samples in a bench run. From \
             2026-11-27 it is measured over the block (every SM's cycle counter stamped before \
             and after it); earlier files read a 50 µs probe at each edge of the block, and \
             such readings swung ±5% between blocks whose times agreed within 1%, so their \
             columns are rough: on 2026-11-27 the same probes put hopper 50–100 MHz above \
             FA3, where the runs of 2026-11-26, in the older block order, had put FA3 above \
             hopper. Per clock (gate runs with clocks over the span only): the speed ratio at \
             equal clocks, FA3's time × clock over hopper's, the kernels' work per cycle apart \
             from how far each one's power draw pulls its clock down. Gate runs before the \
             warm-up round timed the baseline first in every pair \
             of blocks; their ratios, recomputed from the raw samples without each side's first \
             block, move by 0.0% on average (−5.6% to +6.8%)."
                .into(),
        ));
        out.push(Block::Table(table));
    }
    if let Some(table) = &sections.varlen {
        out.push(Block::Heading(
            "Varlen batches against dense at the mean length",
        ));
        out.push(Block::Text(
            "Each packed batch of mixed lengths against the same implementation on the dense batch \
             of its non-empty sequences at their mean length, timed the same way. A mixed batch does \
             Σ Lᵢ² attention work where the dense one does n·mean² (the work column), so at equal \
             throughput its time per token is that factor above dense; time per unit of work is the \
             kernel's own cost of packing and ragged tiles. Where the same run timed PyTorch's \
             varlen_attn (FlashAttention-2 over the same packed batch and offsets, \
             `--sdpa-backends varlen`) on as many input sets, its time per token and its median \
             time over ours (above 1× ours is faster)."
                .into(),
        ));
        out.push(Block::Table(table));
    }
    if let Some((file, table)) = &sections.bench {
        out.push(Block::Heading("Latest benchmark"));
        out.push(Block::Text(format!(
            "From `{file}`. Times are µs per call; TFLOP/s at the median."
        )));
        out.push(Block::Details(
            format!("All {} entries", table.rows.len()),
            table,
        ));
    }
    ncu_blocks(sections, charts, &mut out);
    if let Some(table) = &sections.searches {
        out.push(Block::Heading("Configuration search"));
        out.push(Block::Table(table));
        for (file, _) in &sections.convergence {
            out.extend(chart(charts, file).map(Block::Chart));
        }
    }
    if !sections.files.rows.is_empty() {
        out.push(Block::Heading("Evidence files"));
        out.push(Block::Table(&sections.files));
    }
    out
}

fn chart<'a>(charts: &'a [RenderedChart], file: &str) -> Option<&'a RenderedChart> {
    charts.iter().find(|c| c.file == file)
}

fn glance_blocks<'a>(sections: &'a Sections, out: &mut Vec<Block<'a>>) {
    if sections.glance.is_empty() {
        return;
    }
    out.push(Block::Heading("At a glance"));
    for suite in &sections.glance {
        out.push(Block::Subheading(&suite.suite));
        out.extend(suite.lines.iter().cloned().map(Block::Text));
        out.extend(suite.table.as_ref().map(Block::Table));
    }
}

fn sweep_blocks<'a>(sections: &'a Sections, charts: &'a [RenderedChart], out: &mut Vec<Block<'a>>) {
    if sections.glance.is_empty() {
        return;
    }
    out.push(Block::Heading("Throughput vs sequence length"));
    if sections.sweeps.is_empty() {
        out.push(Block::Text(
            "No sweep yet: no bench run covers two or more sequence lengths of one (B, H, D, causal, \
             dtype) family. `cargo xtask bench --suite sweep` on a GPU machine produces one."
                .into(),
        ));
        return;
    }
    out.push(Block::Text(
        "TFLOP/s at the median time, one curve per implementation (SDPA backends and other references \
         dashed), with the GPU's measured dense fp16 matmul rate (dashed red) and its dense tensor peak \
         (solid dark red)."
            .into(),
    ));
    for sweep in &sections.sweeps {
        out.extend(chart(charts, &sweep.file).map(Block::Chart));
        let sources: Vec<String> = sweep.sources.iter().map(|s| format!("`{s}`")).collect();
        out.push(Block::Text(format!("From {}.", sources.join(", "))));
    }
}

fn progression_blocks<'a>(
    sections: &'a Sections,
    charts: &'a [RenderedChart],
    out: &mut Vec<Block<'a>>,
) {
    if sections.progressions.is_empty() {
        return;
    }
    out.push(Block::Heading("Progression per shape"));
    out.push(Block::Text(progression_note()));
    for progress in &sections.progressions {
        out.extend(chart(charts, &progress.file).map(Block::Chart));
        out.push(Block::Details(
            format!("Every run on {}", progress.shape),
            &progress.table,
        ));
    }
}

fn gate_blocks<'a>(sections: &'a Sections, charts: &'a [RenderedChart], out: &mut Vec<Block<'a>>) {
    if sections.gates.is_empty() {
        return;
    }
    out.push(Block::Heading("Latest gate verdicts"));
    for gate in &sections.gates {
        out.push(Block::Text(gate.verdict.clone()));
        out.push(Block::Table(&gate.table));
        out.push(Block::Text(gate.rule.clone()));
        if !gate.flags.is_empty() {
            out.push(Block::Text(
                "Flags (look at these even when the gate passed):".into(),
            ));
            out.push(Block::List(&gate.flags));
        }
        out.push(Block::Text(format!("Evidence: `{}`", gate.file)));
        out.extend(chart(charts, &format!("speedup-{}.svg", gate.slug)).map(Block::Chart));
        out.extend(chart(charts, &format!("bootstrap-{}.svg", gate.slug)).map(Block::Chart));
    }
}

fn ncu_blocks<'a>(sections: &'a Sections, charts: &'a [RenderedChart], out: &mut Vec<Block<'a>>) {
    let Some(table) = &sections.ncu else {
        return;
    };
    out.push(Block::Heading("Nsight Compute"));
    out.push(Block::Text(
        "What limits each profiled kernel (`cargo xtask ncu`, L2 flushed before each launch, clocks as found). \
         \"of dense matmul\" is the achieved TFLOP/s over the measured dense fp16 matmul rate (cuBLAS); \
         \"of device peak\" over SMs × SM clock × dense FLOP per clock, from the device attributes ncu recorded."
            .into(),
    ));
    out.push(Block::Table(table));
    out.extend(chart(charts, "roofline.svg").map(Block::Chart));
}

const TITLE: &str = "attn performance report";

/// `report.md`: GitHub markdown, charts referenced as `charts/<file>.svg` beside it.
pub fn markdown(sections: &Sections, charts: &[RenderedChart]) -> String {
    let mut out = format!("# {TITLE}\n\n");
    for block in blocks(sections, charts) {
        match block {
            Block::Heading(text) => out.push_str(&format!("## {text}\n\n")),
            Block::Subheading(text) => out.push_str(&format!("### {text}\n\n")),
            Block::Text(text) => out.push_str(&format!("{text}\n\n")),
            Block::Table(table) => out.push_str(&format!("{}\n", table.to_markdown())),
            Block::Details(summary, table) => out.push_str(&format!(
                "<details><summary>{summary}</summary>\n\n{}\n</details>\n\n",
                table.to_markdown()
            )),
            Block::Chart(chart) => {
                out.push_str(&format!("![{}](charts/{})\n\n", chart.caption, chart.file))
            }
            Block::List(items) => {
                out.extend(items.iter().map(|item| format!("- {item}\n")));
                out.push('\n');
            }
        }
    }
    out
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

/// The page's style. Tables never scroll sideways or hide columns: text cells wrap between words
/// (inside a word only when it is wider than the page allows), numbers stay on one line.
const CSS: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;max-width:1320px;padding:16px 24px;color:#1b1b1b;line-height:1.45}
h1{font-size:1.6em;margin:.4em 0}h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}h3{font-size:1.05em;margin:1.2em 0 .3em}
table{border-collapse:collapse;margin:.6em 0;font-size:13px;max-width:100%}
th,td{border:1px solid #d0d0d0;padding:3px 6px;text-align:left;vertical-align:top;overflow-wrap:break-word}th{background:#f3f3f3}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}td.num{white-space:nowrap}td.good{color:#0a6b2d;font-weight:600}td.bad{color:#b3141b;font-weight:600}
figure{margin:1em 0}figure svg{display:block;width:100%;max-width:1040px;height:auto;border:1px solid #eee}figcaption{font-size:13px;color:#555}
details{margin:.4em 0 1em}summary{cursor:pointer;color:#333}
code{background:#f3f3f3;padding:1px 4px;border-radius:3px;overflow-wrap:break-word}p.verdict{font-size:1.1em;padding:6px 10px;border-left:6px solid}
p.verdict.good{border-color:#0a6b2d;background:#eaf6ee}p.verdict.bad{border-color:#b3141b;background:#fbecec}ul{margin-top:.2em}";

/// `index.html`: one self-contained page, inline CSS and SVG, no script, no network.
pub fn html(sections: &Sections, charts: &[RenderedChart]) -> String {
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{TITLE}</title>\n<style>\n{CSS}\n</style>\n</head>\n<body>\n<h1>{TITLE}</h1>\n"
    );
    for block in blocks(sections, charts) {
        match block {
            Block::Heading(text) => out.push_str(&format!("<h2>{}</h2>\n", escape_html(text))),
            Block::Subheading(text) => out.push_str(&format!("<h3>{}</h3>\n", escape_html(text))),
            Block::Text(text) => out.push_str(&paragraph(&text)),
            Block::Table(table) => out.push_str(&table.to_html(verdict_class)),
            Block::Details(summary, table) => out.push_str(&format!(
                "<details>\n<summary>{}</summary>\n{}</details>\n",
                escape_html(&summary),
                table.to_html(verdict_class)
            )),
            Block::Chart(chart) => out.push_str(&format!(
                "<figure>\n{}\n<figcaption>{}</figcaption>\n</figure>\n",
                inline_svg(&chart.svg),
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
    out.push_str("</body>\n</html>\n");
    out
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

/// The SVG without its XML declaration, with a `role` for screen readers, ready to inline.
fn inline_svg(svg: &str) -> String {
    let body = match svg.find("<svg") {
        Some(start) => &svg[start..],
        None => svg,
    };
    body.trim_end().replacen("<svg", "<svg role=\"img\"", 1)
}
