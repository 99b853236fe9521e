//! Candidates prepared for a device: registered implementations (kernel or cuBLAS path) and users'
//! own kernel files, launched on device tensors.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use attn_oracle::{DType, HostTensor, Params, Shape};
use cudarc::cublas::sys as blas;
use cudarc::driver::{
    CudaFunction, CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};

use crate::compile::{Arch, CompileRequest};
use crate::config::{Config, ConfigError};
use crate::error::{DriverContext, KernelError, Result};
use crate::gpu::{DeviceTensor, Gpu};
use crate::registry::{
    self, Abi, DeviceLimits, Engine, Geometry, Implementation, LibraryPlan, Limits, Variants,
};
use crate::tensormap;

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
            Candidate::Source { defines, .. } => defines,
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
                    _ => format!("{what} (a --src kernel that reads the variant parameters declares it with --define VARIANTS=1)"),
                },
            }),
        }
    }

    /// A short label: the implementation's name, or `src:<file name>`; `@<commit>` (7
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
        }
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
struct SourceGeometry {
    block_m: i64,
    warps: i64,
    producer_warps: i64,
    shared_bytes: i64,
    tensor_maps: i64,
    block_n: Option<i64>,
    cluster: i64,
}

fn source_geometry(defines: &Config) -> SourceGeometry {
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

    fn check(&self, label: &str, limits: &Limits) -> Result<()> {
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

    /// The boxes of the TensorMaps ABI when the kernel asks for it (`TENSOR_MAPS=1`).
    fn box_rows(&self) -> Option<BoxRows> {
        match (self.tensor_maps, self.block_n) {
            (1, Some(kv)) => Some(BoxRows::new(
                self.block_m as u32,
                kv as u32,
                self.cluster as u32,
            )),
            _ => None,
        }
    }

    fn for_shape(&self, shape: &Shape) -> Geometry {
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

/// Launch geometry of a prepared kernel as a function of the shape.
type GeometryFn = Box<dyn Fn(&Shape) -> Result<Geometry> + Send + Sync>;

/// How a prepared candidate launches: one kernel, or cuBLAS and a kernel of ours.
enum Launcher {
    Kernel {
        function: CudaFunction,
        geometry: GeometryFn,
        /// `Some` for the `TensorMaps` ABI: the box rows of Q (`BLOCK_M`) and of K/V (`BLOCK_N`).
        tensor_maps: Option<BoxRows>,
        /// `Some` for a persistent kernel ([`Geometry::persistent`]).
        persistent: Option<Persistent>,
    },
    Library {
        plan: LibraryPlan,
        /// Our kernel of the plan.
        function: CudaFunction,
        geometry: GeometryFn,
        scratch: Mutex<Scratch>,
    },
}

/// What a persistent kernel's launches need beyond the ABI: how many blocks run at once, and the
/// kernel's work counter and workspace, a per-kernel scratch buffer.
struct Persistent {
    /// SMs × the blocks of this kernel one SM holds: the grid, unless there are fewer work items.
    blocks: u32,
    /// Two `u32` words, zeroed once here, then the geometry's workspace for every block
    /// ([`Geometry::workspace_per_block`]). The kernel takes tickets from the first and counts its
    /// finished blocks in the second; the last block resets both to zero, so every launch (plain or
    /// replayed from a CUDA graph) starts from zero with no host work; the workspace's words it
    /// must find zero it leaves zero likewise. All launches of a `Prepared` go to the GPU's one
    /// stream, one after another, so no two share the words at once.
    counter: CudaSlice<u32>,
}

impl Persistent {
    fn new(gpu: &Gpu, function: &CudaFunction, geometry: Geometry) -> Result<Persistent> {
        let per_sm = function
            .occupancy_max_active_blocks_per_multiprocessor(
                geometry.block,
                geometry.shared_bytes as usize,
                None,
            )
            .during("cuOccupancyMaxActiveBlocksPerMultiprocessor")?;
        let blocks = gpu.info().sm_count.max(1) * per_sm.max(1);
        let workspace_words =
            (blocks as usize) * (geometry.workspace_per_block as usize).div_ceil(4);
        let counter = gpu
            .stream()
            .alloc_zeros::<u32>(2 + workspace_words)
            .during("cuMemAlloc (work counter and workspace)")?;
        Ok(Persistent { blocks, counter })
    }

    /// The grid for `items` work items: one block per SM slot, no more blocks than items.
    fn grid(&self, items: u64) -> (u32, u32, u32) {
        (items.clamp(1, u64::from(self.blocks)) as u32, 1, 1)
    }
}

/// Rows of the TMA boxes of a `TensorMaps` kernel, from its resolved config.
#[derive(Debug, Clone, Copy)]
struct BoxRows {
    q: u32,
    kv: u32,
}

impl BoxRows {
    /// Q boxes of `block_m` rows; K/V boxes of a block's share of a `block_n`-key tile when
    /// `cluster` blocks share each K/V tile (kernels/README.md): `block_n / cluster` rows.
    fn new(block_m: u32, block_n: u32, cluster: u32) -> BoxRows {
        BoxRows {
            q: block_m,
            kv: block_n / cluster.max(1),
        }
    }
}

/// A library plan's intermediates, grown on demand: S in f32 and P in the input dtype (each only
/// when cuBLAS reads or writes it).
#[derive(Default)]
struct Scratch {
    scores: Option<CudaSlice<f32>>,
    probs: Option<CudaSlice<u16>>,
}

/// `buffer` with room for at least `elements` (reallocated, uninitialised, when smaller).
fn grown<'a, T: cudarc::driver::DeviceRepr>(
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    buffer: &'a mut Option<CudaSlice<T>>,
    elements: usize,
    what: &'static str,
) -> Result<&'a mut CudaSlice<T>> {
    if buffer.as_ref().is_none_or(|b| b.len() < elements) {
        *buffer = None; // free the old one first: these are the largest buffers of a run
                        // SAFETY: every plan writes the part of the buffer it reads (a GEMM or our kernel) before
                        // reading it, in stream order.
        *buffer = Some(unsafe { stream.alloc::<T>(elements) }.during(what)?);
    }
    Ok(buffer.as_mut().expect("allocated above"))
}

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
            // today() is never a revision.
            Candidate::Source { .. } | Candidate::Revision { .. } => {
                let geometry = source_geometry(&config);
                Launcher::Kernel {
                    function,
                    geometry: Box::new(move |shape: &Shape| Ok(geometry.for_shape(shape))),
                    tensor_maps: geometry.box_rows(),
                    persistent: None,
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

    /// The label of the candidate.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The resolved config (defaults plus overrides), or the user's defines.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// How many blocks of this kernel one SM holds at once on `shape`'s geometry (the driver's
    /// occupancy calculator: registers, shared memory, threads); 1 for a library plan.
    pub fn resident_blocks_per_sm(&self, shape: &Shape) -> Result<u32> {
        match &self.engine {
            Launcher::Kernel {
                function, geometry, ..
            } => {
                let g = geometry(shape)?;
                function
                    .occupancy_max_active_blocks_per_multiprocessor(
                        g.block,
                        g.shared_bytes as usize,
                        None,
                    )
                    .during("cuOccupancyMaxActiveBlocksPerMultiprocessor")
            }
            Launcher::Library { .. } => Ok(1),
        }
    }

    /// Launches on `o` (asynchronously, on the GPU's stream). Checks shapes and the launch itself;
    /// faults inside the kernel surface at the next synchronisation.
    pub fn launch(
        &self,
        gpu: &Gpu,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        o: &mut DeviceTensor,
        params: &Params,
    ) -> Result<()> {
        self.launch_batch(gpu, q, k, v, o, params, None)
    }

    /// [`Prepared::launch`] on a dense batch (`offsets` `None`) or on a packed varlen batch:
    /// Q and O `[1, total_q, H, D]`, K and V `[1, total_kv, H_kv, D]` (kernels/README.md).
    #[allow(clippy::too_many_arguments)] // the ABI's tensors, parameters and batch
    pub fn launch_batch(
        &self,
        gpu: &Gpu,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        o: &mut DeviceTensor,
        params: &Params,
        offsets: Option<&crate::gpu::VarlenOffsets>,
    ) -> Result<()> {
        let shape = match offsets {
            None => check_shapes(q, k, v, o, self.dtype, self.head_dim)?,
            Some(offsets) => check_packed(q, k, v, o, self.dtype, self.head_dim, &offsets.varlen)?,
        };
        if let Some(what) = self.variants.missing(&shape, params, offsets.is_some()) {
            return Err(KernelError::Unsupported {
                implementation: self.label.clone(),
                what: what.to_string(),
            });
        }
        let (b, h, sq, skv) = (
            shape.batch as i32,
            shape.heads as i32,
            shape.seq_q as i32,
            shape.seq_kv as i32,
        );
        let scale = params.scale as f32;
        let causal = i32::from(params.causal);
        // The variant parameters (kernels/README.md): K/V heads, the window with causal as its
        // right bound 0, and the varlen offsets (null for a dense batch).
        let kv_heads = shape.kv_heads as i32;
        let (window_left, window_right) = params.abi_window(shape.seq_q, shape.seq_kv);
        let stream = gpu.stream();
        let (cu_q, _gq) = offsets.map(|o| o.cu_q.device_ptr(stream)).unzip();
        let (cu_kv, _gkv) = offsets.map(|o| o.cu_kv.device_ptr(stream)).unzip();
        let (cu_q, cu_kv): (u64, u64) = (cu_q.unwrap_or(0), cu_kv.unwrap_or(0));
        match &self.engine {
            Launcher::Kernel {
                function,
                geometry,
                tensor_maps,
                persistent,
            } => {
                let g = geometry(&shape)?;
                let group = shape.group();
                if group % g.heads_together as usize != 0 {
                    return Err(KernelError::Shape(format!(
                        "{} takes {} query heads of one K/V head together: {} query heads per K/V head ({} / {}) are not a multiple",
                        self.label, g.heads_together, group, shape.heads, shape.kv_heads
                    )));
                }
                // Encoded per launch (a host call of a few µs): the driver copies the parameters,
                // so a captured graph keeps the maps of its capture.
                let maps = match tensor_maps {
                    Some(rows) => {
                        let stream = gpu.stream();
                        let (qp, _gq) = q.buf.device_ptr(stream);
                        let (kp, _gk) = k.buf.device_ptr(stream);
                        let (vp, _gv) = v.buf.device_ptr(stream);
                        let (op, _go) = o.buf.device_ptr(stream);
                        // Packed varlen tensors get maps over [total, H, D] (kernels/hopper.cu).
                        let encode = if offsets.is_some() {
                            tensormap::encode_packed
                        } else {
                            tensormap::encode
                        };
                        Some([
                            encode("Q", qp, self.dtype, q.dims, rows.q)?,
                            encode("K", kp, self.dtype, k.dims, rows.kv)?,
                            encode("V", vp, self.dtype, v.dims, rows.kv)?,
                            // O has Q's shape: its map has Q's boxes.
                            encode("O", op, self.dtype, o.dims, rows.q)?,
                        ])
                    }
                    None => None,
                };
                // A persistent kernel: as many blocks as run at once, looping over the grid's items.
                let grid = match persistent {
                    Some(p) => {
                        p.grid(u64::from(g.grid.0) * u64::from(g.grid.1) * u64::from(g.grid.2))
                    }
                    None => g.grid,
                };
                let cfg = LaunchConfig {
                    grid_dim: grid,
                    block_dim: (g.block, 1, 1),
                    shared_mem_bytes: g.shared_bytes,
                };
                let mut launch = gpu.stream().launch_builder(function);
                launch.arg(&q.buf).arg(&k.buf).arg(&v.buf).arg(&mut o.buf);
                launch
                    .arg(&b)
                    .arg(&h)
                    .arg(&sq)
                    .arg(&skv)
                    .arg(&scale)
                    .arg(&causal);
                if let Some(maps) = &maps {
                    launch.arg(&maps[0]).arg(&maps[1]).arg(&maps[2]);
                }
                launch
                    .arg(&kv_heads)
                    .arg(&window_left)
                    .arg(&window_right)
                    .arg(&cu_q)
                    .arg(&cu_kv);
                if let Some(p) = persistent {
                    launch.arg(&p.counter);
                }
                // The O map last: only a kernel that stores through it declares it.
                if let Some(maps) = &maps {
                    launch.arg(&maps[3]);
                }
                // SAFETY: the arguments match the ABI of kernels/README.md (checked shapes, 16-bit
                // elements of the compiled dtype; for the TensorMaps ABI, maps of these very
                // buffers with the boxes of the compiled config, O's last, with Q's boxes over O's
                // buffer alone; the variant parameters after the plain ones and Q's, K's and V's
                // maps, which a kernel declaring fewer parameters never reads, null offsets for a dense
                // batch, else live int32 arrays of sequences + 1 offsets that match the packed
                // tensors, checked above); the grid covers every output row, or for a persistent
                // kernel its blocks loop over every row block, and its one extra parameter is its
                // own live pair of u32 counter words, zeroed at allocation and left zero by every
                // launch, followed by the workspace its geometry asked for for as many blocks as
                // the grid has at most, used by no other launch at once (this stream runs launches
                // one after another).
                unsafe { launch.launch(cfg) }.during("cuLaunchKernel")?;
            }
            Launcher::Library {
                plan,
                function,
                geometry,
                scratch,
            } => {
                let launch = LibraryLaunch {
                    gpu,
                    shape,
                    dtype: self.dtype,
                    function,
                    geometry: geometry(&shape)?,
                    scale,
                    causal,
                };
                let mut scratch = scratch.lock().unwrap_or_else(|e| e.into_inner());
                launch.run(*plan, &mut scratch, q, k, v, o)?;
            }
        }
        Ok(())
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

/// One launch of a library plan: cuBLAS for the GEMMs the plan names, our kernel for the rest,
/// all on the GPU's stream.
struct LibraryLaunch<'a> {
    gpu: &'a Gpu,
    shape: Shape,
    dtype: DType,
    function: &'a CudaFunction,
    geometry: Geometry,
    scale: f32,
    causal: i32,
}

/// A strided-batched GEMM in cuBLAS's column-major terms (the row-major buffers read transposed):
/// `C (m×n) = op(A) · B`, one per (b, h).
struct Gemm {
    call: &'static str,
    transpose_a: bool,
    m: usize,
    n: usize,
    k: usize,
    a: (u64, usize, usize),
    b: (u64, usize, usize),
    c: (u64, usize, usize),
    c_f32: bool,
}

impl LibraryLaunch<'_> {
    fn run(
        &self,
        plan: LibraryPlan,
        scratch: &mut Scratch,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        o: &mut DeviceTensor,
    ) -> Result<()> {
        let stream = self.gpu.stream();
        let Shape {
            seq_q: sq,
            seq_kv: skv,
            head_dim: d,
            ..
        } = self.shape;
        let elements = self.shape.batch * self.shape.heads * sq * skv;
        let (qp, _gq) = q.buf.device_ptr(stream);
        let (kp, _gk) = k.buf.device_ptr(stream);
        let (vp, _gv) = v.buf.device_ptr(stream);
        let (op, _go) = o.buf.device_ptr_mut(stream);
        let scores = if plan.cublas_scores() {
            let buffer = grown(stream, &mut scratch.scores, elements, "cuMemAlloc (scores)")?;
            let (sp, _gs) = buffer.device_ptr_mut(stream);
            // S[b,h] (row-major S_q×S_kv) = Q·Kᵀ, i.e. column-major S (S_kv×S_q) = op_T(K) · Q.
            self.gemm(Gemm {
                call: "GemmStridedBatchedEx (Q·Kᵀ)",
                transpose_a: true,
                m: skv,
                n: sq,
                k: d,
                a: (kp, d, skv * d),
                b: (qp, d, sq * d),
                c: (sp, skv, sq * skv),
                c_f32: true,
            })?;
            Some(sp)
        } else {
            None
        };
        let probs = if plan.cublas_output() {
            let buffer = grown(
                stream,
                &mut scratch.probs,
                elements,
                "cuMemAlloc (probabilities)",
            )?;
            Some(buffer.device_ptr_mut(stream).0)
        } else {
            None
        };
        let (sq_i, skv_i) = (sq as i32, skv as i32);
        let cfg = LaunchConfig {
            grid_dim: self.geometry.grid,
            block_dim: (self.geometry.block, 1, 1),
            shared_mem_bytes: self.geometry.shared_bytes,
        };
        let mut launch = stream.launch_builder(self.function);
        // Each plan's kernel takes (input, [second input,] output, seq_q, seq_kv, scale, causal):
        // softmax_rows(S, P), softmax_pv(S, V, O), qk_softmax(Q, K, P). It reads the scores when
        // cuBLAS made them, else Q; it writes the probabilities when cuBLAS reads them, else O.
        let first = scores.unwrap_or(qp);
        let out = probs.unwrap_or(op);
        let second = match plan {
            LibraryPlan::Math => None,
            LibraryPlan::HybridQk => Some(vp),
            LibraryPlan::HybridPv => Some(kp),
        };
        launch.arg(&first);
        if let Some(second) = &second {
            launch.arg(second);
        }
        launch
            .arg(&out)
            .arg(&sq_i)
            .arg(&skv_i)
            .arg(&self.scale)
            .arg(&self.causal);
        // SAFETY: the pointers are live buffers of [B·H, S_q, S_kv] (scores, probabilities) or
        // [B·H, S, D] (q, k, v, o) entries of the types the plan's kernel declares (listed above);
        // its grid covers every row of every (b, h).
        unsafe { launch.launch(cfg) }.during("cuLaunchKernel (library plan)")?;
        if let Some(pp) = probs {
            // O (row-major S_q×D; column-major D×S_q) = V (D×S_kv) · P (S_kv×S_q).
            self.gemm(Gemm {
                call: "GemmStridedBatchedEx (P·V)",
                transpose_a: false,
                m: d,
                n: sq,
                k: skv,
                a: (vp, d, skv * d),
                b: (pp, skv, sq * skv),
                c: (op, d, sq * d),
                c_f32: false,
            })?;
        }
        Ok(())
    }

    /// Runs `g` on the GPU's cuBLAS handle (f32 compute, inputs in the problem's dtype).
    fn gemm(&self, g: Gemm) -> Result<()> {
        let handle = *self.gpu.blas()?.handle();
        let elem = match self.dtype {
            DType::Bf16 => blas::cudaDataType::CUDA_R_16BF,
            _ => blas::cudaDataType::CUDA_R_16F,
        };
        let op = |t| {
            if t {
                blas::cublasOperation_t::CUBLAS_OP_T
            } else {
                blas::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let c_type = if g.c_f32 {
            blas::cudaDataType::CUDA_R_32F
        } else {
            elem
        };
        let (one, zero) = (1.0f32, 0.0f32);
        let batch = (self.shape.batch * self.shape.heads) as i32;
        // SAFETY: the pointers come from live buffers of the sizes the leading dimensions, strides
        // and batch count describe (Self::run), all on the handle's stream.
        unsafe {
            cudarc::cublas::result::gemm_strided_batched_ex(
                handle,
                op(g.transpose_a),
                op(false),
                g.m as i32,
                g.n as i32,
                g.k as i32,
                (&one as *const f32).cast(),
                g.a.0 as *const _,
                elem,
                g.a.1 as i32,
                g.a.2 as i64,
                g.b.0 as *const _,
                elem,
                g.b.1 as i32,
                g.b.2 as i64,
                (&zero as *const f32).cast(),
                g.c.0 as *mut _,
                c_type,
                g.c.1 as i32,
                g.c.2 as i64,
                batch,
                blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| KernelError::Cublas {
            call: g.call,
            message: format!("{e:?}"),
        })
    }
}

/// Checks that the tensors' head dim `d` and dtypes are what the kernel was compiled for.
fn check_compiled_for(
    tensors: [&DeviceTensor; 4],
    d: usize,
    dtype: DType,
    head_dim: usize,
) -> Result<()> {
    if d != head_dim {
        return Err(KernelError::Shape(format!(
            "head dim {d}, but the kernel was compiled for {head_dim}"
        )));
    }
    match tensors.iter().find(|t| t.dtype != dtype) {
        Some(t) => Err(KernelError::Shape(format!(
            "a tensor is {} but the kernel was compiled for {dtype}",
            t.dtype
        ))),
        None => Ok(()),
    }
}

/// Checks that packed q, k, v and o (`[1, total, heads, D]`) hold `varlen`'s rows and match the
/// compiled dtype and head dim; returns the batch's bounding shape (the grid's).
pub fn check_packed(
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    o: &DeviceTensor,
    dtype: DType,
    head_dim: usize,
    varlen: &attn_oracle::Varlen,
) -> Result<Shape> {
    let [_, total_q, heads, d] = q.dims;
    let [_, total_kv, kv_heads, _] = k.dims;
    let expected_q = [1, varlen.total_q(), heads, d];
    let expected_kv = [1, varlen.total_kv(), kv_heads, d];
    if q.dims != expected_q
        || o.dims != expected_q
        || k.dims != expected_kv
        || v.dims != expected_kv
    {
        return Err(KernelError::Shape(format!(
            "a varlen batch of {} queries and {} keys needs Q and O {expected_q:?} and K, V {expected_kv:?}; got Q {:?}, K {:?}, V {:?}, O {:?} (totals {total_q}, {total_kv})",
            varlen.total_q(),
            varlen.total_kv(),
            q.dims,
            k.dims,
            v.dims,
            o.dims
        )));
    }
    let per_head = Shape::new(1, heads, 1, 1, d)
        .and_then(|s| s.with_kv_heads(kv_heads))
        .map_err(|e| KernelError::Shape(e.to_string()))?;
    check_compiled_for([q, k, v, o], d, dtype, head_dim)?;
    varlen
        .bounding_shape(&per_head)
        .map_err(|e| KernelError::Shape(e.to_string()))
}

/// Checks that q, k, v and o fit together (K/V heads dividing Q's) and match the compiled dtype
/// and head dim.
pub fn check_shapes(
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    o: &DeviceTensor,
    dtype: DType,
    head_dim: usize,
) -> Result<Shape> {
    let [b, h, sq, d] = q.dims;
    let [kb, kh, skv, kd] = k.dims;
    if k.dims != v.dims {
        return Err(KernelError::Shape(format!(
            "K is {:?} but V is {:?}",
            k.dims, v.dims
        )));
    }
    if (kb, kd) != (b, d) || kh == 0 || h % kh != 0 {
        return Err(KernelError::Shape(format!(
            "Q is {:?} but K/V are {:?}: B and D must agree and K/V's heads divide Q's",
            q.dims, k.dims
        )));
    }
    if o.dims != q.dims {
        return Err(KernelError::Shape(format!(
            "O is {:?} but Q is {:?}",
            o.dims, q.dims
        )));
    }
    check_compiled_for([q, k, v, o], d, dtype, head_dim)?;
    if [b, h, sq, skv, d].contains(&0) {
        return Err(KernelError::Shape(format!(
            "empty tensor: Q {:?}, K {:?}",
            q.dims, k.dims
        )));
    }
    Ok(Shape {
        batch: b,
        heads: h,
        kv_heads: kh,
        seq_q: sq,
        seq_kv: skv,
        head_dim: d,
    })
}
