//! The SM clock of each timed block, and which blocks a throttled clock disqualifies: measured on
//! the device over the block's span (nvidia-smi where the probe cannot run), judged by each
//! side's own level ([`ThrottleRule`]).

use attn_evidence::BlockClock;
use attn_kernels::guard::span_mhz;
use attn_kernels::telemetry::{self, ClockReading};
use attn_kernels::{Gpu, HarnessKernels, TimingOptions, Timings};

use super::sides::TimedSide;
use crate::Result;

/// How far under its side's median a block's clock may dip: 10%. A power-limited GPU runs each
/// kernel at the clock its own power draw allows, so no fraction of the maximum suits every
/// kernel and only a dip under a side's own level is noise (see evidence/METHOD.md, `clock-dip`).
pub const CLOCK_DIP: f64 = 0.10;

/// The fraction of the maximum SM clock under which any block is dropped: 50%, where hardware
/// slowdowns (thermal or power brakes) put the clock, far under any sustained load's level.
pub const CLOCK_FLOOR: f64 = 0.5;

/// Which blocks are kept: those whose SM clock is at most `dip` under the median of the same
/// side's earlier judged blocks (none for its first: only the floor applies) and at least
/// `floor` of `max_mhz`; a block whose clock could not be measured is kept (and the case says
/// so). The warm-up round is no side's reference: it follows an idle GPU and runs high.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThrottleRule {
    /// See [`Interleave::clock_dip`](super::Interleave::clock_dip).
    pub dip: f64,
    /// See [`Interleave::clock_floor`](super::Interleave::clock_floor).
    pub floor: f64,
    /// The device's maximum SM clock, MHz.
    pub max_mhz: u32,
}

impl ThrottleRule {
    /// The clock under which any block is dropped, MHz.
    pub fn floor_mhz(&self) -> f64 {
        f64::from(self.max_mhz) * self.floor
    }

    /// The clock under which a block is dropped, MHz, after its side's `earlier` judged blocks'
    /// measured clocks.
    pub fn threshold_mhz(&self, earlier: &[f64]) -> f64 {
        let mut earlier = earlier.to_vec();
        let own_level = if earlier.is_empty() {
            0.0
        } else {
            (1.0 - self.dip) * attn_stats::statistic::median(&mut earlier)
        };
        self.floor_mhz().max(own_level)
    }

    /// Whether a block measured at `mhz` is kept after its side's `earlier` judged blocks, and
    /// the threshold it was held to.
    pub fn judge(&self, mhz: Option<f64>, earlier: &[f64]) -> (bool, f64) {
        let threshold = self.threshold_mhz(earlier);
        (mhz.is_none_or(|m| m >= threshold), threshold)
    }

    /// The rule, one line, for evidence.
    pub fn describe(&self, source: &str) -> String {
        format!(
            "kept unless the SM clock measured over the block ({source}) is more than {:.0}% under the median of its side's earlier blocks (a transient dip; each side runs at the clock its own power draw allows) or under {:.0}% of the {} MHz maximum ({:.0} MHz)",
            self.dip * 100.0,
            self.floor * 100.0,
            self.max_mhz,
            self.floor_mhz()
        )
    }
}

/// The SM clock over a block from the device: a stamp of every SM's cycle counter on the timed
/// stream before the block and one after it ([`HarnessKernels::stamp_clocks`]), so the clock is
/// the mean over the block's whole span ([`span_mhz`]).
struct BlockProbe {
    kernels: HarnessKernels,
    before: attn_kernels::guard::ClockStamps,
    after: attn_kernels::guard::ClockStamps,
}

impl BlockProbe {
    fn new(gpu: &Gpu) -> Option<BlockProbe> {
        let kernels = HarnessKernels::new(gpu).ok()?;
        // Twice as many thread blocks as SMs, each reserving an SM's worth of shared memory
        // (`HarnessKernels::stamp_clocks`): the first wave puts one on every SM.
        let blocks = 2 * gpu.info().sm_count.max(1) as usize;
        let before = attn_kernels::guard::ClockStamps::new(gpu, blocks).ok()?;
        let after = attn_kernels::guard::ClockStamps::new(gpu, blocks).ok()?;
        Some(BlockProbe {
            kernels,
            before,
            after,
        })
    }

    fn before(&mut self, gpu: &Gpu) -> attn_kernels::Result<()> {
        self.kernels.stamp_clocks(gpu, &mut self.before)
    }

    fn after(&mut self, gpu: &Gpu) -> attn_kernels::Result<Option<f64>> {
        self.kernels.stamp_clocks(gpu, &mut self.after)?;
        Ok(span_mhz(&self.before.read(gpu)?, &self.after.read(gpu)?))
    }
}

/// `side`'s block of `opts` with the SM clock over it, read as
/// [`interleave`](super::interleave()) reads a block's (the device probe, else nvidia-smi after
/// it; `None` where neither can).
pub fn clocked_block(
    gpu: &Gpu,
    side: &mut dyn TimedSide,
    opts: &TimingOptions,
) -> Result<(Timings, Option<f64>)> {
    let mut clocks = DeviceClocks::new(gpu);
    clocks.before()?;
    let timings = side.block(opts)?;
    let (mhz, _) = clocks.after()?;
    Ok((timings, mhz))
}

/// Where [`interleave`](super::interleave()) reads the SM clock of each block.
pub trait BlockClocks {
    /// How a block's clock is read, for the evidence's rule line.
    fn source(&self) -> &'static str;
    /// Before a block.
    fn before(&mut self) -> Result<()>;
    /// After the block: its clock, MHz, and how it was read (`"device-span"` or `"nvidia-smi"`).
    fn after(&mut self) -> Result<(Option<f64>, &'static str)>;
    /// The device's clock and temperature now (before the first block and after the last).
    fn reading(&self) -> Option<ClockReading>;
}

/// The GPU's clocks: the device probe around each block, nvidia-smi after it where the probe
/// cannot run.
pub(super) struct DeviceClocks<'g> {
    gpu: &'g Gpu,
    probe: Option<BlockProbe>,
}

impl<'g> DeviceClocks<'g> {
    pub(super) fn new(gpu: &'g Gpu) -> DeviceClocks<'g> {
        DeviceClocks {
            gpu,
            probe: BlockProbe::new(gpu),
        }
    }
}

impl BlockClocks for DeviceClocks<'_> {
    fn source(&self) -> &'static str {
        if self.probe.is_some() {
            "device: every SM's clock64() over %globaltimer, stamped on the timed stream before and after it"
        } else {
            "nvidia-smi after it"
        }
    }

    fn before(&mut self) -> Result<()> {
        if let Some(p) = self.probe.as_mut() {
            p.before(self.gpu)?;
        }
        Ok(())
    }

    fn after(&mut self) -> Result<(Option<f64>, &'static str)> {
        Ok(match self.probe.as_mut() {
            Some(p) => (p.after(self.gpu)?, BlockClock::SPAN_SOURCE),
            None => (self.reading().map(|c| f64::from(c.sm_mhz)), "nvidia-smi"),
        })
    }

    fn reading(&self) -> Option<ClockReading> {
        telemetry::read_clocks(self.gpu.info().ordinal)
    }
}

#[cfg(test)]
mod tests {
    use super::{ThrottleRule, CLOCK_DIP, CLOCK_FLOOR};

    fn rule() -> ThrottleRule {
        ThrottleRule {
            dip: CLOCK_DIP,
            floor: CLOCK_FLOOR,
            max_mhz: 1980,
        }
    }

    /// The blocks of one side in order: which are kept.
    fn judge(clocks: &[f64]) -> Vec<bool> {
        let mut earlier = Vec::new();
        clocks
            .iter()
            .map(|&mhz| {
                let (kept, _) = rule().judge(Some(mhz), &earlier);
                earlier.push(mhz);
                kept
            })
            .collect()
    }

    #[test]
    fn a_side_is_judged_by_its_own_level_and_a_dip_under_it_is_dropped() {
        assert_eq!(rule().floor_mhz(), 990.0);
        // A power-limited side, steady under 75% of the maximum (a rule that dropped these kept
        // none of them): all kept; so is a side drifting down as the GPU warms.
        assert!(judge(&[1450.0, 1440.0, 1462.0, 1431.0, 1447.0])
            .iter()
            .all(|&k| k));
        assert!(judge(&[1760.0, 1700.0, 1650.0, 1600.0, 1560.0])
            .iter()
            .all(|&k| k));
        // A transient dip more than 10% under the side's median: dropped, and the side's level
        // holds for the next block.
        assert_eq!(
            judge(&[1700.0, 1690.0, 1480.0, 1695.0]),
            [true, true, false, true]
        );
        // The median, not the mean: one dip does not lower the bar for the next.
        assert_eq!(rule().threshold_mhz(&[1700.0, 1690.0, 1200.0]), 1521.0);
        // Under the floor (a hardware brake): dropped even as a side's first block.
        assert_eq!(judge(&[900.0, 1600.0]), [false, true]);
        // Unmeasured: kept (and the case records that it was not measured).
        assert!(rule().judge(None, &[1700.0]).0);
        let line = rule().describe("device");
        assert!(line.contains("10% under the median"), "{line}");
        assert!(
            line.contains("50% of the 1980 MHz maximum (990 MHz)"),
            "{line}"
        );
    }
}
