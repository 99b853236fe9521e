//! GPU tests: each implementation against the f64 oracle on fresh random inputs over the issue's
//! matrix of shapes, both dtypes, causal on and off; unwritten outputs detected; two runs on the
//! same inputs bit-identical (no races). Run on a GPU machine with `--include-ignored`.
//!
//! Modules by subject: `dense` (the matrix of shapes for every implementation, and the poison),
//! `variants` (grouped heads, windows, unequal lengths), `varlen` (packed batches), `persistent`
//! (hopper's persistent scheduler: relaunches, graph replays, the static order's cut and chained
//! items), `decode` (the decode kernels through the block table), `backward` (the backward
//! kernels and the gate's backward reference against the f64 oracle); `oracle` runs a prepared kernel
//! against the f64 oracle, `runs` lists each implementation's configs and runs a matrix over them.

mod backward;
mod decode;
mod dense;
mod oracle;
mod persistent;
mod runs;
mod variants;
mod varlen;
