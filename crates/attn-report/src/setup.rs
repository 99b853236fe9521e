//! Where and how a number was measured: the GPU model and the timing mode. The report only ever
//! divides, joins or sets side by side numbers of one [`Setup`].

use std::fmt;

use attn_evidence::{BenchEntry, GateCase, Timing, TimingMode};

use crate::model::Run;

/// A GPU model and a timing mode.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Setup {
    /// The GPU as its provenance names it, e.g. `NVIDIA H200`.
    pub gpu: String,
    /// `graph`, `batch` or `flushed`.
    pub mode: &'static str,
}

impl Setup {
    /// A setup of `gpu` timed in `mode`.
    pub fn new(gpu: &str, mode: TimingMode) -> Self {
        Setup {
            gpu: gpu.to_owned(),
            mode: mode.as_str(),
        }
    }

    /// The setup of a bench entry of `run`.
    pub fn of_entry(run: &Run, entry: &BenchEntry) -> Self {
        Setup::new(&run.evidence.provenance().gpu, entry.timing.mode)
    }

    /// The setup of a gate case of `run` (the candidate's timing, else the baseline's; a case
    /// timed by neither side reads as flushed, which no timed case compares with).
    pub fn of_case(run: &Run, case: &GateCase) -> Self {
        let mode = case
            .candidate
            .as_ref()
            .or(case.baseline.as_ref())
            .map_or(TimingMode::Flushed, |t: &Timing| t.mode);
        Setup::new(&run.evidence.provenance().gpu, mode)
    }

    /// `H200 · batch`: the GPU without its vendor and memory, for legends.
    pub fn short(&self) -> String {
        format!("{} · {}", short_gpu(&self.gpu), self.mode)
    }
}

impl fmt::Display for Setup {
    /// `NVIDIA H200, batch timing`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, {} timing", self.gpu, self.mode)
    }
}

/// `NVIDIA H100 80GB HBM3` → `H100`: the model without vendor or memory.
pub fn short_gpu(gpu: &str) -> &str {
    let name = gpu.strip_prefix("NVIDIA ").unwrap_or(gpu);
    name.split_whitespace().next().unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setup_names_its_gpu_and_mode() {
        let setup = Setup::new("NVIDIA H100 80GB HBM3", TimingMode::Graph);
        assert_eq!(setup.to_string(), "NVIDIA H100 80GB HBM3, graph timing");
        assert_eq!(setup.short(), "H100 · graph");
        assert_eq!(short_gpu("Some Future GPU"), "Some");
    }
}
