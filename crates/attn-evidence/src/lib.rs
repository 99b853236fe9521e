//! The evidence schema: provenance, raw samples and verdicts that every command writes under
//! `evidence/`.
//!
//! # Bird's-eye view
//!
//! Every measuring command (`cargo xtask gate`, `bench`, `evo`, `micro`, `ncu`, `sanitize`) writes its result as
//! a file under `evidence/`, and `cargo xtask report` reads them back. This crate is the contract
//! between the two sides:
//!
//! - [`Provenance`]: which GPU, driver, libraries, commit and command produced a file, and the SM
//!   clock around the run. Two files are comparable only if their provenance says so.
//! - [`ShapeSpec`] (attn-problem's, re-exported with its [`DType`], [`Window`], [`Varlen`]),
//!   [`Implementation`], [`Timing`]: what ran, on what, and the *raw* samples in µs (statistics
//!   are recomputed from them; nothing is lost to pre-aggregation).
//! - [`GateRun`] (`evidence/gate/*.json`): correctness checks plus an
//!   [`attn_stats::Comparison`] per shape and a verdict. [`BenchRun`] (`evidence/bench/*.json` and a
//!   same-name `.csv`): timings with summaries. Both are an [`Evidence`], told apart by `"kind"`.
//! - [`EvoCandidate`]: one row of a search log (`evidence/evo/<run>/log.csv`,
//!   `evidence/micro/<target>/log.csv`) with its [`CandidateStatus`], read and written by
//!   [`read_evo_log`] and [`write_evo_log`]; [`SearchSpec`] (`search.json`), [`EvoBest`]
//!   (`evo/<run>/best.json`) with its [`EvoFitness`], [`EvoFinalists`] (`evo/<run>/finalists.json`,
//!   a composite-fitness search's profiled finalists): the rest of a search's files;
//!   [`IMPL_KNOB`], the key that names a config's implementation in a search over several (the
//!   log's column, which rows hold typed in [`EvoCandidate::config`], and the search's own
//!   configs), and [`ImplConfig`], a config resolved into its implementation and knobs: what
//!   crosses from the search to what measures it, and a log row's config.
//! - The micro-benchmark's files under `evidence/micro/<target>/` ([`MicroTarget`]): its ranking
//!   [`MicroBest`] (`best.json`) and how well it predicted a search, [`MicroCorrelation`]
//!   (`correlation.json`).
//! - [`SanitizeRun`] (`evidence/sanitize/*.json`): one compute-sanitizer tool run on a candidate,
//!   its [`SanitizeFinding`]s and whether it was clean.
//! - [`write_json_atomic`], [`read`], [`load_dir`], [`evidence_file_name`]: files are written
//!   atomically (temp file + rename), read with errors that name the file, and loaded in time order.
//!
//! `evidence/README.md` documents the layout and every field for people.
//!
//! ```
//! use attn_evidence::{evidence_path, load_dir, write_json_atomic, BenchRun, Evidence, Provenance};
//! let root = tempfile::tempdir()?;
//! let provenance = Provenance {
//!     gpu: "NVIDIA H100 80GB HBM3".into(), gpu_uuid: None, sm_count: Some(132), driver: None,
//!     cuda_driver_api: None, nvrtc: None, pytorch: None, torch_cuda: None, cudnn: None,
//!     flashinfer: None,
//!     git_rev: "1f367d0c0ffee".into(), git_dirty: false, date: "2025-11-22T14:19:00Z".into(),
//!     host: None, tool: "attn 0.1.0".into(), command: vec!["cargo".into(), "xtask".into(), "bench".into()],
//!     clocks: Default::default(), max_sm_mhz: None, peak_tflops: None, memory: None,
//! };
//! let run = BenchRun { schema: attn_evidence::SCHEMA_VERSION, kind: attn_evidence::EvidenceKind::Bench, provenance, suite: None, entries: vec![] };
//! let path = evidence_path(root.path(), "bench", &run.provenance.date, &run.provenance.gpu, &run.provenance.git_rev);
//! write_json_atomic(&path, &run)?;
//! let loaded = load_dir(root.path())?;
//! assert!(matches!(&loaded[..], [(p, Evidence::Bench(_))] if *p == path));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod backward;
mod bench;
mod decode;
mod defence;
mod error;
mod evo;
mod gate;
mod implementation;
mod kind;
mod matrix;
mod micro;
mod provenance;
mod sanitize;
mod search;
mod store;
mod timing;

pub use attn_problem::{DType, DecodeSpec, ProblemError, ProblemKind, ShapeSpec, Varlen, Window};
pub use backward::BackwardRecord;
pub use bench::{BenchEntry, BenchRun, DenseAtMean, BENCH_CSV_HEADER};
pub use decode::{
    achieved_gbs, copy_fraction, copy_gbs, decode_floor_us, decode_shape, DecodeRecord,
};
pub use defence::{defences_line, Defence, DefenceName, DefenceOutcome};
pub use error::EvidenceError;
pub use evo::{read_evo_log, write_evo_log, CandidateStatus, EvoCandidate, EvoLogAppender};
pub use gate::{
    too_few_blocks, BlockClock, CaseStatus, CheckFailure, ClockGuard, CorrectnessCheck,
    EdgeBattery, Flag, FlagKind, FullCheck, GateCase, GateMode, GateRule, GateRun, LaunchGuards,
    TimedOutputCheck, MIN_BLOCKS_A_SIDE,
};
pub use implementation::Implementation;
pub use kind::{EvidenceKind, Kinded};
pub use matrix::{MatrixOutcome, MatrixRun, MatrixTask};
pub use micro::{MicroBest, MicroCorrelation, MicroPair, MicroRanked, MicroTarget};
pub use provenance::{
    bandwidth_by_name, bandwidth_from_attributes, dense_flop_per_clock_per_sm, dense_peak_tflops,
    memory_floor_us, utc_now_rfc3339, ClockReadings, MemoryPeak, Provenance,
};
pub use sanitize::{SanitizeFinding, SanitizeRun, SanitizeTool};
pub use search::{
    is_triton_source, EvoBest, EvoFinalist, EvoFinalists, EvoFitness, ImplConfig,
    SearchImplementation, SearchSpec, IMPL_KNOB,
};
pub use store::{
    evidence_file_name, evidence_path, json_files, load_dir, read, read_json, slug,
    write_bytes_atomic, write_json_atomic, Evidence,
};
pub use timing::{Timing, TimingMode};

/// Version of the evidence schema this build writes. Readers accept files with this version or
/// older; a newer file is an error ([`EvidenceError::SchemaTooNew`]) rather than a misreading.
pub const SCHEMA_VERSION: u32 = 1;
