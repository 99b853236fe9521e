//! A decode batch on the device ([`DecodeBatch`]) and the checks of its buffers against its
//! [`DecodeSpec`] before any launch ([`check_batch`]).

use attn_oracle::{BlockTable, DecodeSpec, HostTensor, KvCache, KvLayout};
use cudarc::driver::CudaSlice;

use crate::error::{DriverContext, KernelError, Result};
use crate::gpu::{DeviceTensor, Gpu};

/// What padding a block table row holds past a sequence's last page: never a page, so that a
/// kernel reading an entry it was not given faults rather than reads a stranger's keys.
pub const TABLE_PADDING: i32 = -1;

/// A paged cache's block table on the device: int32 `[sequences, stride]`, each row a sequence's
/// pages in logical order, padded with [`TABLE_PADDING`].
#[derive(Debug)]
pub struct DeviceTable {
    /// The entries.
    pub buf: CudaSlice<i32>,
    /// Rows (sequences).
    pub sequences: usize,
    /// Entries per row: the longest page list (at least 1).
    pub stride: usize,
    /// Tokens per page.
    pub page_size: usize,
    /// Pages in the K and V caches.
    pub num_pages: usize,
}

/// A decode batch's inputs on the device, as the decode ABI takes them (kernels/README.md,
/// "Decode entry point").
#[derive(Debug)]
pub struct DecodeBatch {
    /// The batch.
    pub spec: DecodeSpec,
    /// Queries `[1, total_q, H, D]`, packed.
    pub q: DeviceTensor,
    /// Keys: `[num_pages, P, H_kv, D]` paged, `[B, H_kv, S_max, D]` contiguous.
    pub k: DeviceTensor,
    /// Values, as the keys.
    pub v: DeviceTensor,
    /// int32 `[B + 1]` offsets of each sequence's new tokens in Q and O.
    pub cu_seqlens_q: CudaSlice<i32>,
    /// int32 `[B]` keys per sequence, the new tokens included.
    pub seqlens_kv: CudaSlice<i32>,
    /// The block table of a paged cache.
    pub table: Option<DeviceTable>,
}

/// A decode launch's inputs by reference, wherever they live: a [`DecodeBatch`]'s own buffers
/// ([`DecodeBatch::args`]), or the interiors of guarded buffers that a check watches.
#[derive(Debug, Clone, Copy)]
pub struct DecodeArgs<'a> {
    /// The batch.
    pub spec: &'a DecodeSpec,
    /// Queries `[1, total_q, H, D]`, packed.
    pub q: &'a DeviceTensor,
    /// Keys in the spec's layout.
    pub k: &'a DeviceTensor,
    /// Values, as the keys.
    pub v: &'a DeviceTensor,
    /// int32 `[B + 1]` offsets of each sequence's new tokens.
    pub cu_seqlens_q: &'a CudaSlice<i32>,
    /// int32 `[B]` keys per sequence.
    pub seqlens_kv: &'a CudaSlice<i32>,
    /// The block table of a paged cache.
    pub table: Option<&'a DeviceTable>,
    /// The softmax scale the launch passes, the spec's 1/√D unless a check draws another.
    pub scale: f64,
}

impl DeviceTable {
    /// `table` padded ([`padded_table`]) and uploaded.
    pub fn upload(gpu: &Gpu, table: &BlockTable) -> Result<DeviceTable> {
        let (entries, stride) = padded_table(table);
        Ok(DeviceTable {
            buf: gpu
                .stream()
                .clone_htod(&entries)
                .during("cuMemcpyHtoD (block table)")?,
            sequences: table.sequences(),
            stride,
            page_size: table.page_size(),
            num_pages: table.num_pages(),
        })
    }
}

impl DeviceTable {
    /// Whether the entries on the device differ from `table`'s, padded (synchronises): a kernel
    /// must leave its table as it found it.
    pub fn changed(&self, gpu: &Gpu, table: &BlockTable) -> Result<bool> {
        let found = gpu
            .stream()
            .clone_dtoh(&self.buf)
            .during("cuMemcpyDtoH (block table)")?;
        Ok(found != padded_table(table).0)
    }
}

/// A decode batch's int32 lengths on the device, as the ABI takes them.
#[derive(Debug)]
pub struct LengthBuffers {
    /// `[B + 1]` offsets of each sequence's new tokens in Q and O.
    pub cu_seqlens_q: CudaSlice<i32>,
    /// `[B]` keys per sequence, the new tokens included.
    pub seqlens_kv: CudaSlice<i32>,
}

impl LengthBuffers {
    /// `spec`'s lengths, uploaded.
    pub fn upload(gpu: &Gpu, spec: &DecodeSpec) -> Result<LengthBuffers> {
        let stream = gpu.stream();
        Ok(LengthBuffers {
            cu_seqlens_q: stream
                .clone_htod(&spec.varlen().cu_seqlens_q())
                .during("cuMemcpyHtoD (cu_seqlens_q)")?,
            seqlens_kv: stream
                .clone_htod(&seqlens_kv(spec))
                .during("cuMemcpyHtoD (seqlens_kv)")?,
        })
    }

    /// The arrays a launch changed (`"cu_seqlens_q"`, `"seqlens_kv"`), read back (synchronises).
    pub fn changed(&self, gpu: &Gpu, spec: &DecodeSpec) -> Result<Vec<String>> {
        let stream = gpu.stream();
        let cu = stream
            .clone_dtoh(&self.cu_seqlens_q)
            .during("cuMemcpyDtoH (cu_seqlens_q)")?;
        let kv = stream
            .clone_dtoh(&self.seqlens_kv)
            .during("cuMemcpyDtoH (seqlens_kv)")?;
        let mut changed = Vec::new();
        if cu != spec.varlen().cu_seqlens_q() {
            changed.push("cu_seqlens_q".to_string());
        }
        if kv != seqlens_kv(spec) {
            changed.push("seqlens_kv".to_string());
        }
        Ok(changed)
    }
}

/// The int32 keys per sequence of `spec`.
fn seqlens_kv(spec: &DecodeSpec) -> Vec<i32> {
    spec.seqlens_kv().iter().map(|&n| n as i32).collect()
}

/// A block table as the kernels read it: `stride` entries per sequence, padded with
/// [`TABLE_PADDING`], `stride` the longest list (1 when every list is empty).
pub fn padded_table(table: &BlockTable) -> (Vec<i32>, usize) {
    let stride = (0..table.sequences())
        .map(|b| table.pages(b).len())
        .max()
        .unwrap_or(0)
        .max(1);
    let mut entries = vec![TABLE_PADDING; table.sequences() * stride];
    for b in 0..table.sequences() {
        entries[b * stride..][..table.pages(b).len()].copy_from_slice(table.pages(b));
    }
    (entries, stride)
}

impl DecodeBatch {
    /// Uploads `q` (`[1, total_q, H, D]`) and `cache` after checking them against `spec`.
    pub fn upload(
        gpu: &Gpu,
        spec: &DecodeSpec,
        q: &HostTensor,
        cache: &KvCache,
    ) -> Result<DecodeBatch> {
        cache.check(spec)?;
        let expected = [1, spec.varlen().total_q(), spec.heads(), spec.head_dim()];
        if q.dims != expected {
            return Err(KernelError::Shape(format!(
                "decode Q is {:?}, the batch needs {expected:?} ([1, total_q, H, D], packed)",
                q.dims
            )));
        }
        let stream = gpu.stream();
        let seqlens_kv: Vec<i32> = spec.seqlens_kv().iter().map(|&n| n as i32).collect();
        let table = cache
            .table()
            .map(|table| DeviceTable::upload(gpu, table))
            .transpose()?;
        Ok(DecodeBatch {
            spec: spec.clone(),
            q: gpu.upload(q)?,
            k: gpu.upload(cache.k())?,
            v: gpu.upload(cache.v())?,
            cu_seqlens_q: stream
                .clone_htod(&spec.varlen().cu_seqlens_q())
                .during("cuMemcpyHtoD (cu_seqlens_q)")?,
            seqlens_kv: stream
                .clone_htod(&seqlens_kv)
                .during("cuMemcpyHtoD (seqlens_kv)")?,
            table,
        })
    }
}

impl DecodeBatch {
    /// Its buffers, as a launch takes them.
    pub fn args(&self) -> DecodeArgs<'_> {
        DecodeArgs {
            spec: &self.spec,
            q: &self.q,
            k: &self.k,
            v: &self.v,
            cu_seqlens_q: &self.cu_seqlens_q,
            seqlens_kv: &self.seqlens_kv,
            table: self.table.as_ref(),
            scale: self.spec.params().scale,
        }
    }
}

/// The dims of a decode batch's buffers, as [`check_batch`] reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchDims {
    /// Q's dims.
    pub q: [usize; 4],
    /// K's dims.
    pub k: [usize; 4],
    /// V's dims.
    pub v: [usize; 4],
    /// O's dims.
    pub o: [usize; 4],
    /// Entries of `cu_seqlens_q`.
    pub cu_seqlens_q: usize,
    /// Entries of `seqlens_kv`.
    pub seqlens_kv: usize,
    /// The table's (rows, stride, page size, pages, entries), when there is one.
    pub table: Option<(usize, usize, usize, usize, usize)>,
}

impl BatchDims {
    /// The dims of `batch` and of the output `o`.
    pub fn of(batch: &DecodeBatch, o: &DeviceTensor) -> BatchDims {
        BatchDims::of_args(&batch.args(), o)
    }

    /// The dims of the buffers of `args` and of the output `o`.
    pub fn of_args(batch: &DecodeArgs<'_>, o: &DeviceTensor) -> BatchDims {
        BatchDims {
            q: batch.q.dims,
            k: batch.k.dims,
            v: batch.v.dims,
            o: o.dims,
            cu_seqlens_q: batch.cu_seqlens_q.len(),
            seqlens_kv: batch.seqlens_kv.len(),
            table: batch
                .table
                .map(|t| (t.sequences, t.stride, t.page_size, t.num_pages, t.buf.len())),
        }
    }
}

/// Checks every dim of a batch's buffers against `spec` and the kernel's dtype and head dim, in
/// one line: Q and O `[1, total_q, H, D]`, K and V the layout's, the offsets `B + 1` and `B`
/// entries, a paged table of `B` rows covering every sequence's pages, a table exactly when paged.
pub fn check_batch(
    spec: &DecodeSpec,
    dims: &BatchDims,
    dtype: attn_oracle::DType,
    head_dim: usize,
) -> Result<()> {
    let shape = |what: String| Err(KernelError::Shape(what));
    if spec.dtype() != dtype || spec.head_dim() != head_dim {
        return shape(format!(
            "the batch is {} D={}, the kernel was compiled for {dtype} D={head_dim}",
            spec.dtype(),
            spec.head_dim()
        ));
    }
    let (b, h, h_kv, d) = (spec.sequences(), spec.heads(), spec.kv_heads(), head_dim);
    let packed = [1, spec.varlen().total_q(), h, d];
    for (name, found) in [("Q", dims.q), ("O", dims.o)] {
        if found != packed {
            return shape(format!(
                "decode {name} is {found:?}, the batch needs {packed:?} ([1, total_q, H, D])"
            ));
        }
    }
    if dims.cu_seqlens_q != b + 1 || dims.seqlens_kv != b {
        return shape(format!(
            "{} cu_seqlens_q and {} seqlens_kv entries for {b} sequences (B + 1 and B)",
            dims.cu_seqlens_q, dims.seqlens_kv
        ));
    }
    let cache = match (spec.layout(), dims.table) {
        (KvLayout::Contiguous, None) => [b, h_kv, spec.max_kv(), d],
        (KvLayout::Paged { page_size, .. }, Some((rows, stride, p, pages, entries))) => {
            if p != page_size || rows != b || entries != rows * stride {
                return shape(format!(
                    "a block table of {rows} rows x {stride} entries ({entries} in all) of pages of {p}, for {b} sequences in pages of {page_size}"
                ));
            }
            if let Some(short) = (0..b).find(|&s| spec.pages_of(s) > stride) {
                return shape(format!(
                    "the block table's rows hold {stride} pages, sequence {short} needs {}",
                    spec.pages_of(short)
                ));
            }
            [pages, page_size, h_kv, d]
        }
        (KvLayout::Contiguous, Some(_)) => {
            return shape("a contiguous KV cache takes no block table".into())
        }
        (KvLayout::Paged { .. }, None) => {
            return shape("a paged KV cache needs its block table".into())
        }
    };
    for (name, found) in [("K", dims.k), ("V", dims.v)] {
        if found != cache {
            return shape(format!(
                "decode {name} cache is {found:?}, the batch's layout needs {cache:?}"
            ));
        }
    }
    Ok(())
}
