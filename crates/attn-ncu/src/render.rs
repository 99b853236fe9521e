//! Plain-text listing of kernel summaries, as `cargo xtask ncu --from-csv` prints it.

use std::fmt::Write;

use crate::group::short_name;
use crate::{KernelSummary, Unit};

/// Kernel names longer than this are cut in text output (JSON keeps them whole).
pub const NAME_WIDTH: usize = 120;

/// One block per kernel: name, launch configuration and IDs, then one line per metric with its
/// median in base units and, when launches disagree, the min-max range.
///
/// ```
/// let launches = attn_ncu::parse_details(include_str!("../tests/fixtures/h100_sdpa_cudnn_details.csv"))?;
/// let text = attn_ncu::render_text(&attn_ncu::group(&launches, None));
/// assert!(text.contains("gpu__time_duration.sum"));
/// # Ok::<(), attn_ncu::NcuError>(())
/// ```
pub fn render_text(kernels: &[KernelSummary]) -> String {
    let mut out = String::new();
    for (index, kernel) in kernels.iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        let ids: Vec<String> = kernel.launch_ids.iter().map(u32::to_string).collect();
        let _ = writeln!(out, "kernel  {}", short_name(&kernel.kernel, NAME_WIDTH));
        let _ = writeln!(
            out,
            "        block {} grid {}, {} launches (IDs {}), medians in base units",
            kernel.block.as_deref().unwrap_or("?"),
            kernel.grid.as_deref().unwrap_or("?"),
            kernel.launches,
            ids.join(", ")
        );
        let width = kernel.metrics.keys().map(String::len).max().unwrap_or(0);
        for (name, agg) in &kernel.metrics {
            let value = match (&agg.text, agg.median) {
                (Some(text), _) => text.clone(),
                (None, Some(m)) => format!("{} {}", number(m), unit_label(&agg.unit)),
                (None, None) => "n/a".to_owned(),
            };
            let spread = match (agg.min, agg.max) {
                (Some(lo), Some(hi)) if lo != hi => format!("  [{} .. {}]", number(lo), number(hi)),
                _ => String::new(),
            };
            let _ = writeln!(out, "  {name:<width$}  {}{spread}", value.trim_end());
        }
    }
    out
}

/// Integers without a fraction, others with up to four significant decimals.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

fn unit_label(unit: &Unit) -> &str {
    match unit {
        Unit::Nanoseconds => "ns",
        Unit::Bytes => "byte",
        Unit::BytesPerSecond => "byte/s",
        Unit::Percent => "%",
        Unit::Count | Unit::Text => "",
        Unit::Other(u) => u,
    }
}
