//! Arguments several commands share, flattened into each: what to run, and on which problems.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use attn_evidence::DType;
use attn_kernels::{registry, Candidate, Config, ConfigError, Gpu, Limits, TimingMode};
use attn_measure::sdpa::{self, Backend};
use attn_measure::{suites, Problem};

/// The most seconds a duration argument may be (a day): no run of this tool waits longer for one
/// thing, and every such number then fits a `Duration`.
pub const MAX_SECONDS: f64 = 86_400.0;

/// clap value parser of a number of seconds (`--timeout`, `--hang-bound`, `--time-budget`):
/// finite, positive, at most [`MAX_SECONDS`].
pub fn seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s <= MAX_SECONDS => Ok(s),
        _ => Err(format!(
            "must be a positive number of seconds up to {MAX_SECONDS} (a day)"
        )),
    }
}

/// clap value parser of a finite number at least zero (`--syncs-per-tile`).
pub fn non_negative(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err("must be a finite number, at least 0".into()),
    }
}

/// clap value parser of a finite number above zero (`--speedup`).
pub fn positive(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err("must be a finite number above 0".into()),
    }
}

/// A user's kernel file (`--src`), refused on one line when it is empty or names no `entry`
/// anywhere (in it, or in a header beside it that it includes), since no compile could find
/// that kernel.
pub fn source_candidate(
    path: &Path,
    entry: Option<&str>,
    defines: &[String],
) -> anyhow::Result<Candidate> {
    let defines: Config = defines
        .join(",")
        .parse()
        .map_err(|e: ConfigError| anyhow::anyhow!("--define: {e}"))?;
    let candidate = Candidate::from_file(path, entry, defines)?;
    if let Candidate::Source { source, entry, .. } = &candidate {
        if source.trim().is_empty() {
            bail!("--src {}: the file is empty", path.display());
        }
        let beside = path.parent().unwrap_or(Path::new("."));
        let headers = local_includes(source)
            .filter_map(|name| std::fs::read_to_string(beside.join(name)).ok());
        if !names_identifier(source, entry)
            && !headers.into_iter().any(|h| names_identifier(&h, entry))
        {
            bail!(
                "--src {}: no kernel `{entry}` in the file (kernels/README.md's ABI defines `extern \"C\" __global__ void attn_fwd(...)`; --entry names another)",
                path.display()
            );
        }
    }
    Ok(candidate)
}

/// A user's Triton kernel (`--triton FILE.py[:KERNEL]`), refused on one line when the file is not
/// there or KERNEL is no Python name; Triton itself judges the rest when it compiles.
pub fn triton_candidate(spec: &str, defines: &[String]) -> anyhow::Result<Candidate> {
    let (file, kernel) = match spec.rsplit_once(':') {
        Some((file, kernel)) if !kernel.contains('/') => (file, kernel),
        _ => (spec, "attn_fwd"),
    };
    if !attn_kernels::triton::is_python_name(kernel) {
        bail!("--triton {spec}: `{kernel}` is not a Python function name (FILE.py:KERNEL)");
    }
    let path = Path::new(file);
    if !path.is_file() {
        bail!("--triton {spec}: no file {file}");
    }
    let defines: Config = defines
        .join(",")
        .parse()
        .map_err(|e: ConfigError| anyhow::anyhow!("--define: {e}"))?;
    Ok(Candidate::from_triton(path, kernel, defines)?)
}

/// The files a source includes with quotes (`#include "x.cuh"`), looked for beside it.
fn local_includes(source: &str) -> impl Iterator<Item = &str> {
    source.lines().filter_map(|line| {
        let rest = line.trim_start().strip_prefix('#')?.trim_start();
        let rest = rest
            .strip_prefix("include")?
            .trim_start()
            .strip_prefix('"')?;
        rest.split('"').next()
    })
}

/// Whether `text` holds `name` as a whole C identifier.
fn names_identifier(text: &str, name: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// Refuses, before PyTorch or a GPU is probed, what `--baseline NAME` could never time. An SDPA
/// baseline (`sdpa` with `backend`, `fa3`, or a Python callable `py:FILE.py:FUNCTION`, whose file
/// and name are checked here): a problem it has no kernel for ([`sdpa::refusal`]:
/// a window for SDPA's own backends, a varlen batch), or FA3 outside batch mode; without PyTorch
/// `sdpa` would fall back to cuBLAS, whose own refusal would not name the baselines that work. A
/// registered implementation: a problem outside its variants. (`rev:REF` is read later, from git.)
pub fn check_baseline(
    name: &str,
    backend: Backend,
    problems: &[Problem],
    mode: Option<TimingMode>,
) -> anyhow::Result<()> {
    let backend = match name {
        "fa3" => Backend::Fa3,
        "sdpa" => backend,
        _ if name.starts_with("rev:") => return Ok(()),
        _ if name.starts_with("py:") => {
            attn_measure::baseline::PyCallable::parse(&name["py:".len()..])?;
            Backend::Py
        }
        _ => {
            refuse_decode_implementation("--baseline", name)?;
            let baseline = Candidate::registered(name, Config::default())?;
            for problem in problems {
                problem.check_supported_by(&baseline)?;
            }
            return Ok(());
        }
    };
    for problem in problems {
        if let Some(why) = sdpa::refusal(problem, backend) {
            bail!("{why}");
        }
    }
    if let Some(mode) = mode {
        backend.check_mode(mode)?;
    }
    Ok(())
}

/// Refuses, in one line, a decode implementation named (by `flag`) for prefill problems.
fn refuse_decode_implementation(flag: &str, name: &str) -> anyhow::Result<()> {
    if attn_kernels::decode::find_decode(name).is_ok() {
        bail!("{flag} {name} is a decode implementation: give a decode batch (--shape \"decode ...\" or --suite decode-seed)");
    }
    Ok(())
}

/// What to run: a registered implementation with knob overrides, or your own kernel file.
#[derive(Debug, Clone, clap::Args)]
pub struct CandidateArgs {
    /// Registered implementation (default: IMPL, then the best registered one).
    #[arg(long = "impl")]
    pub implementation: Option<String>,
    /// Knob overrides for --impl, `K=V,K=V`.
    #[arg(long, default_value = "")]
    pub config: String,
    /// Your own kernel file following kernels/README.md's ABI (instead of --impl).
    #[arg(long, conflicts_with = "implementation")]
    pub src: Option<PathBuf>,
    /// Entry point of --src.
    #[arg(long, requires = "src")]
    pub entry: Option<String>,
    /// Your own Triton kernel of the same ABI, `FILE.py:KERNEL` (KERNEL default `attn_fwd`),
    /// compiled by Triton for the GPU (instead of --impl or --src).
    #[arg(long, conflicts_with_all = ["implementation", "src"])]
    pub triton: Option<String>,
    /// Defines for --src or --triton, `K=V` (repeatable). --src: BLOCK_M, NUM_WARPS, SHARED_BYTES
    /// set its geometry; --triton: BLOCK_M sets the grid, NUM_WARPS and STAGES are Triton's
    /// num_warps and num_stages, the rest are the kernel's constexprs.
    #[arg(long = "define")]
    pub defines: Vec<String>,
}

/// What to run as far as it is known before the GPU is opened.
#[derive(Debug)]
pub enum Chosen {
    /// A kernel file, or the implementation `--impl` or `IMPL` names: checked before any probe of
    /// the GPU.
    Named(Candidate),
    /// The best registered implementation for the device, with the user's overrides: known once
    /// the GPU is open ([`Chosen::on`]).
    Best(Config),
}

impl CandidateArgs {
    /// What to run, checked as far as can be without a GPU; for a named implementation its line
    /// (which and why) is printed, the command's first.
    pub fn choose(&self) -> anyhow::Result<Chosen> {
        if let Some(spec) = &self.triton {
            return Ok(Chosen::Named(triton_candidate(spec, &self.defines)?));
        }
        if self.src.is_none() && !self.defines.is_empty() {
            bail!("--define sets a --src or --triton kernel's defines; an --impl takes --config K=V,K=V");
        }
        match &self.src {
            Some(path) => Ok(Chosen::Named(source_candidate(
                path,
                self.entry.as_deref(),
                &self.defines,
            )?)),
            None => {
                let overrides: Config = self
                    .config
                    .parse()
                    .map_err(|e: ConfigError| anyhow::anyhow!("--config: {e}"))?;
                if let Some(name) = self.implementation.as_deref() {
                    refuse_decode_implementation("--impl", name)?;
                }
                Ok(match registry::named(self.implementation.as_deref())? {
                    Some(selection) => {
                        println!("{}", selection.reason);
                        Chosen::Named(Candidate::Registered {
                            implementation: selection.implementation,
                            overrides,
                        })
                    }
                    None => Chosen::Best(overrides),
                })
            }
        }
    }

    /// What to run for `problems`: a named candidate validated now, before any probe of the GPU
    /// (the device's best is validated by [`Chosen::resolve`] once the GPU is open).
    pub fn checked(&self, problems: &[Problem]) -> anyhow::Result<Chosen> {
        let chosen = self.choose()?;
        if let Chosen::Named(candidate) = &chosen {
            validate(candidate, problems, &Limits::H100)?;
        }
        Ok(chosen)
    }

    /// The candidate for `problems`, validated: [`CandidateArgs::checked`], then
    /// [`Chosen::resolve`].
    pub fn candidate_for(&self, problems: &[Problem]) -> anyhow::Result<(Candidate, Option<Gpu>)> {
        self.checked(problems)?.resolve(problems)
    }
}

impl Chosen {
    /// The candidate of a [`CandidateArgs::checked`] choice: a named one as it is; else the GPU is
    /// opened (and handed back, for the command to use) and the device's best registered
    /// implementation is validated on it.
    pub fn resolve(self, problems: &[Problem]) -> anyhow::Result<(Candidate, Option<Gpu>)> {
        match self {
            Chosen::Named(candidate) => Ok((candidate, None)),
            best => {
                let gpu = Gpu::open(0)?;
                let candidate = best.on(&gpu)?;
                validate(&candidate, problems, &gpu.limits())?;
                Ok((candidate, Some(gpu)))
            }
        }
    }

    /// The candidate on `gpu`'s device: the named one, or the best registered implementation for
    /// it, whose line (which and why) is printed.
    pub fn on(self, gpu: &Gpu) -> anyhow::Result<Candidate> {
        Ok(match self {
            Chosen::Named(candidate) => candidate,
            Chosen::Best(overrides) => {
                let info = gpu.info();
                let selection = registry::best_for(info.capability, &info.name)?;
                println!("{}", selection.reason);
                Candidate::Registered {
                    implementation: selection.implementation,
                    overrides,
                }
            }
        })
    }
}

/// GPU 0: the one a choice already opened, else opened now.
pub fn opened(gpu: Option<Gpu>) -> anyhow::Result<Gpu> {
    Ok(match gpu {
        Some(gpu) => gpu,
        None => Gpu::open(0)?,
    })
}

/// Which problems: shapes, or a named suite.
#[derive(Debug, Clone, clap::Args)]
pub struct ProblemArgs {
    /// A shape `B,H,S,D` or `B,H,SQ,SKV,D`, `H` as `HQ/HKV` for grouped-query heads, or a packed
    /// varlen batch `varlen=L1,L2,... H=H D=D` (`Q:KV` for a sequence whose lengths differ),
    /// optionally followed by ` causal` and ` window=L,R` (repeatable), e.g. "2,32/8,16384,128
    /// causal window=4096,-1" or "varlen=512,3072,0,8192 H=32/8 D=128 causal"; or a decode batch
    /// (gate and bench only), "decode B=64 q=1 kv=8192 H=32/8 D=128 page=16 bf16".
    #[arg(long = "shape")]
    pub shapes: Vec<String>,
    /// Causal mask, for --shape or a suite's shapes.
    #[arg(long)]
    pub causal: bool,
    /// fp16 or bf16.
    #[arg(long, default_value = "fp16", value_parser = DType::parse_input)]
    pub dtype: DType,
    /// A named suite: seed, large, sweep, gqa, mqa, window, varlen, train; decode-seed,
    /// decode-llama3-8b, decode-llama3-70b (gate and bench only).
    #[arg(long)]
    pub suite: Option<String>,
}

/// The Ray cluster's address of `--on ray[=ADDRESS]` (`auto` for plain `ray`: the local one).
pub fn ray_address(on: &str) -> anyhow::Result<String> {
    Ok(match on.split_once('=') {
        None if on == "ray" => "auto".into(),
        Some(("ray", address)) if !address.trim().is_empty() => address.trim().into(),
        _ => bail!(
            "--on {on}: give ray or ray=ADDRESS (a Ray cluster's address, e.g. ray=10.0.0.1:6379)"
        ),
    })
}

/// Whether a `--shape` text is a decode batch (`decode ...`).
pub fn is_decode_text(text: &str) -> bool {
    text.split_whitespace().next() == Some("decode")
}

/// The decode suite `name`, if it is one.
pub fn decode_suite(name: &str) -> Option<&'static attn_oracle::DecodeSuite> {
    attn_oracle::DECODE_SUITES.iter().find(|s| s.name == name)
}

/// Refuses, in one line, a decode batch or suite given to `command`, which takes prefill only.
pub fn refuse_decode(command: &str, shapes: &[&str], suite: Option<&str>) -> anyhow::Result<()> {
    let decode = shapes
        .iter()
        .find(|s| is_decode_text(s))
        .map(|s| s.to_string());
    let decode = decode.or_else(|| {
        suite
            .filter(|n| decode_suite(n).is_some())
            .map(String::from)
    });
    if let Some(what) = decode {
        bail!("`cargo xtask {command}` cannot take decode yet ({what}): decode runs through gate and bench");
    }
    Ok(())
}

/// The decode batch `text` names, at the dtype written in it, else at `dtype`.
fn decode_text(text: &str, dtype: DType) -> anyhow::Result<attn_oracle::DecodeSpec> {
    let spec: attn_oracle::DecodeSpec = text.parse().with_context(|| format!("--shape {text}"))?;
    let written = text
        .split_whitespace()
        .any(|w| DType::parse_input(w).is_ok());
    if written {
        return Ok(spec);
    }
    (spec.with_dtype(dtype)).with_context(|| format!("--shape {text}"))
}

impl ProblemArgs {
    /// The decode batches asked for, when the shapes or the suite are decode (`None`: prefill);
    /// decode and prefill shapes mixed, or --causal with decode (always causal), are refused.
    pub fn decode_problems(&self) -> anyhow::Result<Option<Vec<attn_oracle::DecodeSpec>>> {
        let texts: Vec<String> = match (self.shapes.is_empty(), self.suite.as_deref()) {
            (true, Some(name)) => match decode_suite(name) {
                Some(suite) => suite.shapes.iter().map(|s| s.to_string()).collect(),
                None => return Ok(None),
            },
            (false, Some(_)) => bail!("give --shape or --suite, not both"),
            (_, None) => {
                let decode = self.shapes.iter().filter(|s| is_decode_text(s)).count();
                if decode == 0 {
                    return Ok(None);
                }
                if decode < self.shapes.len() {
                    bail!("decode and prefill shapes in one run: give one kind of problem per run");
                }
                self.shapes.clone()
            }
        };
        let mut specs = Vec::new();
        for text in &texts {
            let spec = decode_text(text, self.dtype)?;
            if !specs.contains(&spec) {
                specs.push(spec);
            }
        }
        Ok(Some(specs))
    }

    /// The problems asked for (`default_suite` when neither --shape nor --suite is given).
    pub fn problems(&self, default_suite: &str) -> anyhow::Result<Vec<Problem>> {
        if self.shapes.is_empty() {
            let name = self.suite.as_deref().unwrap_or(default_suite);
            let mut problems: Vec<Problem> = Vec::new();
            for p in suites::suite(name, self.dtype)? {
                let causal = p.spec.causal || self.causal;
                let problem = Problem::new(attn_evidence::ShapeSpec { causal, ..p.spec })
                    .with_context(|| format!("suite {name} with --causal"))?;
                // Under --causal a suite's shape with and without the mask become one: run it once.
                if !problems.iter().any(|q| q.spec == problem.spec) {
                    problems.push(problem);
                }
            }
            return Ok(problems);
        }
        if self.suite.is_some() {
            bail!("give --shape or --suite, not both");
        }
        self.shapes
            .iter()
            .map(|s| {
                let mut spec: attn_evidence::ShapeSpec =
                    s.parse().with_context(|| format!("--shape {s}"))?;
                spec.causal |= self.causal;
                spec.dtype = self.dtype;
                Problem::new(spec).with_context(|| format!("--shape {s}"))
            })
            .collect()
    }

    /// The suite's name for evidence, when the problems came from one.
    pub fn suite_name(&self, default_suite: &str) -> Option<String> {
        self.shapes
            .is_empty()
            .then(|| self.suite.clone().unwrap_or_else(|| default_suite.into()))
    }
}

/// One problem: a shape with its mask and dtype (`ncu`, `evo`; each sets its default `--shape`
/// with `#[command(mut_arg("shape", ...))]`).
#[derive(Debug, Clone, clap::Args)]
pub struct ShapeArgs {
    /// The shape, `B,H,S,D` or `B,H,SQ,SKV,D`, or `varlen=L1,L2,... H=H D=D`; or, for evo, a
    /// decode batch, "decode B=16 q=1 kv=8192 H=32/8 D=128 page=16 bf16".
    #[arg(long)]
    pub shape: String,
    /// Causal mask.
    #[arg(long)]
    pub causal: bool,
    /// fp16 or bf16.
    #[arg(long, default_value = "fp16", value_parser = DType::parse_input)]
    pub dtype: DType,
}

impl ShapeArgs {
    /// The problem asked for, checked as far as can be without a GPU; a decode batch is refused
    /// in one line naming `command`.
    pub fn spec_for(&self, command: &str) -> anyhow::Result<attn_evidence::ShapeSpec> {
        refuse_decode(command, &[self.shape.as_str()], None)?;
        self.spec()
    }

    /// The decode batch asked for, when the shape is one (`decode ...`; always causal, so
    /// --causal is refused).
    pub fn decode_spec(&self) -> anyhow::Result<Option<attn_oracle::DecodeSpec>> {
        if !is_decode_text(&self.shape) {
            return Ok(None);
        }
        if self.causal {
            bail!("--causal with a decode batch: decode is always causal (its new tokens end their sequences)");
        }
        decode_text(&self.shape, self.dtype).map(Some)
    }

    /// The problem asked for, checked as far as can be without a GPU.
    pub fn spec(&self) -> anyhow::Result<attn_evidence::ShapeSpec> {
        let mut spec: attn_evidence::ShapeSpec =
            (self.shape.parse()).with_context(|| format!("--shape {}", self.shape))?;
        spec.causal |= self.causal;
        spec.dtype = self.dtype;
        Problem::new(spec.clone())?;
        Ok(spec)
    }
}

/// Checks that `candidate` can run `problems` on a device of `limits` as far as the registry can
/// tell without compiling (variants, head dims, per-shape knobs and constraints), so that a bad
/// request fails before anything runs: before any probe of the GPU with the H100's limits.
pub fn validate(
    candidate: &Candidate,
    problems: &[Problem],
    limits: &Limits,
) -> anyhow::Result<()> {
    for p in problems {
        p.check_supported_by(candidate)
            .with_context(|| format!("{p}"))?;
    }
    if let Candidate::Registered { implementation, .. } = candidate {
        for p in problems {
            let for_shape = candidate.for_problem(&p.shape, &p.params, limits);
            implementation.check_head_dim(p.shape.head_dim)?;
            implementation
                .resolve(for_shape.knobs(), p.shape.head_dim, limits)
                .with_context(|| format!("{p}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_triton_kernel_is_named_file_colon_function() {
        let starter = crate::workspace_root().join("kernels/examples/starter_triton.py");
        let spec = starter.display().to_string();
        let named = triton_candidate(&format!("{spec}:attn_fwd"), &["BLOCK_M=64".into()]).unwrap();
        let plain = triton_candidate(&spec, &[]).unwrap();
        for candidate in [named, plain] {
            assert!(matches!(&candidate, Candidate::Triton { kernel, .. } if kernel == "attn_fwd"));
        }
        let err = triton_candidate(&format!("{spec}:not-a-name"), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a Python function name"), "{err}");
        let err = triton_candidate("missing.py:attn_fwd", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("no file missing.py"), "{err}");
    }

    fn suite_args(suite: &str, causal: bool) -> ProblemArgs {
        ProblemArgs {
            shapes: Vec::new(),
            causal,
            dtype: DType::F16,
            suite: Some(suite.into()),
        }
    }

    #[test]
    fn decode_shapes_and_suites_parse_with_the_dtype() {
        let suite = suite_args("decode-llama3-8b", false)
            .decode_problems()
            .unwrap()
            .unwrap();
        assert_eq!(suite.len(), 14);
        assert!(suite
            .iter()
            .all(|s| s.dtype() == DType::F16 && s.heads() == 32));
        let shape = ProblemArgs {
            shapes: vec!["decode B=64 q=1 kv=8192 H=32/8 D=128 page=16 bf16".into()],
            causal: false,
            dtype: DType::F16,
            suite: None,
        };
        let specs = shape.decode_problems().unwrap().unwrap();
        assert_eq!(specs[0].dtype(), DType::Bf16, "the text's dtype wins");
        assert!(suite_args("seed", false)
            .decode_problems()
            .unwrap()
            .is_none());
    }

    #[test]
    fn causal_applies_to_a_suites_shapes_and_keeps_their_own_masks() {
        let causal = suite_args("sweep", true).problems("seed").unwrap();
        assert!(!causal.is_empty() && causal.iter().all(|p| p.spec.causal));
        let plain = suite_args("sweep", false).problems("seed").unwrap();
        assert!(plain.iter().all(|p| !p.spec.causal));
        // A suite's own causal shapes stay causal, its windows stay, without --causal.
        let window = suite_args("window", false).problems("seed").unwrap();
        assert!(window.iter().any(|p| p.spec.causal) && window.iter().any(|p| !p.spec.causal));
        // The large suite has 2,16,8192,128 with and without the mask: under --causal, once.
        let large = suite_args("large", true).problems("seed").unwrap();
        let shapes: Vec<String> = large.iter().map(|p| p.spec.to_string()).collect();
        assert_eq!(
            shapes,
            [
                "4,16,2048,128 causal",
                "2,16,8192,128 causal",
                "2,16,8192,64 causal"
            ]
        );
        let window_causal = suite_args("window", true).problems("seed").unwrap();
        assert!(window_causal.iter().all(|p| p.spec.causal));
        assert_eq!(
            window.iter().map(|p| p.spec.window).collect::<Vec<_>>(),
            window_causal
                .iter()
                .map(|p| p.spec.window)
                .collect::<Vec<_>>()
        );
    }
}
