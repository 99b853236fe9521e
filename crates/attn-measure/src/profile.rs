//! What Nsight Compute and compute-sanitizer run: the tools found before anything runs
//! ([`find_program`], [`find_ncu`]), the kernel ncu filters on, the target-mode program that
//! launches only the candidate ([`Target`], a forward's or a backward's, which a tool runs as this
//! same binary in a hidden mode with the target as JSON), and ncu run on it supervised ([`ncu`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use attn_evidence::ShapeSpec;
use attn_kernels::backward::{BackwardArgs, GpuBackwardReference};
use attn_kernels::registry::Engine;
use attn_kernels::{Candidate, Config, Gpu, Prepared};
use attn_ncu::metrics::Purpose;
use attn_oracle::Distribution;
use serde::{Deserialize, Serialize};

use crate::backward::BackwardCandidate;
use crate::supervise::{run_supervised, Supervised};
use crate::timing::InputSets;
use crate::{MeasureError, Problem, Result};

/// Finds a tool's program before anything runs: `given` itself when it is a path (has a `/`),
/// else `given` on PATH, then in `$CUDA_HOME/bin` and `/usr/local/cuda/bin` (where the CUDA
/// toolkit puts ncu and compute-sanitizer); `None` when it is nowhere.
pub fn find_program(given: &Path) -> Option<PathBuf> {
    let executable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if given.components().count() > 1 {
        return executable(given).then(|| given.to_path_buf());
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        dirs.push(PathBuf::from(home).join("bin"));
    }
    dirs.push("/usr/local/cuda/bin".into());
    dirs.iter().map(|d| d.join(given)).find(|p| executable(p))
}

/// Finds Nsight Compute (`given`: `ncu` or its path) as [`find_program`] does; missing is one
/// clear error, said before anything is measured.
pub fn find_ncu(given: &Path) -> Result<PathBuf> {
    find_program(given).ok_or_else(|| {
        let path = given.to_path_buf();
        MeasureError::Ncu(attn_ncu::NcuError::NcuNotFound { path })
    })
}

/// Profiles `candidate` on `shape` with Nsight Compute (`ncu`, from [`find_ncu`]): `program` (this
/// binary) in its target mode, ncu filtered to the candidate's kernel(s) ([`profiled_entry`]),
/// one warm-up launch skipped and `launches` profiled with `purpose`'s metrics, clocks left
/// alone, caches flushed. ncu runs in its own process group, killed with the target past
/// `timeout`: a faulting or hanging candidate ends only its own profile.
pub fn ncu(
    ncu: &Path,
    program: &Path,
    candidate: &Candidate,
    shape: ShapeSpec,
    purpose: Purpose,
    launches: u32,
    timeout: Duration,
) -> Result<attn_ncu::Profile> {
    let opts = attn_ncu::kernel_options(
        &profiled_entry(candidate),
        purpose,
        ncu.to_path_buf(),
        launches,
    );
    let (args, ended) = run_ncu(&opts, program, candidate, shape, launches, timeout)?;
    Ok(attn_ncu::Profile::from_output(
        &opts,
        program,
        &args,
        &ended.as_ended(),
    )?)
}

/// ncu's source page of `candidate` on `shape` (its launch after one warm-up: SASS instructions
/// with their executions and warp-stall samples, [`attn_ncu::source`]), run as [`ncu`] runs; with
/// the command line, for provenance, and the page's text as ncu printed it.
pub fn ncu_source(
    ncu: &Path,
    program: &Path,
    candidate: &Candidate,
    shape: ShapeSpec,
    timeout: Duration,
) -> Result<(Vec<String>, Vec<attn_ncu::source::SourceProfile>, String)> {
    let mut opts = attn_ncu::kernel_options(
        &profiled_entry(candidate),
        Purpose::Overview,
        ncu.to_path_buf(),
        1,
    );
    opts.page = attn_ncu::Page::Source;
    let (args, ended) = run_ncu(&opts, program, candidate, shape, 1, timeout)?;
    let profiles = attn_ncu::interpret_source(&opts, &ended.as_ended())?;
    let command_line = attn_ncu::command_line(&opts, program, &args);
    Ok((command_line, profiles, ended.stdout))
}

/// How a supervised ncu run ended.
struct NcuRun {
    success: bool,
    status: String,
    stdout: String,
    stderr: String,
}

impl NcuRun {
    fn as_ended(&self) -> attn_ncu::Ended<'_> {
        attn_ncu::Ended {
            success: self.success,
            status: &self.status,
            stdout: &self.stdout,
            stderr: &self.stderr,
        }
    }
}

/// ncu with `opts` on this program's target mode for `candidate` on `shape`, supervised: the
/// target's arguments and how it ended.
fn run_ncu(
    opts: &attn_ncu::ProfileOptions,
    program: &Path,
    candidate: &Candidate,
    shape: ShapeSpec,
    launches: u32,
    timeout: Duration,
) -> Result<([String; 2], NcuRun)> {
    let target = Target::new(candidate, vec![shape], launches)?;
    let args = ["target".to_string(), target.to_json()];
    let command = attn_ncu::command(opts, program, &args);
    match run_supervised(command, timeout)? {
        Supervised::TimedOut => Err(MeasureError::Invalid(format!(
            "ncu: timeout after {} s",
            timeout.as_secs_f64()
        ))),
        Supervised::Finished {
            status,
            stdout,
            stderr,
        } => Ok((
            args,
            NcuRun {
                success: status.success(),
                status: status.to_string(),
                stdout,
                stderr,
            },
        )),
    }
}

/// The kernel name ncu is filtered to for `candidate` (the cuBLAS path launches several).
pub fn profiled_entry(candidate: &Candidate) -> String {
    match candidate {
        Candidate::Registered { implementation, .. } => match implementation.engine {
            Engine::Kernel { .. } => "attn_fwd".into(),
            Engine::Library { .. } => ".*".into(),
        },
        Candidate::Source { entry, .. } => entry.clone(),
        // Triton names the entry after the function.
        Candidate::Triton { kernel, .. } => kernel.clone(),
        Candidate::Revision { of, .. } => profiled_entry(of),
    }
}

/// One warm-up launch and `launches` more of `candidate` on `spec`, nothing else.
fn launch_on(gpu: &Gpu, spec: ShapeSpec, candidate: &Candidate, launches: u32) -> Result<()> {
    let problem = Problem::new(spec)?;
    let candidate = candidate.for_problem(&problem.shape, &problem.params, &gpu.limits());
    let prepared = Prepared::new(gpu, &candidate, problem.dtype, problem.shape.head_dim)?;
    // Exact allocations, no canary guards: compute-sanitizer's memcheck must see a write past a
    // buffer as one, not as a write into the gate's padding.
    let mut sets = InputSets::with_guards(gpu, &problem, 1, 1, 0)?;
    for _ in 0..=launches {
        sets.launch(gpu, &prepared, &problem, 0)?;
    }
    gpu.synchronize()?;
    Ok(())
}

/// `launches + 1` launches of backward `candidate` on `spec`, on exact allocations (as
/// [`launch_on`]'s): Q, K, V and dO drawn at random, O and the LSE the GPU reference's forward of
/// them.
fn launch_backward_on(
    gpu: &Gpu,
    spec: ShapeSpec,
    candidate: &BackwardCandidate,
    launches: u32,
) -> Result<()> {
    let problem = Problem::new(spec)?;
    let (dtype, d) = (problem.dtype, problem.shape.head_dim);
    let prepared = candidate.prepare(gpu, dtype, d)?;
    let inputs = problem.generate(Distribution::Normal, 7);
    let (q, k, v) = (
        gpu.upload(&inputs.q)?,
        gpu.upload(&inputs.k)?,
        gpu.upload(&inputs.v)?,
    );
    let d_o = gpu.upload(&problem.generate(Distribution::Normal, 8).q)?;
    let offsets = (problem.varlen.as_ref())
        .map(|v| gpu.upload_offsets(v))
        .transpose()?;
    let reference = GpuBackwardReference::new(gpu, dtype, d)?;
    let (o, lse) = reference.forward_lse(gpu, &q, &k, &v, &problem.params, offsets.as_ref())?;
    let args = BackwardArgs {
        shape: problem.shape,
        params: problem.params,
        q: &q,
        k: &k,
        v: &v,
        o: &o,
        d_o: &d_o,
        lse: &lse,
        offsets: offsets.as_ref(),
    };
    let (mut dq, mut dk, mut dv) = (
        gpu.alloc_poisoned(q.dims, dtype)?,
        gpu.alloc_poisoned(k.dims, dtype)?,
        gpu.alloc_poisoned(k.dims, dtype)?,
    );
    let plan = prepared.plan(&problem.shape, problem.varlen.as_ref())?;
    let mut workspace = prepared.alloc_workspace(gpu, &plan)?;
    for _ in 0..=launches {
        prepared.launch_args(gpu, &args, &mut dq, &mut dk, &mut dv, &mut workspace)?;
    }
    gpu.synchronize()?;
    Ok(())
}

/// A candidate as a target-mode process rebuilds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetCandidate {
    /// A registered implementation and its knob overrides.
    Registered {
        /// Its name.
        name: String,
        /// Overrides.
        overrides: Config,
    },
    /// A kernel file, read again by the target.
    Source {
        /// The `.cu` file.
        path: PathBuf,
        /// Its entry point.
        entry: String,
        /// Its defines.
        defines: Config,
    },
    /// A Triton kernel, built again by the target.
    Triton {
        /// The `.py` file.
        path: PathBuf,
        /// The `@triton.jit` function.
        kernel: String,
        /// Its constexprs and Triton options.
        defines: Config,
    },
}

/// What a target-mode process launches: `candidate` on each shape, one warm-up launch and
/// `launches` more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// The candidate.
    pub candidate: TargetCandidate,
    /// The shapes, in order.
    pub shapes: Vec<ShapeSpec>,
    /// Launches after the warm-up one, per shape.
    pub launches: u32,
    /// Whether the candidate is a backward implementation or kernel (absent: a forward's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backward: bool,
}

impl Target {
    /// The target that launches `candidate` on `shapes` (a registered implementation or a kernel
    /// file; a revision's kernel has no target form).
    pub fn new(candidate: &Candidate, shapes: Vec<ShapeSpec>, launches: u32) -> Result<Target> {
        let candidate = match candidate {
            Candidate::Registered {
                implementation,
                overrides,
            } => TargetCandidate::Registered {
                name: implementation.name.into(),
                overrides: overrides.clone(),
            },
            Candidate::Source {
                path,
                entry,
                defines,
                ..
            } => TargetCandidate::Source {
                path: path.clone(),
                entry: entry.clone(),
                defines: defines.clone(),
            },
            Candidate::Triton {
                path,
                kernel,
                defines,
                ..
            } => TargetCandidate::Triton {
                path: path.clone(),
                kernel: kernel.clone(),
                defines: defines.clone(),
            },
            Candidate::Revision { revision, .. } => {
                return Err(MeasureError::Invalid(format!(
                    "the kernel at revision {revision} cannot run in a target process"
                )))
            }
        };
        Ok(Target {
            candidate,
            shapes,
            launches,
            backward: false,
        })
    }

    /// The target that launches backward `candidate` on `shapes` (dQ, dK and dV from the GPU
    /// reference's O and LSE of random inputs).
    pub fn backward(
        candidate: &BackwardCandidate,
        shapes: Vec<ShapeSpec>,
        launches: u32,
    ) -> Target {
        let candidate = match candidate {
            BackwardCandidate::Registered { name, overrides } => TargetCandidate::Registered {
                name: name.clone(),
                overrides: overrides.clone(),
            },
            BackwardCandidate::Source { path, defines } => TargetCandidate::Source {
                path: path.clone(),
                entry: "attn_bwd".into(),
                defines: defines.clone(),
            },
        };
        Target {
            candidate,
            shapes,
            launches,
            backward: true,
        }
    }

    /// As one command-line argument.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Back from [`Target::to_json`].
    pub fn from_json(text: &str) -> Result<Target> {
        serde_json::from_str(text)
            .map_err(|e| MeasureError::Invalid(format!("not a target description: {e}")))
    }

    /// The candidate, rebuilt (a kernel file is read again).
    pub fn candidate(&self) -> Result<Candidate> {
        Ok(match &self.candidate {
            TargetCandidate::Registered { name, overrides } => {
                Candidate::registered(name, overrides.clone())?
            }
            TargetCandidate::Source {
                path,
                entry,
                defines,
            } => Candidate::from_file(path, Some(entry), defines.clone())?,
            TargetCandidate::Triton {
                path,
                kernel,
                defines,
            } => Candidate::from_triton(path, kernel, defines.clone())?,
        })
    }

    /// Launches it: every shape in turn on GPU 0, synchronised after each.
    pub fn launch(&self) -> Result<()> {
        if self.backward {
            let candidate = match &self.candidate {
                TargetCandidate::Registered { name, overrides } => {
                    BackwardCandidate::registered(name, overrides.clone())?
                }
                TargetCandidate::Source { path, defines, .. } => BackwardCandidate::Source {
                    path: path.clone(),
                    defines: defines.clone(),
                },
                TargetCandidate::Triton { .. } => {
                    let why = "a Triton kernel has no backward here";
                    return Err(MeasureError::Invalid(why.into()));
                }
            };
            let gpu = Gpu::open(0)?;
            for spec in &self.shapes {
                launch_backward_on(&gpu, spec.clone(), &candidate, self.launches)?;
            }
            return Ok(());
        }
        let candidate = self.candidate()?;
        let gpu = Gpu::open(0)?;
        for spec in &self.shapes {
            launch_on(&gpu, spec.clone(), &candidate, self.launches)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_ncu_is_one_line_naming_it() {
        let err = find_ncu(Path::new("/no/such/dir/ncu"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("ncu not found at \"/no/such/dir/ncu\": install Nsight Compute"),
            "{err}"
        );
        let err = find_ncu(Path::new("ncu-that-is-not-anywhere"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("ncu-that-is-not-anywhere"), "{err}");
        let sh = find_program(Path::new("sh")).expect("sh is on PATH");
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
    }

    #[test]
    fn a_target_round_trips_through_json() {
        let mma = Candidate::registered("mma", "BLOCK_M=64".parse().unwrap()).unwrap();
        let shapes = vec!["2,2,197,64 causal bf16".parse().unwrap()];
        let target = Target::new(&mma, shapes, 3).unwrap();
        let back = Target::from_json(&target.to_json()).unwrap();
        assert_eq!(back, target);
        assert_eq!(back.candidate().unwrap().label(), "mma");
        let src = Candidate::Source {
            path: "no/such/kernel.cu".into(),
            source: String::new(),
            entry: "my_fwd".into(),
            defines: Config::default(),
        };
        let back = Target::from_json(&Target::new(&src, vec![], 0).unwrap().to_json()).unwrap();
        let err = back.candidate().unwrap_err().to_string();
        assert!(err.contains("no/such/kernel.cu"), "{err}");
        assert!(Target::from_json("{").is_err());
        // A backward target says so; a forward's JSON from before reads as a forward's.
        let naive = BackwardCandidate::registered("backward-naive", Config::default()).unwrap();
        let shapes = vec!["1,2,100,64 causal".parse().unwrap()];
        let target = Target::backward(&naive, shapes, 1);
        let json = target.to_json();
        assert!(json.contains(r#""backward":true"#), "{json}");
        assert_eq!(Target::from_json(&json).unwrap(), target);
        assert!(!Target::new(&mma, vec![], 0)
            .unwrap()
            .to_json()
            .contains("backward"));
    }
}
