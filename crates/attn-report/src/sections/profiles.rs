//! Nsight Compute: the metrics table and the roofline of the profiles.

use crate::ceilings::{device_peak, PhysicalLine, MATMUL_LINE};
use crate::charts::{RooflineChart, RooflinePoint};
use crate::format::{micros, percent};
use crate::model::EvidenceSet;
use crate::table::Table;

pub(super) fn ncu_table(evidence: &EvidenceSet) -> Option<Table> {
    if evidence.ncu.is_empty() {
        return None;
    }
    let mut table = Table::new(&[
        "profile",
        "commit",
        "time (µs)",
        "TFLOP/s",
        "of dense matmul",
        "of device peak",
        "tensor pipe",
        "SM busy",
        "warps active",
        "registers/thread",
        "bound by",
        "next step",
    ])
    .numeric(&[2, 3, 4, 5, 6, 7, 8, 9]);
    let dash = || "–".to_string();
    let cell = |value: Option<f64>, show: fn(f64) -> String| value.map(show).unwrap_or_else(dash);
    for row in &evidence.ncu {
        let of_peak = row
            .tflops
            .zip(device_peak(&row.gpu))
            .map(|(t, peak)| t / peak.tflops);
        let profile = if row.label.is_empty() {
            row.kernel.clone()
        } else {
            row.label.clone()
        };
        table.push(vec![
            profile,
            row.git_rev.clone(),
            cell(row.time_us, micros),
            cell(row.tflops, |t| format!("{t:.1}")),
            cell(row.tflops_fraction, |f| percent(100.0 * f)),
            cell(of_peak, |f| percent(100.0 * f)),
            cell(row.tensor_pct, percent),
            cell(row.sm_pct, percent),
            cell(row.warps_active_pct, percent),
            cell(row.registers, |r| format!("{r:.0}")),
            row.bound.clone().unwrap_or_else(dash),
            row.next_step.clone().unwrap_or_else(dash),
        ]);
    }
    Some(table)
}

/// The ncu profiles on a roofline: the DRAM roof and compute roofs the profiles were scored against
/// (measured copy bandwidth, dense-matmul rate), and the device peak from ncu's device attributes.
pub(super) fn roofline(evidence: &EvidenceSet) -> Option<RooflineChart> {
    let points: Vec<RooflinePoint> = evidence
        .ncu
        .iter()
        .filter_map(|row| {
            let (flops, bytes, tflops) = (row.flops?, row.dram_bytes?, row.tflops?);
            (bytes > 0.0 && flops > 0.0 && tflops > 0.0).then(|| RooflinePoint {
                label: if row.label.is_empty() {
                    row.kernel.clone()
                } else {
                    row.label.clone()
                },
                intensity: flops / bytes,
                tflops,
            })
        })
        .collect();
    if points.is_empty() {
        return None;
    }
    // Roofs from the latest profile that has them (profiles are in file-name order).
    let dram_roof = evidence
        .ncu
        .iter()
        .rev()
        .find_map(|row| row.dram_roof_bytes_per_s)
        .map(|b| {
            (
                b,
                "copy, read + write, measured; what the profiles are scored against".to_owned(),
            )
        });
    let matmul = evidence
        .ncu
        .iter()
        .rev()
        .find_map(|row| row.matmul_roof_tflops)
        .map(|tflops| PhysicalLine {
            name: MATMUL_LINE,
            tflops,
            source: "cuBLAS, measured; what the profiles are scored against".into(),
        });
    let peak = evidence
        .ncu
        .iter()
        .rev()
        .find_map(|row| device_peak(&row.gpu));
    let gpu = evidence
        .ncu
        .iter()
        .map(|row| row.gpu.name.as_str())
        .find(|name| !name.is_empty())
        .unwrap_or("GPU not recorded");
    Some(RooflineChart {
        title: format!("Roofline of the Nsight Compute profiles ({gpu}, L2 flushed per launch)"),
        points,
        dram_roof,
        lines: matmul.into_iter().chain(peak).collect(),
    })
}
