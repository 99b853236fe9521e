//! What to run: a registered implementation, a user's kernel file, or either at a git revision;
//! and the variant NVRTC compiles for it.

use std::path::{Path, PathBuf};

use attn_oracle::{DType, Params, Shape};

use crate::compile::{Arch, CompileRequest};
use crate::config::{Config, ConfigError};
use crate::error::{KernelError, Result};
use crate::registry::{self, DeviceLimits, Engine, Geometry, Implementation, Limits, Variants};

use super::launch::BoxRows;

/// What to run: a registered implementation with config overrides, or a user's kernel file.
#[derive(Debug, Clone)]
pub enum Candidate {
    /// `--impl NAME [--config K=V,...]`.
    Registered {
        /// The implementation.
        implementation: &'static Implementation,
        /// Knobs to override (the rest take their defaults).
        overrides: Config,
    },
    /// `--src FILE [--entry NAME] [--define K=V ...]`: a kernel following the ABI of
    /// `kernels/README.md`. Its geometry comes from the defines `BLOCK_M` (default 64),
    /// `NUM_WARPS` (default 4), `PRODUCER_WARPS` (warps on top of `NUM_WARPS`, default 0) and
    /// `SHARED_BYTES` (dynamic shared memory, default 0); `TENSOR_MAPS=1` asks for the TensorMaps
    /// ABI (boxes of `BLOCK_M` rows for Q and `BLOCK_N` rows for K and V).
    Source {
        /// The `.cu` file.
        path: PathBuf,
        /// Its text.
        source: String,
        /// The entry point (default `attn_fwd`).
        entry: String,
        /// Defines passed to NVRTC.
        defines: Config,
    },
    /// `--triton FILE.py:KERNEL [--define K=V ...]`: a Triton kernel of the same ABI, compiled
    /// ahead of time to PTX by Triton ([`crate::triton`]) and launched as a `Source` kernel is,
    /// with Triton's two scratch pointers appended as null. Its grid comes from `BLOCK_M` (default
    /// 64) as a `Source` kernel's does; its block and shared memory from Triton's build.
    Triton {
        /// The `.py` file.
        path: PathBuf,
        /// Its text (for cache keys and evidence; Triton reads the file itself).
        source: String,
        /// The `@triton.jit` function.
        kernel: String,
        /// Its constexprs and Triton's options (`NUM_WARPS`, `STAGES`), and `VARIANTS`.
        defines: Config,
    },
    /// A candidate's kernel as committed at a git revision (`gate --baseline rev:REF`): that
    /// revision's source, with that revision's headers searched first, compiled with today's
    /// knobs, tuned configs, geometry, ABI and entry point (those of `of`).
    Revision {
        /// The candidate as built today.
        of: Box<Candidate>,
        /// The kernel's source at the revision.
        source: String,
        /// A folder holding the revision's headers (searched before the embedded ones).
        include_dir: PathBuf,
        /// The revision, a commit hash.
        revision: String,
    },
}

impl Candidate {
    /// A registered implementation by name (see [`registry::select`] for `IMPL`).
    pub fn registered(name: &str, overrides: Config) -> Result<Candidate> {
        Ok(Candidate::Registered {
            implementation: registry::find(name)?,
            overrides,
        })
    }

    /// A user's kernel file.
    pub fn from_file(path: &Path, entry: Option<&str>, defines: Config) -> Result<Candidate> {
        let source = std::fs::read_to_string(path).map_err(|source| KernelError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Candidate::Source {
            path: path.to_path_buf(),
            source,
            entry: entry.unwrap_or("attn_fwd").to_string(),
            defines,
        })
    }

    /// A user's Triton kernel: `kernel` of the Python file `path`.
    pub fn from_triton(path: &Path, kernel: &str, defines: Config) -> Result<Candidate> {
        crate::triton::check_defines(&defines)?;
        let source = std::fs::read_to_string(path).map_err(|source| KernelError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Candidate::Triton {
            path: path.to_path_buf(),
            source,
            kernel: kernel.to_string(),
            defines,
        })
    }

    /// The candidate to run on `shape` under `params` (its mask): a registered implementation gets
    /// the knobs tuned for that problem on `device`, under the user's own overrides; a user's kernel is
    /// unchanged.
    pub fn for_problem(&self, shape: &Shape, params: &Params, device: &DeviceLimits) -> Candidate {
        match self {
            Candidate::Registered {
                implementation,
                overrides,
            } => Candidate::Registered {
                implementation,
                overrides: implementation.tuned_under(shape, params, overrides, device),
            },
            Candidate::Revision {
                of,
                source,
                include_dir,
                revision,
            } => Candidate::Revision {
                of: Box::new(of.for_problem(shape, params, device)),
                source: source.clone(),
                include_dir: include_dir.clone(),
                revision: revision.clone(),
            },
            source => source.clone(),
        }
    }

    /// The knobs set by the candidate (overrides or defines), for cache keys and evidence.
    pub fn knobs(&self) -> &Config {
        match self {
            Candidate::Registered { overrides, .. } => overrides,
            Candidate::Source { defines, .. } | Candidate::Triton { defines, .. } => defines,
            Candidate::Revision { of, .. } => of.knobs(),
        }
    }

    /// The candidate whose knobs, geometry and ABI apply: itself, or what a revision is of.
    pub fn today(&self) -> &Candidate {
        match self {
            Candidate::Revision { of, .. } => of.today(),
            other => other,
        }
    }

    /// What NVRTC compiles for this candidate at `dtype` and `head_dim`: the one place where a
    /// config becomes defines (the ABI's, then the resolved knobs or the user's defines), so that
    /// every compile of the same variant (gate, bench, search precompiles, ptxas report, tests)
    /// hits the same cache entry. Validates the config against `limits` first.
    pub fn variant(
        &self,
        dtype: DType,
        head_dim: usize,
        arch: &Arch,
        limits: &Limits,
    ) -> Result<Variant<'_>> {
        let mut defines = CompileRequest::abi_defines(dtype, head_dim)?;
        let (config, name, source, include_dir, entry, arch, shared_bytes) = match self {
            Candidate::Registered {
                implementation,
                overrides,
            } => {
                let config = implementation.resolve(overrides, head_dim, limits)?;
                let probe = Shape::single(head_dim);
                let shared = implementation.geometry(&config, &probe)?.shared_bytes;
                let arch = implementation
                    .arch
                    .map(|a| Arch(a.to_string()))
                    .unwrap_or_else(|| arch.clone());
                let (source, entry) = match implementation.engine {
                    Engine::Kernel { source, .. } => (source, "attn_fwd"),
                    Engine::Library { source, entry, .. } => (source, entry),
                };
                let name = implementation.name.to_string();
                (config, name, source, None, entry, arch, shared)
            }
            Candidate::Source {
                path,
                source,
                entry,
                defines: user,
            } => {
                let geometry = source_geometry(user);
                geometry.check(&self.label(), limits)?;
                let name = path.display().to_string();
                let shared = geometry.shared_bytes as u32;
                // `planted.cu` has the parent "": no include folder (an empty -I would swallow
                // the next option).
                let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
                (
                    user.clone(),
                    name,
                    source.as_str(),
                    dir,
                    entry.as_str(),
                    arch.clone(),
                    shared,
                )
            }
            Candidate::Triton { kernel, .. } => {
                return Err(KernelError::Triton(format!(
                    "{}: Triton compiles `{kernel}`, not NVRTC (its build is made when it is prepared for a GPU; `cargo xtask kernels --ptxas --triton` reports it)",
                    self.label()
                )))
            }
            Candidate::Revision {
                of,
                source,
                include_dir,
                revision,
            } => {
                // Today's defines and geometry; the revision's text and headers.
                let mut variant = of.variant(dtype, head_dim, arch, limits)?;
                variant.request.name = format!("{}@{}", variant.request.name, short(revision));
                variant.request.source = source;
                variant.request.include_dir = Some(include_dir);
                // A knob added after the revision (its text never names it) takes the value that
                // behaves as the revision's kernel, in the defines and the launch alike.
                if let Candidate::Registered { implementation, .. } = of.today() {
                    for &(name, legacy) in implementation.introduced {
                        if variant.config.get(name).is_some() && !source.contains(name.as_str()) {
                            variant.config.0.insert(name.to_string(), legacy);
                            let prefix = format!("{name}=");
                            for define in &mut variant.request.defines {
                                if define.starts_with(&prefix) {
                                    *define = format!("{name}={legacy}");
                                }
                            }
                        }
                    }
                }
                return Ok(variant);
            }
        };
        defines.extend(config.0.iter().map(|(k, v)| format!("{k}={v}")));
        Ok(Variant {
            request: CompileRequest {
                name,
                source,
                include_dir,
                defines,
                arch,
            },
            config,
            entry,
            shared_bytes,
        })
    }

    /// The problems beyond dense multi-head attention the candidate handles: the registry's
    /// declaration, or for a user's kernel everything when it defines `VARIANTS=1` (it reads the
    /// five trailing parameters of kernels/README.md), else nothing.
    pub fn variants(&self) -> Variants {
        match self.today() {
            Candidate::Registered { implementation, .. } => implementation.variants,
            candidate => {
                if candidate.knobs().get("VARIANTS") == Some(1) {
                    Variants::ALL
                } else {
                    Variants::NONE
                }
            }
        }
    }

    /// Refuses, with one line, a problem outside [`Candidate::variants`] (`varlen`: a packed
    /// variable-length batch).
    pub fn check_supports(&self, shape: &Shape, params: &Params) -> Result<()> {
        self.check_supports_batch(shape, params, false)
    }

    /// [`Candidate::check_supports`] for a dense (`varlen` false) or varlen batch.
    pub fn check_supports_batch(&self, shape: &Shape, params: &Params, varlen: bool) -> Result<()> {
        match self.variants().missing(shape, params, varlen) {
            None => Ok(()),
            Some(what) => Err(KernelError::Unsupported {
                implementation: self.label(),
                what: match self.today() {
                    Candidate::Registered { .. } => what.to_string(),
                    _ => format!("{what} (a --src or --triton kernel that reads the variant parameters declares it with --define VARIANTS=1)"),
                },
            }),
        }
    }

    /// A short label: the implementation's name, `src:<file name>` or `triton:<file name>:<kernel>`; `@<commit>` (7
    /// characters) after either for a revision.
    pub fn label(&self) -> String {
        match self {
            Candidate::Registered { implementation, .. } => implementation.name.to_string(),
            Candidate::Revision { of, revision, .. } => {
                format!("{}@{}", of.label(), short(revision))
            }
            Candidate::Source { path, .. } => {
                format!(
                    "src:{}",
                    path.file_name()
                        .map(|n| n.to_string_lossy())
                        .unwrap_or_default()
                )
            }
            Candidate::Triton { path, kernel, .. } => {
                format!(
                    "triton:{}:{kernel}",
                    path.file_name()
                        .map(|n| n.to_string_lossy())
                        .unwrap_or_default()
                )
            }
        }
    }
}

/// The first 7 characters of a commit hash.
fn short(revision: &str) -> String {
    revision.chars().take(7).collect()
}

/// One compilable variant of a candidate ([`Candidate::variant`]).
#[derive(Debug, Clone)]
pub struct Variant<'a> {
    /// The resolved config (defaults plus overrides), or the user's defines.
    pub config: Config,
    /// What NVRTC compiles.
    pub request: CompileRequest<'a>,
    /// The kernel to load.
    pub entry: &'a str,
    /// Dynamic shared memory per block, bytes.
    pub shared_bytes: u32,
}

/// The geometry and ABI of a user's kernel, from its defines `BLOCK_M` (default 64), `NUM_WARPS`
/// (default 4), `PRODUCER_WARPS` (default 0: a warp-specialised kernel's extra warps),
/// `SHARED_BYTES` (default 0), `TENSOR_MAPS` (0 or 1, default 0) with `BLOCK_N`, and `CLUSTER`
/// (default 1: blocks per cluster along x, which the kernel declares with `__cluster_dims__`; the
/// grid's x is rounded up to a multiple, and K/V boxes are `BLOCK_N / CLUSTER` rows).
#[derive(Debug, Clone, Copy)]
pub(super) struct SourceGeometry {
    block_m: i64,
    warps: i64,
    producer_warps: i64,
    shared_bytes: i64,
    tensor_maps: i64,
    block_n: Option<i64>,
    cluster: i64,
}

pub(super) fn source_geometry(defines: &Config) -> SourceGeometry {
    SourceGeometry {
        block_m: defines.get("BLOCK_M").unwrap_or(64),
        warps: defines.get("NUM_WARPS").unwrap_or(4),
        producer_warps: defines.get("PRODUCER_WARPS").unwrap_or(0),
        shared_bytes: defines.get("SHARED_BYTES").unwrap_or(0),
        tensor_maps: defines.get("TENSOR_MAPS").unwrap_or(0),
        block_n: defines.get("BLOCK_N"),
        cluster: defines.get("CLUSTER").unwrap_or(1),
    }
}

impl SourceGeometry {
    fn threads(&self) -> i64 {
        (self.warps + self.producer_warps) * 32
    }

    pub(super) fn check(&self, label: &str, limits: &Limits) -> Result<()> {
        let SourceGeometry {
            block_m,
            warps,
            producer_warps,
            shared_bytes,
            tensor_maps,
            block_n,
            cluster,
        } = *self;
        let invalid = |reason: String| KernelError::InvalidConfig {
            implementation: label.to_string(),
            reason: ConfigError::Rule(reason),
        };
        if block_m < 1
            || warps < 1
            || producer_warps < 0
            || self.threads() > i64::from(limits.max_threads_per_block)
            || shared_bytes < 0
            || shared_bytes > i64::from(limits.max_shared_per_block)
        {
            return Err(invalid(format!("BLOCK_M={block_m}, NUM_WARPS={warps}, PRODUCER_WARPS={producer_warps}, SHARED_BYTES={shared_bytes} do not fit the device")));
        }
        // Clusters of up to 8 blocks (the portable limit) whose K/V boxes split BLOCK_N evenly.
        if !(1..=8).contains(&cluster) || block_n.is_some_and(|n| n % cluster != 0) {
            return Err(invalid(format!(
                "CLUSTER={cluster} must be 1 to 8 blocks and divide BLOCK_N={}",
                block_n.unwrap_or(0)
            )));
        }
        match (tensor_maps, block_n) {
            (0, _) | (1, Some(1..)) => Ok(()),
            (1, _) => Err(invalid(
                "TENSOR_MAPS=1 needs BLOCK_N (the rows of the K and V boxes)".into(),
            )),
            (other, _) => Err(invalid(format!(
                "TENSOR_MAPS={other} must be 0 (plain ABI) or 1 (Q, K, V maps appended)"
            ))),
        }
    }

    /// The geometry of a Triton kernel: the grid of its `BLOCK_M`, Triton's warps and shared
    /// memory, no maps, no clusters.
    pub(super) fn built_by_triton(self, num_warps: u32, shared_bytes: u32) -> SourceGeometry {
        SourceGeometry {
            warps: i64::from(num_warps),
            producer_warps: 0,
            shared_bytes: i64::from(shared_bytes),
            tensor_maps: 0,
            cluster: 1,
            ..self
        }
    }

    /// The boxes of the TensorMaps ABI when the kernel asks for it (`TENSOR_MAPS=1`).
    pub(super) fn box_rows(&self) -> Option<BoxRows> {
        match (self.tensor_maps, self.block_n) {
            (1, Some(kv)) => Some(BoxRows::new(
                self.block_m as u32,
                kv as u32,
                self.cluster as u32,
            )),
            _ => None,
        }
    }

    pub(super) fn for_shape(&self, shape: &Shape) -> Geometry {
        Geometry {
            grid: (
                shape
                    .seq_q
                    .div_ceil(self.block_m as usize)
                    .next_multiple_of(self.cluster as usize) as u32,
                shape.heads as u32,
                shape.batch as u32,
            ),
            block: self.threads() as u32,
            shared_bytes: self.shared_bytes as u32,
            persistent: false,
            heads_together: 1,
            workspace_per_block: 0,
        }
    }
}
