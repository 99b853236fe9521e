//! Raw timing samples and how they were taken.

use serde::{Deserialize, Serialize};

/// How each timing sample was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimingMode {
    /// One launch per sample, with L2 flushed before it: the cold-cache time of one call.
    Flushed,
    /// Many back-to-back launches per sample; the sample is total time / launch count.
    Batch,
    /// Launches captured in a CUDA graph and replayed; the sample is total time / launch count.
    Graph,
}

impl TimingMode {
    /// The lowercase name used in JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            TimingMode::Flushed => "flushed",
            TimingMode::Batch => "batch",
            TimingMode::Graph => "graph",
        }
    }
}

/// The raw samples of one implementation on one shape. Samples are kept raw so that every statistic
/// (and the bootstrap distribution, given the recorded seed) can be recomputed later.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// How the samples were taken.
    pub mode: TimingMode,
    /// Unit of `samples`: always `"us"` (microseconds per launch).
    pub unit: String,
    /// Untimed launches before the first sample.
    pub warmup: usize,
    /// Time per launch of each sample, in microseconds, in the order taken.
    pub samples: Vec<f64>,
    /// Launches averaged into each sample (1 for [`TimingMode::Flushed`]).
    pub launches_per_sample: usize,
    /// Input sets the launches rotated over, where recorded (files before it have none): the
    /// two sides of a comparison rotate over as many, since fewer sets leave more inputs in L2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_sets: Option<usize>,
}

impl Timing {
    /// Samples in microseconds, with `unit` set to `"us"`.
    pub fn new(
        mode: TimingMode,
        warmup: usize,
        samples: Vec<f64>,
        launches_per_sample: usize,
    ) -> Self {
        Timing {
            mode,
            unit: "us".into(),
            warmup,
            samples,
            launches_per_sample,
            input_sets: None,
        }
    }

    /// The same timing, recording the input sets its launches rotated over (0: not recorded).
    pub fn with_input_sets(self, sets: usize) -> Self {
        Timing {
            input_sets: (sets > 0).then_some(sets),
            ..self
        }
    }
}
