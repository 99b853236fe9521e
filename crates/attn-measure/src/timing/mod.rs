//! Timing one problem: input sets on the device ([`sets`]), prepared candidates ([`prepared`]),
//! the candidate's side with every timed output verified ([`verify`]) and the baseline's
//! ([`sides`]), sampled in alternating blocks ([`interleave`](mod@interleave): after a warm-up
//! round, each side first in every other round) with clock-throttled blocks dropped and re-taken
//! ([`clocks`]).

pub mod clocks;
pub mod interleave;
pub mod prepared;
pub mod sets;
pub mod sides;
pub mod verify;

pub use crate::random::signed_permutation;
pub use clocks::{clocked_block, BlockClocks, ThrottleRule, CLOCK_DIP, CLOCK_FLOOR};
pub use interleave::{
    default_block, interleave, interleave_with, round_order, Interleave, Interleaved,
};
pub use prepared::{CandidateKey, PreparedCache, PreparedKey};
pub use sets::{
    batch_launches_for, flush_bytes, input_set_count, sets_for, InputSets, BATCH_SAMPLE_FLOP,
};
pub use sides::{KernelSide, SdpaSide, TimedSide, TimingWatch};
pub use verify::{OutputVerifier, VerifiedOutputs};
