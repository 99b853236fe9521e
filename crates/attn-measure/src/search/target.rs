//! What is searched: the run (a new search's spec, its knobs from the registry narrowed to those
//! declared, or the one resumed), then, once the GPUs are known, its space with the registry's
//! constraints (or the `--src` geometry), generation 0's seeds and its log; below them the
//! registry's answers for a search and the candidate (implementation and defines) a config runs.

use std::collections::BTreeMap;
use std::path::Path;

use attn_evidence::{
    read_evo_log, EvoLogAppender, ImplConfig, MicroBest, MicroTarget, SearchSpec, ShapeSpec,
};
use attn_evo::{Branch, KnobDomain, Knobs, Options, Search, SearchRun, Space};
use attn_kernels::decode::{find_decode, DecodeImplementation};
use attn_kernels::registry::{self, Limits};
use attn_kernels::{Candidate, Config, Knob};

use super::{Event, NewSearch, Report, RunRequest, SearchRequest, Target};
use crate::provenance::fresh_seed;
use crate::{MeasureError, Problem, Result};

/// The run `request` names: the one resumed, or a new one in `<evidence>/evo/<run>`.
pub fn open_run(request: &SearchRequest) -> Result<SearchRun> {
    match &request.run {
        RunRequest::Resume(dir) => {
            SearchRun::resume(dir).map_err(|e| MeasureError::Invalid(format!("--resume: {e}")))
        }
        RunRequest::New(new) => Ok(SearchRun::new(
            search_spec(new)?,
            &request.evidence,
            new.name.clone(),
        )),
    }
}

/// A new search's `search.json`: the target's knobs from the registry, narrowed to those
/// declared.
pub fn search_spec(new: &NewSearch) -> Result<SearchSpec> {
    let declared = &new.knobs;
    let mut spec = SearchSpec {
        target: String::new(),
        implementation: None,
        implementations: vec![],
        src: None,
        entry: None,
        defines: BTreeMap::new(),
        knobs: declared.clone(),
        shape: new.shape.clone(),
        decode: new.decode.clone(),
        baseline: new.baseline.clone(),
        sdpa_backend: Some(new.sdpa_backend.to_string()),
        seed: new.seed.unwrap_or_else(fresh_seed),
        population: new.population,
        generations: new.generations,
    };
    let knob_error = |e: attn_evo::EvoError| MeasureError::Invalid(format!("--knob: {e}"));
    match &new.target {
        Target::Synthetic => {
            spec.target = "synthetic".into();
            if declared.is_empty() {
                let why = "--synthetic needs --knob declarations";
                return Err(MeasureError::Invalid(why.into()));
            }
        }
        Target::Source { .. } if new.decode.is_some() => {
            let why = "--src and --triton kernels are not searched on decode batches: give --impl decode, decode-hopper or decode-naive";
            return Err(MeasureError::Invalid(why.into()));
        }
        Target::Source {
            src,
            entry,
            defines,
        } => {
            if declared.is_empty() {
                let why = "--src and --triton need their knobs declared with --knob NAME=v1,v2,...";
                return Err(MeasureError::Invalid(why.into()));
            }
            spec.src = Some(src.clone());
            spec.entry = entry.clone();
            let file = src.file_name().map(|n| n.to_string_lossy());
            let kind = if attn_evidence::is_triton_source(src) {
                "triton"
            } else {
                "src"
            };
            spec.target = format!("{kind}:{}", file.unwrap_or_default());
            spec.defines = defines.clone();
        }
        Target::Implementations(names) => {
            for name in names {
                match (is_decode_implementation(name), new.decode.is_some()) {
                    (true, false) => {
                        return Err(MeasureError::Invalid(format!("--impl {name} is a decode implementation: give a decode batch (--shape \"decode ...\")")));
                    }
                    (false, true) => {
                        return Err(MeasureError::Invalid(format!("--impl {name} is not a decode implementation: a decode batch takes decode, decode-hopper or decode-naive")));
                    }
                    _ => {}
                }
            }
            spec.target = names.join(",");
            let head_dim = spec.shape.head_dim;
            if let [name] = &names[..] {
                let available = searchable_knobs(name, head_dim)?;
                spec.knobs =
                    attn_evo::narrow_domains(name, available, declared).map_err(knob_error)?;
                spec.implementation = Some(name.to_string());
            } else {
                let available = names
                    .iter()
                    .map(|n| Ok((n.as_str(), implementation_knobs(n, head_dim)?)))
                    .collect::<Result<Vec<_>>>()?;
                spec.implementations =
                    attn_evo::narrow_choice(available, declared).map_err(knob_error)?;
            }
        }
    }
    Ok(spec)
}

/// The run's search started: its space (the registry's constraints within `limits`, GPU 0's),
/// generation 0's seeds, and the log, resumed or new (with the number of rows resumed).
pub fn start(
    request: &SearchRequest,
    run: &SearchRun,
    limits: Limits,
    report: Report<'_>,
) -> Result<(Search, EvoLogAppender, Option<usize>)> {
    let spec = &run.spec;
    let space = space(spec, limits)?;
    let options = Options::for_spec(spec, request.budget);
    let seeds = seeds(request, spec, &space, limits, report)?;
    Ok(run.start(Search::new(space, options, seeds)?)?)
}

/// The search space of a spec: its knobs, validated like the registry (or the `--src` geometry).
pub fn space(spec: &SearchSpec, limits: Limits) -> Result<Space> {
    let domains = |knobs: &BTreeMap<String, Vec<i64>>| {
        knobs
            .iter()
            .map(|(name, values)| KnobDomain::new(name.clone(), values.clone()))
            .collect::<std::result::Result<Vec<_>, _>>()
    };
    let knobs = domains(&spec.knobs)?;
    let head_dim = spec.shape.head_dim;
    if !spec.implementations.is_empty() {
        let branches = spec.implementations.iter().map(|imp| {
            let name = imp.name.as_str();
            let constraint = registry_constraint(name, head_dim, limits)?;
            let defaults = default_knobs(name, &spec.shape, &limits)?;
            Ok(Branch::new(
                name,
                domains(&imp.knobs)?,
                constraint,
                defaults,
            )?)
        });
        return Ok(Space::choice(branches.collect::<Result<_>>()?)?);
    }
    Ok(match &spec.implementation {
        Some(name) => {
            let constraint = registry_constraint(name, head_dim, limits)?;
            Space::new(knobs, constraint)?
        }
        None => Space::new(
            knobs,
            attn_evo::source_constraint(
                spec.defines.clone(),
                limits.max_threads_per_block,
                limits.max_shared_per_block,
            ),
        )?,
    })
}

/// Generation 0's seeds: the registered default (each implementation's, in a search over
/// several), then micro's top configs and earlier bests.
pub fn seeds(
    request: &SearchRequest,
    spec: &SearchSpec,
    space: &Space,
    limits: Limits,
    report: Report<'_>,
) -> Result<Vec<Knobs>> {
    let fill: Knobs = match &spec.implementation {
        Some(name) => default_knobs(name, &spec.shape, &limits)?,
        None => space
            .knobs()
            .iter()
            .map(|k| (k.name.clone(), k.values[0]))
            .collect(),
    };
    let mut seeds = match space.branches() {
        [] => vec![fill.clone()],
        _ => space.defaults(),
    };
    if request.seed_from_micro {
        let target = MicroTarget::for_implementation(spec.implementation.as_deref());
        let dir = target.dir(&request.evidence);
        let head_dim = spec.shape.head_dim;
        let rows = read_evo_log(&dir.join("log.csv")).map_err(|e| {
            MeasureError::Invalid(format!("--seed-from-micro: run `cargo xtask micro --target {target} --head-dim {head_dim}` first: {e}"))
        })?;
        if let Some(d) = MicroBest::read(&dir.join("best.json"))
            .ok()
            .and_then(|b| b.head_dim)
        {
            if d != head_dim {
                report(Event::Line(format!("note: micro ({target}) ranked tiles of head dim {d}; this search is at {head_dim}")));
            }
        }
        let s = attn_evo::seed_from_micro(&mut seeds, &rows, space, &fill);
        report(Event::Line(format!(
            "seeded from micro ({target}): {} distinct valid config(s) from {} ranked tile configs, {} with no valid completion (knobs matched by name: {})",
            s.added,
            s.ranked,
            s.unplaced,
            target.knobs().join(", ")
        )));
    }
    if request.seed_from_evo {
        let dir = request.evidence.join("evo");
        attn_evo::seed_from_bests(&mut seeds, &dir, &spec.target, space, &fill);
    }
    Ok(seeds)
}

/// The candidate a worker measures (and the precompile compiles): a registered implementation
/// or a source file, with `config`.
pub fn candidate(
    implementation: Option<&str>,
    src: Option<&Path>,
    entry: Option<&str>,
    config: Config,
) -> Result<Candidate> {
    Ok(match (implementation, src) {
        (Some(name), _) => Candidate::registered(name, config)?,
        // A `.py` source is a Triton kernel of the ABI (`evo --triton`), its entry the kernel.
        (None, Some(src)) if attn_evidence::is_triton_source(src) => {
            Candidate::from_triton(src, entry.unwrap_or("attn_fwd"), config)?
        }
        (None, Some(src)) => Candidate::from_file(src, entry, config)?,
        (None, None) => {
            let why = "the worker needs --impl, --src or --baseline";
            return Err(MeasureError::Invalid(why.into()));
        }
    })
}

/// The defines of a resolved search config ([`attn_evo::resolve_config`]): the spec's fixed ones
/// and the config's knobs.
pub fn candidate_config(spec: &SearchSpec, config: &ImplConfig) -> Config {
    Config(spec.defines.clone()).merged(&Config(config.knobs.clone()))
}

/// A registered implementation a search tunes: the prefill registry's or the decode registry's
/// (their names never collide, so a name alone says which).
#[derive(Debug, Clone, Copy)]
enum Registered {
    Prefill(&'static registry::Implementation),
    Decode(&'static DecodeImplementation),
}

impl Registered {
    /// The implementation called `name`, decode's registry first.
    fn find(name: &str) -> Result<Registered> {
        Ok(match find_decode(name) {
            Ok(decode) => Registered::Decode(decode),
            Err(_) => Registered::Prefill(registry::find(name)?),
        })
    }

    fn knobs(self) -> &'static [Knob] {
        match self {
            Registered::Prefill(imp) => imp.knobs,
            Registered::Decode(imp) => imp.knobs,
        }
    }

    fn check_head_dim(self, head_dim: usize) -> Result<()> {
        match self {
            Registered::Prefill(imp) => imp.check_head_dim(head_dim)?,
            Registered::Decode(imp) => imp.check_head_dim(head_dim)?,
        }
        Ok(())
    }

    fn resolve(self, knobs: &Config, head_dim: usize, limits: &Limits) -> Result<Config> {
        Ok(match self {
            Registered::Prefill(imp) => imp.resolve(knobs, head_dim, limits)?,
            Registered::Decode(imp) => imp.resolve(knobs, head_dim, limits)?,
        })
    }
}

/// Whether `name` is a registered decode implementation.
pub fn is_decode_implementation(name: &str) -> bool {
    find_decode(name).is_ok()
}

/// The knobs of registered implementation `name` (prefill or decode) at `head_dim`, with their
/// domains: none for an implementation without knobs (`cublas`).
pub fn implementation_knobs(
    name: &str,
    head_dim: usize,
) -> Result<Vec<(&'static str, &'static [i64])>> {
    let imp = Registered::find(name)?;
    imp.check_head_dim(head_dim)?;
    Ok(imp
        .knobs()
        .iter()
        .map(|k| (k.name.as_str(), k.domain))
        .collect())
}

/// The knobs of registered implementation `name` a search of it alone may tune at `head_dim`,
/// with their domains (one without knobs is an error: there is nothing to search).
pub fn searchable_knobs(
    name: &str,
    head_dim: usize,
) -> Result<Vec<(&'static str, &'static [i64])>> {
    if Registered::find(name)?.knobs().is_empty() {
        return Err(MeasureError::Invalid(format!(
            "`{name}` has no knobs to search"
        )));
    }
    implementation_knobs(name, head_dim)
}

/// The registry's constraints on `name`'s knobs at `head_dim` within `limits`, as a search
/// space's validator.
pub fn registry_constraint(
    name: &str,
    head_dim: usize,
    limits: Limits,
) -> Result<impl Fn(&BTreeMap<String, i64>) -> std::result::Result<(), String> + Send + Sync> {
    let imp = Registered::find(name)?;
    Ok(move |knobs: &BTreeMap<String, i64>| {
        imp.resolve(&Config(knobs.clone()), head_dim, &limits)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
}

/// `name`'s default config for `shape` on `device`, tuned values included (a decode
/// implementation's defaults, resolved): a search's first seed.
pub fn default_knobs(
    name: &str,
    shape: &ShapeSpec,
    device: &Limits,
) -> Result<BTreeMap<String, i64>> {
    match Registered::find(name)? {
        Registered::Prefill(imp) => {
            let problem = Problem::new(shape.clone())?;
            let tuned = imp.tuned_for(&problem.shape, &problem.params, device);
            Ok(imp.default_config(shape.head_dim).merged(&tuned).0)
        }
        decode => Ok(decode
            .resolve(&Config::default(), shape.head_dim, device)?
            .0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_runs_the_implementation_it_picks() {
        let spec: SearchSpec = serde_json::from_value(serde_json::json!({
            "target": "cublas,mma", "implementation": null, "src": null, "entry": null,
            "implementations": [{"name": "cublas", "knobs": {}}, {"name": "mma", "knobs": {"STAGES": [1, 2]}}],
            "defines": {}, "knobs": {}, "shape": {"batch": 2, "heads": 8, "seq_q": 1024,
            "seq_kv": 1024, "head_dim": 64, "causal": false, "dtype": "fp16"},
            "baseline": "sdpa", "seed": 1, "population": 4, "generations": 2,
        }))
        .unwrap();
        let knobs = |pairs: &[(&str, i64)]| -> BTreeMap<String, i64> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        let resolved =
            attn_evo::resolve_config(&spec, &knobs(&[(attn_evo::IMPL_KNOB, 1), ("STAGES", 2)]));
        let (name, config) = (
            resolved.implementation.as_deref(),
            candidate_config(&spec, &resolved),
        );
        assert_eq!(
            (name, config.to_string().as_str()),
            (Some("mma"), "STAGES=2")
        );
        let resolved = attn_evo::resolve_config(&spec, &knobs(&[(attn_evo::IMPL_KNOB, 0)]));
        let (name, config) = (
            resolved.implementation.as_deref(),
            candidate_config(&spec, &resolved),
        );
        assert_eq!((name, config), (Some("cublas"), Config::default()));
        assert!(candidate(name, None, None, Config::default()).is_ok());
        // One implementation's search: its own name, the knobs as they are.
        let single = SearchSpec {
            implementation: Some("mma".into()),
            implementations: vec![],
            ..spec
        };
        let resolved = attn_evo::resolve_config(&single, &knobs(&[("STAGES", 1)]));
        let (name, config) = (
            resolved.implementation.as_deref(),
            candidate_config(&single, &resolved),
        );
        assert_eq!(
            (name, config.to_string().as_str()),
            (Some("mma"), "STAGES=1")
        );
        assert!(implementation_knobs("cublas", 64).unwrap().is_empty());
        assert!(searchable_knobs("cublas", 64).is_err());
        assert!(implementation_knobs("hopper", 96).is_err());
    }
}
