//! The gate's pipeline as a library: what `cargo xtask gate` and `bench` do, step by step.
//!
//! - [`Problem`] (`problem`): one attention problem, built once from its text; [`suites`]: the
//!   named shape lists.
//! - [`Baseline`] (`baseline`): PyTorch SDPA through the long-lived helper ([`sdpa`], typed
//!   requests and replies), cuBLAS, any registered implementation, or the candidate at a git
//!   revision ([`revision`], the ratchet); the evidence descriptions.
//! - [`check`]: correctness checks with one row policy, every element compared with the GPU
//!   reference, inputs cycling through the distributions that find bugs, the scale drawn per
//!   check, every buffer between canary guards, inputs checksummed, every launch run twice;
//!   [`battery`]: the same checks on small edge shapes for the case's head dim, dtype and mask.
//! - [`timing`]: input sets, prepared candidates, timed sides (every timed output verified), and
//!   the interleaved, clock-guarded sampling of candidate and baseline; the seeded draws and the
//!   whole-output bound it shares with [`check`] are modules of their own (`random`, `bound`).
//! - [`decide`]: the decision as one function of typed results; [`replay`] calls it unchanged.
//! - [`gate`]: one case end to end, phase by phase; [`bench`](mod@bench): a bench run as a session
//!   (`BenchSession`: the typed request, the events its caller shows); [`supervise`]: the
//!   watchdog that bounds a hang, and supervised worker processes.
//! - [`search`]: a search as a session (`SearchSession`: the typed request, the target, the GPUs,
//!   the worker protocol and a generation's precompile, the finalists, the Ray pool); [`matrix`]:
//!   a suite matrix's tasks on the Ray pool's GPUs; [`micro`]: the `clock64()`
//!   micro-benchmark; [`profile`]: what Nsight Compute and compute-sanitizer run (the
//!   target-mode launch); [`sanitize`]: compute-sanitizer's command line and its report as typed
//!   findings; [`provenance`]: where a measurement comes from.
//!
//! It depends on attn-kernels, attn-oracle, attn-stats, attn-evidence, attn-ncu and attn-evo (the
//! pure search whose candidates it measures), never on a command line parser: xtask turns
//! arguments into these types and prints what comes back.

pub mod backward;
pub mod baseline;
pub mod battery;
pub mod bench;
mod bound;
pub mod check;
pub mod decide;
pub mod decode;
pub mod defences;
mod error;
pub mod gate;
pub mod guards;
pub mod matrix;
pub mod micro;
mod problem;
pub mod profile;
pub mod provenance;
pub mod py_gate;
mod random;
pub mod replay;
pub mod revision;
pub mod sanitize;
pub mod sdpa;
pub mod search;
pub mod suites;
pub mod supervise;
pub mod timing;

pub use baseline::Baseline;
pub use error::{MeasureError, Result};
pub use problem::{oracle_dtype, Problem};
