//! What to search, resolved from the arguments: the run, the target and its knobs, the space
//! with the registry's constraints (or the `--src` geometry), and generation 0's seeds.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use attn_evidence::{read_evo_log, MicroBest, MicroTarget, SearchSpec};
use attn_evo::{Branch, KnobDomain, Knobs, SearchRun, Space};
use attn_kernels::registry::Limits;
use attn_kernels::Config;
use attn_measure::provenance::fresh_seed;

use super::Args;

/// The run the arguments name: `--resume DIR`'s, or a new one in `<evidence>/evo/<run>`.
pub fn open_run(args: &Args) -> anyhow::Result<SearchRun> {
    if let Some(dir) = &args.resume {
        return SearchRun::resume(dir).context("--resume");
    }
    Ok(SearchRun::new(
        search_spec(args)?,
        &args.evidence,
        args.run.clone(),
    ))
}

/// The search the arguments ask for (a new run's `search.json`).
pub fn search_spec(args: &Args) -> anyhow::Result<SearchSpec> {
    let shape = args.problem.spec()?;
    let declared = args
        .knobs
        .iter()
        .map(|k| KnobDomain::parse(k).map(|d| (d.name, d.values)))
        .collect::<Result<BTreeMap<_, _>, _>>()
        .context("--knob")?;
    let mut spec = SearchSpec {
        target: String::new(),
        implementation: None,
        implementations: vec![],
        src: None,
        entry: args.entry.clone(),
        defines: BTreeMap::new(),
        knobs: declared.clone(),
        shape,
        baseline: args.baseline.clone(),
        seed: args.seed.unwrap_or_else(fresh_seed),
        population: args.population,
        generations: args.generations,
    };
    if args.synthetic && args.implementation.is_none() {
        spec.target = "synthetic".into();
        if declared.is_empty() {
            bail!("--synthetic needs --knob declarations");
        }
    } else if let Some(src) = &args.src {
        if declared.is_empty() {
            bail!("--src needs its knobs declared with --knob NAME=v1,v2,...");
        }
        spec.src = Some(src.clone());
        let file = src.file_name().map(|n| n.to_string_lossy());
        spec.target = format!("src:{}", file.unwrap_or_default());
        spec.defines = args
            .defines
            .join(",")
            .parse::<Config>()
            .map_err(|e| anyhow::anyhow!("--define: {e}"))?
            .0;
    } else {
        let names = args.implementation.as_deref().unwrap_or("tiled");
        let names: Vec<&str> = names.split(',').map(str::trim).collect();
        spec.target = names.join(",");
        let head_dim = spec.shape.head_dim;
        if let [name] = names[..] {
            let available = attn_measure::search::searchable_knobs(name, head_dim)?;
            spec.knobs = attn_evo::narrow_domains(name, available, &declared).context("--knob")?;
            spec.implementation = Some(name.to_string());
        } else {
            let available = names
                .iter()
                .map(|&n| Ok((n, attn_measure::search::implementation_knobs(n, head_dim)?)))
                .collect::<anyhow::Result<Vec<_>>>()?;
            spec.implementations =
                attn_evo::narrow_choice(available, &declared).context("--knob")?;
        }
    }
    Ok(spec)
}

/// The search space of a spec: its knobs, validated like the registry (or the `--src` geometry).
pub fn space(spec: &SearchSpec, limits: Limits) -> anyhow::Result<Space> {
    let domains = |knobs: &BTreeMap<String, Vec<i64>>| {
        knobs
            .iter()
            .map(|(name, values)| KnobDomain::new(name.clone(), values.clone()))
            .collect::<Result<Vec<_>, _>>()
    };
    let knobs = domains(&spec.knobs)?;
    let head_dim = spec.shape.head_dim;
    if !spec.implementations.is_empty() {
        let branches = spec.implementations.iter().map(|imp| {
            let name = imp.name.as_str();
            let constraint = attn_measure::search::registry_constraint(name, head_dim, limits)?;
            let defaults = attn_measure::search::default_knobs(name, &spec.shape)?;
            Ok(Branch::new(
                name,
                domains(&imp.knobs)?,
                constraint,
                defaults,
            )?)
        });
        return Ok(Space::choice(branches.collect::<anyhow::Result<_>>()?)?);
    }
    Ok(match &spec.implementation {
        Some(name) => {
            let constraint = attn_measure::search::registry_constraint(name, head_dim, limits)?;
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
pub fn seeds(args: &Args, spec: &SearchSpec, space: &Space) -> anyhow::Result<Vec<Knobs>> {
    let fill: Knobs = match &spec.implementation {
        Some(name) => attn_measure::search::default_knobs(name, &spec.shape)?,
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
    if args.seed_from_micro {
        let target = MicroTarget::for_implementation(spec.implementation.as_deref());
        let dir = target.dir(&args.evidence);
        let head_dim = spec.shape.head_dim;
        let rows = read_evo_log(&dir.join("log.csv")).with_context(|| {
            format!("--seed-from-micro: run `cargo xtask micro --target {target} --head-dim {head_dim}` first")
        })?;
        if let Some(d) = MicroBest::read(&dir.join("best.json"))
            .ok()
            .and_then(|b| b.head_dim)
        {
            if d != head_dim {
                println!("note: micro ({target}) ranked tiles of head dim {d}; this search is at {head_dim}");
            }
        }
        let s = attn_evo::seed_from_micro(&mut seeds, &rows, space, &fill);
        println!(
            "seeded from micro ({target}): {} distinct valid config(s) from {} ranked tile configs, {} with no valid completion (knobs matched by name: {})",
            s.added,
            s.ranked,
            s.unplaced,
            target.knobs().join(", ")
        );
    }
    if args.seed_from_evo {
        let dir = args.evidence.join("evo");
        attn_evo::seed_from_bests(&mut seeds, &dir, &spec.target, space, &fill);
    }
    Ok(seeds)
}
