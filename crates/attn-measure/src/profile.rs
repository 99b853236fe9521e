//! What Nsight Compute and compute-sanitizer run: the kernel ncu filters on, and the target-mode
//! program that launches only the candidate ([`Target`], which a tool runs as this same binary in a
//! hidden mode with the target as JSON).

use std::path::PathBuf;

use attn_evidence::ShapeSpec;
use attn_kernels::registry::Engine;
use attn_kernels::{Candidate, Config, Gpu, Prepared};
use serde::{Deserialize, Serialize};

use crate::timing::InputSets;
use crate::{MeasureError, Problem, Result};

/// The kernel name ncu is filtered to for `candidate` (the cuBLAS path launches several).
pub fn profiled_entry(candidate: &Candidate) -> &'static str {
    match candidate {
        Candidate::Registered { implementation, .. } => match implementation.engine {
            Engine::Kernel { .. } => "attn_fwd",
            Engine::Library { .. } => ".*",
        },
        Candidate::Source { .. } => "attn_fwd",
        Candidate::Revision { of, .. } => profiled_entry(of),
    }
}

/// One warm-up launch and `launches` more of `candidate` on `spec`, nothing else.
fn launch_on(gpu: &Gpu, spec: ShapeSpec, candidate: &Candidate, launches: u32) -> Result<()> {
    let problem = Problem::new(spec)?;
    let candidate = candidate.for_shape(&problem.shape);
    let prepared = Prepared::new(gpu, &candidate, problem.dtype, problem.shape.head_dim)?;
    let mut sets = InputSets::new(gpu, &problem, 1, 1)?;
    for _ in 0..=launches {
        sets.launch(gpu, &prepared, &problem, 0)?;
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
        })
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
        })
    }

    /// Launches it: every shape in turn on GPU 0, synchronised after each.
    pub fn launch(&self) -> Result<()> {
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
    }
}
