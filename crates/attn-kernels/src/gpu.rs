//! The device: context, stream, lazily compiled and cached kernels, device tensors.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use attn_oracle::{DType, HostTensor};
use cudarc::cublas::CudaBlas;
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtrMut};

use crate::compile::{self, Arch, CompileRequest};
use crate::error::{DriverContext, KernelError, Result};
use crate::registry::DeviceLimits;
use crate::toolkit;

/// What we know of the device, read once when it is opened.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DeviceInfo {
    /// Its ordinal.
    pub ordinal: usize,
    /// Marketing name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// UUID, hex.
    pub uuid: String,
    /// Compute capability (major, minor).
    pub capability: (i32, i32),
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// L2 cache, bytes.
    pub l2_bytes: u32,
    /// Dynamic shared memory per block after opting in, bytes.
    pub max_shared_per_block: u32,
    /// Threads per block.
    pub max_threads_per_block: u32,
    /// The CUDA version the driver supports, e.g. "13.0".
    pub driver_cuda: String,
    /// Device memory, bytes.
    pub total_memory: usize,
    /// Maximum SM clock, MHz.
    pub max_sm_mhz: u32,
    /// Peak memory clock, kHz (0 where the driver does not say).
    #[serde(default)]
    pub memory_clock_khz: i64,
    /// Global memory bus width, bits (0 where the driver does not say).
    #[serde(default)]
    pub memory_bus_bits: i64,
}

/// A device tensor in `[B, H, S, D]` layout; elements are 16-bit (fp16 or bf16) bit patterns.
#[derive(Debug)]
pub struct DeviceTensor {
    /// `[B, H, S, D]`.
    pub dims: [usize; 4],
    /// fp16 or bf16.
    pub dtype: DType,
    /// The elements' bits.
    pub buf: CudaSlice<u16>,
}

/// A varlen batch on the device: its lengths and the ABI's two int32 offset arrays.
#[derive(Debug)]
pub struct VarlenOffsets {
    /// The lengths.
    pub varlen: attn_oracle::Varlen,
    /// `cu_seqlens_q`, `sequences + 1` entries.
    pub cu_q: CudaSlice<i32>,
    /// `cu_seqlens_kv`.
    pub cu_kv: CudaSlice<i32>,
}

impl VarlenOffsets {
    /// The offset arrays a launch changed, read back and compared with the batch's own
    /// (`"cu_seqlens_q"`, `"cu_seqlens_kv"`): a kernel must leave its inputs as it found them.
    /// Synchronises.
    pub fn changed(&self, gpu: &Gpu) -> Result<Vec<&'static str>> {
        let mut changed = Vec::new();
        for (name, on_device, expected) in [
            ("cu_seqlens_q", &self.cu_q, self.varlen.cu_seqlens_q()),
            ("cu_seqlens_kv", &self.cu_kv, self.varlen.cu_seqlens_kv()),
        ] {
            let found = gpu
                .stream
                .clone_dtoh(on_device)
                .during("cuMemcpyDtoH (varlen offsets)")?;
            gpu.synchronize()?;
            if found != expected {
                changed.push(name);
            }
        }
        Ok(changed)
    }
}

/// An opened GPU with one stream that every launch and timing of this crate uses.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    limits: DeviceLimits,
    functions: Mutex<HashMap<String, CudaFunction>>,
    blas: OnceLock<CudaBlas>,
    /// Every other stream work of ours may run on ([`Gpu::new_side_stream`]): the timing's guard
    /// pass records an event on each to see, on the device, work that outlives the timed stream.
    side_streams: Mutex<Vec<Arc<CudaStream>>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

fn attribute(ctx: &CudaContext, attr: CUdevice_attribute, call: &'static str) -> Result<i32> {
    ctx.attribute(attr).during(call)
}

impl Gpu {
    /// Opens GPU `ordinal`, or says in one line why not (no driver, no device).
    pub fn open(ordinal: usize) -> Result<Gpu> {
        if !toolkit::driver_available() {
            return Err(KernelError::NoDriver);
        }
        let count = CudaContext::device_count().map_err(|e| KernelError::NoGpu(e.to_string()))?;
        if count <= ordinal as i32 {
            return Err(KernelError::NoGpu(format!(
                "asked for GPU {ordinal}, the driver sees {count}"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| KernelError::NoGpu(e.to_string()))?;
        // One stream, synchronised by us: cudarc's per-buffer event tracking would add work to
        // every launch we time.
        // SAFETY: every buffer of this crate is used on `stream` only, so no cross-stream
        // ordering is lost by turning tracking off.
        unsafe { ctx.disable_event_tracking() };
        // A created (non-blocking) stream, not the legacy default one: CUDA graphs can only be
        // captured from such a stream, and nothing else in the process synchronises with it.
        let stream = ctx.new_stream().during("cuStreamCreate")?;
        let uuid = ctx.uuid().during("cuDeviceGetUuid")?;
        let info = DeviceInfo {
            ordinal,
            name: ctx.name().during("cuDeviceGetName")?,
            uuid: uuid
                .bytes
                .iter()
                .map(|b| format!("{:02x}", *b as u8))
                .collect(),
            capability: ctx.compute_capability().during("cuDeviceGetAttribute")?,
            sm_count: attribute(
                &ctx,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                "sm count",
            )? as u32,
            l2_bytes: attribute(
                &ctx,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
                "L2 size",
            )? as u32,
            max_shared_per_block: attribute(
                &ctx,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                "shared memory limit",
            )? as u32,
            max_threads_per_block: attribute(
                &ctx,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                "thread limit",
            )? as u32,
            driver_cuda: driver_cuda_version()?,
            total_memory: ctx.total_mem().during("cuDeviceTotalMem")?,
            max_sm_mhz: (attribute(
                &ctx,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE,
                "clock rate",
            )? / 1000) as u32,
            // Only for the physical floor of a launch: a driver that does not report them leaves
            // the floor to the table by device name.
            memory_clock_khz: ctx
                .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
                .map_or(0, i64::from),
            memory_bus_bits: ctx
                .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)
                .map_or(0, i64::from),
        };
        let limits = DeviceLimits {
            capability: info.capability,
            sm_count: info.sm_count,
            l2_bytes: info.l2_bytes,
            max_threads_per_block: info.max_threads_per_block,
            max_shared_per_block: info.max_shared_per_block,
            shared_per_sm: attribute(
                &ctx,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                "shared memory per SM",
            )? as u32,
            reserved_shared_per_block: attribute(
                &ctx,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
                "reserved shared memory per block",
            )? as u32,
        };
        Ok(Gpu {
            ctx,
            stream,
            info,
            limits,
            functions: Mutex::new(HashMap::new()),
            blas: OnceLock::new(),
            side_streams: Mutex::new(Vec::new()),
        })
    }

    /// What the device is.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Its limits and size, for config validation and the tuning policy.
    pub fn limits(&self) -> DeviceLimits {
        self.limits
    }

    /// The architecture to compile for: the device's own.
    /// On sm_90 this is `compute_90a`: the architecture-specific target that allows Hopper's own
    /// instructions (wgmma, setmaxnreg); its code runs on exactly this kind of device, which is the
    /// one we compile for.
    pub fn arch(&self) -> Arch {
        match self.info.capability {
            (9, 0) => Arch("compute_90a".into()),
            (major, minor) => Arch::from_capability(major, minor),
        }
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream every launch uses.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// A new stream for work beside the timed stream, registered so that the timing's guard pass
    /// sees on the device how long its work outlives the timed stream's: every stream of ours
    /// other than [`Gpu::stream`] must come from here.
    pub fn new_side_stream(&self) -> Result<Arc<CudaStream>> {
        let stream = self.ctx.new_stream().during("cuStreamCreate")?;
        self.side_streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(stream.clone());
        Ok(stream)
    }

    /// The streams made by [`Gpu::new_side_stream`].
    pub fn side_streams(&self) -> Vec<Arc<CudaStream>> {
        self.side_streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Compiles (through the caches) and loads `entry` of `req`, allowing `shared_bytes` of dynamic
    /// shared memory per block.
    pub fn load(
        &self,
        req: &CompileRequest<'_>,
        entry: &str,
        shared_bytes: u32,
    ) -> Result<CudaFunction> {
        // The source itself (not its name or length) keys the cache: two files of one name and
        // size must not share a module.
        let source_hash = compile::sha256_hex(req.source.as_bytes());
        let key = format!(
            "{source_hash}\u{1f}{}\u{1f}{}\u{1f}{entry}",
            req.defines.join(" "),
            req.arch.0
        );
        let what = || {
            (
                req.name.to_string(),
                req.defines.join(" "),
                req.arch.0.clone(),
            )
        };
        self.load_with(
            key,
            || Ok(compile::compile(req)?.ptx),
            what,
            entry,
            shared_bytes,
        )
    }

    /// Loads entry `entry` of PTX built by another compiler (the Triton front end), as
    /// [`Gpu::load`] loads NVRTC's: cached by the text, with its dynamic shared memory allowed.
    pub fn load_ptx(
        &self,
        name: &str,
        ptx: &str,
        entry: &str,
        shared_bytes: u32,
    ) -> Result<CudaFunction> {
        let key = format!(
            "ptx\u{1f}{}\u{1f}{entry}",
            compile::sha256_hex(ptx.as_bytes())
        );
        let what = || {
            (
                name.to_string(),
                "prebuilt PTX".to_string(),
                "its own target".to_string(),
            )
        };
        self.load_with(key, || Ok(ptx.to_string()), what, entry, shared_bytes)
    }

    /// The cached function of `key`, or `ptx()`'s module loaded and its `entry` found; then its
    /// dynamic shared memory allowed. `what`: (name, config, arch) for a missing entry's message.
    fn load_with(
        &self,
        key: String,
        ptx: impl FnOnce() -> Result<String>,
        what: impl FnOnce() -> (String, String, String),
        entry: &str,
        shared_bytes: u32,
    ) -> Result<CudaFunction> {
        let mut functions = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        let function = match functions.get(&key) {
            Some(f) => f.clone(),
            None => {
                let module = self
                    .ctx
                    .load_module(cudarc::nvrtc::Ptx::from_src(ptx()?))
                    .during("cuModuleLoadData")?;
                let function = module.load_function(entry).map_err(|e| {
                    let (implementation, config, arch) = what();
                    KernelError::Compile {
                        implementation,
                        config,
                        arch,
                        log: format!("no kernel named `{entry}` in the module ({e})"),
                    }
                })?;
                functions.insert(key, function.clone());
                function
            }
        };
        if shared_bytes > 48 * 1024 {
            function
                .set_attribute(
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared_bytes as i32,
                )
                .during("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")?;
        }
        Ok(function)
    }

    /// The cuBLAS handle, created on first use, bound to our stream.
    pub(crate) fn blas(&self) -> Result<&CudaBlas> {
        if let Some(blas) = self.blas.get() {
            return Ok(blas);
        }
        let blas = CudaBlas::new(self.stream.clone()).map_err(|e| KernelError::Cublas {
            call: "cublasCreate",
            message: format!("{e:?}"),
        })?;
        Ok(self.blas.get_or_init(|| blas))
    }

    /// Copies a host tensor (fp16 or bf16) to the device.
    pub fn upload(&self, tensor: &HostTensor) -> Result<DeviceTensor> {
        let dtype = tensor.dtype()?;
        if !matches!(dtype, DType::F16 | DType::Bf16) {
            return Err(KernelError::Unsupported {
                implementation: "the GPU path".into(),
                what: format!("dtype {dtype}"),
            });
        }
        let bits: Vec<u16> = tensor
            .as_bytes()
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        let buf = self.stream.clone_htod(&bits).during("cuMemcpyHtoD")?;
        Ok(DeviceTensor {
            dims: tensor.dims,
            dtype,
            buf,
        })
    }

    /// Copies a host tensor into an existing device tensor of the same dims and dtype.
    pub fn copy_into(&self, tensor: &HostTensor, device: &mut DeviceTensor) -> Result<()> {
        let dtype = tensor.dtype()?;
        if tensor.dims != device.dims || dtype != device.dtype {
            return Err(KernelError::Shape(format!(
                "a {dtype} {:?} tensor copied into a {} {:?} one",
                tensor.dims, device.dtype, device.dims
            )));
        }
        let bits: Vec<u16> = tensor
            .as_bytes()
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        self.stream
            .memcpy_htod(&bits, &mut device.buf)
            .during("cuMemcpyHtoD")
    }

    /// Copies a varlen batch's offsets to the device.
    pub fn upload_offsets(&self, varlen: &attn_oracle::Varlen) -> Result<VarlenOffsets> {
        Ok(VarlenOffsets {
            cu_q: self
                .stream
                .clone_htod(&varlen.cu_seqlens_q())
                .during("cuMemcpyHtoD (cu_seqlens_q)")?,
            cu_kv: self
                .stream
                .clone_htod(&varlen.cu_seqlens_kv())
                .during("cuMemcpyHtoD (cu_seqlens_kv)")?,
            varlen: varlen.clone(),
        })
    }

    /// An output tensor filled with the poison pattern of its dtype.
    pub fn alloc_poisoned(&self, dims: [usize; 4], dtype: DType) -> Result<DeviceTensor> {
        let len: usize = dims.iter().product();
        // SAFETY: the buffer is fully written by `poison` before anything reads it.
        let buf = unsafe { self.stream.alloc::<u16>(len) }.during("cuMemAlloc")?;
        let mut tensor = DeviceTensor { dims, dtype, buf };
        self.poison(&mut tensor)?;
        Ok(tensor)
    }

    /// Overwrites every element with the poison pattern, so an unwritten output shows.
    pub fn poison(&self, tensor: &mut DeviceTensor) -> Result<()> {
        let bits = match tensor.dtype {
            DType::Bf16 => attn_oracle::POISON_BF16_BITS,
            _ => attn_oracle::POISON_F16_BITS,
        };
        let len = tensor.buf.len();
        let (ptr, _guard) = tensor.buf.device_ptr_mut(&self.stream);
        // SAFETY: `ptr` addresses `len` u16 elements owned by `tensor`, on our stream.
        unsafe { cudarc::driver::sys::cuMemsetD16Async(ptr, bits, len, self.stream.cu_stream()) }
            .result()
            .during("cuMemsetD16Async")
    }

    /// Copies a device tensor back.
    pub fn download(&self, tensor: &DeviceTensor) -> Result<HostTensor> {
        let bits: Vec<u16> = self.stream.clone_dtoh(&tensor.buf).during("cuMemcpyDtoH")?;
        self.synchronize()?;
        let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
        Ok(HostTensor::from_bytes(tensor.dims, tensor.dtype, &bytes)?)
    }

    /// Waits for all work on the device (every stream), surfacing any asynchronous fault.
    pub fn synchronize(&self) -> Result<()> {
        self.ctx.synchronize().during("cuCtxSynchronize")
    }
}

/// An exclusive hold on GPU `ordinal` among the processes of this machine that ask for one (a
/// `flock` on a file in the temporary folder), released when dropped. GPU tests take it so that
/// tests sharing a device never run at once (timings and the guards' device measurements assume
/// the device is theirs); a test's child processes run under their parent's hold and must not
/// ask again. `None` where the lock file cannot be opened (then nothing is serialised).
pub fn device_lock(ordinal: usize) -> Option<DeviceLock> {
    use std::os::fd::AsRawFd;
    let path = std::env::temp_dir().join(format!("attn-gpu-{ordinal}.lock"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ok()?;
    // SAFETY: flock on a descriptor this function owns; it blocks until the lock is free.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0;
    locked.then_some(DeviceLock { _file: file })
}

/// See [`device_lock`].
#[derive(Debug)]
pub struct DeviceLock {
    _file: std::fs::File,
}

fn driver_cuda_version() -> Result<String> {
    let mut version = 0;
    // SAFETY: the driver library is loaded (Gpu::open checked); the out-pointer is a valid local.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) }
        .result()
        .during("cuDriverGetVersion")?;
    Ok(format!("{}.{}", version / 1000, (version % 1000) / 10))
}
