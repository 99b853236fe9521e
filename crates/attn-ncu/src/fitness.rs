//! The search's composite fitness: one number that ranks candidate kernels.
//!
//! ```text
//! score = speedup_weight · speedup
//!       + tensor_weight  · tensor_pct
//!       + sm_busy_weight · sm_busy_pct
//!       − penalty
//! penalty = sync_weight     · syncs_per_tile
//!         + register_weight · max(0, registers_per_thread − register_budget)
//!         + spill_weight    · spill_bytes / 1024
//! ```
//!
//! With the default weights (1000, 2, 1) speedup over the reference dominates: a 1% speedup is
//! worth 10 points, as much as 5 points of tensor-pipe activity. The counters only break ties
//! between kernels of similar speed and steer the search towards kernels that use the hardware
//! well. Every score is stored with the inputs and weights that produced it, so it can be
//! recomputed or re-weighted later.

use serde::{Deserialize, Serialize};

use crate::metrics::{
    DURATION, LOCAL_BYTES_LD, LOCAL_BYTES_ST, REGISTERS_PER_THREAD, SM_BUSY_PCT, TENSOR_PIPE_PCT,
};
use crate::{KernelSummary, NcuError};

/// The weights of [`fitness`]; `Default` gives the seeds' weights.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FitnessWeights {
    /// Points per 1.0 of speedup over the reference (SDPA).
    pub speedup: f64,
    /// Points per percent of tensor-pipe activity.
    pub tensor_pct: f64,
    /// Points per percent of SM throughput.
    pub sm_busy_pct: f64,
    /// Penalty per block-wide synchronisation per tile of the main loop.
    pub per_sync_per_tile: f64,
    /// Registers per thread allowed before the register penalty starts.
    pub register_budget: f64,
    /// Penalty per register per thread above the budget.
    pub per_register_over_budget: f64,
    /// Penalty per KiB of local-memory (spill) traffic per launch.
    pub per_spill_kib: f64,
}

impl Default for FitnessWeights {
    /// 1000·speedup + 2·tensor% + 1·SM% − (5 per sync per tile, 1 per register above 168,
    /// 1 per KiB spilled). 168 registers is what cuDNN's SDPA kernel uses on H100.
    fn default() -> Self {
        Self {
            speedup: 1000.0,
            tensor_pct: 2.0,
            sm_busy_pct: 1.0,
            per_sync_per_tile: 5.0,
            register_budget: 168.0,
            per_register_over_budget: 1.0,
            per_spill_kib: 1.0,
        }
    }
}

/// What the score is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FitnessInputs {
    /// Reference time / candidate time (above 1: faster than the reference).
    pub speedup: f64,
    /// Tensor pipe busy, %.
    pub tensor_pct: f64,
    /// SM throughput, %.
    pub sm_busy_pct: f64,
    /// `__syncthreads()` (or barrier waits) per tile of the main loop, from the kernel's source.
    pub syncs_per_tile: f64,
    /// Registers per thread.
    pub registers_per_thread: f64,
    /// Local-memory bytes loaded + stored per launch (0 when the metric was not collected).
    pub spill_bytes: f64,
}

impl FitnessInputs {
    /// Takes the counters from a profiled kernel; the speedup and syncs per tile come from the
    /// caller (a benchmark and the kernel's source). Missing spill metrics count as no spills;
    /// the other counters are required.
    pub fn from_summary(
        summary: &KernelSummary,
        speedup: f64,
        syncs_per_tile: f64,
    ) -> Result<Self, NcuError> {
        let spill = |m: &str| summary.value(m).unwrap_or(0.0);
        Ok(Self {
            speedup,
            tensor_pct: summary.require(TENSOR_PIPE_PCT)?,
            sm_busy_pct: summary.require(SM_BUSY_PCT)?,
            syncs_per_tile,
            registers_per_thread: summary.require(REGISTERS_PER_THREAD)?,
            spill_bytes: spill(LOCAL_BYTES_LD) + spill(LOCAL_BYTES_ST),
        })
    }
}

impl FitnessInputs {
    /// Takes the counters from every kernel one candidate launches, as [`FitnessInputs::from_summary`]
    /// does for one. A path of several kernels (the cuBLAS path: two GEMMs and a softmax) is one
    /// candidate: its tensor and SM percentages are its kernels' weighted by their time in the
    /// profile (median duration × launches, so the percentage of the whole call), its registers
    /// the largest any kernel uses, its spills their sum. No kernel is an error.
    ///
    /// ```
    /// use attn_ncu::{group, parse_raw, FitnessInputs};
    /// // A fill kernel (43.5% SM busy) and cuDNN's attention kernel (6.8% SM busy), as profiled.
    /// let kernels = group(&parse_raw(include_str!("../tests/fixtures/h100_sdpa_cudnn_raw.csv"))?, None);
    /// let one = FitnessInputs::from_kernels(&kernels[1..], 1.0, 1.0)?;
    /// assert_eq!(one, FitnessInputs::from_summary(&kernels[1], 1.0, 1.0)?);
    /// let both = FitnessInputs::from_kernels(&kernels, 1.0, 1.0)?;
    /// assert!(both.sm_busy_pct > one.sm_busy_pct && both.sm_busy_pct < 43.6);
    /// assert_eq!(both.registers_per_thread, 168.0);
    /// # Ok::<(), attn_ncu::NcuError>(())
    /// ```
    pub fn from_kernels(
        kernels: &[KernelSummary],
        speedup: f64,
        syncs_per_tile: f64,
    ) -> Result<Self, NcuError> {
        let each = kernels
            .iter()
            .map(|k| FitnessInputs::from_summary(k, speedup, syncs_per_tile))
            .collect::<Result<Vec<_>, _>>()?;
        match (kernels, each.as_slice()) {
            ([], _) => Err(NcuError::NoKernels),
            (_, [one]) => Ok(*one),
            _ => {
                let time = kernels
                    .iter()
                    .map(|k| Ok(k.require(DURATION)? * k.launches as f64))
                    .collect::<Result<Vec<f64>, NcuError>>()?;
                let total: f64 = time.iter().sum::<f64>().max(f64::MIN_POSITIVE);
                let weighted = |pct: fn(&FitnessInputs) -> f64| {
                    each.iter().zip(&time).map(|(i, t)| pct(i) * t).sum::<f64>() / total
                };
                Ok(Self {
                    speedup,
                    tensor_pct: weighted(|i| i.tensor_pct),
                    sm_busy_pct: weighted(|i| i.sm_busy_pct),
                    syncs_per_tile,
                    registers_per_thread: each
                        .iter()
                        .map(|i| i.registers_per_thread)
                        .fold(0.0, f64::max),
                    spill_bytes: each.iter().map(|i| i.spill_bytes).sum(),
                })
            }
        }
    }
}

/// The formula of [`fitness`] with `weights`' numbers, on one line.
///
/// ```
/// let text = attn_ncu::formula(&attn_ncu::FitnessWeights::default());
/// assert_eq!(text, "1000·speedup + 2·tensor% + 1·SM busy% − (5·syncs per tile + 1·registers over 168 + 1·KiB spilled)");
/// ```
pub fn formula(weights: &FitnessWeights) -> String {
    let w = weights;
    format!(
        "{}·speedup + {}·tensor% + {}·SM busy% − ({}·syncs per tile + {}·registers over {} + {}·KiB spilled)",
        w.speedup, w.tensor_pct, w.sm_busy_pct, w.per_sync_per_tile, w.per_register_over_budget,
        w.register_budget, w.per_spill_kib
    )
}

/// A score with everything needed to recompute it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Fitness {
    /// The composite score; higher is better.
    pub score: f64,
    /// The penalty that was subtracted (already included in `score`).
    pub penalty: f64,
    /// The inputs used.
    pub inputs: FitnessInputs,
    /// The weights used.
    pub weights: FitnessWeights,
}

/// Computes the composite score (see the module documentation for the formula).
///
/// ```
/// use attn_ncu::{fitness, FitnessInputs, FitnessWeights};
/// let inputs = FitnessInputs {
///     speedup: 1.1, tensor_pct: 40.0, sm_busy_pct: 30.0,
///     syncs_per_tile: 2.0, registers_per_thread: 170.0, spill_bytes: 0.0,
/// };
/// let f = fitness(&inputs, &FitnessWeights::default());
/// // 1100 + 80 + 30 − (10 + 2 + 0)
/// assert!((f.score - 1198.0).abs() < 1e-9);
/// ```
pub fn fitness(inputs: &FitnessInputs, weights: &FitnessWeights) -> Fitness {
    let penalty = weights.per_sync_per_tile * inputs.syncs_per_tile
        + weights.per_register_over_budget
            * (inputs.registers_per_thread - weights.register_budget).max(0.0)
        + weights.per_spill_kib * inputs.spill_bytes / 1024.0;
    let score = weights.speedup * inputs.speedup
        + weights.tensor_pct * inputs.tensor_pct
        + weights.sm_busy_pct * inputs.sm_busy_pct
        - penalty;
    Fitness {
        score,
        penalty,
        inputs: *inputs,
        weights: *weights,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> FitnessInputs {
        FitnessInputs {
            speedup: 1.0,
            tensor_pct: 50.0,
            sm_busy_pct: 40.0,
            syncs_per_tile: 0.0,
            registers_per_thread: 128.0,
            spill_bytes: 0.0,
        }
    }

    /// A change to the inputs.
    type Change = fn(&mut FitnessInputs);

    #[test]
    fn each_penalty_lowers_the_score_by_its_weight() {
        let w = FitnessWeights::default();
        let base = fitness(&inputs(), &w).score;
        assert!((base - 1140.0).abs() < 1e-9);
        let cases: &[(Change, f64)] = &[
            (|i| i.syncs_per_tile = 3.0, 15.0),
            (|i| i.registers_per_thread = 200.0, 32.0),
            (|i| i.spill_bytes = 4096.0, 4.0),
            (|i| i.speedup = 0.9, 100.0),
        ];
        for (change, drop) in cases {
            let mut i = inputs();
            change(&mut i);
            let f = fitness(&i, &w);
            assert!(
                (base - f.score - drop).abs() < 1e-9,
                "{i:?}: {} vs {base}",
                f.score
            );
            assert_eq!(f.inputs, i);
        }
    }

    #[test]
    fn weights_are_configurable() {
        let w = FitnessWeights {
            speedup: 0.0,
            tensor_pct: 1.0,
            sm_busy_pct: 0.0,
            ..FitnessWeights::default()
        };
        assert!((fitness(&inputs(), &w).score - 50.0).abs() < 1e-9);
    }
}
