//! Nsight Compute as a library: run ncu, parse its CSV, explain and score kernels.
//!
//! # Bird's-eye view
//!
//! ```text
//!  ProfileOptions ──arguments/command──▶ ncu --csv ... program args      (runner)
//!                                           │ stdout/stderr, exit status
//!                    interpret ◀────────────┘ failures → NcuError
//!  CSV text ──parse / parse_details / parse_raw──▶ Vec<Launch>            (parse, value)
//!  Vec<Launch> ──group(filter)──▶ Vec<KernelSummary> (medians per kernel) (group)
//!  KernelSummary ──explain(flops, Ceilings)──▶ Explanation (Display)      (explain)
//!  KernelSummary + speedup ──FitnessInputs──fitness(weights)──▶ Fitness   (fitness)
//!  all of it ──NcuEvidence::write_in("evidence/ncu")──▶ JSON              (evidence)
//!  source-page CSV ──parse_source──▶ SourceProfile (samples per SASS line,
//!                   by execution count, hottest)                        (source)
//! ```
//!
//! * [`value`]: every number is normalised to a base unit (ns, byte, byte/s, %, count) with
//!   ncu's text kept alongside; unknown units and metrics are kept, not rejected.
//! * [`metrics`]: metric sets by purpose with Hopper names and Ampere/Ada equivalents.
//! * The crate needs no GPU and no CUDA: the runner only builds a command line and reads what
//!   ncu prints, so all of it is tested with captured output and a fake `ncu` script.
//!
//! ```
//! use attn_ncu::{group, parse, KernelFilter};
//! let csv = include_str!("../tests/fixtures/h100_sdpa_cudnn_details.csv");
//! let launches = parse(csv)?;
//! let cudnn = launches.iter().find(|l| l.id == 3).unwrap();
//! assert_eq!(cudnn.value("gpu__time_duration.sum"), Some(9440.0));
//! let kernels = group(&launches, Some(&KernelFilter::parse("regex:sdpa.*wgmma")?));
//! assert_eq!(kernels[0].launches, 2);
//! # Ok::<(), attn_ncu::NcuError>(())
//! ```

pub mod assess;
mod error;
pub mod evidence;
pub mod explain;
pub mod fitness;
pub mod group;
pub mod metrics;
pub mod parse;
pub mod render;
pub mod runner;
pub mod source;
pub mod value;

pub use assess::{assess, fitness_line, kernel_options, matching_kernels, Assessed};
pub use error::NcuError;
pub use evidence::{NcuEvidence, Provenance};
pub use explain::{explain, Bound, Ceilings, Explanation, Stall};
pub use fitness::{fitness, formula, Fitness, FitnessInputs, FitnessWeights};
pub use group::{group, Aggregate, KernelFilter, KernelSummary};
pub use parse::{detect_page, parse, parse_details, parse_raw, Launch, Page};
pub use render::render_text;
pub use runner::{
    arguments, command, command_line, interpret, interpret_source, profile, Ended, Profile,
    ProfileOptions,
};
pub use value::{Unit, Value};
