//! Two sides sampled against each other: a warm-up round, then alternating blocks, each side
//! first in every other round (ABBA), until each has its clean samples; every block clocked and
//! judged, a throttled one dropped and re-taken.

use attn_evidence::{BlockClock, ClockGuard};
use attn_kernels::telemetry::ClockReading;
use attn_kernels::{Gpu, TimingOptions, Timings};

use super::clocks::{BlockClocks, DeviceClocks, ThrottleRule, CLOCK_DIP, CLOCK_FLOOR};
use super::sides::TimedSide;
use crate::Result;

/// How two sides are sampled against each other.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interleave {
    /// The harness options; `samples` is the clean samples wanted per side.
    pub timing: TimingOptions,
    /// Samples per block: the sides alternate block by block, after a warm-up round, each side
    /// first in every other round ([`round_order`]), so both see the same clocks and temperature;
    /// the comparison resamples whole blocks ([`attn_stats::compare_in_blocks`]).
    pub block: usize,
    /// A block whose SM clock, measured on the device over it, is more than this fraction under
    /// the median of its side's earlier judged blocks is dropped and re-taken ([`ThrottleRule`]).
    pub clock_dip: f64,
    /// A block under this fraction of the device's maximum SM clock is dropped whatever its side
    /// ran at before (a hardware brake).
    pub clock_floor: f64,
    /// The device's maximum SM clock, MHz.
    pub max_sm_mhz: u32,
}

/// Samples per block unless asked otherwise: a tenth of `samples` (at least 1), ten blocks a side.
pub fn default_block(samples: usize) -> usize {
    (samples / 10).max(1)
}

impl Interleave {
    /// Blocks of [`default_block`] samples, judged by [`CLOCK_DIP`] and [`CLOCK_FLOOR`].
    pub fn new(timing: TimingOptions, max_sm_mhz: u32) -> Interleave {
        Interleave {
            timing,
            block: default_block(timing.samples),
            clock_dip: CLOCK_DIP,
            clock_floor: CLOCK_FLOOR,
            max_sm_mhz,
        }
    }
}

/// The samples of both sides, and what the clock guard did.
#[derive(Debug, Clone)]
pub struct Interleaved {
    /// Side A (the candidate): its kept samples, and the guard pass of its first block.
    pub a: Timings,
    /// Side B (the baseline).
    pub b: Timings,
    /// Blocks kept and dropped.
    pub guard: ClockGuard,
    /// The clock read before the first block and after the last.
    pub clocks: (Option<ClockReading>, Option<ClockReading>),
}

/// Which side runs first in round `round` of [`interleave`] (0 the candidate, 1 the baseline):
/// the baseline in even rounds, the candidate in odd ones (B A, A B, B A, …: an ABBA design).
/// The warm-up round takes a run's first block out of the judgement, and over every two rounds
/// after it each side runs first once, so a drifting clock moves both alike (see
/// evidence/METHOD.md, `abba-order`).
pub fn round_order(round: usize) -> [usize; 2] {
    if round % 2 == 0 {
        [1, 0]
    } else {
        [0, 1]
    }
}

/// Samples `a` and `b` in alternating blocks, until each has `timing.samples` clean samples or
/// each has had four times its blocks. Round 0 warms the GPU up: a block of each side (the
/// baseline first, so that its time is known before the candidate's first block:
/// `after_first_baseline_block` sees it), timed and clocked like the others, its samples never
/// kept (a run's first block follows an idle GPU: [`round_order`]); each side's
/// guard pass comes from it. The rounds after it alternate which side runs first
/// ([`round_order`]). Each block's SM clock is measured on the device (nvidia-smi where the probe
/// cannot run) and judged by [`ThrottleRule`].
pub fn interleave(
    gpu: &Gpu,
    a: &mut dyn TimedSide,
    b: &mut dyn TimedSide,
    plan: &Interleave,
    after_first_baseline_block: impl FnMut(&Timings),
) -> Result<Interleaved> {
    let mut clocks = DeviceClocks::new(gpu);
    interleave_with(&mut clocks, a, b, plan, after_first_baseline_block)
}

/// [`interleave`] with the block clocks of `clocks` (a test's own, without a GPU).
pub fn interleave_with(
    clocks: &mut dyn BlockClocks,
    a: &mut dyn TimedSide,
    b: &mut dyn TimedSide,
    plan: &Interleave,
    mut after_first_baseline_block: impl FnMut(&Timings),
) -> Result<Interleaved> {
    let wanted = plan.timing.samples;
    let block = plan.block.clamp(1, wanted.max(1));
    let blocks_needed = wanted.div_ceil(block);
    let rule = ThrottleRule {
        dip: plan.clock_dip,
        floor: plan.clock_floor,
        max_mhz: plan.max_sm_mhz,
    };
    let before = clocks.reading();
    let source = clocks.source();
    let mut tally = Tally::default();
    let mut started = [false; 2];
    // Round 0 warms up; rounds 1 to 4 · blocks_needed may be judged.
    for round in 0..=4 * blocks_needed {
        let warming_up = round == 0;
        if !warming_up && tally.kept[0] >= blocks_needed && tally.kept[1] >= blocks_needed {
            break;
        }
        for side in round_order(round) {
            if !warming_up && tally.kept[side] >= blocks_needed {
                continue;
            }
            let first = !started[side];
            started[side] = true;
            let opts = TimingOptions {
                samples: block.min(wanted - tally.kept[side] * block).max(1),
                warmup: if first { plan.timing.warmup } else { 2 },
                guard_launches: if tally.guard[side].is_none() {
                    plan.timing.guard_launches
                } else {
                    0
                },
                ..plan.timing
            };
            clocks.before()?;
            let timings = if side == 0 {
                a.block(&opts)?
            } else {
                b.block(&opts)?
            };
            tally.take_guard_pass(side, &timings);
            let (clock, how) = clocks.after()?;
            if side == 1 && first {
                after_first_baseline_block(&timings);
            }
            if warming_up {
                tally.warm_up(side, clock, how);
            } else if tally.judge(&rule, side, clock, how) {
                tally.keep(side, timings, clock, plan.timing.warmup);
            }
        }
    }
    let after = clocks.reading();
    let complete = tally.kept[0] >= blocks_needed && tally.kept[1] >= blocks_needed;
    Ok(tally.finish(plan, block, complete, &rule, source, (before, after)))
}

/// A side's guard pass: wall, event, host residual and device (other streams) residual times, µs.
type GuardPass = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>);

/// What [`interleave_with`] has kept and dropped so far, side by side (0 the candidate, 1 the
/// baseline).
#[derive(Default)]
struct Tally {
    merged: [Option<Timings>; 2],
    kept: [usize; 2],
    dropped: [usize; 2],
    min_kept: Option<f64>,
    blocks: Vec<BlockClock>,
    guard: [Option<GuardPass>; 2],
}

impl Tally {
    /// The guard pass judges where the work ran, not how fast: it is kept even from a block whose
    /// samples are dropped (or work escaping the stream could hide behind a throttled first
    /// block).
    fn take_guard_pass(&mut self, side: usize, timings: &Timings) {
        if self.guard[side].is_none() && !timings.guard_event_us.is_empty() {
            self.guard[side] = Some((
                timings.wall_us.clone(),
                timings.guard_event_us.clone(),
                timings.guard_residual_us.clone(),
                timings.guard_stream_residual_us.clone(),
            ));
        }
    }

    /// A warm-up block: recorded, never kept, no side's reference.
    fn warm_up(&mut self, side: usize, mhz: Option<f64>, how: &str) {
        self.blocks.push(BlockClock {
            side,
            mhz,
            source: how.into(),
            kept: false,
            warmup: true,
            threshold_mhz: None,
        });
    }

    /// Whether a judged block of `side` at `mhz` is kept by `rule` against the side's judged
    /// blocks so far (the level it is held to); recorded either way.
    fn judge(&mut self, rule: &ThrottleRule, side: usize, mhz: Option<f64>, how: &str) -> bool {
        let earlier: Vec<f64> = self
            .blocks
            .iter()
            .filter(|b| b.side == side && !b.warmup)
            .filter_map(|b| b.mhz)
            .collect();
        let (keep, threshold) = rule.judge(mhz, &earlier);
        self.blocks.push(BlockClock {
            side,
            mhz,
            source: how.into(),
            kept: keep,
            warmup: false,
            threshold_mhz: mhz.map(|_| threshold.round()),
        });
        if !keep {
            self.dropped[side] += 1;
        }
        keep
    }

    /// A kept block's samples, after the side's earlier ones.
    fn keep(&mut self, side: usize, timings: Timings, mhz: Option<f64>, warmup: usize) {
        self.min_kept = match (self.min_kept, mhz) {
            (Some(m), Some(c)) => Some(m.min(c)),
            (m, c) => m.or(c),
        };
        self.kept[side] += 1;
        match &mut self.merged[side] {
            Some(all) => all.samples_us.extend(timings.samples_us),
            // The side's untimed launches were its first block's (the warm-up round's).
            slot => *slot = Some(Timings { warmup, ..timings }),
        }
    }

    /// Both sides' kept samples with their guard passes, and the clock guard's record.
    fn finish(
        self,
        plan: &Interleave,
        block: usize,
        complete: bool,
        rule: &ThrottleRule,
        source: &str,
        clocks: (Option<ClockReading>, Option<ClockReading>),
    ) -> Interleaved {
        let empty = || Timings {
            mode: plan.timing.mode,
            warmup: plan.timing.warmup,
            launches_per_sample: 1,
            input_sets: 0,
            samples_us: vec![],
            wall_us: vec![],
            guard_event_us: vec![],
            guard_residual_us: vec![],
            guard_stream_residual_us: vec![],
        };
        let with_guard = |t: Option<Timings>, g: Option<GuardPass>| {
            let mut t = t.unwrap_or_else(empty);
            if let Some((wall, event, residual, streams)) = g {
                (
                    t.wall_us,
                    t.guard_event_us,
                    t.guard_residual_us,
                    t.guard_stream_residual_us,
                ) = (wall, event, residual, streams);
            }
            t
        };
        let [a_t, b_t] = self.merged;
        let [a_g, b_g] = self.guard;
        let measured = self.blocks.iter().any(|b| b.mhz.is_some());
        Interleaved {
            a: with_guard(a_t, a_g),
            b: with_guard(b_t, b_g),
            guard: ClockGuard {
                block_samples: block,
                kept_blocks: self.kept,
                dropped_blocks: self.dropped,
                threshold_mhz: measured.then(|| rule.floor_mhz().round() as u32),
                min_kept_mhz: self.min_kept.map(|m| m.round() as u32),
                complete,
                rule: Some(rule.describe(source)),
                blocks: self.blocks,
            },
            clocks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::round_order;

    /// A side whose block `n` (from 1) returns samples of value `1000 · side + n`, logging every
    /// call with its options.
    struct FakeSide {
        side: usize,
        calls: usize,
        log: std::rc::Rc<std::cell::RefCell<Vec<(usize, attn_kernels::TimingOptions)>>>,
    }

    impl super::TimedSide for FakeSide {
        fn block(
            &mut self,
            opts: &attn_kernels::TimingOptions,
        ) -> crate::Result<attn_kernels::Timings> {
            self.calls += 1;
            self.log.borrow_mut().push((self.side, *opts));
            Ok(fake_timings(
                opts,
                vec![(1000 * self.side + self.calls) as f64; opts.samples],
            ))
        }
    }

    /// A block's timings: `samples_us`, and a guard pass of `opts.guard_launches` launches of 1 µs.
    fn fake_timings(
        opts: &attn_kernels::TimingOptions,
        samples_us: Vec<f64>,
    ) -> attn_kernels::Timings {
        let guard = vec![1.0; opts.guard_launches];
        attn_kernels::Timings {
            mode: opts.mode,
            warmup: opts.warmup,
            launches_per_sample: 1,
            input_sets: 2,
            samples_us,
            wall_us: guard.clone(),
            guard_event_us: guard.clone(),
            guard_residual_us: guard.clone(),
            guard_stream_residual_us: guard,
        }
    }

    /// Block clocks from a list, one per block.
    struct FakeClocks(std::vec::IntoIter<f64>);

    impl super::BlockClocks for FakeClocks {
        fn source(&self) -> &'static str {
            "a test's list"
        }
        fn before(&mut self) -> crate::Result<()> {
            Ok(())
        }
        fn after(&mut self) -> crate::Result<(Option<f64>, &'static str)> {
            Ok((self.0.next(), "device"))
        }
        fn reading(&self) -> Option<attn_kernels::telemetry::ClockReading> {
            None
        }
    }

    /// Both sides the same kernel on a GPU whose clock sags for a while in the run's middle (as a
    /// power-limited H100's did: evidence/METHOD.md, `min-blocks-a-side`): sample `t` of the
    /// run, whichever side takes it, lasts 110 µs from 45% to 85% of the run, else 100, give or
    /// take a little.
    struct WanderingGpu {
        side: usize,
        clock: std::rc::Rc<std::cell::Cell<usize>>,
        run_samples: usize,
    }

    impl super::TimedSide for WanderingGpu {
        fn block(
            &mut self,
            opts: &attn_kernels::TimingOptions,
        ) -> crate::Result<attn_kernels::Timings> {
            let samples_us = (0..opts.samples)
                .map(|_| {
                    let t = self.clock.get();
                    self.clock.set(t + 1);
                    let at = t as f64 / self.run_samples as f64;
                    let sag = if (0.45..0.85).contains(&at) {
                        10.0
                    } else {
                        0.0
                    };
                    100.0 + sag + 0.05 * ((t * 7 + self.side) % 5) as f64
                })
                .collect();
            Ok(fake_timings(opts, samples_us))
        }
    }

    #[test]
    fn a_kernel_against_itself_under_a_wandering_clock_is_no_change() {
        let verdict = |block: usize| {
            let clock = std::rc::Rc::new(std::cell::Cell::new(0));
            let side = |side| WanderingGpu {
                side,
                clock: clock.clone(),
                // The warm-up block of each side and 20 samples a side: the whole run.
                run_samples: 2 * (block + 20),
            };
            let (mut a, mut b) = (side(0), side(1));
            let timing = attn_kernels::TimingOptions {
                samples: 20,
                guard_launches: 0,
                ..attn_kernels::TimingOptions::default()
            };
            let plan = super::Interleave {
                block,
                ..super::Interleave::new(timing, 1980)
            };
            let mut clocks = FakeClocks(vec![1500.0; 64].into_iter());
            let timed = super::interleave_with(&mut clocks, &mut a, &mut b, &plan, |_| {}).unwrap();
            let sample =
                |t: &attn_kernels::Timings| attn_stats::Sample::new(t.samples_us.clone()).unwrap();
            let (b, a) = (sample(&timed.b), sample(&timed.a));
            let opts = attn_stats::CompareOptions::default();
            let in_blocks = attn_stats::compare_in_blocks(&b, &a, block, &opts).unwrap();
            (
                in_blocks.verdict,
                attn_stats::compare(&b, &a, &opts).unwrap().verdict,
            )
        };
        use attn_stats::Verdict::{Faster, NoChange};
        // The default: ten blocks a side, each side's blocks spread over the whole run.
        assert_eq!(super::default_block(20), 2);
        assert_eq!(verdict(2).0, NoChange);
        // The design before: two blocks a side (A B B A), resampled one by one. The baseline's
        // both fall in the sag and the kernel beats itself: why the gate refuses fewer than
        // MIN_BLOCKS_A_SIDE a side (as hopper did against itself on an H100: evidence/METHOD.md,
        // `min-blocks-a-side`).
        assert_eq!(verdict(10).1, Faster);
        assert!(attn_evidence::too_few_blocks(10, 20usize.div_ceil(10)));
    }

    #[test]
    fn a_warm_up_round_is_never_kept_and_the_sides_then_take_turns_going_first() {
        let log = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let side = |side| FakeSide {
            side,
            calls: 0,
            log: log.clone(),
        };
        let (mut a, mut b) = (side(0), side(1));
        let timing = attn_kernels::TimingOptions {
            samples: 20,
            ..attn_kernels::TimingOptions::default()
        };
        let plan = super::Interleave {
            block: 10,
            ..super::Interleave::new(timing, 1980)
        };
        // Warm-up B, A (a cool GPU, higher clocks: no side's reference); round 1 A, B; round 2
        // B, A (B dips more than 10% under its median: dropped); round 3 B alone (A has its two
        // blocks).
        let mut clocks =
            FakeClocks(vec![1900.0, 1800.0, 1700.0, 1690.0, 1400.0, 1680.0, 1670.0].into_iter());
        let mut first_baseline = Vec::new();
        let timed = super::interleave_with(&mut clocks, &mut a, &mut b, &plan, |t| {
            first_baseline.push(t.samples_us[0])
        })
        .unwrap();
        let order: Vec<usize> = log.borrow().iter().map(|(side, _)| *side).collect();
        assert_eq!(order, [1, 0, 0, 1, 1, 0, 1]);
        // Each side's first block (the warm-up) takes the untimed launches and the guard pass.
        for (i, (side, opts)) in log.borrow().iter().enumerate() {
            let first = i < 2;
            assert_eq!(
                opts.warmup,
                if first { timing.warmup } else { 2 },
                "call {i} (side {side})"
            );
            assert_eq!(
                opts.guard_launches,
                if first { timing.guard_launches } else { 0 }
            );
        }
        // The hang bound comes from the baseline's warm-up block.
        assert_eq!(first_baseline, [1001.0]);
        // No warm-up sample and no throttled one is kept.
        assert_eq!(timed.a.samples_us, [[2.0; 10], [3.0; 10]].concat());
        assert_eq!(timed.b.samples_us, [[1002.0; 10], [1004.0; 10]].concat());
        assert_eq!(timed.a.warmup, timing.warmup);
        assert_eq!(timed.a.guard_event_us.len(), timing.guard_launches);
        let guard = &timed.guard;
        assert_eq!((guard.kept_blocks, guard.dropped_blocks), ([2, 2], [0, 1]));
        assert!(guard.complete);
        assert_eq!(guard.min_kept_mhz, Some(1670));
        let flags: Vec<(bool, bool)> = guard.blocks.iter().map(|b| (b.warmup, b.kept)).collect();
        assert_eq!(
            flags,
            [
                (true, false),
                (true, false),
                (false, true),
                (false, true),
                (false, false),
                (false, true),
                (false, true)
            ]
        );
        // Each judged block records the threshold it was held to: the floor for a side's first,
        // then 90% of the median of the side's earlier judged blocks.
        let thresholds: Vec<Option<f64>> = guard.blocks.iter().map(|b| b.threshold_mhz).collect();
        assert_eq!(
            thresholds,
            [
                None,
                None,
                Some(990.0),
                Some(990.0),
                Some(1521.0),
                Some(1530.0),
                Some(1391.0)
            ]
        );
        // Evidence: the kept blocks' mean clock per side leaves the warm-up out.
        assert_eq!(guard.mean_kept_mhz(1), Some((1690.0 + 1670.0) / 2.0));
    }

    #[test]
    fn the_baseline_runs_first_and_a_drifting_clock_favours_neither_side() {
        // The warm-up round: the baseline first (its time bounds the candidate's first block).
        assert_eq!(round_order(0), [1, 0]);
        // The judged rounds 1..=2n in order, as block positions: a clock falling linearly over
        // the run (each block slower than the one before) costs both sides the same in total.
        for rounds in [2usize, 4, 6, 20] {
            let mut position_sum = [0usize; 2];
            let mut position = 0;
            for round in 1..=rounds {
                let order = round_order(round);
                assert_ne!(order[0], order[1]);
                for side in order {
                    position_sum[side] += position;
                    position += 1;
                }
            }
            assert_eq!(position_sum[0], position_sum[1], "{rounds} rounds");
        }
    }
}
