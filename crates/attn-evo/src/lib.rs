//! The kernel-config search behind `cargo xtask evo`: pure CPU, no CUDA.
//!
//! # Bird's-eye view
//!
//! - [`Space`]: the knobs of an implementation ([`KnobDomain`]: a name and its integer values)
//!   and a validator (the registry's constraints and device limits); or a choice among
//!   implementations ([`Space::choice`] of [`Branch`]es, `--impl a,b,c`): the implementation is
//!   a categorical knob ([`IMPL_KNOB`]) with each one's own knobs (maybe none) beneath it. Its
//!   operators ([`Space::random`], [`Space::mutate`], [`Space::crossover`], [`Space::project`])
//!   only return configs that pass [`Space::check`]: a config that cannot be valid is never built.
//! - [`rank_probabilities`], [`pick_rank`]: rank-based parent selection, `p(r) ∝ 1 / (r + N)`.
//! - [`Search`]: an elitist population search, one [`Generation`] at a time. The caller measures
//!   the candidates (however it likes: worker processes, GPUs in parallel) and [`Search::record`]s
//!   a fitness, or `None` for an invalid candidate. Configs are never measured twice; everything is
//!   seeded; [`Search::resume`] continues from a log as if never interrupted.
//! - [`evaluations_from_log`]: a search log (`attn_evidence::EvoCandidate` rows) as evaluations
//!   ([`Space::to_row`] and [`Space::from_row`]: a config as a row holds it, the implementation
//!   by name).
//! - [`Measurement`]: what a worker measured (its JSON line), scored into a log row against the
//!   baseline ([`Measurement::log_row`]); [`best_row`] picks the winner.
//! - `plan`: [`narrow_domains`] (and [`narrow_choice`] for several implementations), the `--src`
//!   constraint ([`source_constraint`]), generation 0's seeds from earlier bests, each candidate's
//!   input seed ([`config_seed`]) and the `gate` command that confirms a config
//!   ([`gate_command`]); [`evo_best`]: `best.json`.
//! - `composite`: `--fitness composite`, the finalists ([`finalists`]) profiled by the caller
//!   and ranked by attn-ncu's composite fitness ([`rank_finalists`], [`composite_winner`]).
//! - `summary`: the lines `cargo xtask evo` prints ([`search_line`], [`best_lines`], ...).
//! - [`SearchRun`]: a run's folder, new (`search.json` written) or resumed from its log.
//! - [`drive`]: a search measured to its end by a [`Measurer`] (the caller's), one thread per
//!   device ([`for_each_on_devices`]), every candidate scored against its device's baseline.
//! - `micro`: the micro-benchmark's ranking ([`micro_results`], [`micro_ranked`]), the seeds it
//!   gives a search ([`seed_from_micro`]: its configs completed into the space by
//!   [`project_micro`]) and how well it predicted one ([`micro_correlation`]: Spearman's ρ and
//!   Kendall's τ over the configs both measured).
//!
//! ```
//! use attn_evo::{KnobDomain, Options, Search, Space};
//! // Two knobs; BLOCK_M must be a multiple of 16 x NUM_WARPS.
//! let space = Space::new(
//!     vec![KnobDomain::new("BLOCK_M", vec![32, 64, 128])?, KnobDomain::new("NUM_WARPS", vec![2, 4, 8])?],
//!     |k| if k["BLOCK_M"] % (16 * k["NUM_WARPS"]) == 0 { Ok(()) } else { Err("BLOCK_M too small".into()) },
//! )?;
//! let options = Options { population: 3, generations: 4, budget: 10, seed: 1, ..Options::default() };
//! let mut search = Search::new(space, options, vec![])?;
//! while let Some(generation) = search.next_generation() {
//!     for knobs in generation.candidates {
//!         assert!(search.space().check(&knobs).is_ok());
//!         let fitness = (knobs["BLOCK_M"] / knobs["NUM_WARPS"]) as f64; // a stand-in for a speedup
//!         search.record(generation.number, knobs, Some(fitness));
//!     }
//! }
//! // 6 valid configs in all: the search measured each once, and found the best.
//! assert_eq!(search.evaluated(), 6);
//! assert_eq!(search.best().unwrap().fitness, Some(64.0));
//! # Ok::<(), attn_evo::EvoError>(())
//! ```

mod composite;
mod drive;
mod error;
mod log;
mod measured;
mod micro;
mod plan;
mod run;
mod search;
mod select;
mod space;
mod summary;

pub use composite::{
    composite_note, composite_winner, finalists, finalists_table, rank_finalists, Composite,
    SYNCS_PER_TILE_SOURCE,
};
pub use drive::{compare_options, drive, for_each_on_devices, measure_baselines, Measurer};
pub use error::{EvoError, Result};
pub use log::evaluations_from_log;
pub use measured::{best_row, evo_best, synthetic_measurement, synthetic_samples, Measurement};
pub use micro::{
    correlate_with_search, correlation_lines, micro_correlation, micro_flops_per_tile, micro_knobs,
    micro_metric, micro_ranked, micro_results, micro_scope, project_micro, seed_from_micro,
    CorrelationInputs, MicroOutcome, MicroSeeds, MIN_PAIRS,
};
pub use plan::{
    config_seed, format_knobs, gate_command, narrow_choice, narrow_domains, resolve_config,
    seed_from_bests, source_constraint, split_row, KnobOf,
};
pub use run::SearchRun;
pub use search::{Evaluation, Generation, Options, Search};
pub use select::{pick_rank, rank_probabilities};
pub use space::{Branch, KnobDomain, Knobs, Space, IMPL_KNOB};
pub use summary::{best_lines, counts_line, row_line, search_line};
