//! Metric sets named by purpose, with Hopper names and their Ampere/Ada equivalents.
//!
//! Collecting fewer metrics means fewer replay passes, so each purpose asks only for what it needs.

use serde::{Deserialize, Serialize};

/// Tensor pipe busy, % of peak (covers HMMA and Hopper's HGMMA/wgmma).
pub const TENSOR_PIPE_PCT: &str =
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active";
/// wgmma instructions executed (Hopper only).
pub const WGMMA_INSTRUCTIONS: &str = "sm__inst_executed_pipe_tensor_op_gmma.sum";
/// SM throughput, % of peak over the kernel's elapsed time ("how busy the SMs were").
pub const SM_BUSY_PCT: &str = "sm__throughput.avg.pct_of_peak_sustained_elapsed";
/// Achieved occupancy: active warps, % of the SM's maximum.
pub const WARPS_ACTIVE_PCT: &str = "sm__warps_active.avg.pct_of_peak_sustained_active";
/// Bytes read from DRAM (HBM).
pub const DRAM_BYTES_READ: &str = "dram__bytes_read.sum";
/// Bytes written to DRAM (HBM).
pub const DRAM_BYTES_WRITE: &str = "dram__bytes_write.sum";
/// Kernel duration on the GPU.
pub const DURATION: &str = "gpu__time_duration.sum";
/// The SM clock over the kernel, in cycles per second: a reading, unlike [`SM_CLOCK_KHZ`]. Long
/// attention rows run power-limited (an H200 held cuDNN's kernel at 1676 MHz of 1980), so two
/// kernels' speeds compare fairly only beside their clocks.
pub const SM_CLOCK_HZ: &str = "sm__cycles_elapsed.avg.per_second";
/// Warp instructions executed, all pipes: with a power-limited clock, fewer is faster.
pub const WARP_INSTRUCTIONS: &str = "sm__inst_executed.sum";
/// Registers per thread as compiled.
pub const REGISTERS_PER_THREAD: &str = "launch__registers_per_thread";
/// Dynamic shared memory per block.
pub const DYNAMIC_SHARED_PER_BLOCK: &str = "launch__shared_mem_per_block_dynamic";
/// Shared-memory bank conflicts on loads.
pub const SHARED_BANK_CONFLICTS_LD: &str =
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum";
/// Shared-memory bank conflicts on stores.
pub const SHARED_BANK_CONFLICTS_ST: &str =
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum";
/// Local-memory (register spill) bytes loaded through L1.
pub const LOCAL_BYTES_LD: &str = "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum";
/// Local-memory (register spill) bytes stored through L1.
pub const LOCAL_BYTES_ST: &str = "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum";
/// Blocks per SM over the whole grid (below 1: some SMs idle).
pub const WAVES_PER_SM: &str = "launch__waves_per_multiprocessor";
/// Streaming multiprocessors of the device (ncu reports it for every kernel).
pub const SM_COUNT: &str = "device__attribute_multiprocessor_count";
/// The device's SM clock in kHz (its nominal maximum, not a reading).
pub const SM_CLOCK_KHZ: &str = "device__attribute_clock_rate";

/// Every stall reason's warp cycles per issued instruction (one ncu metric per reason, named
/// [`STALL_PREFIX`] reason [`STALL_SUFFIX`]): a regular expression for `--metrics`, which ncu
/// expands; [`crate::explain`] lists the largest.
pub const STALL_REASONS: &str =
    r"regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio";
/// The name of a stall-reason metric before its reason.
pub const STALL_PREFIX: &str = "smsp__average_warps_issue_stalled_";
/// The name of a stall-reason metric after its reason.
pub const STALL_SUFFIX: &str = "_per_issue_active.ratio";

/// What a profile is for; each purpose is a small metric set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Purpose {
    /// Time, tensor pipe, SM busy, occupancy, DRAM traffic, registers, shared memory: what
    /// [`crate::explain`] and [`crate::fitness`] read.
    Overview,
    /// Tensor-core activity only.
    Tensor,
    /// DRAM traffic and time.
    Memory,
    /// Occupancy and its limiters (registers, shared memory).
    Occupancy,
    /// Shared-memory bank conflicts.
    BankConflicts,
    /// Register spills (local-memory traffic).
    Spills,
    /// Where warps wait: every stall reason per issued instruction, beside time, clock and the
    /// tensor pipe.
    Stalls,
    /// Everything above but the stall reasons (a score of metrics, through a regular expression:
    /// ask for them by name).
    All,
}

impl std::str::FromStr for Purpose {
    type Err = crate::NcuError;

    /// `overview`, `tensor`, `memory`, `occupancy`, `bank-conflicts`, `spills`, `stalls` or `all`.
    fn from_str(name: &str) -> Result<Purpose, crate::NcuError> {
        Ok(match name {
            "overview" => Purpose::Overview,
            "tensor" => Purpose::Tensor,
            "memory" => Purpose::Memory,
            "occupancy" => Purpose::Occupancy,
            "bank-conflicts" => Purpose::BankConflicts,
            "spills" => Purpose::Spills,
            "stalls" => Purpose::Stalls,
            "all" => Purpose::All,
            other => return Err(crate::NcuError::UnknownPurpose(other.to_string())),
        })
    }
}

/// A named list of ncu metric names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MetricSet {
    /// Name for logs and evidence, e.g. `hopper/overview`.
    pub name: String,
    /// What it is for.
    pub purpose: Purpose,
    /// ncu metric names, for `--metrics` (joined with commas).
    pub metrics: Vec<&'static str>,
}

impl MetricSet {
    /// The metrics as owned strings, ready for [`crate::ProfileOptions::metrics`].
    pub fn to_strings(&self) -> Vec<String> {
        self.metrics.iter().map(|m| (*m).to_owned()).collect()
    }
}

/// The Hopper (sm_90) metric names for a purpose.
///
/// ```
/// use attn_ncu::metrics::{hopper, Purpose, DURATION};
/// assert!(hopper(Purpose::Overview).metrics.contains(&DURATION));
/// ```
pub fn hopper(purpose: Purpose) -> MetricSet {
    let metrics: Vec<&'static str> = match purpose {
        Purpose::Overview => vec![
            DURATION,
            SM_CLOCK_HZ,
            WARP_INSTRUCTIONS,
            TENSOR_PIPE_PCT,
            WGMMA_INSTRUCTIONS,
            SM_BUSY_PCT,
            WARPS_ACTIVE_PCT,
            DRAM_BYTES_READ,
            DRAM_BYTES_WRITE,
            REGISTERS_PER_THREAD,
            DYNAMIC_SHARED_PER_BLOCK,
            WAVES_PER_SM,
        ],
        Purpose::Tensor => vec![DURATION, TENSOR_PIPE_PCT, WGMMA_INSTRUCTIONS],
        Purpose::Memory => vec![DURATION, DRAM_BYTES_READ, DRAM_BYTES_WRITE],
        Purpose::Occupancy => vec![
            WARPS_ACTIVE_PCT,
            REGISTERS_PER_THREAD,
            DYNAMIC_SHARED_PER_BLOCK,
            WAVES_PER_SM,
            "launch__occupancy_limit_registers",
            "launch__occupancy_limit_shared_mem",
            "launch__occupancy_limit_warps",
        ],
        Purpose::BankConflicts => vec![SHARED_BANK_CONFLICTS_LD, SHARED_BANK_CONFLICTS_ST],
        Purpose::Spills => vec![REGISTERS_PER_THREAD, LOCAL_BYTES_LD, LOCAL_BYTES_ST],
        Purpose::Stalls => vec![
            DURATION,
            SM_CLOCK_HZ,
            WARP_INSTRUCTIONS,
            TENSOR_PIPE_PCT,
            STALL_REASONS,
        ],
        Purpose::All => {
            let mut all = Vec::new();
            for p in [
                Purpose::Overview,
                Purpose::Occupancy,
                Purpose::BankConflicts,
                Purpose::Spills,
            ] {
                for m in hopper(p).metrics {
                    if !all.contains(&m) {
                        all.push(m);
                    }
                }
            }
            all
        }
    };
    MetricSet {
        name: format!("hopper/{}", purpose.name()),
        purpose,
        metrics,
    }
}

/// The Ampere/Ada (sm_80/86/89) metric names for a purpose: Hopper's, translated through
/// [`AMPERE_EQUIVALENTS`], minus those with no equivalent.
pub fn ampere(purpose: Purpose) -> MetricSet {
    let metrics = hopper(purpose)
        .metrics
        .into_iter()
        .filter_map(ampere_equivalent)
        .collect();
    MetricSet {
        name: format!("ampere/{}", purpose.name()),
        purpose,
        metrics,
    }
}

/// The Ampere/Ada name of a Hopper metric; `None` where the hardware has no such counter.
pub fn ampere_equivalent(hopper_metric: &str) -> Option<&'static str> {
    AMPERE_EQUIVALENTS
        .iter()
        .find(|e| e.hopper == hopper_metric)
        .map_or_else(|| static_name(hopper_metric), |e| e.ampere)
}

/// Looks a metric name up among the ones this module knows, to hand out a `'static` str.
fn static_name(metric: &str) -> Option<&'static str> {
    [Purpose::All, Purpose::Stalls]
        .into_iter()
        .flat_map(|p| hopper(p).metrics)
        .find(|m| *m == metric)
}

/// One row of the Hopper to Ampere/Ada translation table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Equivalent {
    /// The Hopper (sm_90) metric.
    pub hopper: &'static str,
    /// Its Ampere/Ada (sm_80/86/89) counterpart; `None` if the hardware has none.
    pub ampere: Option<&'static str>,
    /// Why they differ, or what to read instead.
    pub note: &'static str,
}

/// The metrics whose Ampere/Ada name or meaning differs from Hopper's. Metrics not listed
/// (`dram__*`, `gpu__time_duration`, `launch__*`, `sm__throughput`, `sm__warps_active`,
/// `l1tex__*`) have the same name on all three.
pub const AMPERE_EQUIVALENTS: &[Equivalent] = &[
    Equivalent {
        hopper: TENSOR_PIPE_PCT,
        ampere: Some(TENSOR_PIPE_PCT),
        note: "same name; on Ampere/Ada it counts mma.sync (HMMA) only, on Hopper it also covers wgmma (HGMMA)",
    },
    Equivalent {
        hopper: WGMMA_INSTRUCTIONS,
        ampere: None,
        note: "wgmma exists only on sm_90; count HMMA with sm__inst_executed_pipe_tensor_op_hmma.sum instead",
    },
];

impl Purpose {
    /// The name [`Purpose::from_str`](std::str::FromStr) reads: `overview`, `stalls`, ...
    pub fn name(self) -> &'static str {
        match self {
            Purpose::Overview => "overview",
            Purpose::Tensor => "tensor",
            Purpose::Memory => "memory",
            Purpose::Occupancy => "occupancy",
            Purpose::BankConflicts => "bank-conflicts",
            Purpose::Spills => "spills",
            Purpose::Stalls => "stalls",
            Purpose::All => "all",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_contains_every_purpose_without_duplicates() {
        let all = hopper(Purpose::All).metrics;
        let mut deduped = all.clone();
        deduped.sort_unstable();
        deduped.dedup();
        assert_eq!(deduped.len(), all.len());
        for p in [
            Purpose::Overview,
            Purpose::Tensor,
            Purpose::Memory,
            Purpose::BankConflicts,
            Purpose::Spills,
        ] {
            assert!(hopper(p).metrics.iter().all(|m| all.contains(m)), "{p:?}");
        }
    }

    #[test]
    fn stall_reasons_are_asked_for_by_name_on_either_architecture() {
        assert!(!hopper(Purpose::All).metrics.contains(&STALL_REASONS));
        for set in [hopper(Purpose::Stalls), ampere(Purpose::Stalls)] {
            assert!(set.metrics.contains(&STALL_REASONS), "{}", set.name);
        }
    }

    #[test]
    fn ampere_drops_wgmma_and_keeps_the_rest() {
        let hopper_set = hopper(Purpose::Overview);
        let ampere_set = ampere(Purpose::Overview);
        assert!(!ampere_set.metrics.contains(&WGMMA_INSTRUCTIONS));
        assert_eq!(ampere_set.metrics.len(), hopper_set.metrics.len() - 1);
        assert_eq!(ampere_set.name, "ampere/overview");
    }

    #[test]
    fn purposes_read_back_their_names() {
        use std::str::FromStr;
        let purposes = [
            Purpose::Overview,
            Purpose::Tensor,
            Purpose::Memory,
            Purpose::Occupancy,
            Purpose::BankConflicts,
            Purpose::Spills,
            Purpose::Stalls,
            Purpose::All,
        ];
        for p in purposes {
            assert_eq!(Purpose::from_str(p.name()).ok(), Some(p));
        }
    }
}
