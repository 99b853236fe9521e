//! The backward (training) pass on the GPU: the backward implementations ([`registry`]), a
//! backward's buffers and their checks ([`batch`]), [`PreparedBackward`], which compiles one (or a
//! user's `--src` kernel) for a device and launches its stages, and the gate's own f32 kernels
//! ([`GpuBackwardReference`]).
//!
//! The ABI is kernels/README.md's "Backward entry point": `attn_bwd`, with optional `attn_bwd_pre`
//! and `attn_bwd_post` of the same parameters, launched in that order on one stream, sharing a
//! workspace the caller gives (so that the gate can guard it and fill it with NaNs).
//!
//! ```no_run
//! use attn_kernels::backward::{BackwardInputs, GpuBackwardReference, PreparedBackward};
//! use attn_kernels::{Config, Gpu};
//! use attn_oracle::{generate, CaseSpec, DType, Distribution, Params, Shape};
//!
//! let gpu = Gpu::open(0)?;
//! let shape = Shape::new(1, 8, 512, 512, 64)?;
//! let params = Params::new(64, true);
//! let spec = CaseSpec { shape, dtype: DType::F16, distribution: Distribution::Normal, seed: 7 };
//! let (inputs, d_o) = (generate(&spec), generate(&CaseSpec { seed: 8, ..spec }).q);
//! // O and the LSE from the gate's reference forward.
//! let reference = GpuBackwardReference::new(&gpu, DType::F16, 64)?;
//! let (q, k, v) = (gpu.upload(&inputs.q)?, gpu.upload(&inputs.k)?, gpu.upload(&inputs.v)?);
//! let (o, lse) = reference.forward_lse(&gpu, &q, &k, &v, &params, None)?;
//! let inputs = BackwardInputs {
//!     q: inputs.q, k: inputs.k, v: inputs.v, o: gpu.download(&o)?, d_o, lse: lse.download(&gpu)?,
//! };
//! let mma = PreparedBackward::new(&gpu, "backward-mma", &Config::default(), DType::F16, 64)?;
//! let grads = mma.run(&gpu, shape, params, None, &inputs)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod batch;
pub mod reference;
pub mod registry;
mod source;

use std::path::Path;

use attn_oracle::{DType, Gradients, Params, Shape, Varlen};
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};

use crate::compile::{self, CompileRequest};
use crate::config::Config;
use crate::error::{DriverContext, KernelError, Result};
use crate::gpu::{DeviceTensor, Gpu};
use crate::registry::Variants;

pub use batch::{
    check_backward, poison_workspace, BackwardArgs, BackwardBatch, BackwardDims, BackwardInputs,
    BackwardWorkspace, F32Tensor,
};
pub use reference::{GpuBackwardReference, ReferenceGradients};
pub use registry::{
    backward_registry, find_backward, workspace_bytes, BackwardGeometry, BackwardImplementation,
    BackwardKernel, BackwardPlan, StagePlan, STAGE_ENTRIES,
};
pub use source::SourceDeclarations;

/// A backward implementation (or a user's kernel) compiled for one device, dtype and head dim.
pub struct PreparedBackward {
    label: String,
    implementation: Option<&'static BackwardImplementation>,
    config: Config,
    dtype: DType,
    head_dim: usize,
    variants: Variants,
    deterministic: bool,
    geometry: BackwardGeometry,
    pre: Option<CudaFunction>,
    main: CudaFunction,
    post: Option<CudaFunction>,
}

impl std::fmt::Debug for PreparedBackward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedBackward")
            .field("label", &self.label)
            .field("config", &self.config)
            .field("dtype", &self.dtype)
            .field("head_dim", &self.head_dim)
            .field("deterministic", &self.deterministic)
            .finish_non_exhaustive()
    }
}

/// The buffers and scalars every stage of one launch takes, in the ABI's order.
struct StageArgs<'a, 'b> {
    args: &'b BackwardArgs<'a>,
    dq: &'b mut DeviceTensor,
    dk: &'b mut DeviceTensor,
    dv: &'b mut DeviceTensor,
    workspace: &'b mut CudaSlice<f32>,
    cu_q: u64,
    cu_kv: u64,
}

impl PreparedBackward {
    /// Resolves `overrides` over the defaults of the backward implementation `name`, compiles
    /// (through the caches) and loads its stages for `gpu`, `dtype` and `head_dim`; a GPU or head
    /// dim it does not take is refused before compiling.
    pub fn new(
        gpu: &Gpu,
        name: &str,
        overrides: &Config,
        dtype: DType,
        head_dim: usize,
    ) -> Result<PreparedBackward> {
        let implementation = find_backward(name)?;
        implementation.gpus.require(name, gpu.info().capability)?;
        let config = implementation.resolve(overrides, head_dim, &gpu.limits())?;
        let mut defines = CompileRequest::abi_defines(dtype, head_dim)?;
        defines.extend(implementation.defines(&config));
        let request = CompileRequest {
            name: implementation.name.into(),
            source: implementation.source,
            include_dir: None,
            defines,
            arch: gpu.arch(),
        };
        let geometry = implementation.geometry(&config, head_dim);
        let [pre, main, post] = load_stages(gpu, &request, &geometry, [true, true, true])?;
        Ok(PreparedBackward {
            label: implementation.name.into(),
            implementation: Some(implementation),
            config,
            dtype,
            head_dim,
            variants: implementation.variants,
            // backward-mma is deterministic where its dQ adds are ordered by tickets.
            deterministic: implementation.deterministic || geometry.tickets,
            geometry,
            pre,
            main: main.expect("attn_bwd is always loaded"),
            post,
        })
    }

    /// A user's backward kernel (`--src FILE`, kernels/README.md's "Backward entry point"):
    /// `attn_bwd`, and `attn_bwd_pre` and `attn_bwd_post` where the file defines them, compiled
    /// with `defines` (the kernel's folder searched first for its headers), its geometry and
    /// declarations from them ([`SourceDeclarations`]).
    pub fn from_source(
        gpu: &Gpu,
        path: &Path,
        defines: &Config,
        dtype: DType,
        head_dim: usize,
    ) -> Result<PreparedBackward> {
        let text = std::fs::read_to_string(path).map_err(|source| KernelError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let label = format!(
            "src:{}",
            path.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        );
        let declared = SourceDeclarations::of(defines, &label, &gpu.limits())?;
        let mut all_defines = CompileRequest::abi_defines(dtype, head_dim)?;
        all_defines.extend(defines.0.iter().map(|(k, v)| format!("{k}={v}")));
        let request = CompileRequest {
            name: path.display().to_string(),
            source: &text,
            include_dir: path.parent().filter(|d| !d.as_os_str().is_empty()),
            defines: all_defines,
            arch: gpu.arch(),
        };
        let ptx = compile::compile(&request)?.ptx;
        let present = STAGE_ENTRIES.map(|entry| compile::ptx_has_entry(&ptx, entry));
        if !present[1] {
            return Err(KernelError::Compile {
                implementation: request.name.clone(),
                config: request.defines.join(" "),
                arch: request.arch.0.clone(),
                log: "no kernel named `attn_bwd` in the module (declare it `extern \"C\" __global__`)"
                    .into(),
            });
        }
        let [pre, main, post] = load_stages(gpu, &request, &declared.geometry, present)?;
        Ok(PreparedBackward {
            label,
            implementation: None,
            config: defines.clone(),
            dtype,
            head_dim,
            variants: declared.variants,
            deterministic: declared.deterministic,
            geometry: declared.geometry,
            pre,
            main: main.expect("attn_bwd is present"),
            post,
        })
    }

    /// Its label: the implementation's name, or `src:<file name>`.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The registered implementation (`None` for a user's kernel).
    pub fn implementation(&self) -> Option<&'static BackwardImplementation> {
        self.implementation
    }

    /// The resolved config, or the user's defines.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether it declares its gradients the same bits on every launch.
    pub fn deterministic(&self) -> bool {
        self.deterministic
    }

    /// The problems beyond dense multi-head attention it handles.
    pub fn variants(&self) -> Variants {
        self.variants
    }

    /// The launch it makes of `shape` (a varlen batch: its bounding shape, `varlen` its lengths).
    pub fn plan(&self, shape: &Shape, varlen: Option<&Varlen>) -> Result<BackwardPlan> {
        self.geometry
            .plan(shape, varlen, self.pre.is_some(), self.post.is_some())
    }

    /// A workspace of `plan`'s size (zeroed; the kernels rely on none of its contents).
    pub fn alloc_workspace(&self, gpu: &Gpu, plan: &BackwardPlan) -> Result<CudaSlice<f32>> {
        let floats = (plan.workspace_bytes.div_ceil(4) as usize).max(1);
        gpu.stream()
            .alloc_zeros::<f32>(floats)
            .during("cuMemAlloc (backward workspace)")
    }

    /// Launches its stages on `args` into `dq`, `dk`, `dv` with `workspace` (asynchronously, on
    /// the GPU's stream), after checking every buffer against the problem and the problem against
    /// its variants; returns the plan it launched. Faults surface at the next synchronisation.
    pub fn launch_args(
        &self,
        gpu: &Gpu,
        args: &BackwardArgs<'_>,
        dq: &mut DeviceTensor,
        dk: &mut DeviceTensor,
        dv: &mut DeviceTensor,
        workspace: &mut CudaSlice<f32>,
    ) -> Result<BackwardPlan> {
        args.check_dtype(self.dtype)?;
        for (name, t) in [("dQ", &*dq), ("dK", &*dk), ("dV", &*dv)] {
            if t.dtype != self.dtype {
                return Err(KernelError::Shape(format!(
                    "backward {name} is {}, the kernel was compiled for {}",
                    t.dtype, self.dtype
                )));
            }
        }
        let varlen = args.varlen();
        check_backward(&args.shape, varlen, &args.dims([dq, dk, dv]), self.head_dim)?;
        if let Some(what) = self
            .variants
            .missing(&args.shape, &args.params, varlen.is_some())
        {
            let hint = if self.implementation.is_none() {
                " (a --src kernel that reads the variant parameters declares it with --define VARIANTS=1)"
            } else {
                ""
            };
            return Err(KernelError::Unsupported {
                implementation: self.label.clone(),
                what: format!("{what}{hint}"),
            });
        }
        let plan = self.plan(&args.shape, varlen)?;
        let capacity = workspace.len() as u64 * 4;
        if capacity < plan.workspace_bytes {
            return Err(KernelError::Shape(format!(
                "a backward workspace of {capacity} bytes, the problem needs {}",
                plan.workspace_bytes
            )));
        }
        let stream = gpu.stream();
        let (cu_q, _gq) = args.offsets.map(|o| o.cu_q.device_ptr(stream)).unzip();
        let (cu_kv, _gkv) = args.offsets.map(|o| o.cu_kv.device_ptr(stream)).unzip();
        let mut stage_args = StageArgs {
            args,
            dq,
            dk,
            dv,
            workspace,
            cu_q: cu_q.unwrap_or(0),
            cu_kv: cu_kv.unwrap_or(0),
        };
        let stages = [
            (self.pre.as_ref(), plan.pre, STAGE_ENTRIES[0]),
            (Some(&self.main), Some(plan.main), STAGE_ENTRIES[1]),
            (self.post.as_ref(), plan.post, STAGE_ENTRIES[2]),
        ];
        for (function, stage, entry) in stages {
            if let (Some(function), Some(stage)) = (function, stage) {
                launch_stage(gpu, function, &stage, entry, &mut stage_args)?;
            }
        }
        Ok(plan)
    }

    /// Runs once on host tensors: upload, poison the outputs and fill the workspace with NaNs,
    /// launch, synchronise, download (dQ like Q, dK and dV like K, in the kernel's dtype).
    pub fn run(
        &self,
        gpu: &Gpu,
        shape: Shape,
        params: Params,
        varlen: Option<&Varlen>,
        inputs: &BackwardInputs,
    ) -> Result<Gradients> {
        let batch = BackwardBatch::upload(gpu, shape, params, varlen, inputs)?;
        let mut dq = gpu.alloc_poisoned(batch.q.dims, self.dtype)?;
        let mut dk = gpu.alloc_poisoned(batch.k.dims, self.dtype)?;
        let mut dv = gpu.alloc_poisoned(batch.k.dims, self.dtype)?;
        let plan = self.plan(&shape, varlen)?;
        let mut workspace = self.alloc_workspace(gpu, &plan)?;
        poison_workspace(gpu, &mut workspace)?;
        self.launch_args(
            gpu,
            &batch.args(),
            &mut dq,
            &mut dk,
            &mut dv,
            &mut workspace,
        )?;
        gpu.synchronize()?;
        Ok(Gradients {
            dq: gpu.download(&dq)?,
            dk: gpu.download(&dk)?,
            dv: gpu.download(&dv)?,
        })
    }
}

/// Loads the stages `wanted` (pre, main, post) of `request`, each with its geometry's shared
/// memory.
fn load_stages(
    gpu: &Gpu,
    request: &CompileRequest<'_>,
    geometry: &BackwardGeometry,
    wanted: [bool; 3],
) -> Result<[Option<CudaFunction>; 3]> {
    let shared = [
        geometry.side_shared,
        geometry.main_shared,
        geometry.side_shared,
    ];
    let mut out = [None, None, None];
    for (i, entry) in STAGE_ENTRIES.iter().enumerate() {
        if wanted[i] {
            out[i] = Some(gpu.load(request, entry, shared[i])?);
        }
    }
    Ok(out)
}

/// Launches one stage: every stage takes the same parameters (kernels/README.md).
fn launch_stage(
    gpu: &Gpu,
    function: &CudaFunction,
    stage: &StagePlan,
    entry: &'static str,
    p: &mut StageArgs<'_, '_>,
) -> Result<()> {
    let args = p.args;
    let shape = args.shape;
    let (batch, heads, kv_heads) = (
        shape.batch as i32,
        shape.heads as i32,
        shape.kv_heads as i32,
    );
    let (seq_q, seq_kv) = (shape.seq_q as i32, shape.seq_kv as i32);
    let (scale, causal) = (args.params.scale as f32, i32::from(args.params.causal));
    let (window_left, window_right) = args.params.abi_window(shape.seq_q, shape.seq_kv);
    let workspace_bytes = p.workspace.len() as i64 * 4;
    let cfg = LaunchConfig {
        grid_dim: stage.grid,
        block_dim: (stage.block, 1, 1),
        shared_mem_bytes: stage.shared_bytes,
    };
    let mut launch = gpu.stream().launch_builder(function);
    launch
        .arg(&args.q.buf)
        .arg(&args.k.buf)
        .arg(&args.v.buf)
        .arg(&args.o.buf)
        .arg(&args.d_o.buf)
        .arg(&args.lse.buf)
        .arg(&mut p.dq.buf)
        .arg(&mut p.dk.buf)
        .arg(&mut p.dv.buf)
        .arg(&batch)
        .arg(&heads)
        .arg(&seq_q)
        .arg(&seq_kv)
        .arg(&scale)
        .arg(&causal)
        .arg(&kv_heads)
        .arg(&window_left)
        .arg(&window_right)
        .arg(&p.cu_q)
        .arg(&p.cu_kv)
        .arg(&mut *p.workspace)
        .arg(&workspace_bytes);
    // SAFETY: the arguments follow kernels/README.md's backward ABI, checked against the problem
    // before the first stage: Q, O, dO and dQ of Q's layout, K, V, dK and dV of K's, all 16-bit
    // elements of the compiled dtype, the LSE one f32 per query row; null offsets for a dense
    // batch, else live int32 arrays of B + 1 entries matching the packed tensors; the workspace a
    // live f32 buffer of at least the plan's bytes, its size passed, used by no other launch at
    // once (this stream runs the stages, and every launch, one after another); the grid is the
    // plan's for this stage, covering every row its kernel writes.
    unsafe { launch.launch(cfg) }.during(match entry {
        "attn_bwd_pre" => "cuLaunchKernel (attn_bwd_pre)",
        "attn_bwd_post" => "cuLaunchKernel (attn_bwd_post)",
        _ => "cuLaunchKernel (attn_bwd)",
    })?;
    Ok(())
}

#[cfg(test)]
mod tests;
