//! The gate on backward problems: a backward implementation's gradients judged on fresh inputs
//! against the gate's GPU reference and the f64 oracle ([`check`]), timed ([`timing`]) and
//! judged ([`gate`]) against a backward implementation or PyTorch SDPA's backward ([`sdpa`]), on
//! buffers both the checks and the timed sides hold alike (`sets`).

pub mod check;
pub mod gate;
pub mod sdpa;
mod sets;
pub mod timing;

pub use check::{backward_check_plan, oracle_is_full, run_backward_checks, CheckInputs};
pub use gate::{ended_backward_case, BackwardBaseline, BackwardCandidate, BackwardGate};
pub use timing::{backward_set_count, BackwardSide};
