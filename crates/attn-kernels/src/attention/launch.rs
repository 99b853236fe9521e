//! How a prepared candidate launches: the plain and TensorMaps ABIs of kernels/README.md, persistent
//! kernels' work counters, and the hand-off to a library plan.

use std::sync::Mutex;

use attn_oracle::{Params, Shape};
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};

use crate::error::{DriverContext, KernelError, Result};
use crate::gpu::{DeviceTensor, Gpu};
use crate::registry::{Geometry, LibraryPlan, Variants};
use crate::tensormap;

use super::checks::{check_packed, check_shapes};
use super::library::{LibraryLaunch, Scratch};
use super::Prepared;

/// Launch geometry of a prepared kernel as a function of the shape.
pub(super) type GeometryFn = Box<dyn Fn(&Shape) -> Result<Geometry> + Send + Sync>;

/// How a prepared candidate launches: one kernel, or cuBLAS and a kernel of ours.
pub(super) enum Launcher {
    Kernel {
        function: CudaFunction,
        geometry: GeometryFn,
        /// `Some` for the `TensorMaps` ABI: the box rows of Q (`BLOCK_M`) and of K/V (`BLOCK_N`).
        tensor_maps: Option<BoxRows>,
        /// `Some` for a persistent kernel ([`Geometry::persistent`]).
        persistent: Option<Persistent>,
        /// A Triton kernel: the variant parameters only if it declares them (`VARIANTS=1`), then
        /// Triton's global and profile scratch pointers, null (its build asked for no scratch).
        triton_scratch: bool,
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
pub(super) struct Persistent {
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
    pub(super) fn new(
        gpu: &Gpu,
        function: &CudaFunction,
        geometry: Geometry,
    ) -> Result<Persistent> {
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
pub(super) struct BoxRows {
    q: u32,
    kv: u32,
}

impl BoxRows {
    /// Q boxes of `block_m` rows; K/V boxes of a block's share of a `block_n`-key tile when
    /// `cluster` blocks share each K/V tile (kernels/README.md): `block_n / cluster` rows.
    pub(super) fn new(block_m: u32, block_n: u32, cluster: u32) -> BoxRows {
        BoxRows {
            q: block_m,
            kv: block_n / cluster.max(1),
        }
    }
}

impl Prepared {
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

    /// What of `shape` the compiled config declares it does not take, as a phrase (a launch
    /// refuses it as [`KernelError::Unsupported`] before launching): query heads per K/V head that
    /// are not a multiple of the heads its geometry takes together (hopper's `CLUSTER_HEADS=1`
    /// pairs). `None` for every other shape, and always for a `--src` kernel, whose geometry takes
    /// heads one at a time: the host's own config rules are the only ones that decline.
    pub fn declines(&self, shape: &Shape) -> Result<Option<String>> {
        match &self.engine {
            Launcher::Kernel { geometry, .. } => Ok(declined(&geometry(shape)?, shape)),
            Launcher::Library { .. } => Ok(None),
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
                triton_scratch,
            } => {
                let g = geometry(&shape)?;
                if let Some(what) = declined(&g, &shape) {
                    return Err(KernelError::Unsupported {
                        implementation: self.label.clone(),
                        what,
                    });
                }
                // Encoded per launch (a short host call): the driver copies the parameters,
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
                // A Triton kernel's parameter list ends where it ends: its scratch pointers follow.
                let variant_params = !*triton_scratch || self.variants != Variants::NONE;
                if variant_params {
                    launch
                        .arg(&kv_heads)
                        .arg(&window_left)
                        .arg(&window_right)
                        .arg(&cu_q)
                        .arg(&cu_kv);
                }
                let null_scratch: u64 = 0;
                if *triton_scratch {
                    launch.arg(&null_scratch).arg(&null_scratch);
                }
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
                // tensors, checked above; a Triton kernel's list as triton_aot.py compiled it, the
                // variant parameters where it declared them, then its two scratch pointers, null
                // because its build reported no scratch); the grid covers every output row, or for a persistent
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
}

/// Why geometry `g` declines `shape` ([`Prepared::declines`]), if it does.
fn declined(g: &Geometry, shape: &Shape) -> Option<String> {
    let (together, group) = (g.heads_together as usize, shape.group());
    (group % together != 0).then(|| {
        format!(
            "{group} query heads per K/V head ({} / {}): this config takes {together} query heads of one K/V head together, and {group} are not a multiple",
            shape.heads, shape.kv_heads
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn geometry(heads_together: u32) -> Geometry {
        Geometry {
            grid: (1, 1, 1),
            block: 128,
            shared_bytes: 0,
            persistent: false,
            heads_together,
            workspace_per_block: 0,
        }
    }

    fn shape(heads: usize, kv_heads: usize) -> Shape {
        Shape::new(2, heads, 97, 129, 64)
            .and_then(|s| s.with_kv_heads(kv_heads))
            .unwrap()
    }

    #[test]
    fn head_pairs_decline_odd_groups_only_and_src_kernels_decline_nothing() {
        let pairs = geometry(2);
        for (h, kv) in [(6, 2), (5, 1), (28, 4), (7, 1), (6, 6)] {
            let why = declined(&pairs, &shape(h, kv)).expect("an odd group");
            assert!(why.contains("are not a multiple"), "{why}");
            assert!(why.contains(&format!("({h} / {kv})")), "{why}");
        }
        for (h, kv) in [(12, 2), (8, 1), (32, 8), (4, 2)] {
            assert_eq!(declined(&pairs, &shape(h, kv)), None, "{h}/{kv}");
        }
        // A --src kernel's geometry takes heads one at a time, whatever its defines.
        let defines = Config::from_pairs(&[("CLUSTER", 2), ("BLOCK_N", 64), ("TENSOR_MAPS", 1)]);
        let source = super::super::candidate::source_geometry(&defines);
        for (h, kv) in [(6, 2), (5, 1), (7, 1), (12, 2)] {
            assert_eq!(
                declined(&source.for_shape(&shape(h, kv)), &shape(h, kv)),
                None
            );
        }
    }
}
