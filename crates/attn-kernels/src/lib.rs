//! CUDA attention kernels: NVRTC build, a registry of named implementations, launch and timing.
//!
//! This is the only crate of the workspace that touches CUDA (through `cudarc`, loaded at run
//! time: it builds and its CPU tests run on machines with no CUDA at all).
//!
//! - [`registry`]: implementations by name (`naive`, `tiled`, `cublas`, ...), their knobs,
//!   defaults, constraints and launch geometry.
//! - [`compile`]: NVRTC with an on-disk cache; the ptxas resource report.
//! - [`gpu`]: the device, its lazily compiled and cached kernels, device tensors.
//! - [`attention`]: a [`Candidate`] prepared for a device and launched on tensors.
//! - [`backward`]: the backward implementations (`backward-naive`, `backward-mma`), their
//!   buffers and checks, [`backward::PreparedBackward`], which launches their stages (or a user's
//!   `--src` kernel's), and [`backward::GpuBackwardReference`], the gate's f32 backward
//!   (kernels/README.md, "Backward entry point").
//! - [`decode`]: the decode implementations (`decode-naive`, `decode`), a decode batch on the
//!   device, and [`decode::PreparedDecode`], which launches them (kernels/README.md, "Decode
//!   entry point").
//! - [`timing`]: the harness (L2 flush, input rotation, events, raw samples).
//! - [`reference`]: the whole-output check on the GPU (an f32 reference kernel and a per-row
//!   comparison).
//! - [`telemetry`]: SM clock and temperature, to flag a throttled run.
//! - [`triton`]: the Triton front end: a Triton kernel of the forward ABI compiled ahead of time to
//!   PTX (`kernels/triton_aot.py`, no GPU needed).
//! - [`guard`]: the gate's defences around a candidate's buffers (canary guards, input
//!   checksums) and its device clock probe (`kernels/harness.cu`).
//!
//! ```no_run
//! use attn_kernels::{Candidate, Config, Gpu, Prepared};
//! use attn_oracle::{generate, CaseSpec, DType, Distribution, Params, Shape};
//!
//! let gpu = Gpu::open(0)?;
//! let shape = Shape::new(1, 8, 512, 512, 64)?;
//! let inputs = generate(&CaseSpec { shape, dtype: DType::F16, distribution: Distribution::Normal, seed: 7 });
//! let tiled = Prepared::new(&gpu, &Candidate::registered("tiled", Config::default())?, DType::F16, 64)?;
//! let out = tiled.run(&gpu, &inputs.q, &inputs.k, &inputs.v, &Params::new(64, false))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod attention;
pub mod backward;
pub mod compile;
pub mod config;
pub mod decode;
pub mod error;
pub mod gpu;
pub mod guard;
pub mod planted;
pub mod reference;
pub mod registry;
pub mod telemetry;
pub mod tensormap;
pub mod timing;
pub mod toolkit;
pub mod triton;

pub use attention::{Candidate, Prepared};
pub use config::{Config, ConfigError, Knob, KnobName};
pub use error::{KernelError, Result};
pub use gpu::{device_lock, DeviceInfo, DeviceLock, DeviceTensor, Gpu, VarlenOffsets};
pub use guard::{GuardViolation, GuardedTensor, HarnessKernels};
pub use reference::{
    ColumnMap, Counters, ElementBound, GpuReference, ReferenceOutput, RowErrors, RowMask,
};
pub use registry::{registry, DeviceLimits, Implementation, Limits};
pub use timing::{Harness, SampleHooks, TimingMode, TimingOptions, Timings};
