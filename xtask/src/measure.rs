//! Timing of implementations and baselines on one shape, shared by `gate` and `bench`.

use std::collections::HashMap;

use anyhow::{bail, Context};
use attn_evidence::{ShapeSpec, Timing};
use attn_kernels::{
    telemetry, Candidate, Config, DeviceTensor, Gpu, Harness, Prepared, TimingMode, TimingOptions,
    Timings,
};
use attn_oracle::{generate, CaseSpec, DType, Distribution, Params, Shape};

use crate::gate::sdpa::{self, Sdpa};

/// The attention problem a shape spec describes.
pub fn problem(spec: &ShapeSpec) -> anyhow::Result<(Shape, DType, Params)> {
    let shape = Shape::new(
        spec.batch,
        spec.heads,
        spec.seq_q,
        spec.seq_kv,
        spec.head_dim,
    )?;
    let dtype: DType = spec.dtype.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    if !matches!(dtype, DType::F16 | DType::Bf16) {
        bail!("dtype {dtype} is not supported on the GPU (fp16 or bf16)");
    }
    Ok((shape, dtype, Params::new(spec.head_dim, spec.causal)))
}

/// How many input sets to rotate among: enough to exceed twice the L2 between reuses, at most 8,
/// and never more than a quarter of the device's memory.
pub fn input_sets(shape: &Shape, gpu: &Gpu) -> usize {
    let set_bytes = (2 * shape.q_len() + 2 * shape.kv_len()) * 2;
    let wanted = (2 * gpu.info().l2_bytes as usize)
        .div_ceil(set_bytes.max(1))
        .clamp(2, 8);
    let affordable = (gpu.info().total_memory / 4 / set_bytes.max(1)).max(1);
    wanted.min(affordable)
}

/// Device-resident input sets with their output buffers.
pub struct InputSets {
    pub q: Vec<DeviceTensor>,
    pub k: Vec<DeviceTensor>,
    pub v: Vec<DeviceTensor>,
    pub o: Vec<DeviceTensor>,
}

impl InputSets {
    /// `count` fresh random sets (seeds `seed`, `seed+1`, ...), uploaded.
    pub fn new(
        gpu: &Gpu,
        shape: Shape,
        dtype: DType,
        count: usize,
        seed: u64,
    ) -> anyhow::Result<InputSets> {
        let mut sets = InputSets {
            q: vec![],
            k: vec![],
            v: vec![],
            o: vec![],
        };
        for i in 0..count {
            let inputs = generate(&CaseSpec {
                shape,
                dtype,
                distribution: Distribution::Normal,
                seed: seed.wrapping_add(i as u64),
            });
            sets.q.push(gpu.upload(&inputs.q)?);
            sets.k.push(gpu.upload(&inputs.k)?);
            sets.v.push(gpu.upload(&inputs.v)?);
            sets.o.push(gpu.alloc_poisoned(inputs.q.dims, dtype)?);
        }
        Ok(sets)
    }
}

/// Times a prepared candidate on `spec` with the harness; returns the timings and the clock
/// readings around them.
pub fn time_prepared(
    gpu: &Gpu,
    prepared: &Prepared,
    spec: &ShapeSpec,
    opts: &TimingOptions,
    seed: u64,
    mut side: Option<&mut attn_kernels::planted::SideStreamWork>,
) -> anyhow::Result<(
    Timings,
    Option<telemetry::ClockReading>,
    Option<telemetry::ClockReading>,
)> {
    let (shape, dtype, params) = problem(spec)?;
    let count = input_sets(&shape, gpu);
    let mut sets = InputSets::new(gpu, shape, dtype, count, seed)?;
    let mut harness = Harness::new(gpu)?;
    let before = telemetry::read_clocks(gpu.info().ordinal);
    let timings = harness.time(count, opts, &mut |i| {
        prepared.launch(
            gpu,
            &sets.q[i],
            &sets.k[i],
            &sets.v[i],
            &mut sets.o[i],
            &params,
        )?;
        if let Some(side) = side.as_deref_mut() {
            side.launch()?;
        }
        Ok(())
    })?;
    let after = telemetry::read_clocks(gpu.info().ordinal);
    Ok((timings, before, after))
}

/// Prepared candidates, compiled once per (dtype, head dim).
#[derive(Default)]
pub struct PreparedCache {
    prepared: HashMap<(String, DType, usize), Prepared>,
}

impl PreparedCache {
    pub fn get(
        &mut self,
        gpu: &Gpu,
        key: &str,
        candidate: &Candidate,
        dtype: DType,
        head_dim: usize,
    ) -> anyhow::Result<&Prepared> {
        let k = (format!("{key}[{}]", candidate.knobs()), dtype, head_dim);
        if !self.prepared.contains_key(&k) {
            let prepared = Prepared::new(gpu, candidate, dtype, head_dim)?;
            self.prepared.insert(k.clone(), prepared);
        }
        Ok(&self.prepared[&k])
    }
}

/// What a candidate is compared with.
pub enum Baseline {
    /// PyTorch SDPA through the Python helper, with a backend.
    Sdpa { sdpa: Sdpa, backend: String },
    /// A registered implementation (`cublas`, or any other, e.g. the candidate itself).
    Registered(Candidate),
}

impl Baseline {
    /// The evidence description.
    pub fn implementation(&self) -> attn_evidence::Implementation {
        match self {
            Baseline::Sdpa { backend, .. } => sdpa_implementation(backend),
            Baseline::Registered(c) => candidate_implementation(c, None),
        }
    }

    /// Times the baseline on `spec` with the same options (and the same protocol) as the candidate.
    pub fn time(
        &self,
        gpu: &Gpu,
        cache: &mut PreparedCache,
        spec: &ShapeSpec,
        opts: &TimingOptions,
        seed: u64,
    ) -> anyhow::Result<Timings> {
        match self {
            Baseline::Sdpa { sdpa, backend } => time_sdpa(sdpa, backend, gpu, spec, opts, seed),
            Baseline::Registered(candidate) => {
                let (_, dtype, _) = problem(spec)?;
                let prepared = cache.get(
                    gpu,
                    &format!("baseline:{}", candidate.label()),
                    candidate,
                    dtype,
                    spec.head_dim,
                )?;
                Ok(time_prepared(gpu, prepared, spec, opts, seed, None)?.0)
            }
        }
    }
}

/// The evidence description of SDPA with a backend.
pub fn sdpa_implementation(backend: &str) -> attn_evidence::Implementation {
    let mut imp = attn_evidence::Implementation::named("sdpa");
    imp.backend = Some(backend.to_string());
    imp
}

/// Times PyTorch SDPA on `spec` through the helper, with the harness's protocol and options.
pub fn time_sdpa(
    sdpa: &Sdpa,
    backend: &str,
    gpu: &Gpu,
    spec: &ShapeSpec,
    opts: &TimingOptions,
    seed: u64,
) -> anyhow::Result<Timings> {
    let (shape, _, params) = problem(spec)?;
    let flush = (gpu.info().l2_bytes as usize).max(1 << 20) * 2;
    let job = sdpa::time_job(
        spec,
        params.scale,
        backend,
        opts,
        input_sets(&shape, gpu),
        seed,
        flush,
    );
    let result = sdpa.run_jobs(&[job])?.remove(0);
    if let Some(err) = sdpa::job_error(&result) {
        bail!("PyTorch SDPA ({backend}) on {spec}: {err}");
    }
    Ok(Timings {
        mode: opts.mode,
        warmup: opts.warmup,
        launches_per_sample: result["launches_per_sample"].as_u64().unwrap_or(1) as usize,
        samples_us: sdpa::floats(&result, "samples_us"),
        wall_us: sdpa::floats(&result, "wall_us"),
        guard_event_us: sdpa::floats(&result, "guard_event_us"),
    })
}

/// Builds the baseline from `--baseline`: `sdpa` (falls back to `cublas` without PyTorch, saying
/// so), `cublas`, or any registered implementation name.
pub fn baseline(name: &str, backend: &str) -> anyhow::Result<Baseline> {
    if name == "sdpa" {
        return match Sdpa::detect() {
            Ok(sdpa) => Ok(Baseline::Sdpa {
                sdpa,
                backend: backend.to_string(),
            }),
            Err(err) => {
                println!(
                    "PyTorch SDPA is unavailable ({}); the baseline is the cublas math path",
                    crate::one_line(&err)
                );
                Ok(Baseline::Registered(Candidate::registered(
                    "cublas",
                    Config::default(),
                )?))
            }
        };
    }
    Ok(Baseline::Registered(
        Candidate::registered(name, Config::default()).context("--baseline")?,
    ))
}

/// The evidence description of a candidate (with its resolved config when prepared).
pub fn candidate_implementation(
    candidate: &Candidate,
    resolved: Option<&Config>,
) -> attn_evidence::Implementation {
    let mut imp = attn_evidence::Implementation::named(candidate.label());
    let source = match candidate {
        Candidate::Registered {
            implementation,
            overrides,
        } => {
            imp.config = resolved.unwrap_or(overrides).to_strings();
            match implementation.engine {
                attn_kernels::registry::Engine::Kernel { source, .. } => Some(source.to_string()),
                attn_kernels::registry::Engine::Cublas => None,
            }
        }
        Candidate::Source {
            source, defines, ..
        } => {
            imp.config = defines.to_strings();
            Some(source.clone())
        }
    };
    imp.source_sha256 = source.map(|s| attn_kernels::compile::sha256_hex(s.as_bytes()));
    imp
}

/// The evidence form of harness timings.
pub fn timing_evidence(t: &Timings) -> Timing {
    let mode = match t.mode {
        TimingMode::Flushed => attn_evidence::TimingMode::Flushed,
        TimingMode::Graph => attn_evidence::TimingMode::Graph,
        TimingMode::Batch => attn_evidence::TimingMode::Batch,
    };
    Timing::new(mode, t.warmup, t.samples_us.clone(), t.launches_per_sample)
}

/// The median of a slice (NaN when empty).
pub fn median(values: &[f64]) -> f64 {
    attn_stats::Sample::new(values.to_vec())
        .map(|s| s.median())
        .unwrap_or(f64::NAN)
}

/// One correctness check: its record, and what it was computed from (kept for a second reference).
pub struct CheckRun {
    pub check: attn_evidence::CorrectnessCheck,
    pub inputs: attn_oracle::Inputs,
    pub output: attn_oracle::HostTensor,
    pub reference: attn_oracle::Reference,
}

/// `checks` correctness checks of a prepared candidate on fresh random inputs (seeds `seed`,
/// `seed+1`, ...): poisoned output, the f64 oracle (sampled rows above 2M query elements), and an
/// output identical to the previous call's on new inputs counted as stale.
pub fn run_checks(
    gpu: &Gpu,
    prepared: &Prepared,
    spec: &ShapeSpec,
    seed: u64,
    checks: usize,
) -> anyhow::Result<Vec<CheckRun>> {
    use attn_oracle::{compare, reference, tolerance, RowSelection};
    let (shape, dtype, params) = problem(spec)?;
    let mut runs: Vec<CheckRun> = Vec::with_capacity(checks);
    for i in 0..checks {
        let case_seed = seed.wrapping_add(i as u64);
        let inputs = generate(&CaseSpec {
            shape,
            dtype,
            distribution: Distribution::Normal,
            seed: case_seed,
        });
        let output = prepared.run(gpu, &inputs.q, &inputs.k, &inputs.v, &params)?;
        let rows = if shape.q_len() > 1 << 21 {
            RowSelection::Sampled {
                rows_per_head: 64,
                seed: case_seed,
            }
        } else {
            RowSelection::All
        };
        let reference = reference(&inputs.q, &inputs.k, &inputs.v, &params, &rows)?;
        let verdict = compare(&output, &reference, &tolerance(dtype, Distribution::Normal));
        let stale = runs
            .last()
            .is_some_and(|p| p.output.as_bytes() == output.as_bytes());
        let reason = if stale {
            Some("output identical to the previous call's on new inputs (stale output)".to_string())
        } else {
            verdict.reason.clone()
        };
        let check = attn_evidence::CorrectnessCheck {
            seed: case_seed,
            distribution: Distribution::Normal.to_string(),
            passed: verdict.passed && !stale,
            max_abs: verdict.max_abs,
            rel_l2: verdict.rel_l2,
            nan_count: verdict.nan_count,
            poison_count: verdict.poison_count,
            reason,
            sdpa_max_abs: None,
            closer_to: None,
        };
        runs.push(CheckRun {
            check,
            inputs,
            output,
            reference,
        });
    }
    Ok(runs)
}

/// The first failed check of [`run_checks`], as one line (`None` when all pass).
pub fn check_against_oracle(
    gpu: &Gpu,
    prepared: &Prepared,
    spec: &ShapeSpec,
    seed: u64,
    checks: usize,
) -> anyhow::Result<Option<String>> {
    let runs = run_checks(gpu, prepared, spec, seed, checks)?;
    Ok(runs.into_iter().find(|r| !r.check.passed).map(|r| {
        format!(
            "seed {}: {}",
            r.check.seed,
            r.check.reason.unwrap_or_else(|| "wrong result".into())
        )
    }))
}
