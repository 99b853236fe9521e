//! Decode on the GPU: the decode implementations ([`registry`]), a batch's device buffers and their
//! checks ([`batch`]), and [`PreparedDecode`], which compiles one for a device and launches it on a
//! [`DecodeBatch`] (the decode kernel, then `attn_decode_combine` when the keys are split).
//!
//! The ABI is kernels/README.md's "Decode entry point".
//!
//! ```no_run
//! use attn_kernels::decode::PreparedDecode;
//! use attn_kernels::{Config, Gpu};
//! use attn_oracle::{generate_decode, DecodeCase, Distribution};
//!
//! let gpu = Gpu::open(0)?;
//! let spec = "decode B=4 q=1 kv=4096 H=32/8 D=128 page=16".parse()?;
//! let inputs = generate_decode(&DecodeCase { spec, distribution: Distribution::Normal, seed: 7 })?;
//! let decode = PreparedDecode::new(&gpu, "decode", &Config::default(), inputs.case.spec.dtype(), 128)?;
//! let out = decode.run(&gpu, &inputs.case.spec, &inputs.q, &inputs.cache)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod batch;
pub mod copy;
pub mod registry;

use std::sync::Mutex;

use attn_oracle::{DType, DecodeSpec, HostTensor, KvCache};
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};

use crate::config::Config;
use crate::error::{DriverContext, KernelError, Result};
use crate::gpu::{DeviceTensor, Gpu};

pub use batch::{
    check_batch, padded_table, BatchDims, DecodeArgs, DecodeBatch, DeviceTable, LengthBuffers,
    TABLE_PADDING,
};
pub use registry::{
    auto_splits, decode_registry, find_decode, DecodeImplementation, DecodeKernel, DecodePlan,
    MAX_SPLITS,
};

/// A decode implementation compiled for one device, dtype and head dim.
pub struct PreparedDecode {
    implementation: &'static DecodeImplementation,
    config: Config,
    dtype: DType,
    head_dim: usize,
    /// Blocks of the decode kernel the GPU holds at once: SMs × the driver's occupancy.
    slots: usize,
    decode: CudaFunction,
    combine: Option<CudaFunction>,
    /// The split partials' f32 buffer, grown to the largest launch so far; every launch of this
    /// kernel goes to the GPU's one stream, one after another, so no two use it at once.
    workspace: Mutex<Option<CudaSlice<f32>>>,
}

impl std::fmt::Debug for PreparedDecode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedDecode")
            .field("implementation", &self.implementation.name)
            .field("config", &self.config)
            .field("dtype", &self.dtype)
            .field("head_dim", &self.head_dim)
            .finish_non_exhaustive()
    }
}

impl PreparedDecode {
    /// Resolves `overrides` over the defaults of the decode implementation `name`, compiles
    /// (through the caches) and loads it for `gpu`, `dtype` and `head_dim`.
    pub fn new(
        gpu: &Gpu,
        name: &str,
        overrides: &Config,
        dtype: DType,
        head_dim: usize,
    ) -> Result<PreparedDecode> {
        let implementation = find_decode(name)?;
        implementation.gpus.require(name, gpu.info().capability)?;
        let limits = gpu.limits();
        let config = implementation.resolve(overrides, head_dim, &limits)?;
        let request = implementation.compile_request(&config, dtype, head_dim, gpu.arch())?;
        let shared = implementation.shared_bytes(&config, head_dim);
        let decode = gpu.load(&request, "attn_decode", shared)?;
        let threads = implementation.block_threads(&config);
        let per_sm = decode
            .occupancy_max_active_blocks_per_multiprocessor(threads, shared as usize, None)
            .during("cuOccupancyMaxActiveBlocksPerMultiprocessor (attn_decode)")?;
        let combine = match implementation.kernel.combines() {
            false => None,
            true => Some(gpu.load(&request, "attn_decode_combine", 0)?),
        };
        Ok(PreparedDecode {
            implementation,
            config,
            dtype,
            head_dim,
            slots: gpu.info().sm_count as usize * (per_sm as usize).max(1),
            decode,
            combine,
            workspace: Mutex::new(None),
        })
    }

    /// The implementation.
    pub fn implementation(&self) -> &'static DecodeImplementation {
        self.implementation
    }

    /// The resolved config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The launch this kernel makes of `spec` on its GPU.
    pub fn plan(&self, spec: &DecodeSpec) -> Result<DecodePlan> {
        self.implementation.plan(&self.config, spec, self.slots)
    }

    /// Launches on `o` (asynchronously, on the GPU's stream) after checking every buffer against
    /// the batch's spec; returns the plan it launched. Faults surface at the next synchronisation.
    pub fn launch(
        &self,
        gpu: &Gpu,
        batch: &DecodeBatch,
        o: &mut DeviceTensor,
    ) -> Result<DecodePlan> {
        self.launch_args(gpu, &batch.args(), o)
    }

    /// [`PreparedDecode::launch`] on inputs wherever they live (a check's guarded buffers).
    pub fn launch_args(
        &self,
        gpu: &Gpu,
        batch: &DecodeArgs<'_>,
        o: &mut DeviceTensor,
    ) -> Result<DecodePlan> {
        let spec = batch.spec;
        for (name, t) in [("Q", batch.q), ("K", batch.k), ("V", batch.v), ("O", &*o)] {
            if t.dtype != self.dtype {
                return Err(KernelError::Shape(format!(
                    "decode {name} is {}, the kernel was compiled for {}",
                    t.dtype, self.dtype
                )));
            }
        }
        check_batch(
            spec,
            &BatchDims::of_args(batch, o),
            self.dtype,
            self.head_dim,
        )?;
        let plan = self.plan(spec)?;
        let stream = gpu.stream();
        let mut workspace = self.workspace.lock().unwrap_or_else(|e| e.into_inner());
        let floats = (plan.workspace_bytes / 4) as usize;
        if floats > workspace.as_ref().map_or(0, |w| w.len()) {
            *workspace = Some(
                stream
                    .alloc_zeros::<f32>(floats)
                    .during("cuMemAlloc (decode workspace)")?,
            );
        }
        let (ws_ptr, _gw) = match workspace.as_ref().filter(|_| floats > 0) {
            Some(w) => {
                let (p, g) = w.device_ptr(stream);
                (p, Some(g))
            }
            None => (0u64, None),
        };
        // The capacity the kernel may use: the whole allocation (it traps on less than it needs).
        let ws_bytes: i64 = if floats > 0 {
            workspace.as_ref().map_or(0, |w| w.len() as i64 * 4)
        } else {
            0
        };
        let (table_ptr, _gt) = match batch.table {
            Some(t) => {
                let (p, g) = t.buf.device_ptr(stream);
                (p, Some(g))
            }
            None => (0u64, None),
        };
        let (stride, page_size, s_max) = match batch.table {
            Some(t) => (t.stride as i32, t.page_size as i32, 0i32),
            None => (0, 0, spec.max_kv() as i32),
        };
        let (b, h, h_kv) = (
            spec.sequences() as i32,
            spec.heads() as i32,
            spec.kv_heads() as i32,
        );
        let scale = batch.scale as f32;
        let window_left: i32 = spec
            .window()
            .and_then(|w| w.left)
            .map_or(-1, |l| l.min(i32::MAX as usize) as i32);
        let splits = plan.splits as i32;
        let cfg = LaunchConfig {
            grid_dim: plan.grid,
            block_dim: (plan.block, 1, 1),
            shared_mem_bytes: plan.shared_bytes,
        };
        let mut launch = stream.launch_builder(&self.decode);
        launch
            .arg(&batch.q.buf)
            .arg(&batch.k.buf)
            .arg(&batch.v.buf)
            .arg(&mut o.buf)
            .arg(batch.cu_seqlens_q)
            .arg(batch.seqlens_kv)
            .arg(&table_ptr)
            .arg(&stride)
            .arg(&page_size)
            .arg(&s_max)
            .arg(&b)
            .arg(&h)
            .arg(&h_kv)
            .arg(&scale)
            .arg(&window_left)
            .arg(&ws_ptr)
            .arg(&ws_bytes)
            .arg(&splits);
        // SAFETY: the arguments follow the decode ABI of kernels/README.md, checked above against
        // the batch's spec: Q and O [1, total_q, H, D] and K, V in the spec's layout, all of the
        // compiled dtype; cu_seqlens_q (B + 1) and seqlens_kv (B) int32 arrays uploaded from the
        // spec; for a paged cache a live int32 table of B rows × `stride` entries, each row
        // covering its sequence's pages with entries of a BlockTable (pages within the cache),
        // else null with page_size 0 and the slab length S_max; the workspace, when splits > 1,
        // is this kernel's own live f32 buffer of at least the plan's bytes (its size passed),
        // used by no other launch at once (launches on this stream run one after another); the
        // grid is the plan's, covering every (row tile, K/V head, sequence, split).
        unsafe { launch.launch(cfg) }.during("cuLaunchKernel (attn_decode)")?;
        if let (Some(grid), Some(combine)) = (plan.combine_grid, &self.combine) {
            let total_rows = (spec.varlen().total_q() * spec.heads()) as i32;
            let cfg = LaunchConfig {
                grid_dim: (grid, 1, 1),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut launch = stream.launch_builder(combine);
            launch
                .arg(&ws_ptr)
                .arg(&mut o.buf)
                .arg(&total_rows)
                .arg(&splits);
            // SAFETY: attn_decode_combine reads the workspace the decode launch just wrote on the
            // same stream (splits × total_q·H rows of D f32, then their LSEs, within its size) and
            // writes O, [total_q, H, D] of the compiled dtype, checked above; a warp per row, the
            // grid covering total_q·H rows.
            unsafe { launch.launch(cfg) }.during("cuLaunchKernel (attn_decode_combine)")?;
        }
        Ok(plan)
    }

    /// Runs once on host tensors: upload, poison the output, launch, synchronise, download
    /// (`[1, total_q, H, D]`).
    pub fn run(
        &self,
        gpu: &Gpu,
        spec: &DecodeSpec,
        q: &HostTensor,
        cache: &KvCache,
    ) -> Result<HostTensor> {
        let batch = DecodeBatch::upload(gpu, spec, q, cache)?;
        let mut o = gpu.alloc_poisoned(batch.q.dims, self.dtype)?;
        self.launch(gpu, &batch, &mut o)?;
        gpu.synchronize()?;
        gpu.download(&o)
    }
}

#[cfg(test)]
mod tests;
