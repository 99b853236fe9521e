//! Provenance of a measuring run (`attn_measure::provenance`), with this binary's git revision.

use attn_evidence::Provenance;
use attn_kernels::telemetry::ClockReading;
use attn_kernels::Gpu;

/// The git revision and dirty flag of the code that runs: the ones this binary was built from.
/// Kernels are compiled into the binary, so the build's revision is the truth even where the
/// binary runs from another checkout (or from a bundle copied beside a stale `.git`); cargo
/// rebuilds it whenever HEAD, the index or a source file changes (`build.rs`).
pub fn git_revision() -> (String, bool) {
    (
        env!("ATTN_BUILD_GIT_REV").to_string(),
        env!("ATTN_BUILD_GIT_DIRTY") == "true",
    )
}

/// Provenance for a run on `gpu`, with the clock readings taken around it.
pub fn collect(
    gpu: &Gpu,
    torch: Option<&attn_measure::sdpa::SdpaInfo>,
    before: Option<ClockReading>,
    after: Option<ClockReading>,
) -> Provenance {
    let (git_rev, git_dirty) = git_revision();
    attn_measure::provenance::collect(gpu, torch, before, after, git_rev, git_dirty)
}
