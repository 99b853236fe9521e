//! `--fitness composite`: the fastest finalists of a search profiled one by one with Nsight
//! Compute (in its own process group, killed past its bound), ranked by attn-evo's composite into
//! `finalists.json`.

use std::path::Path;
use std::time::Duration;

use attn_evidence::{EvoCandidate, EvoFinalists, ImplConfig, Provenance, SearchSpec};
use attn_evo::{Knobs, SearchRun};
use attn_ncu::metrics::Purpose;
use attn_ncu::KernelSummary;

use super::target::{candidate, candidate_config};
use super::{Event, Report, SearchRequest};
use crate::Result;

/// The finalists of a finished search (its log's `rows`) profiled one by one, ranked, written to
/// `finalists.json` and shown.
pub fn profile(
    request: &SearchRequest,
    run: &SearchRun,
    rows: &[EvoCandidate],
    provenance: Option<Provenance>,
    report: Report<'_>,
) -> Result<EvoFinalists> {
    let composite = attn_evo::Composite {
        finalists: request.finalists,
        syncs_per_tile: request.syncs_per_tile,
        weights: attn_ncu::FitnessWeights::default(),
    };
    let (spec, ncu, program) = (&run.spec, &request.ncu, &request.program);
    let count = attn_evo::finalists(rows, request.finalists).len();
    report(Event::Line(format!(
        "profiling {count} finalists with {}",
        ncu.display()
    )));
    let mut done = 0;
    let profile = |implementation: Option<&str>, knobs: &Knobs| {
        done += 1;
        let config = ImplConfig {
            implementation: implementation.map(str::to_string),
            knobs: knobs.clone(),
        };
        let shown = ImplConfig {
            implementation: Some(implementation.unwrap_or(&spec.target).to_string()),
            knobs: knobs.clone(),
        };
        report(Event::Line(format!(
            "  {done}/{count} {}",
            shown.describe()
        )));
        profile_finalist(spec, &config, ncu, program, FINALIST_TIMEOUT).map_err(|e| e.to_string())
    };
    let (name, profiling) = (run.name(), finalist_profiling());
    let ranked = attn_evo::rank_finalists(
        spec, &name, rows, &composite, profiling, provenance, profile,
    );
    let path = run.dir.join("finalists.json");
    ranked.write(&path)?;
    let table = attn_evo::finalists_table(&ranked);
    report(Event::Line(
        table.strip_suffix('\n').unwrap_or(&table).to_string(),
    ));
    report(Event::Line(format!("finalists: {}", path.display())));
    Ok(ranked)
}

/// Launches of a search finalist that ncu profiles (after one warm-up launch).
pub const FINALIST_LAUNCHES: u32 = 3;

/// How long ncu may take on one finalist (its metric set replays each launch dozens of times)
/// before it and the target are killed and the finalist is left unscored.
pub const FINALIST_TIMEOUT: Duration = Duration::from_secs(300);

/// The metric set a search finalist is profiled with: everything the composite fitness reads.
const FINALIST_METRICS: Purpose = Purpose::All;

/// How a search's finalists are profiled, in a line (for `finalists.json`).
pub fn finalist_profiling() -> String {
    let opts = attn_ncu::ProfileOptions::new("attn_fwd", vec![]);
    format!(
        "ncu, metric set {}, {FINALIST_LAUNCHES} launches after a warm-up on GPU 0, filtered to the candidate's kernel (attn_fwd; every kernel of the cuBLAS path); {}; caches flushed before each pass",
        attn_ncu::metrics::hopper(FINALIST_METRICS).name,
        opts.clock_note()
    )
}

/// A search finalist profiled with Nsight Compute ([`crate::profile::ncu`], `ncu` and this
/// `program`, killed past `timeout`): `config`'s implementation (or the spec's `--src` kernel)
/// with its knobs on the spec's shape. Its kernels, each with the
/// metrics asked for (ncu's device attributes dropped), aggregated over the profiled launches.
pub fn profile_finalist(
    spec: &SearchSpec,
    config: &ImplConfig,
    ncu: &Path,
    program: &Path,
    timeout: Duration,
) -> Result<Vec<KernelSummary>> {
    let implementation = config.implementation.as_deref();
    let config = candidate_config(spec, config);
    let made = candidate(
        implementation,
        spec.src.as_deref(),
        spec.entry.as_deref(),
        config,
    )?;
    let shape = spec.shape.clone();
    let launches = FINALIST_LAUNCHES;
    let profile = crate::profile::ncu(
        ncu,
        program,
        &made,
        shape,
        FINALIST_METRICS,
        launches,
        timeout,
    )?;
    let asked = attn_ncu::metrics::hopper(FINALIST_METRICS).to_strings();
    let mut kernels = attn_ncu::group(&profile.launches, None);
    for kernel in &mut kernels {
        kernel.metrics.retain(|name, _| asked.contains(name));
    }
    Ok(kernels)
}
