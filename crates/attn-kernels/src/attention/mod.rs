//! Candidates prepared for a device: registered implementations (kernel or cuBLAS path) and users'
//! own kernel files, launched on device tensors.
//!
//! - `candidate`: what to run (a registered implementation, a user's file, either at a git
//!   revision) and the variant NVRTC compiles for it.
//! - `launch`: how a prepared kernel launches on the ABI of kernels/README.md.
//! - `library`: the library plans (cuBLAS and a kernel of ours) and their scratch buffers.
//! - `checks`: shape and argument checks before a launch.

use std::sync::Mutex;

use attn_oracle::{DType, HostTensor, Params, Shape};

use crate::config::{Config, ConfigError};
use crate::error::{KernelError, Result};
use crate::gpu::Gpu;
use crate::registry::{Abi, Engine, Geometry, Implementation, Variants};

mod candidate;
mod checks;
mod launch;
mod library;

pub use candidate::{Candidate, Variant};
pub use checks::{check_packed, check_shapes};

use candidate::source_geometry;
use launch::{BoxRows, Launcher, Persistent};
use library::Scratch;

/// A candidate compiled for one device, dtype and head dim, ready to launch on any shape with that
/// head dim.
pub struct Prepared {
    label: String,
    variants: Variants,
    config: Config,
    dtype: DType,
    head_dim: usize,
    engine: Launcher,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("label", &self.label)
            .field("config", &self.config)
            .field("dtype", &self.dtype)
            .field("head_dim", &self.head_dim)
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// Validates, compiles (through the caches) and loads `candidate` for `dtype` and `head_dim`.
    pub fn new(
        gpu: &Gpu,
        candidate: &Candidate,
        dtype: DType,
        head_dim: usize,
    ) -> Result<Prepared> {
        if let Candidate::Registered { implementation, .. } = candidate.today() {
            if let Some(required) = implementation.arch {
                if gpu.arch().0 != required {
                    return Err(KernelError::Unsupported {
                        implementation: implementation.name.into(),
                        what: format!(
                            "{} (it needs {required}: a Hopper sm_90 GPU); use `mma` here",
                            gpu.arch().sm()
                        ),
                    });
                }
            }
        }
        if let Candidate::Triton {
            path,
            kernel,
            defines,
            ..
        } = candidate
        {
            return Prepared::triton(gpu, candidate, (path, kernel, defines), dtype, head_dim);
        }
        let limits = gpu.limits();
        let variant = candidate.variant(dtype, head_dim, &gpu.arch(), &limits)?;
        let function = gpu.load(&variant.request, variant.entry, variant.shared_bytes)?;
        let config = variant.config;
        let engine = match candidate.today() {
            Candidate::Registered { implementation, .. } => match implementation.engine {
                Engine::Kernel { .. } => {
                    let tensor_maps = match implementation.abi {
                        Abi::Plain => None,
                        Abi::TensorMaps => {
                            let rows = |name| {
                                config.get(name).map(|v| v as u32).ok_or_else(|| {
                                    KernelError::InvalidConfig {
                                        implementation: implementation.name.into(),
                                        reason: ConfigError::Rule(format!("the TensorMaps ABI needs the knob {name} for its boxes")),
                                    }
                                })
                            };
                            let cluster = config.get("CLUSTER").unwrap_or(1) as u32;
                            Some(BoxRows::new(rows("BLOCK_M")?, rows("BLOCK_N")?, cluster))
                        }
                    };
                    let probe = imp_geometry(implementation, &config, head_dim)?;
                    let persistent = if probe.persistent {
                        Some(Persistent::new(gpu, &function, probe)?)
                    } else {
                        None
                    };
                    let (imp, cfg) = (*implementation, config.clone());
                    Launcher::Kernel {
                        function,
                        geometry: Box::new(move |shape| imp.geometry(&cfg, shape)),
                        tensor_maps,
                        persistent,
                        triton_scratch: false,
                    }
                }
                Engine::Library { plan, .. } => {
                    let (imp, cfg) = (*implementation, config.clone());
                    Launcher::Library {
                        plan,
                        function,
                        geometry: Box::new(move |shape| imp.geometry(&cfg, shape)),
                        scratch: Mutex::new(Scratch::default()),
                    }
                }
            },
            // today() is never a revision; a Triton kernel returned above.
            Candidate::Source { .. } | Candidate::Revision { .. } | Candidate::Triton { .. } => {
                let geometry = source_geometry(&config);
                Launcher::Kernel {
                    function,
                    geometry: Box::new(move |shape: &Shape| Ok(geometry.for_shape(shape))),
                    tensor_maps: geometry.box_rows(),
                    persistent: None,
                    triton_scratch: false,
                }
            }
        };
        Ok(Prepared {
            label: candidate.label(),
            variants: candidate.variants(),
            config,
            dtype,
            head_dim,
            engine,
        })
    }

    /// A Triton kernel ([`Candidate::Triton`]): built by Triton for this GPU's architecture, its
    /// PTX loaded, launched with the `--src` grid of its `BLOCK_M` and Triton's block and shared
    /// memory.
    fn triton(
        gpu: &Gpu,
        candidate: &Candidate,
        (path, kernel, defines): (&std::path::Path, &str, &Config),
        dtype: DType,
        head_dim: usize,
    ) -> Result<Prepared> {
        let arch = gpu.arch();
        let capability = arch.capability().ok_or_else(|| {
            KernelError::Triton(format!(
                "{}: no compute capability in `{}`",
                candidate.label(),
                arch.0
            ))
        })?;
        let build = crate::triton::compile(&crate::triton::TritonRequest {
            path,
            kernel,
            dtype,
            head_dim,
            defines,
            arch: capability,
        })?;
        let geometry = source_geometry(defines).built_by_triton(build.num_warps, build.shared);
        geometry.check(&candidate.label(), &gpu.limits())?;
        let function = gpu.load_ptx(&candidate.label(), &build.ptx, &build.name, build.shared)?;
        Ok(Prepared {
            label: candidate.label(),
            variants: candidate.variants(),
            config: defines.clone(),
            dtype,
            head_dim,
            engine: Launcher::Kernel {
                function,
                geometry: Box::new(move |shape: &Shape| Ok(geometry.for_shape(shape))),
                tensor_maps: None,
                persistent: None,
                triton_scratch: true,
            },
        })
    }

    /// The label of the candidate.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The resolved config (defaults plus overrides), or the user's defines.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The problems beyond dense multi-head attention it handles ([`Candidate::variants`]).
    pub fn variants(&self) -> Variants {
        self.variants
    }

    /// Runs once on host tensors: upload, poison the output, launch, synchronise, download.
    pub fn run(
        &self,
        gpu: &Gpu,
        q: &HostTensor,
        k: &HostTensor,
        v: &HostTensor,
        params: &Params,
    ) -> Result<HostTensor> {
        self.run_batch(gpu, q, k, v, params, None)
    }

    /// [`Prepared::run`] on a dense batch (`varlen` `None`) or a packed varlen batch (Q, K, V and
    /// the output `[1, tokens, heads, D]`), its offsets uploaded for the launch.
    pub fn run_batch(
        &self,
        gpu: &Gpu,
        q: &HostTensor,
        k: &HostTensor,
        v: &HostTensor,
        params: &Params,
        varlen: Option<&attn_oracle::Varlen>,
    ) -> Result<HostTensor> {
        let (q, k, v) = (gpu.upload(q)?, gpu.upload(k)?, gpu.upload(v)?);
        let offsets = varlen.map(|v| gpu.upload_offsets(v)).transpose()?;
        let mut o = gpu.alloc_poisoned(q.dims, q.dtype)?;
        self.launch_batch(gpu, &q, &k, &v, &mut o, params, offsets.as_ref())?;
        gpu.synchronize()?;
        gpu.download(&o)
    }
}

/// `implementation`'s geometry for `config` on a probe shape of `head_dim` (what does not depend on
/// the shape: block, shared memory, persistence).
fn imp_geometry(
    implementation: &Implementation,
    config: &Config,
    head_dim: usize,
) -> Result<Geometry> {
    implementation.geometry(config, &Shape::single(head_dim))
}
