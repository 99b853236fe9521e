//! Assembles the outputs: `report.md`, `pr-comment.md` and `index.html`, which render the same
//! [`Block`]s in the same order (so markdown and HTML cannot disagree) and link the charts under
//! `charts/` instead of carrying them.

mod html;
mod markdown;

pub use html::html;
pub use markdown::{markdown, pr_comment};

use std::collections::HashMap;

use crate::progress::progression_note;
use crate::sections::Sections;
use crate::setup::Setup;
use crate::table::Table;

/// A chart ready to be written and linked.
#[derive(Debug, Clone)]
pub struct RenderedChart {
    /// File name under `charts/`.
    pub file: String,
    /// Alt text / caption.
    pub caption: String,
    /// The SVG document.
    pub svg: String,
}

/// One block of the report, in page order.
enum Block<'a> {
    /// A section (`##`), listed in the table of contents.
    Heading(String),
    /// A subsection (`###`); `true`: listed in the table of contents under its section.
    Subheading(String, bool),
    Text(String),
    Table(&'a Table),
    /// A table folded away under a one-line summary (long detail).
    Details(String, &'a Table),
    /// Blocks folded away under a one-line plain summary.
    Fold(String, Vec<Block<'a>>),
    Chart(&'a RenderedChart),
    List(&'a [String]),
}

const TITLE: &str = "attn performance report";

/// The anchor GitHub gives a heading: lowercase, spaces to `-`, other punctuation dropped, and
/// `-1`, `-2` … after a repeat. `seen` counts the anchors so far.
fn anchor(text: &str, seen: &mut HashMap<String, usize>) -> String {
    let base: String = text
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect();
    let count = seen.entry(base.clone()).or_insert(0);
    let id = match *count {
        0 => base,
        n => format!("{base}-{n}"),
    };
    *count += 1;
    id
}

/// A heading's text and anchor.
type Link = (String, String);

/// Every heading's anchor in page order, and the table of contents: each section with the
/// subsections listed under it.
struct Outline {
    anchors: Vec<String>,
    toc: Vec<(String, String, Vec<Link>)>,
}

fn outline(blocks: &[Block<'_>]) -> Outline {
    let mut seen = HashMap::new();
    let mut anchors = Vec::new();
    let mut toc: Vec<(String, String, Vec<Link>)> = Vec::new();
    for block in blocks {
        match block {
            Block::Heading(text) => {
                let id = anchor(text, &mut seen);
                toc.push((text.clone(), id.clone(), Vec::new()));
                anchors.push(id);
            }
            Block::Subheading(text, listed) => {
                let id = anchor(text, &mut seen);
                if let (true, Some(section)) = (*listed, toc.last_mut()) {
                    section.2.push((text.clone(), id.clone()));
                }
                anchors.push(id);
            }
            _ => {}
        }
    }
    Outline { anchors, toc }
}

fn blocks<'a>(sections: &'a Sections, charts: &'a [RenderedChart]) -> Vec<Block<'a>> {
    let mut out = vec![Block::Text(sections.summary.clone())];
    glance_blocks(sections, charts, &mut out);
    sweep_blocks(sections, charts, &mut out);
    progression_blocks(sections, charts, &mut out);
    gate_blocks(sections, charts, &mut out);
    comparison_blocks(sections, &mut out);
    decode_blocks(sections, charts, &mut out);
    if let Some((file, setups, table)) = &sections.bench {
        out.push(Block::Heading("Latest benchmark".into()));
        let setups: Vec<String> = setups.iter().map(Setup::to_string).collect();
        out.push(Block::Text(format!(
            "From `{file}` ({}). Times are µs per call; TFLOP/s at the median.",
            setups.join("; ")
        )));
        out.push(Block::Details(
            format!("All {} entries", table.rows.len()),
            table,
        ));
    }
    ncu_blocks(sections, charts, &mut out);
    if let Some(table) = &sections.searches {
        out.push(Block::Heading("Configuration search".into()));
        out.push(Block::Table(table));
        for (file, _) in &sections.convergence {
            out.extend(chart(charts, file).map(Block::Chart));
        }
    }
    if !sections.files.rows.is_empty() {
        out.push(Block::Heading("Evidence files".into()));
        out.push(Block::Details(
            format!("All {} files", sections.files.rows.len()),
            &sections.files,
        ));
    }
    out
}

fn chart<'a>(charts: &'a [RenderedChart], file: &str) -> Option<&'a RenderedChart> {
    charts.iter().find(|c| c.file == file)
}

fn glance_blocks<'a>(
    sections: &'a Sections,
    charts: &'a [RenderedChart],
    out: &mut Vec<Block<'a>>,
) {
    if sections.glance.is_empty() {
        return;
    }
    out.push(Block::Heading("At a glance".into()));
    for suite in &sections.glance {
        out.push(Block::Subheading(
            format!("{} on {}", suite.suite, suite.gpu),
            true,
        ));
        for view in &suite.views {
            out.extend(chart(charts, &view.file).map(Block::Chart));
            out.push(Block::Text(view.sentence.clone()));
            out.push(Block::Fold(
                format!("Numbers of the chart ({})", view.setup),
                vec![Block::Text(view.source.clone()), Block::Table(&view.table)],
            ));
        }
        out.extend(suite.gate.clone().map(Block::Text));
    }
}

fn sweep_blocks<'a>(sections: &'a Sections, charts: &'a [RenderedChart], out: &mut Vec<Block<'a>>) {
    if sections.glance.is_empty() {
        return;
    }
    out.push(Block::Heading("Throughput vs sequence length".into()));
    if sections.sweeps.is_empty() {
        out.push(Block::Text(
            "No sweep yet: no bench run covers two or more sequence lengths of one (B, H, D, causal, \
             dtype) family. `cargo xtask bench --suite sweep` on a GPU machine produces one."
                .into(),
        ));
        return;
    }
    out.push(Block::Text(
        "TFLOP/s at the median time, one chart per problem (GPU, timing mode, B, H, K/V heads, D, \
         mask, window, dtype) varying only the sequence length, one curve per implementation (SDPA \
         backends and other references dashed), with the GPU's measured dense fp16 matmul rate \
         (dashed red) and its dense tensor peak (solid dark red)."
            .into(),
    ));
    for sweep in &sections.sweeps {
        out.extend(chart(charts, &sweep.file).map(Block::Chart));
        let sources: Vec<String> = sweep.sources.iter().map(|s| format!("`{s}`")).collect();
        out.push(Block::Text(format!(
            "{}; from {}.",
            sweep.setup,
            sources.join(", ")
        )));
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
    out.push(Block::Heading("Progression per shape".into()));
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
    out.push(Block::Heading("Latest gate verdicts".into()));
    out.push(Block::Text(format!(
        "The latest run of each (candidate, baseline, suite, GPU and timing mode), {} in all, each folded under its \
         verdict. `cargo xtask report --gate-charts --out target/report` also draws each one's \
         speedup bars and bootstrap histogram.",
        sections.gates.len()
    )));
    for gate in &sections.gates {
        let mut inner = vec![
            Block::Text(gate.verdict.clone()),
            Block::Table(&gate.table),
            Block::Text(gate.rule.clone()),
        ];
        if !gate.flags.is_empty() {
            inner.push(Block::Text(
                "Flags (look at these even when the gate passed):".into(),
            ));
            inner.push(Block::List(&gate.flags));
        }
        inner.push(Block::Text(format!("Evidence: `{}`", gate.file)));
        inner.extend(chart(charts, &format!("speedup-{}.svg", gate.slug)).map(Block::Chart));
        inner.extend(chart(charts, &format!("bootstrap-{}.svg", gate.slug)).map(Block::Chart));
        out.push(Block::Fold(gate.summary.clone(), inner));
    }
}

/// The tables of one kind, one per setup under a subheading naming it.
fn per_setup<'a>(tables: &'a [(Setup, Table)], out: &mut Vec<Block<'a>>) {
    for (setup, table) in tables {
        out.push(Block::Subheading(setup.to_string(), false));
        out.push(Block::Table(table));
    }
}

fn comparison_blocks<'a>(sections: &'a Sections, out: &mut Vec<Block<'a>>) {
    if !sections.implementations.is_empty() {
        out.push(Block::Heading(
            "Implementations against SDPA's backends".into(),
        ));
        out.push(Block::Text(
            "TFLOP/s at the median time (4·B·H·S_q·S_kv·D, halved when causal), from the latest bench \
             entry of each implementation and shape on one GPU model in one timing mode (one table \
             each); the ratios compare the fastest of the project's kernels with SDPA's default \
             dispatch and its FlashAttention-2 backend within the table (above 1× is faster)."
                .into(),
        ));
        per_setup(&sections.implementations, out);
    }
    if !sections.against_fa3.is_empty() {
        out.push(Block::Heading(
            "hopper against FlashAttention-3 and cuDNN, one run each".into(),
        ));
        out.push(Block::Text(format!(
            "Each row from one run, the latest of each shape on one GPU model in one timing mode \
             (one table each): a gate run of hopper as tuned (no `--config`: runs of other knobs \
             are experiments) against `--baseline fa3` (the two sides timed in interleaved blocks, \
             the speedup with its 95% CI) where there is one, else a bench run that timed hopper \
             (its defaults), FlashAttention-3 (`--sdpa-backends fa3`) and SDPA's default (cuDNN) \
             on as many input sets each. FlashAttention-3 is its prebuilt library through JAX, \
             many back-to-back calls per sample (batch mode, inputs resident, rotating over one \
             input set per call on both sides), timed by their kernels' span on the device \
             (CUPTI), as hopper is by CUDA events; runs before {} timed FA3 by the host clock, \
             which adds JAX's dispatch to FA3 alone, and are left out. A gate \
             row's cuDNN columns come from the latest gate run of hopper against SDPA's default \
             on that shape in the same setup, its own interleaved ratio (both runs named). \
             Ratios are speed (the other's median time over hopper's; above 1× hopper is \
             faster). SM MHz: the mean clock of each side's kept blocks in a gate run, or over \
             each entry's samples in a bench run. Per clock (gate runs with clocks measured over \
             each block only): FA3's time × clock over hopper's, the kernels' work per cycle apart \
             from how far each one's power draw pulls its clock down. How the clocks were read, \
             and how far older files' clock columns and block order can be trusted: \
             `evidence/METHOD.md`.",
            crate::sections::FA3_DEVICE_SPAN_SINCE
        )));
        per_setup(&sections.against_fa3, out);
    }
    if !sections.varlen.is_empty() {
        out.push(Block::Heading(
            "Varlen batches against dense at the mean length".into(),
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
        per_setup(&sections.varlen, out);
    }
}

fn decode_blocks<'a>(
    sections: &'a Sections,
    charts: &'a [RenderedChart],
    out: &mut Vec<Block<'a>>,
) {
    if sections.decode.is_empty() {
        return;
    }
    out.push(Block::Heading("Decode".into()));
    out.push(Block::Text(
        "Decode batches (a few new tokens per sequence over a KV cache) are bound by memory, so \
         each is shown as GB/s at its median time (the bytes a launch must move at the least: KV \
         cache, queries, outputs and block table) beside the device-to-device copy bandwidth \
         measured in the same run (a copy timed with events, the median of a few). Each row is the \
         newest bench entry of its implementation and batch on one GPU model in one timing mode, \
         so rows of one table can come from different runs (each names its own), and each \
         percentage divides by its own run's copy. An implementation run with overridden knobs \
         (`--config`) is labelled with them, is its own row, and stays out of the chart."
            .into(),
    ));
    for decode in &sections.decode {
        out.push(Block::Subheading(decode.setup.to_string(), true));
        out.extend(chart(charts, &decode.file).map(Block::Chart));
        out.push(Block::Text(format!(
            "{}: bandwidth against the new tokens per sequence (log scale), one colour per \
             implementation as tuned (references as triangles); points of one implementation at \
             one x are different batches, drawn slightly apart by implementation. A ragged batch \
             (sequences taking different numbers of new tokens) sits at its mean, hollow. Dashed: \
             the device-to-device copy bandwidth measured in the same run as the points, one line \
             per run. From {}.",
            decode.setup, decode.sources
        )));
        for (batch, table) in &decode.batches {
            out.push(Block::Text(format!("`{batch}`")));
            out.push(Block::Table(table));
        }
    }
}

fn ncu_blocks<'a>(sections: &'a Sections, charts: &'a [RenderedChart], out: &mut Vec<Block<'a>>) {
    let Some(table) = &sections.ncu else {
        return;
    };
    out.push(Block::Heading("Nsight Compute".into()));
    out.push(Block::Text(
        "What limits each profiled kernel (`cargo xtask ncu`, L2 flushed before each launch, clocks as found). \
         \"of dense matmul\" is the achieved TFLOP/s over the measured dense fp16 matmul rate (cuBLAS); \
         \"of device peak\" over SMs × SM clock × dense FLOP per clock, from the device attributes ncu recorded."
            .into(),
    ));
    out.push(Block::Table(table));
    out.extend(chart(charts, "roofline.svg").map(Block::Chart));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_are_githubs() {
        let mut seen = HashMap::new();
        assert_eq!(
            anchor(
                "hopper against FlashAttention-3 and cuDNN, one run each",
                &mut seen
            ),
            "hopper-against-flashattention-3-and-cudnn-one-run-each"
        );
        assert_eq!(
            anchor("Implementations against SDPA's backends", &mut seen),
            "implementations-against-sdpas-backends"
        );
        assert_eq!(
            anchor("NVIDIA H200, batch timing", &mut seen),
            "nvidia-h200-batch-timing"
        );
        assert_eq!(
            anchor("NVIDIA H200, batch timing", &mut seen),
            "nvidia-h200-batch-timing-1"
        );
    }
}
