//! The registry of implementations: name, source, knobs, defaults, constraints, launch geometry.
//!
//! The vocabulary and the validation live here; [`table`] lists the implementations, and each
//! implementation with knobs of its own has its module: [`hopper`], [`mma`], [`hybrid`].

mod device;
mod hopper;
mod hybrid;
mod mma;
mod table;

use attn_oracle::{Params, Shape};

use crate::config::{Config, ConfigError, Knob, KnobName};
use crate::error::{KernelError, Result};

pub use device::{DeviceLimits, Gpus, Limits};
pub use hopper::{hopper_dynamic_shared, hopper_static_shared};
pub use table::registry;

/// How an implementation computes attention.
#[derive(Debug, Clone, Copy)]
pub enum Engine {
    /// One CUDA kernel following the ABI of `kernels/README.md`.
    Kernel {
        /// File name under `kernels/`.
        file: &'static str,
        /// Its source, embedded at build time.
        source: &'static str,
    },
    /// cuBLAS for one or both GEMMs and one kernel of ours for the rest, as `plan` says; the
    /// kernel's ABI is its own (stated in its file), not the one of `kernels/README.md`.
    Library {
        /// Which GEMMs cuBLAS does.
        plan: LibraryPlan,
        /// File name under `kernels/`.
        file: &'static str,
        /// Its source, embedded at build time.
        source: &'static str,
        /// The kernel's entry point.
        entry: &'static str,
    },
}

impl Engine {
    /// The kernel file under `kernels/` and its source.
    pub fn kernel_file(&self) -> (&'static str, &'static str) {
        match *self {
            Engine::Kernel { file, source } | Engine::Library { file, source, .. } => {
                (file, source)
            }
        }
    }
}

/// How a library-backed implementation splits attention between cuBLAS and our kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LibraryPlan {
    /// cuBLAS S = Q·Kᵀ (f32), our scale + mask + softmax kernel writing P, cuBLAS O = P·V.
    Math,
    /// cuBLAS S = Q·Kᵀ (f32), our fused softmax·V kernel writing O.
    HybridQk,
    /// Our fused Q·Kᵀ + softmax kernel writing P, cuBLAS O = P·V.
    HybridPv,
}

impl LibraryPlan {
    /// cuBLAS computes S = Q·Kᵀ into an f32 scratch buffer.
    pub fn cublas_scores(self) -> bool {
        matches!(self, LibraryPlan::Math | LibraryPlan::HybridQk)
    }

    /// cuBLAS computes O = P·V from a probabilities scratch buffer.
    pub fn cublas_output(self) -> bool {
        matches!(self, LibraryPlan::Math | LibraryPlan::HybridPv)
    }
}

/// The kernel ABI of an implementation (`kernels/README.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abi {
    /// The ten plain parameters (pointers, sizes, scale, causal).
    Plain,
    /// The plain parameters, then `__grid_constant__` TMA tensor maps of Q, K and V: 3-D maps over
    /// `[B·H, S, D]`, 128-byte swizzle, boxes of 64 columns × `BLOCK_M` (Q) or `BLOCK_N` (K, V)
    /// rows × 1; and O's map (Q's boxes) last of all parameters, for a kernel that stores with TMA.
    TensorMaps,
}

/// The problems beyond dense multi-head attention an implementation handles, through the five
/// trailing parameters of kernels/README.md ("Variants"). The host refuses the others before
/// compiling, with one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variants {
    /// Fewer K/V heads than query heads (grouped-query, multi-query).
    pub grouped_heads: bool,
    /// Sliding windows.
    pub window: bool,
    /// Packed variable-length batches.
    pub varlen: bool,
}

impl Variants {
    /// Dense multi-head attention only.
    pub const NONE: Variants = Variants {
        grouped_heads: false,
        window: false,
        varlen: false,
    };
    /// Grouped heads and windows on dense batches.
    pub const DENSE: Variants = Variants {
        grouped_heads: true,
        window: true,
        varlen: false,
    };
    /// Everything the ABI describes.
    pub const ALL: Variants = Variants {
        grouped_heads: true,
        window: true,
        varlen: true,
    };

    /// What of `shape`, `params` and a varlen batch (`varlen`) is outside these variants, as a
    /// phrase; `None` when supported.
    pub fn missing(&self, shape: &Shape, params: &Params, varlen: bool) -> Option<&'static str> {
        if varlen && !self.varlen {
            Some("packed variable-length (varlen) batches")
        } else if shape.kv_heads != shape.heads && !self.grouped_heads {
            Some("grouped-query / multi-query heads")
        } else if params.window.is_bounded() && !self.window {
            Some("sliding windows")
        } else {
            None
        }
    }

    /// `gqa, window, varlen` or `none`: for `cargo xtask kernels`.
    pub fn describe(&self) -> String {
        let names: Vec<&str> = [
            (self.grouped_heads, "gqa"),
            (self.window, "window"),
            (self.varlen, "varlen"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Grid dimensions (x, y, z): one block per work item (for a persistent kernel, the items its
    /// blocks loop over).
    pub grid: (u32, u32, u32),
    /// Threads per block.
    pub block: u32,
    /// Dynamic shared memory per block, bytes.
    pub shared_bytes: u32,
    /// A persistent kernel: launched as `(min(items, SMs × resident blocks per SM), 1, 1)` blocks
    /// that loop over the `grid.0 · grid.1 · grid.2` items, with one more parameter after the ABI's:
    /// a pointer to two zeroed `u32` words the kernel owns (its work counter; it leaves them zero).
    pub persistent: bool,
    /// Query heads one work item (a cluster's blocks) takes together, sharing their K/V head: the
    /// prepared kernel declines a problem whose query heads per K/V head are not a multiple, as
    /// unsupported before launching (`Prepared::declines`; 1: any).
    pub heads_together: u32,
    /// Bytes of workspace per block a persistent kernel takes after its two counter words (in the
    /// same zeroed allocation; 0: none).
    pub workspace_per_block: u32,
}

/// A registered implementation.
#[derive(Debug)]
pub struct Implementation {
    /// Its name, as given to `--impl` or `IMPL`.
    pub name: &'static str,
    /// One line on what it is.
    pub summary: &'static str,
    /// How it runs.
    pub engine: Engine,
    /// The parameters its kernel takes.
    pub abi: Abi,
    /// Its knobs and their domains.
    pub knobs: &'static [Knob],
    /// Supported head dims; `None` for any.
    pub head_dims: Option<&'static [usize]>,
    /// The only architecture it compiles for, e.g. `compute_90a` for Hopper's wgmma; `None` for
    /// any (sm_80 and newer).
    pub arch: Option<&'static str>,
    /// The GPUs it runs on.
    pub gpus: Gpus,
    /// The problems beyond dense multi-head attention it handles.
    pub variants: Variants,
    /// Knobs added after the kernel's first version, each with the value that behaves as a kernel
    /// which predates it: a git revision's text that never names the knob is compiled and launched
    /// with that value (`gate --baseline rev:REF`).
    pub introduced: &'static [(KnobName, i64)],
    /// Knobs whose default gives way to the other knobs: when the defaults under the overrides
    /// break a constraint and the overrides do not name such a knob, it takes this value instead
    /// (hopper's Q_REGS: 1 at D=128 where the tile, overlap and schedule leave it registers, 0
    /// where a tuning or the user picks one that does not; its Q_STAGES: 2 where tuned, 1 where
    /// the user's knobs rule out the persistent loop's two Q tiles). The resolved config says which.
    pub yielding: &'static [(KnobName, i64)],
    defaults: fn(head_dim: usize) -> Config,
    /// Knobs tuned for a problem, its shape and mask (e.g. smaller tiles when the grid would not
    /// fill the GPU, another work order under a causal mask); they override the defaults, and the
    /// user's overrides override them.
    tuned: fn(&Shape, &Params, &DeviceLimits) -> Config,
    constraints: fn(&Config, head_dim: usize) -> std::result::Result<(), ConfigError>,
    geometry: fn(&Config, &Shape) -> Geometry,
}

fn elem_bytes() -> u32 {
    2 // fp16 and bf16 alike
}

fn knob(cfg: &Config, name: KnobName) -> u32 {
    // resolve() guarantees every knob is present and within its (small, positive) domain.
    cfg.get(name).map_or(0, |v| v as u32)
}

fn row_tiles(seq_q: usize, block_m: u32) -> u32 {
    seq_q.div_ceil(block_m.max(1) as usize) as u32
}

/// Blocks of `rows_per_block` query rows that a shape launches.
fn grid_blocks(shape: &Shape, rows_per_block: usize) -> usize {
    shape.batch * shape.heads * shape.seq_q.div_ceil(rows_per_block)
}

/// The implementation called `name`.
pub fn find(name: &str) -> Result<&'static Implementation> {
    find_named(registry(), name, |i| i.name)
}

/// The entry of `table` called `name`, else the error listing the table's names: one lookup for
/// the prefill and the decode registries.
pub(crate) fn find_named<T>(
    table: &'static [T],
    name: &str,
    name_of: fn(&T) -> &'static str,
) -> Result<&'static T> {
    table
        .iter()
        .find(|i| name_of(i) == name)
        .ok_or_else(|| KernelError::UnknownImpl {
            name: name.to_string(),
            known: table.iter().map(name_of).collect::<Vec<_>>().join(", "),
        })
}

/// Refuses, in one line naming `implementation`, a head dim outside `head_dims` (`None`: any
/// multiple of 32 up to 256, what a warp-per-row kernel takes): the decode and backward rule.
pub(crate) fn check_row_head_dim(
    implementation: &str,
    head_dims: Option<&[usize]>,
    head_dim: usize,
) -> Result<()> {
    let ok = match head_dims {
        Some(dims) => dims.contains(&head_dim),
        None => head_dim % 32 == 0 && (32..=256).contains(&head_dim),
    };
    if ok {
        return Ok(());
    }
    let supported = match head_dims {
        Some(dims) => format!("{dims:?}"),
        None => "multiples of 32 up to 256".into(),
    };
    Err(KernelError::Unsupported {
        implementation: implementation.into(),
        what: format!("head dim {head_dim} (supported: {supported})"),
    })
}

/// An implementation chosen to run, and why, in one line (what the commands print first).
#[derive(Debug, Clone)]
pub struct Selection {
    /// The implementation.
    pub implementation: &'static Implementation,
    /// Why it, e.g. `best registered implementation for sm_90 (NVIDIA H200): hopper (sm_90a TMA +
    /// wgmma; mma elsewhere)`.
    pub reason: String,
}

/// The implementation the user names: `--impl` (`cli`) if given, else the `IMPL` environment
/// variable; `None` where neither names one (the device decides: [`best_for`]). An unknown name
/// is an error, found before any GPU is probed.
pub fn named(cli: Option<&str>) -> Result<Option<Selection>> {
    let (name, by) = match cli {
        Some(name) => (name.to_string(), "--impl"),
        None => match std::env::var("IMPL").ok().filter(|s| !s.is_empty()) {
            Some(name) => (name, "IMPL"),
            None => return Ok(None),
        },
    };
    let implementation = find(&name)?;
    Ok(Some(Selection {
        implementation,
        reason: format!("implementation {name}: named by {by}"),
    }))
}

/// The best registered implementation for a device of compute capability `capability` called
/// `device_name`: the first of the preference order ([`table::PREFERENCE`]) that runs on it.
pub fn best_for(capability: (i32, i32), device_name: &str) -> Result<Selection> {
    let sm = format!("sm_{}{}", capability.0, capability.1);
    let preferred = || {
        table::PREFERENCE.iter().map(|&(name, why)| {
            let implementation = find(name).expect("the preference order names registered ones");
            (implementation, why)
        })
    };
    let needs = |imp: &Implementation| format!("{} needs {}", imp.name, imp.gpus.describe());
    let Some(chosen) = preferred().position(|(imp, _)| imp.gpus.include(capability)) else {
        return Err(KernelError::NoImplementationFor {
            device: format!("{sm} ({device_name})"),
            why: preferred()
                .map(|(imp, _)| needs(imp))
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    let (implementation, why) = preferred().nth(chosen).expect("found above");
    let mut notes = vec![why.to_string()];
    notes.extend(preferred().take(chosen).map(|(imp, _)| needs(imp)));
    if let Some((next, _)) = preferred().nth(chosen + 1) {
        notes.push(format!("{} elsewhere", next.name));
    }
    Ok(Selection {
        implementation,
        reason: format!(
            "best registered implementation for {sm} ({device_name}): {} ({})",
            implementation.name,
            notes.join("; ")
        ),
    })
}

/// The implementation to run on a device of `capability` called `device_name`: the one the user
/// names ([`named`]), else the best for the device ([`best_for`]).
pub fn select(cli: Option<&str>, capability: (i32, i32), device_name: &str) -> Result<Selection> {
    match named(cli)? {
        Some(selection) => Ok(selection),
        None => best_for(capability, device_name),
    }
}

impl Implementation {
    /// The default config for a head dim.
    pub fn default_config(&self, head_dim: usize) -> Config {
        (self.defaults)(head_dim)
    }

    /// The knobs tuned for `shape` under `params`' mask on `device` (empty when the defaults are
    /// best).
    pub fn tuned_for(&self, shape: &Shape, params: &Params, device: &DeviceLimits) -> Config {
        (self.tuned)(shape, params, device)
    }

    /// The knobs for `shape` under `params`' mask with the user's `overrides` on top of its
    /// tuning. Where the overrides rule out part of the tuning (SCHEDULE=0 where the tuning takes
    /// the persistent loop's two Q tiles) the tuned values of the [`Implementation::yielding`]
    /// knobs give way, so that [`Implementation::resolve`] yields them as it yields defaults; where
    /// the rest of the tuning still rules them out (Q_REGS=1 beside a tuned 160-key tile), the
    /// whole tuning does.
    pub fn tuned_under(
        &self,
        shape: &Shape,
        params: &Params,
        overrides: &Config,
        device: &DeviceLimits,
    ) -> Config {
        let tuned = self.tuned_for(shape, params, device);
        let valid = |cfg: &Config| self.constrained(cfg, shape.head_dim).is_ok();
        let merged = tuned.merged(overrides);
        if valid(&merged) {
            return merged;
        }
        let yields = |name: &String| self.yielding.iter().any(|(knob, _)| knob == name);
        let kept = Config(
            tuned
                .0
                .into_iter()
                .filter(|(name, _)| !yields(name))
                .collect(),
        )
        .merged(overrides);
        if valid(&kept) {
            return kept;
        }
        // The tuning's tile itself rules the user's knobs out (Q_REGS=1 beside a 160-key tile):
        // the user's knobs over the defaults, whose error, if any, is the user's own.
        overrides.clone()
    }

    /// Checks that this implementation handles `head_dim`.
    pub fn check_head_dim(&self, head_dim: usize) -> Result<()> {
        match self.head_dims {
            Some(dims) if !dims.contains(&head_dim) => Err(KernelError::Unsupported {
                implementation: self.name.into(),
                what: format!("head dim {head_dim} (supported: {dims:?})"),
            }),
            _ if head_dim == 0 => Err(KernelError::Shape("head dim must be at least 1".into())),
            _ => Ok(()),
        }
    }

    /// The defaults with `overrides` applied and checked against the constraints, the
    /// [`Implementation::yielding`] knobs the overrides leave unset giving way where they break one.
    fn constrained(
        &self,
        overrides: &Config,
        head_dim: usize,
    ) -> std::result::Result<Config, ConfigError> {
        let mut cfg = self.default_config(head_dim).merged(overrides);
        if (self.constraints)(&cfg, head_dim).is_err() {
            let yielded: Vec<(KnobName, i64)> = self
                .yielding
                .iter()
                .filter(|(name, _)| overrides.get(name).is_none())
                .copied()
                .collect();
            // With nothing to yield the reason stands as it is; else the reason that remains.
            cfg = cfg.merged(&Config::from_pairs(&yielded));
        }
        (self.constraints)(&cfg, head_dim).map(|()| cfg)
    }

    /// The defaults with `overrides` applied, validated against the knobs' domains, the
    /// implementation's constraints and the device limits; the reason in the error otherwise.
    pub fn resolve(&self, overrides: &Config, head_dim: usize, limits: &Limits) -> Result<Config> {
        self.check_head_dim(head_dim)?;
        let invalid = |reason: ConfigError| KernelError::InvalidConfig {
            implementation: self.name.into(),
            reason,
        };
        overrides.check_domains(self.knobs).map_err(invalid)?;
        let cfg = self.constrained(overrides, head_dim).map_err(invalid)?;
        let probe = Shape::single(head_dim);
        let geometry = (self.geometry)(&cfg, &probe);
        if geometry.block > limits.max_threads_per_block {
            return Err(invalid(ConfigError::TooManyThreads {
                threads: geometry.block,
                limit: limits.max_threads_per_block,
            }));
        }
        if geometry.shared_bytes > limits.max_shared_per_block {
            return Err(invalid(ConfigError::TooMuchSharedMemory {
                bytes: geometry.shared_bytes,
                limit: limits.max_shared_per_block,
            }));
        }
        Ok(cfg)
    }

    /// The launch geometry for a resolved config and a shape.
    pub fn geometry(&self, cfg: &Config, shape: &Shape) -> Result<Geometry> {
        let g = (self.geometry)(cfg, shape);
        if g.grid.1 > 65_535 || g.grid.2 > 65_535 {
            return Err(KernelError::Shape(format!(
                "grid {:?} exceeds CUDA's 65535 limit on y/z (heads, batch) for {shape:?}",
                g.grid
            )));
        }
        Ok(g)
    }
}
#[cfg(test)]
mod tests;
