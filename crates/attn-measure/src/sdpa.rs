//! PyTorch SDPA as a baseline and a second reference, through an embedded Python helper that
//! stays alive for the whole run (`python3`, or `ATTN_PYTHON`): typed requests go to its stdin and
//! typed replies come back on its stdout, one JSON object a line. A reply missing a field is an
//! error, never a silent default. The same helper runs FlashAttention-3 ([`Backend::Fa3`]) through
//! JAX, so that FA3 is a baseline timed in the same run as our kernels, and PyTorch's own kernels
//! for packed variable-length batches and sliding windows ([`Backend::Varlen`], [`Backend::Flex`]),
//! which SDPA lacks. A decode batch of equal lengths runs through SDPA too ([`Sdpa::time_decode`]),
//! on a contiguous cache and with its new tokens aligned at the end of each sequence; any paged
//! decode batch, ragged included, runs through FlashInfer ([`Backend::Flashinfer`]) on a paged
//! cache of the batch's page size and page policy.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use attn_evidence::DType;
use attn_kernels::{TimingMode, TimingOptions, Timings};
use attn_oracle::{DecodeSpec, KvLayout};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::{MeasureError, Problem, Result};

const HELPER: &str = include_str!("sdpa_helper.py");

/// Which SDPA backend PyTorch is asked to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// PyTorch's own dispatch (cuDNN on an H100).
    Default,
    /// FlashAttention-2.
    Flash,
    /// Memory-efficient attention.
    Efficient,
    /// cuDNN, explicitly.
    Cudnn,
    /// The unfused math path.
    Math,
    /// Not SDPA: FlashAttention-3's prebuilt library ([`FA3_LIB_VAR`] names it), called through
    /// JAX's FFI by the same helper. JAX exposes no CUDA events, so it is timed in batch mode only
    /// ([`Backend::check_mode`]), by the device span (CUPTI) of one dispatch of back-to-back calls.
    Fa3,
    /// Not SDPA: PyTorch's `torch.nn.attention.varlen.varlen_attn` (2.10 or later), its
    /// FlashAttention-2 kernel over packed sequences with cumulative offsets and a sliding
    /// window: PyTorch's baseline for varlen batches and windows, which SDPA has no kernel for.
    /// Grouped heads go to the kernel as they are; a dense batch runs as B sequences of equal
    /// length. Its output is checked on sampled rows against a float64 reference before it is
    /// timed, as FA3's is.
    Varlen,
    /// Not SDPA: FlexAttention (`torch.nn.attention.flex_attention`, compiled with
    /// `torch.compile` once per helper process) with a block mask of the problem's mask, so that
    /// the blocks a window or causal mask hides are skipped: PyTorch's compiled (Triton) kernel for
    /// windows, on dense batches (grouped heads through `enable_gqa`). Checked on sampled rows
    /// before it is timed, as FA3's is.
    Flex,
    /// Not SDPA: FlashInfer's paged decode, for decode batches only ([`decode_refusal`]): its
    /// tensor-core decode wrapper when every sequence has one new token, its paged prefill
    /// wrapper (causal, bottom-right) otherwise, on a paged cache with the batch's page size,
    /// page policy and lengths, planned outside the timed region. Checked on sampled rows before
    /// it is timed, as FA3's is; its version goes into the run's provenance.
    Flashinfer,
    /// Not SDPA: a user's Python callable, `fn(q, k, v, scale=, causal=) -> O` on `[B, H, S, D]`
    /// tensors, named by `--baseline py:FILE.py:FUNCTION` ([`Sdpa::load_callable`] loads it into
    /// the helper; it is never parsed from a backend name). Checked on sampled rows, then timed
    /// eagerly with fresh inputs for every sample, every timed output checked, by a timer bound
    /// before its module ran (sdpa_helper.py's `PyCallable` says what that covers).
    Py,
}

/// The environment variable naming FlashAttention-3's library (a build exporting the XLA FFI
/// target `dew_flash3_mha_fwd`).
pub const FA3_LIB_VAR: &str = "ATTN_FA3_LIB";

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 10] = [
        Backend::Default,
        Backend::Flash,
        Backend::Efficient,
        Backend::Cudnn,
        Backend::Math,
        Backend::Fa3,
        Backend::Varlen,
        Backend::Flex,
        Backend::Flashinfer,
        Backend::Py,
    ];

    /// Its name on the command line and in evidence.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Default => "default",
            Backend::Flash => "flash",
            Backend::Efficient => "efficient",
            Backend::Cudnn => "cudnn",
            Backend::Math => "math",
            Backend::Fa3 => "fa3",
            Backend::Varlen => "varlen",
            Backend::Flex => "flex",
            Backend::Flashinfer => "flashinfer",
            Backend::Py => "py",
        }
    }

    /// Whether it is one of SDPA's own backends (else FlashAttention-3, varlen_attn,
    /// FlexAttention or FlashInfer: asked for by name, each with problems SDPA has no kernel for).
    pub fn is_sdpa(self) -> bool {
        matches!(
            self,
            Backend::Default | Backend::Flash | Backend::Efficient | Backend::Cudnn | Backend::Math
        )
    }

    /// Whether the helper times decode batches with it: SDPA's own backends and FlashInfer.
    pub fn times_decode(self) -> bool {
        self.is_sdpa() || self == Backend::Flashinfer
    }

    /// Refuses, in one line, a timing mode this backend cannot be timed in: FA3 runs through
    /// JAX, which exposes no CUDA events, so only batch mode (the device span of many calls).
    pub fn check_mode(self, mode: TimingMode) -> Result<()> {
        if self == Backend::Fa3 && mode != TimingMode::Batch {
            return Err(MeasureError::Invalid(format!(
                "FlashAttention-3 is timed through JAX, which exposes no CUDA events: use --mode batch (not {mode})"
            )));
        }
        Ok(())
    }

    /// The library of [`Backend::Fa3`], from [`FA3_LIB_VAR`]: a missing variable or file is one
    /// line.
    pub fn fa3_library() -> Result<PathBuf> {
        let path = std::env::var_os(FA3_LIB_VAR).map(PathBuf::from).ok_or_else(|| {
            MeasureError::Invalid(format!(
                "the fa3 baseline needs {FA3_LIB_VAR}, the path of FlashAttention-3's library (a build exporting the XLA FFI target dew_flash3_mha_fwd)"
            ))
        })?;
        if !path.is_file() {
            return Err(MeasureError::Invalid(format!(
                "{FA3_LIB_VAR}={} is not a file",
                path.display()
            )));
        }
        Ok(path)
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Backend {
    type Err = MeasureError;

    fn from_str(text: &str) -> Result<Backend> {
        if text == "py" {
            return Err(MeasureError::Invalid(
                "a Python callable is named by --baseline py:FILE.py:FUNCTION, not by a backend name".into(),
            ));
        }
        Backend::ALL
            .into_iter()
            .find(|b| b.as_str() == text)
            .ok_or_else(|| {
                MeasureError::Invalid(format!(
                    "unknown SDPA backend `{text}` (known: default, flash, efficient, cudnn, math, fa3 for FlashAttention-3, varlen for PyTorch's varlen_attn, flex for FlexAttention, flashinfer for FlashInfer's paged decode)"
                ))
            })
    }
}

/// Why the helper refuses `problem` with `backend`, one line naming the alternatives; `None` when
/// the backend runs it as it is. A packed varlen batch: only [`Backend::Varlen`] takes one (SDPA
/// and FA3 take dense `[B, H, S, D]` tensors here; timing or running the bounding dense batch
/// instead would be other work, so nothing is sent). A sliding window: SDPA has no window kernel
/// (a boolean mask runs its dense masked paths, not a window baseline); varlen_attn, FlexAttention
/// and FlashAttention-3 ([`Backend::Fa3`]) have one. FlashInfer ([`Backend::Flashinfer`]) is a
/// decode baseline only here: every prefill problem is refused.
pub fn refusal(problem: &Problem, backend: Backend) -> Option<String> {
    if backend == Backend::Flashinfer {
        return Some(format!(
            "{problem}: flashinfer times decode batches only (its paged decode and paged prefill over a KV cache): give a decode batch (--shape \"decode ...\" or --suite decode-llama3-8b), or another backend for a prefill problem"
        ));
    }
    if problem.varlen.is_some() && backend != Backend::Varlen {
        return Some(format!(
            "{problem}: {backend} is no baseline for a packed varlen batch (it takes dense batches, and a padded batch is other work); time PyTorch's varlen_attn (--sdpa-backend varlen) or a registered implementation (--baseline mma)"
        ));
    }
    if backend == Backend::Py && problem.params.window.is_bounded() {
        return Some(format!(
            "{problem}: a py callable is called as fn(q, k, v, scale=, causal=), with no window to pass; gate a window against --sdpa-backend varlen or flex, or a registered implementation"
        ));
    }
    if !backend.is_sdpa() {
        return None;
    }
    problem.params.window.is_bounded().then(|| format!(
        "{problem}: PyTorch SDPA has no sliding-window kernel (a boolean mask runs its dense masked paths), so it is no baseline for a window; gate against PyTorch's kernels that have one (--sdpa-backend varlen for varlen_attn, flex for FlexAttention), another implementation (--baseline mma) or FlashAttention-3 (--baseline fa3 --mode batch)"
    ))
}

/// Head dims FlashInfer's paged decode and prefill kernels are built for.
pub const FLASHINFER_HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// Why FlashAttention-3 times no decode batch: the build the toolkit loads (dew-flash-attn-cu13's,
/// the library of [`FA3_LIB_VAR`]) is compiled without its paged-KV and split-KV paths, which say
/// so themselves ("This build does not support paged KV.", "... does not support splits.").
pub const FA3_NO_DECODE: &str = "FlashAttention-3's library here is built without paged KV and without split-KV, so it is no decode baseline: use flashinfer, an SDPA backend or --baseline decode-naive";

/// Why SDPA's `backend` (or FlashInfer) cannot be the baseline of decode batch `spec`, one line
/// naming the alternative; `None` when it can. SDPA takes dense tensors, so the sequences' lengths
/// must be equal (a padded batch is other work), and it has no window kernel (as for prefill).
/// FlashInfer takes ragged batches and a left window, but reads a paged cache only (a contiguous
/// batch has no page size to give it) at the head dims it is built for.
pub fn decode_refusal(spec: &DecodeSpec, backend: Backend) -> Option<String> {
    if backend == Backend::Flashinfer {
        if spec.layout().page_size().is_none() {
            return Some(format!(
                "{spec}: flashinfer reads a paged KV cache and this batch's is contiguous: give it a page size (page=16) or use an SDPA backend"
            ));
        }
        if !FLASHINFER_HEAD_DIMS.contains(&spec.head_dim()) {
            return Some(format!(
                "{spec}: flashinfer's paged decode is built for head dims 64, 128 and 256, not D={} — use --baseline decode-naive",
                spec.head_dim()
            ));
        }
        return None;
    }
    if backend == Backend::Fa3 {
        return Some(format!("{spec}: {FA3_NO_DECODE}"));
    }
    if !backend.is_sdpa() {
        return Some(format!(
            "{spec}: --sdpa-backend {backend} does not time decode batches: SDPA's own backends (default, flash, efficient, cudnn, math), flashinfer, or --baseline decode-naive"
        ));
    }
    let (q, kv) = (spec.seqlens_q(), spec.seqlens_kv());
    let equal = |l: &[usize]| l.windows(2).all(|w| w[0] == w[1]);
    if !equal(q) || !equal(kv) || q.first().is_none_or(|&n| n == 0) {
        let list = |l: &[usize]| {
            l.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        return Some(format!(
            "SDPA takes equal lengths: {spec} has q={} kv={} — use {}",
            list(q),
            list(kv),
            decode_alternatives(spec)
        ));
    }
    spec.window().filter(|w| w.is_bounded()).map(|_| format!(
        "{spec}: PyTorch SDPA has no sliding-window kernel (a boolean mask runs its dense masked paths), so it is no baseline for a window — use {}",
        decode_alternatives(spec)
    ))
}

/// The baselines that do time `spec` when SDPA cannot: FlashInfer where it takes the batch, and
/// the registered naive decode always.
fn decode_alternatives(spec: &DecodeSpec) -> &'static str {
    if decode_refusal(spec, Backend::Flashinfer).is_none() {
        "--sdpa-backend flashinfer or --baseline decode-naive"
    } else {
        "--baseline decode-naive"
    }
}

/// A varlen batch's lengths as the helper's requests carry them.
#[derive(Debug, Serialize)]
struct PackedLengths<'a> {
    q: &'a [usize],
    kv: &'a [usize],
}

impl<'a> PackedLengths<'a> {
    fn of(problem: &'a Problem) -> Option<PackedLengths<'a>> {
        problem.spec.varlen.as_ref().map(|v| PackedLengths {
            q: &v.seqlens_q,
            kv: &v.seqlens_kv,
        })
    }
}

/// Versions the helper reports.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SdpaInfo {
    /// `torch.__version__`.
    pub torch: String,
    /// `torch.version.cuda`.
    pub cuda: String,
    /// `torch.backends.cudnn.version()`.
    pub cudnn: String,
    /// `flashinfer.__version__`, once a decode request has run FlashInfer ([`Sdpa::versions`]);
    /// never in the info reply, which imports nothing that is not asked for.
    #[serde(skip)]
    pub flashinfer: Option<String>,
}

/// A request to the helper.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum Request<'a> {
    Info,
    /// Import FlashInfer's attention modules and name its version.
    Flashinfer,
    /// Load the py backend's callable.
    Callable {
        file: &'a Path,
        function: &'a str,
    },
    Run(RunRequest<'a>),
    /// Wait for all of the helper's device work (before it is paused).
    Sync,
    Time(TimeRequest<'a>),
    Decode(DecodeRequest<'a>),
    Backward(BackwardRequest),
    #[serde(rename = "backward_run")]
    BackwardRun(BackwardRunRequest<'a>),
}

/// How a time request is timed: the backend and the harness's protocol, the same fields for
/// every kind of problem.
#[derive(Debug, Serialize)]
struct Protocol {
    backend: Backend,
    warmup: usize,
    samples: usize,
    mode: TimingMode,
    batch_launches: usize,
    guard_launches: usize,
    sets: usize,
    seed: u64,
    flush_bytes: usize,
}

impl Protocol {
    fn new(
        backend: Backend,
        opts: &TimingOptions,
        sets: usize,
        seed: u64,
        flush_bytes: usize,
    ) -> Protocol {
        Protocol {
            backend,
            warmup: opts.warmup,
            samples: opts.samples,
            mode: opts.mode,
            // As many launches a sample as a kernel side makes on `sets` (one set each).
            batch_launches: attn_kernels::timing::launches_per_sample(opts, sets),
            guard_launches: opts.guard_launches,
            sets,
            seed,
            flush_bytes,
        }
    }
}

/// Time SDPA on a decode batch of equal lengths with the harness's protocol: Q `[B, H, q, D]`,
/// K and V contiguous `[B, H_kv, kv, D]`, the new tokens the last `q` of each sequence; or
/// FlashInfer on a paged cache of `layout`'s page size and policy, the lengths as they are.
#[derive(Debug, Serialize)]
struct DecodeRequest<'a> {
    /// Each sequence's new tokens.
    q: &'a [usize],
    /// Each sequence's keys, the new tokens included.
    kv: &'a [usize],
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    dtype: DType,
    window: (i32, i32),
    scale: f64,
    /// The kernel side's cache layout: `"contiguous"` or `{"paged": {"page_size", "policy"}}`.
    layout: KvLayout,
    #[serde(flatten)]
    protocol: Protocol,
}

impl<'a> DecodeRequest<'a> {
    fn new(
        spec: &'a DecodeSpec,
        backend: Backend,
        opts: &TimingOptions,
        sets: usize,
        seed: u64,
        flush_bytes: usize,
    ) -> DecodeRequest<'a> {
        DecodeRequest {
            q: spec.seqlens_q(),
            kv: spec.seqlens_kv(),
            heads: spec.heads(),
            kv_heads: spec.kv_heads(),
            head_dim: spec.head_dim(),
            dtype: spec.dtype(),
            window: spec.window().unwrap_or_default().abi(),
            scale: spec.params().scale,
            layout: spec.layout(),
            protocol: Protocol::new(backend, opts, sets, seed, flush_bytes),
        }
    }
}

/// Compute SDPA's output on `.npy` inputs.
#[derive(Debug, Serialize)]
struct RunRequest<'a> {
    q: &'a Path,
    k: &'a Path,
    v: &'a Path,
    out: &'a Path,
    dtype: DType,
    causal: bool,
    window: (i32, i32),
    scale: f64,
    backend: Backend,
    /// A varlen batch's lengths (its files packed), or `None` for a dense batch.
    varlen: Option<PackedLengths<'a>>,
    /// Where a py callable's second call on the same inputs writes its output.
    #[serde(skip_serializing_if = "Option::is_none")]
    second: Option<&'a Path>,
}

/// Time SDPA with the harness's protocol.
#[derive(Debug, Serialize)]
struct TimeRequest<'a> {
    /// `[B, H, S_q, S_kv, D]`: a varlen batch's bounding dense shape.
    shape: [usize; 5],
    kv_heads: usize,
    dtype: DType,
    causal: bool,
    window: (i32, i32),
    scale: f64,
    /// A varlen batch's lengths, or `None` for a dense batch.
    varlen: Option<PackedLengths<'a>>,
    /// The bound every timed output of a py callable is held to (the oracle's table for normal
    /// inputs); absent for the other backends.
    #[serde(skip_serializing_if = "Option::is_none")]
    tolerance: Option<attn_oracle::Tolerance>,
    #[serde(flatten)]
    protocol: Protocol,
}

/// The helper's reply to a callable request.
#[derive(Debug, Deserialize)]
struct CallableReply {
    #[allow(dead_code)] // read to check the reply's form
    callable: String,
}

/// The helper's reply to a time request.
#[derive(Debug, Deserialize)]
struct TimeReply {
    samples_us: Vec<f64>,
    wall_us: Vec<f64>,
    guard_event_us: Vec<f64>,
    launches_per_sample: usize,
}

/// The helper's reply to a decode request: the timings, and the FlashInfer version that ran
/// (`null` for SDPA).
#[derive(Debug, Deserialize)]
struct DecodeReply {
    #[serde(flatten)]
    timings: TimeReply,
    flashinfer: Option<String>,
}

/// The helper's reply to a flashinfer request.
#[derive(Debug, Deserialize)]
struct FlashinferReply {
    flashinfer: String,
}

/// The helper's reply to a sync request.
#[derive(Debug, Deserialize)]
struct SyncReply {
    #[allow(dead_code)] // read to check the reply's form
    synced: bool,
}

/// The helper's reply to a run request.
#[derive(Debug, Deserialize)]
struct RunReply {
    #[allow(dead_code)] // read to check the reply's form
    out: PathBuf,
}

/// One reply line.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Reply<T> {
    Ok {
        ok: T,
    },
    // Before `Error`: an untagged reply with both fields is a refusal.
    Refused {
        refused: crate::py_gate::Refusal,
        error: String,
    },
    Error {
        error: String,
    },
    Fatal {
        fatal: String,
    },
}

struct Process {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// The running helper, its scratch folder, and what it reported.
pub struct Sdpa {
    process: Mutex<Process>,
    dir: PathBuf,
    /// Versions, as the info reply gave them ([`Sdpa::versions`] adds FlashInfer's).
    pub info: SdpaInfo,
    /// The FlashInfer version the helper reported, once it ran FlashInfer.
    flashinfer: Mutex<Option<String>>,
}

impl std::fmt::Debug for Sdpa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sdpa")
            .field("dir", &self.dir)
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl Drop for Sdpa {
    fn drop(&mut self) {
        let _ = self.resume();
        if let Ok(mut p) = self.process.lock() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Sdpa {
    /// Starts the helper and reads its versions. `Err` says in one line why PyTorch is unusable.
    pub fn detect() -> Result<Sdpa> {
        let python = std::env::var("ATTN_PYTHON").unwrap_or_else(|_| "python3".into());
        Sdpa::start(&python)
    }

    /// [`Sdpa::detect`] with the Python `python`.
    fn start(python: &str) -> Result<Sdpa> {
        // One folder per helper: a py candidate's helper and its baseline's live side by side.
        let (dir, script) = crate::supervise::script_folder("sdpa", "sdpa_helper.py", HELPER)?;
        let mut child = Command::new(python)
            .arg(&script)
            // Its own process group, which `pause` stops whole; a group left stopped when this
            // process dies is orphaned, and the kernel sends it SIGHUP and SIGCONT.
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| MeasureError::Io {
                what: format!("no Python to run PyTorch SDPA (`{python}`; set ATTN_PYTHON)"),
                source,
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(MeasureError::Sdpa("the helper's pipes are missing".into()));
        };
        let mut sdpa = Sdpa {
            process: Mutex::new(Process {
                child,
                stdin,
                stdout: BufReader::new(stdout),
            }),
            dir,
            info: SdpaInfo {
                torch: String::new(),
                cuda: String::new(),
                cudnn: String::new(),
                flashinfer: None,
            },
            flashinfer: Mutex::new(None),
        };
        sdpa.info = sdpa.call(&Request::Info)?;
        Ok(sdpa)
    }

    /// Stops the helper's process group once its device work is done (a whole-device sync in
    /// it), so that nothing it runs (a thread a callable started, say) shares the GPU while
    /// another side is timed; [`Sdpa::resume`] lets it go on. Not covered: work a thread queues in
    /// the moment between the sync's reply and the stop.
    pub fn pause(&self) -> Result<()> {
        let _: SyncReply = self.call(&Request::Sync)?;
        self.signal(libc::SIGSTOP)
    }

    /// Lets a paused helper go on ([`Sdpa::pause`]); a helper not paused is unaffected.
    pub fn resume(&self) -> Result<()> {
        self.signal(libc::SIGCONT)
    }

    fn signal(&self, signal: libc::c_int) -> Result<()> {
        let p = self.process.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: killpg only sends a signal; the group id is the helper's pid, its group leader
        // (`process_group(0)` at spawn), not yet reaped while `p.child` is held.
        let sent = unsafe { libc::killpg(p.child.id() as libc::pid_t, signal) };
        if sent != 0 {
            return Err(MeasureError::Io {
                what: "signalling the Python helper".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    fn call<T: DeserializeOwned>(&self, request: &Request<'_>) -> Result<T> {
        let mut p = self.process.lock().unwrap_or_else(|e| e.into_inner());
        let line = serde_json::to_string(request)
            .map_err(|e| MeasureError::Sdpa(format!("encoding a request: {e}")))?;
        let sent = writeln!(p.stdin, "{line}").and_then(|()| p.stdin.flush());
        let mut answer = String::new();
        let read = sent.and_then(|()| p.stdout.read_line(&mut answer));
        if read.is_err() || answer.is_empty() {
            let status = p.child.try_wait().ok().flatten();
            return Err(MeasureError::Sdpa(match status {
                Some(s) => format!("the Python helper exited ({s})"),
                None => "the Python helper stopped answering".into(),
            }));
        }
        match serde_json::from_str::<Reply<T>>(&answer) {
            Ok(Reply::Ok { ok }) => Ok(ok),
            Ok(Reply::Refused { refused, error }) => Err(MeasureError::Refused {
                refusal: refused,
                message: error,
            }),
            Ok(Reply::Error { error }) => Err(MeasureError::Sdpa(error)),
            Ok(Reply::Fatal { fatal }) => Err(MeasureError::Sdpa(fatal)),
            Err(e) => Err(MeasureError::Sdpa(format!(
                "malformed reply from the helper ({e}): {}",
                answer.trim()
            ))),
        }
    }

    /// The versions for a run's provenance: the info reply's, with FlashInfer's when it ran.
    pub fn versions(&self) -> SdpaInfo {
        let flashinfer = self.flashinfer.lock().unwrap_or_else(|e| e.into_inner());
        SdpaInfo {
            flashinfer: flashinfer.clone(),
            ..self.info.clone()
        }
    }

    /// Imports FlashInfer in the helper and returns its version (recorded for provenance), so
    /// that a missing or broken install is one line before anything is timed.
    pub fn probe_flashinfer(&self) -> Result<String> {
        // The helper's line already names FlashInfer and the fix: not prefixed as SDPA's.
        let reply: FlashinferReply = self.call(&Request::Flashinfer).map_err(|e| match e {
            MeasureError::Sdpa(line) => MeasureError::Invalid(line),
            other => other,
        })?;
        *self.flashinfer.lock().unwrap_or_else(|e| e.into_inner()) = Some(reply.flashinfer.clone());
        Ok(reply.flashinfer)
    }

    /// A path in the helper's scratch folder.
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// SDPA's (or varlen_attn's) output on `.npy` inputs `[q, k, v]` (packed for a varlen
    /// batch), written to `out`.
    pub fn run(
        &self,
        qkv: [&Path; 3],
        out: &Path,
        problem: &Problem,
        backend: Backend,
    ) -> Result<()> {
        self.run_request(qkv, out, None, problem, backend)
    }

    /// The loaded py callable ([`Sdpa::load_callable`]) called twice on `.npy` inputs `[q, k, v]`
    /// of a dense `problem` (a candidate's check): the first output written to `out`, the second
    /// to `second`; a broken calling contract (a view of the inputs, changed inputs, a down-cast,
    /// another stream, a patched timer, one memory for both outputs) is [`MeasureError::Refused`].
    pub fn run_callable(
        &self,
        qkv: [&Path; 3],
        out: &Path,
        second: &Path,
        problem: &Problem,
    ) -> Result<()> {
        self.run_request(qkv, out, Some(second), problem, Backend::Py)
    }

    fn run_request(
        &self,
        [q, k, v]: [&Path; 3],
        out: &Path,
        second: Option<&Path>,
        problem: &Problem,
        backend: Backend,
    ) -> Result<()> {
        if let Some(why) = refusal(problem, backend) {
            return Err(MeasureError::Invalid(why));
        }
        let _: RunReply = self.call(&Request::Run(RunRequest {
            q,
            k,
            v,
            out,
            dtype: problem.spec.dtype,
            causal: problem.params.causal,
            window: problem.params.window.abi(),
            scale: problem.params.scale,
            backend,
            varlen: PackedLengths::of(problem),
            second,
        }))?;
        Ok(())
    }

    /// Loads `function` of the Python file `file` as the helper's py backend ([`Backend::Py`]):
    /// importing it runs its module in the helper's process, after the helper has bound its timer.
    pub fn load_callable(&self, file: &Path, function: &str) -> Result<()> {
        let _: CallableReply = self
            .call(&Request::Callable { file, function })
            .map_err(|e| MeasureError::Sdpa(format!("py:{}:{function}: {e}", file.display())))?;
        Ok(())
    }

    /// Times SDPA on `problem` with the harness's protocol: `sets` input sets drawn from `seed`,
    /// the L2 flushed with `flush_bytes`. Repeated calls on one problem continue its rotation.
    pub fn time(
        &self,
        problem: &Problem,
        backend: Backend,
        opts: &TimingOptions,
        sets: usize,
        seed: u64,
        flush_bytes: usize,
    ) -> Result<Timings> {
        if let Some(why) = refusal(problem, backend) {
            return Err(MeasureError::Invalid(why));
        }
        let s = &problem.spec;
        let reply: TimeReply = self
            .call(&Request::Time(TimeRequest {
                shape: [s.batch, s.heads, s.seq_q, s.seq_kv, s.head_dim],
                kv_heads: problem.shape.kv_heads,
                dtype: s.dtype,
                causal: problem.params.causal,
                window: problem.params.window.abi(),
                scale: problem.params.scale,
                varlen: PackedLengths::of(problem),
                tolerance: (backend == Backend::Py)
                    .then(|| attn_oracle::tolerance(s.dtype, attn_oracle::Distribution::Normal)),
                protocol: Protocol::new(backend, opts, sets, seed, flush_bytes),
            }))
            .map_err(|e| MeasureError::Sdpa(format!("{backend} on {problem}: {e}")))?;
        Ok(reply.timings(opts, sets))
    }

    /// Times SDPA (or FlashInfer) on decode batch `spec` ([`decode_refusal`] first) with the
    /// harness's protocol on `sets` input sets drawn from `seed`; the helper checks its output on
    /// sampled rows against a float64 reference before it times.
    pub fn time_decode(
        &self,
        spec: &DecodeSpec,
        backend: Backend,
        opts: &TimingOptions,
        sets: usize,
        seed: u64,
        flush_bytes: usize,
    ) -> Result<Timings> {
        if let Some(why) = decode_refusal(spec, backend) {
            return Err(MeasureError::Invalid(why));
        }
        let request = DecodeRequest::new(spec, backend, opts, sets, seed, flush_bytes);
        let reply: DecodeReply = self
            .call(&Request::Decode(request))
            .map_err(|e| MeasureError::Sdpa(format!("{backend} on {spec}: {e}")))?;
        if backend == Backend::Flashinfer {
            // Evidence must say which FlashInfer ran: a reply without its version is refused.
            let version = reply.flashinfer.clone().ok_or_else(|| {
                MeasureError::Sdpa(format!(
                    "{backend} on {spec}: the helper's reply did not name FlashInfer's version"
                ))
            })?;
            *self.flashinfer.lock().unwrap_or_else(|e| e.into_inner()) = Some(version);
        }
        Ok(reply.timings.timings(opts, sets))
    }
}

impl TimeReply {
    fn timings(self, opts: &TimingOptions, sets: usize) -> Timings {
        Timings {
            mode: opts.mode,
            warmup: opts.warmup,
            launches_per_sample: self.launches_per_sample,
            input_sets: sets,
            samples_us: self.samples_us,
            wall_us: self.wall_us,
            guard_event_us: self.guard_event_us,
            guard_residual_us: vec![],
            guard_stream_residual_us: vec![],
        }
    }
}

/// Time SDPA's backward (dQ, dK, dV through autograd, the forward kept outside the timed region)
/// with the harness's protocol on a dense batch ([`crate::backward::sdpa`] says what is timed).
#[derive(Debug, Serialize)]
struct BackwardRequest {
    /// `[B, H, S_q, S_kv, D]`.
    shape: [usize; 5],
    kv_heads: usize,
    dtype: DType,
    causal: bool,
    window: (i32, i32),
    scale: f64,
    #[serde(flatten)]
    protocol: Protocol,
}

impl BackwardRequest {
    fn new(problem: &Problem, protocol: Protocol) -> BackwardRequest {
        let s = &problem.spec;
        BackwardRequest {
            shape: [s.batch, s.heads, s.seq_q, s.seq_kv, s.head_dim],
            kv_heads: problem.shape.kv_heads,
            dtype: s.dtype,
            causal: problem.params.causal,
            window: problem.params.window.abi(),
            scale: problem.params.scale,
            protocol,
        }
    }
}

/// Compute SDPA's gradients (and its forward's O) on `.npy` inputs Q, K, V and dO.
#[derive(Debug, Serialize)]
struct BackwardRunRequest<'a> {
    q: &'a Path,
    k: &'a Path,
    v: &'a Path,
    #[serde(rename = "do")]
    d_o: &'a Path,
    dq: &'a Path,
    dk: &'a Path,
    dv: &'a Path,
    o: &'a Path,
    dtype: DType,
    causal: bool,
    window: (i32, i32),
    scale: f64,
    backend: Backend,
}

/// The helper's reply to a backward run request.
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // read to check the reply's form
struct BackwardRunReply {
    dq: PathBuf,
    dk: PathBuf,
    dv: PathBuf,
    o: PathBuf,
}

impl Sdpa {
    /// SDPA's dQ, dK and dV through autograd on `.npy` inputs `[q, k, v, do]` (the forward run
    /// with `backend` first), written with the forward's O to `[dq, dk, dv, o]`;
    /// [`crate::backward::sdpa::backward_refusal`] first.
    pub fn run_backward(
        &self,
        inputs: [&Path; 4],
        outputs: [&Path; 4],
        problem: &Problem,
        backend: Backend,
    ) -> Result<()> {
        if let Some(why) = crate::backward::sdpa::backward_refusal(problem, backend) {
            return Err(MeasureError::Invalid(why));
        }
        let ([q, k, v, d_o], [dq, dk, dv, o]) = (inputs, outputs);
        let _: BackwardRunReply = self.call(&Request::BackwardRun(BackwardRunRequest {
            q,
            k,
            v,
            d_o,
            dq,
            dk,
            dv,
            o,
            dtype: problem.spec.dtype,
            causal: problem.params.causal,
            window: problem.params.window.abi(),
            scale: problem.params.scale,
            backend,
        }))?;
        Ok(())
    }

    /// Times SDPA's backward on `problem` ([`crate::backward::sdpa::backward_refusal`] first)
    /// with the harness's protocol on `sets` input sets drawn from `seed`, the L2 flushed with
    /// `flush_bytes`. Repeated calls on one problem continue its rotation.
    pub fn time_backward(
        &self,
        problem: &Problem,
        backend: Backend,
        opts: &TimingOptions,
        sets: usize,
        seed: u64,
        flush_bytes: usize,
    ) -> Result<Timings> {
        if let Some(why) = crate::backward::sdpa::backward_refusal(problem, backend) {
            return Err(MeasureError::Invalid(why));
        }
        let protocol = Protocol::new(backend, opts, sets, seed, flush_bytes);
        let reply: TimeReply = self
            .call(&Request::Backward(BackwardRequest::new(problem, protocol)))
            .map_err(|e| MeasureError::Sdpa(format!("{backend}'s backward on {problem}: {e}")))?;
        Ok(reply.timings(opts, sets))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_the_helpers_protocol() {
        let line = serde_json::to_string(&Request::Info).unwrap();
        assert_eq!(line, r#"{"kind":"info"}"#);
        let time = Request::Time(TimeRequest {
            shape: [1, 2, 3, 3, 64],
            kv_heads: 1,
            dtype: DType::Bf16,
            causal: true,
            window: (16, -1),
            scale: 0.125,
            varlen: None,
            tolerance: None,
            protocol: Protocol {
                backend: Backend::Flash,
                warmup: 1,
                samples: 2,
                mode: TimingMode::Graph,
                batch_launches: 5,
                guard_launches: 3,
                sets: 2,
                seed: 9,
                flush_bytes: 16,
            },
        });
        let value: serde_json::Value = serde_json::to_value(&time).unwrap();
        assert_eq!(value["kind"], "time");
        // Only a py callable's request carries the bound its timed outputs are held to.
        assert!(value.get("tolerance").is_none());
        assert_eq!(value["dtype"], "bf16");
        assert_eq!(value["backend"], "flash");
        assert_eq!(value["mode"], "graph");
        assert_eq!(value["kv_heads"], 1);
        assert_eq!(value["window"], serde_json::json!([16, -1]));
        assert!(value["varlen"].is_null(), "a dense batch: {value}");
        // A varlen batch's files are packed and its lengths travel with the request.
        let problem = Problem::parse("varlen=512,0,300:700 H=8/2 D=64 causal").unwrap();
        let run = Request::Run(RunRequest {
            q: Path::new("q.npy"),
            k: Path::new("k.npy"),
            v: Path::new("v.npy"),
            out: Path::new("o.npy"),
            dtype: DType::F16,
            causal: true,
            window: (-1, -1),
            scale: 0.125,
            backend: Backend::Varlen,
            varlen: PackedLengths::of(&problem),
            second: None,
        });
        let value: serde_json::Value = serde_json::to_value(&run).unwrap();
        assert_eq!(value["backend"], "varlen");
        // Only a callable's check asks for a second call's output.
        assert!(value.get("second").is_none());
        assert_eq!(
            value["varlen"],
            serde_json::json!({"q": [512, 0, 300], "kv": [512, 0, 700]})
        );
    }

    #[test]
    fn a_decode_request_carries_the_batch() {
        let spec: DecodeSpec = "decode B=3 q=2 kv=700 H=32/8 D=128 page=16 bf16"
            .parse()
            .unwrap();
        let opts = TimingOptions {
            mode: TimingMode::Graph,
            ..TimingOptions::default()
        };
        let request = Request::Decode(DecodeRequest::new(&spec, Backend::Default, &opts, 4, 9, 16));
        let value: serde_json::Value = serde_json::to_value(&request).unwrap();
        assert_eq!(value["kind"], "decode");
        assert_eq!(value["q"], serde_json::json!([2, 2, 2]));
        assert_eq!(value["kv"], serde_json::json!([700, 700, 700]));
        assert_eq!(
            (&value["heads"], &value["kv_heads"], &value["head_dim"]),
            (
                &serde_json::json!(32),
                &serde_json::json!(8),
                &serde_json::json!(128)
            )
        );
        assert_eq!(value["dtype"], "bf16");
        assert_eq!(value["backend"], "default");
        assert_eq!(value["mode"], "graph");
        assert_eq!(value["window"], serde_json::json!([-1, -1]));
        assert_eq!(
            value["layout"],
            serde_json::json!({"paged": {"page_size": 16, "policy": "in-order"}})
        );
        assert_eq!(
            (&value["sets"], &value["seed"]),
            (&serde_json::json!(4), &serde_json::json!(9))
        );
        assert!((value["scale"].as_f64().unwrap() - 128f64.sqrt().recip()).abs() < 1e-12);
        for key in [
            "warmup",
            "samples",
            "batch_launches",
            "guard_launches",
            "flush_bytes",
        ] {
            assert!(value[key].is_u64(), "{key}: {value}");
        }
        assert_eq!(decode_refusal(&spec, Backend::Default), None);
    }

    #[test]
    fn sdpa_refuses_ragged_or_windowed_decode_in_one_line() {
        let ragged: DecodeSpec = "decode B=2 q=1,2 kv=100,512 H=8/2 D=64".parse().unwrap();
        let why = decode_refusal(&ragged, Backend::Default).unwrap();
        assert!(
            why.starts_with("SDPA takes equal lengths: ")
                && why.contains("q=1,2 kv=100,512")
                && why.ends_with("— use --baseline decode-naive"),
            "{why}"
        );
        let windowed: DecodeSpec = "decode B=2 q=1 kv=512 H=8/2 D=64 window=128,0"
            .parse()
            .unwrap();
        let why = decode_refusal(&windowed, Backend::Default).unwrap();
        assert!(
            why.contains("sliding-window") && why.contains("decode-naive"),
            "{why}"
        );
        let equal: DecodeSpec = "decode B=2 q=1 kv=512 H=8/2 D=64".parse().unwrap();
        let fa3 = decode_refusal(&equal, Backend::Fa3).unwrap();
        assert!(
            fa3.contains("paged KV") && fa3.contains("decode-naive"),
            "{fa3}"
        );
        assert!(decode_refusal(&equal, Backend::Flex)
            .unwrap()
            .contains("decode-naive"));
        for why in [
            decode_refusal(&ragged, Backend::Default),
            decode_refusal(&windowed, Backend::Flash),
        ] {
            assert!(!why.unwrap().contains('\n'));
        }
    }

    #[test]
    fn flashinfer_takes_paged_decode_batches_ragged_and_windowed_and_nothing_else() {
        let ragged: DecodeSpec =
            "decode B=4 q=1,2,4,1 kv=100,512,1000,17 H=8/2 D=64 page=16 pages=shuffled"
                .parse()
                .unwrap();
        assert_eq!(decode_refusal(&ragged, Backend::Flashinfer), None);
        let windowed: DecodeSpec = "decode B=2 q=1 kv=512 H=32/8 D=128 page=16 window=128,0"
            .parse()
            .unwrap();
        assert_eq!(decode_refusal(&windowed, Backend::Flashinfer), None);
        // SDPA's refusal of what FlashInfer takes names it.
        let why = decode_refusal(&ragged, Backend::Default).unwrap();
        assert!(
            why.ends_with("— use --sdpa-backend flashinfer or --baseline decode-naive"),
            "{why}"
        );
        let contiguous: DecodeSpec = "decode B=2 q=1,2 kv=100,512 H=8/2 D=64".parse().unwrap();
        let why = decode_refusal(&contiguous, Backend::Flashinfer).unwrap();
        assert!(
            why.contains("paged KV cache") && why.contains("page=16"),
            "{why}"
        );
        let odd: DecodeSpec = "decode B=2 q=1 kv=512 H=8/2 D=96 page=16".parse().unwrap();
        let why = decode_refusal(&odd, Backend::Flashinfer).unwrap();
        assert!(
            why.contains("D=96") && why.contains("decode-naive"),
            "{why}"
        );
        for why in [
            decode_refusal(&contiguous, Backend::Flashinfer),
            decode_refusal(&odd, Backend::Flashinfer),
        ] {
            assert!(!why.unwrap().contains('\n'));
        }
        // Every prefill problem is refused, in one line naming decode.
        for text in ["2,32/8,4096,128", "varlen=512,300 H=8 D=64 causal"] {
            let problem = Problem::parse(text).unwrap();
            let why = refusal(&problem, Backend::Flashinfer).unwrap();
            assert!(
                why.contains("flashinfer times decode batches only") && !why.contains('\n'),
                "{why}"
            );
        }
        // A decode request for it carries the kernel side's layout and lengths as they are.
        let opts = TimingOptions::default();
        let request = Request::Decode(DecodeRequest::new(
            &ragged,
            Backend::Flashinfer,
            &opts,
            2,
            5,
            16,
        ));
        let value: serde_json::Value = serde_json::to_value(&request).unwrap();
        assert_eq!(value["backend"], "flashinfer");
        assert_eq!(value["q"], serde_json::json!([1, 2, 4, 1]));
        assert_eq!(
            value["layout"],
            serde_json::json!({"paged": {"page_size": 16, "policy": "shuffled"}})
        );
        let probe = serde_json::to_string(&Request::Flashinfer).unwrap();
        assert_eq!(probe, r#"{"kind":"flashinfer"}"#);
    }

    #[test]
    fn a_decode_reply_names_the_flashinfer_that_ran() {
        let reply = r#"{"ok": {"samples_us": [1.0], "wall_us": [], "guard_event_us": [], "launches_per_sample": 1, "flashinfer": "0.7.4"}}"#;
        let Ok(Reply::Ok { ok }) = serde_json::from_str::<Reply<DecodeReply>>(reply) else {
            panic!("a decode reply: {reply}")
        };
        assert_eq!(ok.flashinfer.as_deref(), Some("0.7.4"));
        assert_eq!(ok.timings.samples_us, vec![1.0]);
        let sdpa = r#"{"ok": {"samples_us": [1.0], "wall_us": [], "guard_event_us": [], "launches_per_sample": 1, "flashinfer": null}}"#;
        let Ok(Reply::Ok { ok }) = serde_json::from_str::<Reply<DecodeReply>>(sdpa) else {
            panic!("an SDPA decode reply: {sdpa}")
        };
        assert_eq!(ok.flashinfer, None);
        let probe = r#"{"ok": {"flashinfer": "0.7.4"}}"#;
        assert!(matches!(
            serde_json::from_str::<Reply<FlashinferReply>>(probe),
            Ok(Reply::Ok { ok }) if ok.flashinfer == "0.7.4"
        ));
        assert!(serde_json::from_str::<Reply<FlashinferReply>>(r#"{"ok": {}}"#).is_err());
    }

    #[test]
    fn a_reply_missing_a_field_is_an_error_not_a_default() {
        let full = r#"{"ok": {"samples_us": [1.0], "wall_us": [], "guard_event_us": [], "launches_per_sample": 1}}"#;
        assert!(matches!(
            serde_json::from_str::<Reply<TimeReply>>(full),
            Ok(Reply::Ok { .. })
        ));
        let partial = r#"{"ok": {"samples_us": [1.0]}}"#;
        assert!(serde_json::from_str::<Reply<TimeReply>>(partial).is_err());
        let error = r#"{"error": "RuntimeError: no kernel"}"#;
        assert!(matches!(
            serde_json::from_str::<Reply<TimeReply>>(error),
            Ok(Reply::Error { .. })
        ));
        // A callable's refusal is typed, whatever its words; an unknown kind is no refusal.
        let refused =
            r#"{"refused": "contract", "error": "the callable left another stream current"}"#;
        assert!(matches!(
            serde_json::from_str::<Reply<TimeReply>>(refused),
            Ok(Reply::Refused {
                refused: crate::py_gate::Refusal::Contract,
                ..
            })
        ));
        let unknown = r#"{"refused": "bored", "error": "x"}"#;
        assert!(matches!(
            serde_json::from_str::<Reply<TimeReply>>(unknown),
            Ok(Reply::Error { .. })
        ));
    }

    #[test]
    fn a_paused_helper_is_stopped_whole_and_goes_on_when_resumed() {
        // A stand-in helper answering info and sync as the real one does (no PyTorch needed).
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("python");
        let responder = r#"
import json, sys
for line in sys.stdin:
    kind = json.loads(line)["kind"]
    ok = {"torch": "fake", "cuda": "", "cudnn": ""} if kind == "info" else {"synced": True}
    print(json.dumps({"ok": ok}), flush=True)
"#;
        std::fs::write(&fake, format!("#!/bin/sh\nexec python3 -c '{responder}'\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let sdpa = Sdpa::start(fake.to_str().unwrap()).unwrap();
        assert_eq!(sdpa.info.torch, "fake");
        let pid = sdpa.process.lock().unwrap().child.id();
        // The process state, the field after the command's parenthesis in /proc/PID/stat.
        let state = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            stat.rsplit(')')
                .next()
                .unwrap()
                .trim()
                .chars()
                .next()
                .unwrap()
        };
        let becomes = |stopped: bool| {
            (0..200).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                (state() == 'T') == stopped
            })
        };
        sdpa.pause().unwrap();
        assert!(becomes(true), "not stopped: {}", state());
        sdpa.resume().unwrap();
        assert!(becomes(false), "still stopped");
        let _: SyncReply = sdpa.call(&Request::Sync).unwrap();
    }

    #[test]
    fn backends_parse_by_name() {
        assert_eq!("flash".parse::<Backend>().unwrap(), Backend::Flash);
        assert_eq!("varlen".parse::<Backend>().unwrap(), Backend::Varlen);
        assert_eq!("flex".parse::<Backend>().unwrap(), Backend::Flex);
        assert_eq!(
            "flashinfer".parse::<Backend>().unwrap(),
            Backend::Flashinfer
        );
        assert!(Backend::Cudnn.is_sdpa() && !Backend::Flex.is_sdpa() && !Backend::Fa3.is_sdpa());
        assert!(!Backend::Flashinfer.is_sdpa() && Backend::Flashinfer.times_decode());
        assert!(Backend::Default.times_decode() && !Backend::Varlen.times_decode());
        assert!(Backend::Flashinfer.check_mode(TimingMode::Graph).is_ok());
        for backend in Backend::ALL.into_iter().filter(|&b| b != Backend::Py) {
            assert_eq!(backend.as_str().parse::<Backend>().unwrap(), backend);
        }
        // A callable has a file: never a bare backend name.
        let py = "py".parse::<Backend>().unwrap_err().to_string();
        assert!(py.contains("--baseline py:FILE.py:FUNCTION"), "{py}");
        assert!(!Backend::Py.is_sdpa() && !Backend::Py.times_decode());
        let err = "fast".parse::<Backend>().unwrap_err().to_string();
        assert!(
            err.contains("varlen")
                && err.contains("fa3")
                && err.contains("flex")
                && err.contains("flashinfer"),
            "{err}"
        );
    }
}

#[cfg(test)]
mod backward_tests {
    use super::*;

    #[test]
    fn backward_requests_are_the_helpers_protocol() {
        let problem = Problem::parse("2,16/4,1024,128 causal bf16").unwrap();
        let opts = TimingOptions {
            mode: TimingMode::Batch,
            ..TimingOptions::default()
        };
        let protocol = Protocol::new(Backend::Cudnn, &opts, 3, 7, 16);
        let value =
            serde_json::to_value(Request::Backward(BackwardRequest::new(&problem, protocol)))
                .unwrap();
        assert_eq!(value["kind"], "backward");
        assert_eq!(value["shape"], serde_json::json!([2, 16, 1024, 1024, 128]));
        assert_eq!(value["kv_heads"], 4);
        assert_eq!(
            (&value["dtype"], &value["causal"]),
            (&"bf16".into(), &true.into())
        );
        assert_eq!(value["window"], serde_json::json!([-1, -1]));
        assert_eq!(value["backend"], "cudnn");
        assert_eq!(value["mode"], "batch");
        assert_eq!((&value["sets"], &value["seed"]), (&3.into(), &7.into()));
        assert!(value.get("varlen").is_none(), "{value}");
        let p = Path::new;
        let run = Request::BackwardRun(BackwardRunRequest {
            q: p("q.npy"),
            k: p("k.npy"),
            v: p("v.npy"),
            d_o: p("do.npy"),
            dq: p("dq.npy"),
            dk: p("dk.npy"),
            dv: p("dv.npy"),
            o: p("o.npy"),
            dtype: DType::F16,
            causal: false,
            window: (-1, -1),
            scale: 0.125,
            backend: Backend::Flash,
        });
        let value = serde_json::to_value(&run).unwrap();
        assert_eq!(value["kind"], "backward_run");
        assert_eq!(
            (&value["do"], &value["dv"]),
            (&"do.npy".into(), &"dv.npy".into())
        );
        assert_eq!(value["backend"], "flash");
        let reply = r#"{"ok": {"dq": "a", "dk": "b", "dv": "c"}}"#;
        assert!(serde_json::from_str::<Reply<BackwardRunReply>>(reply).is_err());
    }
}
