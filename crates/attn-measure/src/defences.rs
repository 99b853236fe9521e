//! The record of which defences ran on a gate case, built from what its phases left in the case
//! (checks, battery, timed outputs, comparison, flags) and the few facts the case does not keep:
//! never a constant list, so a defence a case skipped says so.

use attn_evidence::{
    CaseStatus, CheckFailure, CorrectnessCheck, Defence, DefenceName, FlagKind, GateCase, GateRule,
    LaunchGuards,
};

use crate::decide::implausibility;

/// What a case's record needs beyond the case itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CaseFacts {
    /// The watchdog's floor (s) and factor of the baseline's median, when one bounds the launches.
    pub watchdog: Option<(f64, f64)>,
    /// Launches of the candidate's guard pass, each followed by events on every other stream
    /// (0: the side-stream check had nothing to judge).
    pub side_stream_launches: usize,
    /// The device's dense tensor peak, TFLOP/s, when known.
    pub peak_tflops: Option<f64>,
}

/// Every defence of [`DefenceName::ALL`] on `case` (its status decided), judged by `rule`.
pub fn case_defences(case: &GateCase, rule: &GateRule, facts: &CaseFacts) -> Vec<Defence> {
    DefenceName::ALL
        .iter()
        .map(|&name| defence(name, case, rule, facts))
        .collect()
}

/// Why a phase left nothing: the case ended before it.
fn not_reached(case: &GateCase, phase: &str) -> String {
    match case.status {
        Some(status) => format!("not reached: the case ended before {phase} ({status})"),
        None => format!("not reached: the case ended before {phase}"),
    }
}

fn failed_with(checks: &[&CorrectnessCheck], failure: CheckFailure) -> bool {
    checks
        .iter()
        .any(|c| !c.passed && c.failure == Some(failure))
}

fn defence(name: DefenceName, case: &GateCase, rule: &GateRule, facts: &CaseFacts) -> Defence {
    let mut checks: Vec<&CorrectnessCheck> = case.correctness.iter().collect();
    let battery = case.battery.as_ref();
    checks.extend(battery.iter().flat_map(|b| b.checks.iter()));
    let guarded: Vec<&LaunchGuards> = checks.iter().filter_map(|c| c.guards.as_ref()).collect();
    let timed = case.timed_outputs.as_ref();
    let during_timing = |what: &str| match timed {
        Some(t) => format!("; {what} after {} timed samples", t.samples_checked),
        None => String::new(),
    };
    match name {
        DefenceName::HangWatchdog => match facts.watchdog {
            None => Defence::not_run(name, "no watchdog bounded this session's launches"),
            Some(_) if checks.is_empty() && case.status != Some(CaseStatus::Hang) => {
                Defence::not_run(name, not_reached(case, "any candidate launch"))
            }
            Some((floor, factor)) => Defence::ran(
                name,
                format!(
                    "every candidate launch bounded: {floor:.1} s, then the larger of that and {factor:.0}× the baseline's first median"
                ),
                case.status == Some(CaseStatus::Hang),
            ),
        },
        DefenceName::ScaleDraws => {
            let nominal = 1.0 / (case.shape.head_dim as f64).sqrt();
            let factors: Vec<f64> = case
                .correctness
                .iter()
                .filter_map(|c| c.scale)
                .map(|s| s / nominal)
                .collect();
            if factors.is_empty() {
                return Defence::not_run(name, not_reached(case, "its checks"));
            }
            let drawn = factors.iter().filter(|f| (*f - 1.0).abs() > 1e-9).count();
            let caught = case.correctness.iter().any(|c| {
                !c.passed
                    && c.failure == Some(CheckFailure::Incorrect)
                    && c.scale.is_some_and(|s| (s / nominal - 1.0).abs() > 1e-9)
            });
            Defence::ran(
                name,
                format!(
                    "{} checks, {drawn} at a scale other than 1/√D",
                    factors.len()
                ),
                caught,
            )
        }
        DefenceName::GuardRegions | DefenceName::InputChecksums => {
            let Some(first) = guarded.first() else {
                return Defence::not_run(name, not_reached(case, "a guarded check"));
            };
            let launches: u32 = guarded.iter().map(|g| g.launches).sum();
            if name == DefenceName::GuardRegions {
                let caught = failed_with(&checks, CheckFailure::WroteOutside)
                    || failed_with(&checks, CheckFailure::ReadOutside)
                    || guarded.iter().any(|g| !g.outside.is_empty() || !g.read_outside.is_empty())
                    || timed.is_some_and(|t| !t.outside.is_empty());
                // NaN guards after the inputs (newer checks): reads there are probed on failure.
                let after = guarded
                    .iter()
                    .flat_map(|g| g.input_guards_after.iter().copied())
                    .max();
                let probes: u32 = guarded.iter().map(|g| g.read_probe_launches).sum();
                let reads = match after {
                    Some(bytes) => format!(
                        "; NaN guards up to {bytes} bytes after Q, K and V, {probes} read-probe launches"
                    ),
                    None => String::new(),
                };
                Defence::ran(
                    name,
                    format!(
                        "{} bytes each side of Q, K, V and O over {launches} checked launches{reads}{}",
                        first.guard_bytes,
                        during_timing("read")
                    ),
                    caught,
                )
            } else {
                let caught = failed_with(&checks, CheckFailure::WroteInputs)
                    || guarded.iter().any(|g| !g.inputs_written.is_empty())
                    || timed.is_some_and(|t| !t.inputs_written.is_empty());
                Defence::ran(
                    name,
                    format!(
                        "Q, K and V summed across {launches} checked launches{}",
                        during_timing("summed")
                    ),
                    caught,
                )
            }
        }
        DefenceName::Determinism => {
            let twice: Vec<&&LaunchGuards> = guarded.iter().filter(|g| g.launches >= 2).collect();
            if twice.is_empty() {
                return Defence::not_run(name, not_reached(case, "a check launched twice"));
            }
            // A backward kernel may declare itself non-deterministic (dQ added up with atomics):
            // its launches may differ, but the second must pass the same tolerance.
            let declared_unstable = case.backward.as_ref().is_some_and(|b| !b.deterministic);
            let caught = failed_with(&checks, CheckFailure::NonDeterministic)
                || (!declared_unstable && twice.iter().any(|g| !g.identical));
            let compared = if declared_unstable {
                let differ = twice.iter().filter(|g| !g.identical).count();
                format!(
                    "declared non-deterministic: the second launch judged by the same tolerance ({differ} differed bitwise from the first)"
                )
            } else {
                "outputs compared bitwise".to_string()
            };
            Defence::ran(
                name,
                format!(
                    "{} checks launched twice on the same inputs, {compared}",
                    twice.len()
                ),
                caught,
            )
        }
        DefenceName::StaleOutput => {
            let compared = case.correctness.len().saturating_sub(1);
            if compared == 0 {
                let why = if case.correctness.is_empty() {
                    not_reached(case, "its checks")
                } else {
                    "one check only: no previous output to compare with".into()
                };
                return Defence::not_run(name, why);
            }
            let main: Vec<&CorrectnessCheck> = case.correctness.iter().collect();
            Defence::ran(
                name,
                format!("{compared} checks compared with the previous check's output"),
                failed_with(&main, CheckFailure::Stale),
            )
        }
        DefenceName::EdgeBattery => {
            let Some(b) = battery else {
                return Defence::not_run(name, not_reached(case, "the edge battery"));
            };
            let caught = b.checks.iter().any(|c| !c.passed);
            if let Some(first) = &b.checked_in {
                return Defence::ran(
                    name,
                    format!("run on {first} (same config, head dim, dtype, mask and layout)"),
                    caught,
                );
            }
            if b.shapes.is_empty() {
                return Defence::not_run(name, "no edge shape for this problem");
            }
            Defence::ran(
                name,
                format!(
                    "{} of {} shapes checked, {} skipped",
                    b.checks.len(),
                    b.shapes.len(),
                    b.skipped.len()
                ),
                caught,
            )
        }
        DefenceName::InputPermutations => match timed {
            Some(t) if t.inputs_scrambled => Defence::ran(
                name,
                format!(
                    "fresh signed column permutations before each of {} timed samples over {} input sets",
                    t.samples_checked, t.sets
                ),
                false,
            ),
            Some(_) => Defence::not_run(name, "timed on inputs not permuted between samples"),
            None => Defence::not_run(name, not_timed(case)),
        },
        DefenceName::TimedVerification => match timed {
            Some(t) => Defence::ran(
                name,
                format!(
                    "{} timed samples of {} launches verified against their input set's reference{}",
                    t.samples_checked,
                    t.launches_per_sample.unwrap_or(1),
                    if t.reference_masked {
                        ", references masked"
                    } else {
                        ""
                    }
                ),
                t.samples_bad > 0,
            ),
            None => Defence::not_run(name, not_timed(case)),
        },
        DefenceName::SideStream => {
            let caught = case.flags.iter().any(|f| f.kind == FlagKind::EscapedStream);
            if facts.side_stream_launches == 0 && !caught {
                return Defence::not_run(
                    name,
                    if case.candidate.is_some() {
                        "no guard-pass launch to judge".into()
                    } else {
                        not_timed(case)
                    },
                );
            }
            Defence::ran(
                name,
                format!(
                    "{} guard-pass launches, events on every other stream",
                    facts.side_stream_launches
                ),
                caught,
            )
        }
        DefenceName::Plausibility => {
            let Some(c) = case.comparison.as_ref() else {
                return Defence::not_run(name, not_timed(case));
            };
            let mut bounds = Vec::new();
            if let Some(floor) = case.memory_floor_us {
                bounds.push(format!("memory floor {floor:.2} µs"));
            }
            if let Some(peak) = facts.peak_tflops {
                bounds.push(format!("dense peak {peak:.0} TFLOP/s"));
            }
            if bounds.len() < 2 {
                bounds.push(format!("speedup ≤ {:.0}×", rule.max_speedup));
            }
            let caught = implausibility(case, rule, facts.peak_tflops).is_some();
            let allowed = if caught && rule.allow_implausible {
                " (allowed by a person)"
            } else {
                ""
            };
            Defence::ran(
                name,
                format!(
                    "median {:.2} µs against {}{allowed}",
                    c.candidate.median,
                    bounds.join(", ")
                ),
                caught,
            )
        }
    }
}

fn not_timed(case: &GateCase) -> String {
    if case.candidate.is_some() {
        "timed, but no comparison was made".into()
    } else {
        not_reached(case, "timing")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_evidence::{DefenceOutcome, EdgeBattery};

    fn check(seed: u64, scale: f64) -> CorrectnessCheck {
        CorrectnessCheck {
            seed,
            distribution: "normal".into(),
            passed: true,
            max_abs: 1e-3,
            rel_l2: 1e-4,
            nan_count: 0,
            poison_count: 0,
            reason: None,
            sdpa_max_abs: None,
            closer_to: None,
            failure: None,
            rows: None,
            full: None,
            scale: Some(scale),
            shape: None,
            guards: Some(LaunchGuards {
                guard_bytes: 4096,
                outside: vec![],
                inputs_written: vec![],
                launches: 2,
                identical: true,
                input_guards_after: vec![],
                read_probe_launches: 0,
                read_outside: vec![],
            }),
        }
    }

    fn checked_case() -> GateCase {
        let problem = crate::Problem::parse("1,8,512,64").unwrap();
        let mut case = crate::gate::ended_case(&problem, CaseStatus::NotFaster, String::new());
        case.correctness = vec![check(1, 0.0625), check(2, 0.125)];
        case
    }

    fn find(defences: &[Defence], name: DefenceName) -> &Defence {
        defences.iter().find(|d| d.name == name).unwrap()
    }

    #[test]
    fn a_case_that_ended_at_its_battery_records_timing_defences_as_not_run() {
        let mut case = checked_case();
        let mut bad = check(9, 0.125);
        bad.passed = false;
        bad.failure = Some(CheckFailure::WroteOutside);
        bad.shape = Some("1,1,1,64".into());
        case.battery = Some(EdgeBattery {
            shapes: vec!["1,1,1,64".into(), "1,3,77,64".into()],
            checks: vec![bad],
            skipped: vec![],
            checked_in: None,
        });
        case.status = Some(CaseStatus::WroteOutside);
        let facts = CaseFacts {
            watchdog: Some((5.0, 100.0)),
            ..CaseFacts::default()
        };
        let defences = case_defences(&case, &GateRule::default(), &facts);
        assert_eq!(defences.len(), DefenceName::ALL.len());
        let battery = find(&defences, DefenceName::EdgeBattery);
        assert_eq!(battery.outcome, DefenceOutcome::Failed);
        assert_eq!(battery.covered, "1 of 2 shapes checked, 0 skipped");
        assert_eq!(
            find(&defences, DefenceName::GuardRegions).outcome,
            DefenceOutcome::Failed
        );
        for name in [
            DefenceName::TimedVerification,
            DefenceName::InputPermutations,
            DefenceName::SideStream,
            DefenceName::Plausibility,
        ] {
            let d = find(&defences, name);
            assert!(!d.ran && d.outcome == DefenceOutcome::NotRun, "{d:?}");
            assert!(d.covered.contains("wrote outside its output"), "{d:?}");
        }
        assert!(find(&defences, DefenceName::HangWatchdog).ran);
        assert!(find(&defences, DefenceName::StaleOutput).ran);
        let line = attn_evidence::defences_line(&defences).unwrap();
        assert!(line.starts_with("defences: 7 of 11 (not run: "), "{line}");
    }

    #[test]
    fn one_check_and_no_watchdog_leave_stale_output_and_hangs_unchecked() {
        let mut case = checked_case();
        case.correctness.truncate(1);
        let defences = case_defences(&case, &GateRule::default(), &CaseFacts::default());
        let stale = find(&defences, DefenceName::StaleOutput);
        assert!(
            !stale.ran && stale.covered.contains("one check only"),
            "{stale:?}"
        );
        assert!(!find(&defences, DefenceName::HangWatchdog).ran);
        // Both checks drawn at a scale of 1/√D or not: the first (0.0625 = 0.5/√64) is drawn.
        let scales = find(&defences, DefenceName::ScaleDraws);
        assert_eq!(scales.covered, "1 checks, 1 at a scale other than 1/√D");
        let battery = find(&defences, DefenceName::EdgeBattery);
        assert!(
            !battery.ran && battery.covered.contains("not reached"),
            "{battery:?}"
        );
    }

    #[test]
    fn launches_that_differ_are_caught_only_where_the_kernel_declared_itself_deterministic() {
        let mut case = checked_case();
        for c in &mut case.correctness {
            c.guards.as_mut().unwrap().identical = false;
        }
        for (deterministic, caught) in [(true, true), (false, false)] {
            let shape = case.shape.clone();
            case.backward = Some(attn_evidence::BackwardRecord::new(
                &shape,
                deterministic,
                false,
            ));
            let defences = case_defences(&case, &GateRule::default(), &CaseFacts::default());
            let d = find(&defences, DefenceName::Determinism);
            assert_eq!(d.outcome == DefenceOutcome::Failed, caught, "{d:?}");
            assert_eq!(
                d.covered.contains("2 differed bitwise"),
                !deterministic,
                "{d:?}"
            );
        }
        // A non-deterministic kernel whose second launch is wrong is caught all the same.
        case.correctness[1].passed = false;
        case.correctness[1].failure = Some(CheckFailure::NonDeterministic);
        let defences = case_defences(&case, &GateRule::default(), &CaseFacts::default());
        assert_eq!(
            find(&defences, DefenceName::Determinism).outcome,
            DefenceOutcome::Failed
        );
    }
}
