//! What `cargo xtask ncu` makes of a profile, short of printing it: the options that profile one
//! of our kernels, the kernels of a capture that match a filter, and each kernel judged (its
//! explanation, its fitness when the metrics allow one, its evidence).

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::group::short_name;
use crate::metrics::{hopper, Purpose};
use crate::{
    explain, fitness, group, Ceilings, Explanation, Fitness, FitnessInputs, FitnessWeights,
    KernelFilter, KernelSummary, Launch, NcuError, NcuEvidence, ProfileOptions, Provenance,
};

/// How one of our kernels is profiled: `purpose`'s metric set (Hopper names), filtered to
/// `entry`, one warm-up launch skipped, then `launches` profiled.
pub fn kernel_options(
    entry: &str,
    purpose: Purpose,
    ncu: PathBuf,
    launches: u32,
) -> ProfileOptions {
    let metrics = hopper(purpose)
        .metrics
        .iter()
        .map(|m| m.to_string())
        .collect();
    let mut opts = ProfileOptions::new(entry, metrics);
    opts.ncu = ncu;
    opts.launch_skip = 1;
    opts.launch_count = launches;
    opts
}

/// The kernels of `launches` that match `filter` (a name part, or `regex:PATTERN`), grouped;
/// none matching is an error that names the kernels there. `source` names the capture.
pub fn matching_kernels(
    launches: &[Launch],
    filter: Option<&str>,
    source: &str,
) -> Result<Vec<KernelSummary>, NcuError> {
    let parsed = filter.map(KernelFilter::parse).transpose()?;
    let kernels = group(launches, parsed.as_ref());
    if kernels.is_empty() {
        let names: BTreeSet<String> = launches.iter().map(|l| short_name(&l.kernel, 60)).collect();
        return Err(NcuError::NoMatchingKernel {
            capture: source.into(),
            filter: filter.unwrap_or_default().into(),
            kernels: names.into_iter().collect(),
        });
    }
    Ok(kernels)
}

/// One profiled kernel judged.
#[derive(Debug)]
pub struct Assessed {
    /// What bounds it, against the H100's measured ceilings.
    pub explanation: Explanation,
    /// Its composite score, or why its metrics allow none.
    pub fitness: Result<Fitness, NcuError>,
    /// Its evidence file's content: `provenance` with the device ncu named, the explanation and
    /// the fitness.
    pub evidence: NcuEvidence,
}

/// Judges `kernel`, which does `flops` per launch, with the caller's `speedup` (from a gate run)
/// and barriers per K/V tile (from its source) as fitness inputs.
pub fn assess(
    kernel: &KernelSummary,
    mut provenance: Provenance,
    flops: f64,
    speedup: f64,
    syncs_per_tile: f64,
) -> Assessed {
    let explanation = explain(kernel, Some(flops), &Ceilings::H100_MEASURED);
    let device = kernel.metrics.get("device__attribute_display_name");
    provenance.device = device.and_then(|a| a.text.clone());
    let mut evidence = NcuEvidence::new(provenance, kernel).with_explanation(explanation.clone());
    let fitness = FitnessInputs::from_summary(kernel, speedup, syncs_per_tile)
        .map(|inputs| fitness(&inputs, &FitnessWeights::default()));
    if let Ok(scored) = &fitness {
        evidence = evidence.with_fitness(*scored);
    }
    Assessed {
        explanation,
        fitness,
        evidence,
    }
}

/// A score as one line with its terms (the default weights' formula).
pub fn fitness_line(fitness: &Fitness) -> String {
    let inputs = &fitness.inputs;
    format!(
        "fitness {:.1} = 1000·speedup {:.3} + 2·tensor {:.1}% + SM {:.1}% − penalty {:.1} (registers {}, syncs/tile {}, spill bytes {})",
        fitness.score, inputs.speedup, inputs.tensor_pct, inputs.sm_busy_pct, fitness.penalty,
        inputs.registers_per_thread, inputs.syncs_per_tile, inputs.spill_bytes
    )
}
