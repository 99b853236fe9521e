//! The gate's decision for one case, as one function of its typed results and the rule. A live
//! run and `--replay` of its evidence call it alike: a stored decision is reproduced from the
//! stored facts (raw samples included), never from message text.

use attn_evidence::{
    CaseStatus, CheckFailure, CorrectnessCheck, FlagKind, GateCase, GateMode, GateRule,
};
use attn_stats::{CompareOptions, Comparison};

/// The outcome of a case and why, in one line.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// What ended the case.
    pub status: CaseStatus,
    /// Why.
    pub reason: String,
}

/// The device's dense fp16/bf16 tensor peak, TFLOP/s ([`attn_evidence::dense_peak_tflops`]),
/// from a CUDA device's properties.
pub fn peak_tflops(sm_count: u32, max_sm_mhz: u32, capability: (i32, i32)) -> Option<f64> {
    let (major, minor) = capability;
    attn_evidence::dense_peak_tflops(
        sm_count,
        f64::from(max_sm_mhz),
        u32::try_from(major).ok()?,
        u32::try_from(minor).ok()?,
    )
}

/// How a check failed (schema-1 checks recorded only counts).
fn failure_of(check: &CorrectnessCheck) -> CheckFailure {
    check.failure.unwrap_or(if check.poison_count > 0 {
        CheckFailure::Unwritten
    } else if check.nan_count > 0 {
        CheckFailure::NonFinite
    } else {
        CheckFailure::Incorrect
    })
}

/// Why a timed result is implausible, if it is: above the device's dense tensor peak, below the
/// memory floor (the bytes a launch must move at peak bandwidth), or, where either physical bound
/// is unknown, more than the rule's limit faster than the baseline.
///
/// Where both bounds are known they are what no honest kernel can beat; the ratio is then only
/// [`remarkable_speedup`]: a baseline may be slow for reasons of its own (a scalar kernel, a
/// dispatch-bound library call at a tiny shape), and an honest kernel many times faster than it
/// must not be rejected for that.
pub fn implausibility(
    case: &GateCase,
    rule: &GateRule,
    peak_tflops: Option<f64>,
) -> Option<String> {
    let comparison = case.comparison.as_ref()?;
    let tflops = case.tflops(comparison.candidate.median);
    if let Some(peak) = peak_tflops {
        if tflops > peak {
            return Some(format!(
                "{tflops:.0} TFLOP/s is above the device's dense tensor peak of {peak:.0} TFLOP/s"
            ));
        }
    }
    if let Some(floor) = case.memory_floor_us {
        if comparison.candidate.median < floor {
            return Some(format!(
                "{} µs is below the physical floor of {} µs (the bytes a launch must move at the device's peak memory bandwidth)",
                micros(comparison.candidate.median),
                micros(floor)
            ));
        }
    }
    let bounded = peak_tflops.is_some() && case.memory_floor_us.is_some();
    if bounded {
        return None;
    }
    remarkable_speedup(case, rule)
        .map(|r| format!("{r}, beyond the plausible {:.0}×", rule.max_speedup))
}

/// The speedup, when it is beyond the rule's `max_speedup`: implausible where the physical bounds
/// are unknown ([`implausibility`]), else a note a reviewer should read.
pub fn remarkable_speedup(case: &GateCase, rule: &GateRule) -> Option<String> {
    let comparison = case.comparison.as_ref()?;
    (comparison.speedup.point > rule.max_speedup)
        .then(|| format!("{:.1}× faster than the baseline", comparison.speedup.point))
}

/// The ratchet's failure: the candidate's median above (1 + `tolerance`) × the baseline's AND
/// the whole CI of (candidate − baseline) medians above 0; noise either way passes.
pub fn regressed(comparison: &Comparison, tolerance: f64) -> bool {
    comparison.candidate.median > (1.0 + tolerance) * comparison.baseline.median
        && comparison.diff_median.lower > 0.0
}

/// The decision for `case` (its comparison already computed from its samples) under `rule`'s
/// mode: faster by the threshold of `options`, or (a ratchet) no regression.
pub fn decide(
    case: &GateCase,
    rule: &GateRule,
    options: &CompareOptions,
    peak_tflops: Option<f64>,
) -> Decision {
    let done = |status, reason: String| Decision { status, reason };
    if let Some(status @ (CaseStatus::Hang | CaseStatus::Fault | CaseStatus::CouldNotRun)) =
        case.status
    {
        return done(status, case.reason.clone());
    }
    if let Some(bad) = case.correctness.iter().find(|c| !c.passed) {
        return check_failed(bad, None);
    }
    let battery = case.battery.as_ref();
    if let Some(bad) = battery.and_then(|b| b.checks.iter().find(|c| !c.passed)) {
        return check_failed(bad, Some("edge shape"));
    }
    if let Some(timed) = case.timed_outputs.as_ref() {
        if let Some(first) = timed.outside.first() {
            return done(
                CaseStatus::WroteOutside,
                format!("wrote outside its output during timing ({first})"),
            );
        }
        if let Some(first) = timed.inputs_written.first() {
            return done(
                CaseStatus::WroteInputs,
                format!("wrote into its inputs during timing ({first})"),
            );
        }
    }
    if let Some(timed) = case.timed_outputs.as_ref().filter(|t| t.samples_bad > 0) {
        return done(
            CaseStatus::TimedOutputDiffers,
            format!(
                "output of timed launches differs from the checked output in {} of {} samples ({})",
                timed.samples_bad,
                timed.samples_checked,
                timed.first_bad.as_deref().unwrap_or("?")
            ),
        );
    }
    // The flags that reject a case, each with its status.
    let rejecting = [
        (
            FlagKind::EscapedStream,
            CaseStatus::EscapedStream,
            "rejected",
        ),
        (
            FlagKind::BrokeContract,
            CaseStatus::BrokeContract,
            "rejected while timed",
        ),
    ];
    for (kind, status, what) in rejecting {
        if let Some(flag) = case.flags.iter().find(|f| f.kind == kind) {
            return done(status, format!("{what}: {}", flag.message));
        }
    }
    let Some(comparison) = &case.comparison else {
        return not_timed(case);
    };
    if let Some(guard) = case.clock_guard.as_ref().filter(|g| !g.complete) {
        return done(
            CaseStatus::Inconclusive,
            format!(
                "inconclusive: too few clean samples (blocks dropped for a throttled SM clock: candidate {}, baseline {})",
                guard.dropped_blocks[0], guard.dropped_blocks[1]
            ),
        );
    }
    let throttled = case.flags.iter().find(|f| f.kind == FlagKind::Throttled);
    if let Some(flag) = throttled.filter(|_| rule.throttle_inconclusive) {
        return done(
            CaseStatus::Inconclusive,
            format!("inconclusive: {}", flag.message),
        );
    }
    let speed = format!(
        "{} vs {} µs, speedup {:.2}× [{:.2}, {:.2}], {}",
        micros(comparison.candidate.median),
        micros(comparison.baseline.median),
        comparison.speedup.point,
        comparison.speedup.lower,
        comparison.speedup.upper,
        comparison.verdict
    );
    if let Some(why) = implausibility(case, rule, peak_tflops) {
        if !rule.allow_implausible {
            return done(
                CaseStatus::Implausible,
                format!(
                    "implausible: {why} ({speed}); a person may accept it with --allow-implausible"
                ),
            );
        }
    }
    if let GateMode::NoRegression { tolerance } = rule.mode {
        return if regressed(comparison, tolerance) {
            done(
                CaseStatus::Regression,
                format!(
                    "regression: {speed} (ratchet: slower than {:.2}× the baseline's median, CI of the difference above 0)",
                    1.0 + tolerance
                ),
            )
        } else {
            done(CaseStatus::Passed, format!("no regression: {speed}"))
        };
    }
    if comparison.gate.passed {
        done(CaseStatus::Passed, format!("passed: {speed}"))
    } else {
        done(
            CaseStatus::NotFaster,
            format!(
                "not faster enough: {speed} (gate: ≤ {:.2}× baseline median, CI of the difference below 0)",
                options.gate_threshold
            ),
        )
    }
}

/// The decision for a failed correctness check: its failure's status, and a reason naming the
/// inputs, the scale and (for the edge-shape battery) the shape.
fn check_failed(bad: &CorrectnessCheck, battery: Option<&str>) -> Decision {
    let failure = failure_of(bad);
    let status = match failure {
        CheckFailure::Unwritten => CaseStatus::Unwritten,
        CheckFailure::NonFinite => CaseStatus::NonFinite,
        CheckFailure::Stale => CaseStatus::StaleOutput,
        CheckFailure::Incorrect => CaseStatus::Incorrect,
        CheckFailure::WroteOutside => CaseStatus::WroteOutside,
        CheckFailure::WroteInputs => CaseStatus::WroteInputs,
        CheckFailure::ReadOutside => CaseStatus::ReadOutside,
        CheckFailure::NonDeterministic => CaseStatus::NonDeterministic,
        CheckFailure::BrokeContract => CaseStatus::BrokeContract,
    };
    let why = bad.reason.as_deref().unwrap_or("wrong result");
    let mut inputs = format!("{} inputs, seed {}", bad.distribution, bad.seed);
    if let Some(scale) = bad.scale {
        inputs.push_str(&format!(", scale {scale:.4}"));
    }
    if let (Some(what), Some(shape)) = (battery, bad.shape.as_deref()) {
        inputs = format!("{what} {shape}, {inputs}");
    }
    let reason = if failure.is_defence() {
        // The reason is the verdict: "wrote outside its output (128 bytes after O)".
        format!("{why} ({inputs})")
    } else {
        format!("incorrect ({inputs}): {why}")
    };
    Decision { status, reason }
}

/// Why a case has no comparison: every block dropped by the clock rule (inconclusive, with the
/// clocks measured), or (older files, or too few samples for another reason) not timed.
fn not_timed(case: &GateCase) -> Decision {
    let Some(guard) = case.clock_guard.as_ref().filter(|g| !g.complete) else {
        return Decision {
            status: CaseStatus::CouldNotRun,
            reason: "not timed".into(),
        };
    };
    let judged = || guard.blocks.iter().filter(|b| !b.warmup);
    let measured: Vec<f64> = judged().filter_map(|b| b.mhz).collect();
    let clocks = match (
        measured.iter().copied().reduce(f64::min),
        measured.iter().copied().reduce(f64::max),
    ) {
        (Some(lo), Some(hi)) => {
            let source = judged()
                .find(|b| b.mhz.is_some())
                .map_or("", |b| b.source.as_str());
            format!("; SM clock over the blocks {lo:.0}–{hi:.0} MHz ({source})")
        }
        _ => String::new(),
    };
    let rule = guard
        .rule
        .clone()
        .or_else(|| guard.threshold_mhz.map(|t| format!("kept at ≥ {t} MHz")))
        .unwrap_or_else(|| "the SM clock could not be read".into());
    Decision {
        status: CaseStatus::Inconclusive,
        reason: format!(
            "inconclusive: not timed: blocks dropped for a throttled SM clock (candidate {} kept, {} dropped; baseline {} kept, {} dropped; rule: {rule}{clocks})",
            guard.kept_blocks[0], guard.dropped_blocks[0], guard.kept_blocks[1], guard.dropped_blocks[1]
        ),
    }
}

fn micros(us: f64) -> String {
    if us >= 100.0 {
        format!("{us:.0}")
    } else if us >= 10.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_evidence::{Flag, ShapeSpec, TimedOutputCheck};
    use attn_stats::Sample;

    fn case(candidate_us: f64, baseline_us: f64) -> GateCase {
        let options = CompareOptions::default();
        let wobble = |base: f64| -> Vec<f64> {
            (0..60)
                .map(|i| base * (1.0 + 0.001 * f64::from(i % 7)))
                .collect()
        };
        let comparison = attn_stats::compare(
            &Sample::new(wobble(baseline_us)).unwrap(),
            &Sample::new(wobble(candidate_us)).unwrap(),
            &options,
        )
        .unwrap();
        GateCase {
            shape: "2,16,4096,128".parse::<ShapeSpec>().unwrap(),
            decode: None,
            backward: None,
            config: Default::default(),
            correctness: vec![],
            candidate: None,
            baseline: None,
            comparison: Some(comparison),
            candidate_tflops: None,
            baseline_tflops: None,
            flags: vec![],
            timed_outputs: None,
            clock_guard: None,
            battery: None,
            memory_floor_us: None,
            defences: vec![],
            status: None,
            passed: false,
            reason: String::new(),
        }
    }

    fn status(case: &GateCase, peak: Option<f64>) -> CaseStatus {
        decide(case, &GateRule::default(), &CompareOptions::default(), peak).status
    }

    #[test]
    fn a_faster_case_passes_and_a_slower_one_does_not() {
        assert_eq!(
            status(&case(400.0, 460.0), Some(1070.0)),
            CaseStatus::Passed
        );
        assert_eq!(
            status(&case(455.0, 460.0), Some(1070.0)),
            CaseStatus::NotFaster
        );
    }

    #[test]
    fn impossible_speed_is_implausible_unless_a_person_allows_it() {
        // 2,16,4096,128 is 275 GFLOP: 100 µs would be 2749 TFLOP/s.
        let fast = case(100.0, 460.0);
        assert_eq!(status(&fast, Some(1070.0)), CaseStatus::Implausible);
        // Without a known peak, 20× the baseline is still implausible.
        let twenty = case(23.0, 460.0);
        assert_eq!(status(&twenty, None), CaseStatus::Implausible);
        let rule = GateRule {
            allow_implausible: true,
            ..GateRule::default()
        };
        let allowed = decide(&fast, &rule, &CompareOptions::default(), Some(1070.0));
        assert_eq!(allowed.status, CaseStatus::Passed);
    }

    #[test]
    fn verification_failures_come_before_speed() {
        let mut timed = case(400.0, 460.0);
        timed.timed_outputs = Some(TimedOutputCheck {
            sets: 2,
            samples_checked: 100,
            samples_bad: 88,
            first_bad: Some("sample 12".into()),
            inputs_scrambled: true,
            launches_per_sample: Some(1),
            reference_masked: true,
            outside: vec![],
            inputs_written: vec![],
        });
        assert_eq!(status(&timed, None), CaseStatus::TimedOutputDiffers);
        let mut escaped = case(400.0, 460.0);
        escaped.flags.push(Flag::new(
            FlagKind::EscapedStream,
            "work escapes the timed stream",
        ));
        assert_eq!(status(&escaped, None), CaseStatus::EscapedStream);
        let mut throttled = case(400.0, 460.0);
        throttled
            .flags
            .push(Flag::new(FlagKind::Throttled, "SM clock 1635 MHz"));
        assert_eq!(status(&throttled, None), CaseStatus::Inconclusive);
    }

    #[test]
    fn a_ratchet_fails_only_on_a_clear_regression() {
        let ratchet = GateRule {
            mode: GateMode::NoRegression { tolerance: 0.02 },
            ..GateRule::default()
        };
        let judge = |cand: f64, base: f64| {
            decide(
                &case(cand, base),
                &ratchet,
                &CompareOptions::default(),
                Some(1070.0),
            )
        };
        // Faster, level, or slower within the tolerance: no regression.
        for (cand, base) in [(400.0, 460.0), (460.0, 460.0), (465.0, 460.0)] {
            let d = judge(cand, base);
            assert_eq!(
                d.status,
                CaseStatus::Passed,
                "{cand} vs {base}: {}",
                d.reason
            );
            assert!(d.reason.starts_with("no regression"), "{}", d.reason);
        }
        // 5 % slower, CI clear of 0: a regression.
        let d = judge(483.0, 460.0);
        assert_eq!(d.status, CaseStatus::Regression, "{}", d.reason);
        assert!(d.reason.contains("1.02×"), "{}", d.reason);
        // The usual gate fails the level case the ratchet passes.
        assert_eq!(status(&case(460.0, 460.0), None), CaseStatus::NotFaster);
        // Beyond the tolerance but noise wide enough that the CI reaches 0: no regression.
        let noisy = |base: f64| -> Vec<f64> {
            (0..40)
                .map(|i| base * (0.6 + 0.02 * f64::from(i % 41)))
                .collect()
        };
        let options = CompareOptions::default();
        let mut wide = case(480.0, 460.0);
        wide.comparison = Some(
            attn_stats::compare(
                &Sample::new(noisy(460.0)).unwrap(),
                &Sample::new(noisy(480.0)).unwrap(),
                &options,
            )
            .unwrap(),
        );
        let c = wide.comparison.as_ref().unwrap();
        assert!(c.candidate.median > 1.02 * c.baseline.median);
        assert!(c.diff_median.lower <= 0.0, "{:?}", c.diff_median);
        assert_eq!(
            decide(&wide, &ratchet, &options, None).status,
            CaseStatus::Passed
        );
        // Correctness still comes first.
        let mut wrong = case(400.0, 460.0);
        wrong.status = Some(CaseStatus::Fault);
        wrong.reason = "fault: illegal address".into();
        assert_eq!(
            decide(&wrong, &ratchet, &options, None).status,
            CaseStatus::Fault
        );
    }

    fn failed_check(failure: CheckFailure, reason: &str) -> CorrectnessCheck {
        CorrectnessCheck {
            seed: 5,
            distribution: "normal".into(),
            passed: false,
            max_abs: 0.0,
            rel_l2: 0.0,
            nan_count: 0,
            poison_count: 0,
            reason: Some(reason.into()),
            sdpa_max_abs: None,
            closer_to: None,
            failure: Some(failure),
            rows: None,
            full: None,
            scale: Some(0.0625),
            shape: None,
            guards: None,
        }
    }

    #[test]
    fn each_defence_fails_the_case_with_its_own_status_and_verdict() {
        for (failure, status, verdict) in [
            (
                CheckFailure::WroteOutside,
                CaseStatus::WroteOutside,
                "wrote outside its output (128 bytes after O)",
            ),
            (
                CheckFailure::WroteInputs,
                CaseStatus::WroteInputs,
                "wrote into its inputs (Q changed across the launch)",
            ),
            (
                CheckFailure::ReadOutside,
                CaseStatus::ReadOutside,
                "read outside its inputs (past K, past V); with NaN there: 12 NaN/Inf output elements",
            ),
            (
                CheckFailure::NonDeterministic,
                CaseStatus::NonDeterministic,
                "non-deterministic output: two launches on the same inputs differ in 4 of 65536 elements",
            ),
        ] {
            let mut c = case(400.0, 460.0);
            c.correctness = vec![failed_check(failure, verdict)];
            let d = decide(&c, &GateRule::default(), &CompareOptions::default(), None);
            assert_eq!(d.status, status);
            assert!(!d.status.passed());
            assert!(d.reason.starts_with(verdict), "{}", d.reason);
            assert!(d.reason.contains("scale 0.0625"), "{}", d.reason);
        }
        // A wrong value still reads "incorrect (...)", now with the scale it was checked at.
        let mut c = case(400.0, 460.0);
        c.correctness = vec![failed_check(CheckFailure::Incorrect, "max abs error 1e-1")];
        let d = decide(&c, &GateRule::default(), &CompareOptions::default(), None);
        assert_eq!(d.status, CaseStatus::Incorrect);
        assert!(
            d.reason
                .starts_with("incorrect (normal inputs, seed 5, scale 0.0625)"),
            "{}",
            d.reason
        );
    }

    #[test]
    fn a_failed_edge_shape_fails_the_case_naming_the_shape() {
        let mut c = case(400.0, 460.0);
        let mut bad = failed_check(CheckFailure::Unwritten, "3 output elements never written");
        bad.shape = Some("1,1,129,127,64 causal".into());
        c.battery = Some(attn_evidence::EdgeBattery {
            shapes: vec!["1,1,1,64".into(), "1,1,129,127,64 causal".into()],
            checks: vec![bad],
            skipped: vec![],
            checked_in: None,
        });
        let d = decide(&c, &GateRule::default(), &CompareOptions::default(), None);
        assert_eq!(d.status, CaseStatus::Unwritten);
        assert!(
            d.reason.contains("edge shape 1,1,129,127,64 causal"),
            "{}",
            d.reason
        );
    }

    #[test]
    fn writes_found_after_timing_fail_the_case() {
        let mut c = case(400.0, 460.0);
        c.timed_outputs = Some(TimedOutputCheck {
            sets: 2,
            samples_checked: 100,
            samples_bad: 0,
            first_bad: None,
            inputs_scrambled: true,
            launches_per_sample: Some(1),
            reference_masked: true,
            outside: vec!["2 bytes before O of input set 1".into()],
            inputs_written: vec![],
        });
        let d = decide(&c, &GateRule::default(), &CompareOptions::default(), None);
        assert_eq!(d.status, CaseStatus::WroteOutside);
        assert_eq!(
            d.reason,
            "wrote outside its output during timing (2 bytes before O of input set 1)"
        );
    }

    #[test]
    fn a_slow_baseline_makes_no_honest_kernel_implausible_where_the_bounds_are_known() {
        // 15× a slow baseline, yet above the FLOP floor (257 µs at 1070 TFLOP/s) and the memory
        // floor: honest, and passed.
        let mut c = case(300.0, 4500.0);
        c.memory_floor_us = Some(50.0);
        assert_eq!(status(&c, Some(1070.0)), CaseStatus::Passed);
        assert!(remarkable_speedup(&c, &GateRule::default()).is_some());
        // With either bound unknown the ratio is all there is to judge by.
        assert_eq!(status(&c, None), CaseStatus::Implausible);
        c.memory_floor_us = None;
        assert_eq!(status(&c, Some(1070.0)), CaseStatus::Implausible);
    }

    #[test]
    fn a_median_under_the_memory_floor_is_implausible() {
        let mut c = case(400.0, 460.0);
        c.memory_floor_us = Some(390.0);
        assert_eq!(status(&c, None), CaseStatus::Passed);
        c.memory_floor_us = Some(420.0);
        let d = decide(&c, &GateRule::default(), &CompareOptions::default(), None);
        assert_eq!(d.status, CaseStatus::Implausible);
        assert!(
            d.reason.contains("below the physical floor of 420 µs"),
            "{}",
            d.reason
        );
    }

    #[test]
    fn a_case_never_timed_says_why() {
        let mut c = case(400.0, 460.0);
        c.comparison = None;
        // No clock guard (older files): as before.
        let d = decide(&c, &GateRule::default(), &CompareOptions::default(), None);
        assert_eq!(
            (d.status, d.reason.as_str()),
            (CaseStatus::CouldNotRun, "not timed")
        );
        c.clock_guard = Some(attn_evidence::ClockGuard {
            block_samples: 10,
            kept_blocks: [0, 0],
            dropped_blocks: [20, 20],
            threshold_mhz: Some(1485),
            min_kept_mhz: None,
            complete: false,
            rule: Some("kept when the SM clock measured on the device over the block is ≥ 75% of the 1980 MHz maximum (1485 MHz)".into()),
            // The warm-up block is neither kept nor dropped: the range is the judged blocks'.
            blocks: vec![
                attn_evidence::BlockClock {
                    side: 1,
                    mhz: Some(1890.0),
                    source: "device".into(),
                    kept: false,
                    warmup: true,
                    threshold_mhz: None,
                },
                attn_evidence::BlockClock {
                    side: 1,
                    mhz: Some(1402.0),
                    source: "device".into(),
                    kept: false,
                    warmup: false,
                    threshold_mhz: None,
                },
            ],
        });
        let d = decide(&c, &GateRule::default(), &CompareOptions::default(), None);
        assert_eq!(d.status, CaseStatus::Inconclusive);
        assert!(d.reason.contains("1402–1402 MHz (device)"), "{}", d.reason);
        assert!(d.reason.contains("75% of the 1980 MHz"), "{}", d.reason);
    }

    #[test]
    fn the_h100_peak_is_computed_from_its_properties() {
        let peak = peak_tflops(132, 1980, (9, 0)).unwrap();
        assert!((peak - 1070.5).abs() < 1.0, "{peak}");
        assert_eq!(peak_tflops(132, 1980, (7, 5)), None);
    }
}
