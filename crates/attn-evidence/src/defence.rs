//! Which of the gate's defences ran on a case, what each covered and what it found: what a PASS
//! proves, read from the case itself rather than from the gate's documentation.

use serde::{Deserialize, Serialize};

/// One of the gate's defences against a wrong or cheating kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DefenceName {
    /// Correctness on small edge shapes chosen to break tiling.
    EdgeBattery,
    /// Every timed sample's inputs turned through fresh signed column permutations.
    InputPermutations,
    /// Canary bytes before and after each buffer (NaNs around the inputs of newer checks: writes
    /// there, and reads that change the output, fail).
    GuardRegions,
    /// Q, K and V summed before and after the launches.
    InputChecksums,
    /// A second launch on the same inputs must give bitwise the same output.
    Determinism,
    /// The softmax scale drawn per check around 1/√D.
    ScaleDraws,
    /// An output byte-identical to the previous check's on new inputs.
    StaleOutput,
    /// Every timed output verified against the reference of its input set.
    TimedVerification,
    /// The memory floor, the dense tensor peak, or the speedup limit where either is unknown.
    Plausibility,
    /// Every candidate launch bounded in time.
    HangWatchdog,
    /// Work left running on other streams after the timed stream's end.
    SideStream,
}

impl DefenceName {
    /// Every defence, in the order the gate meets them on a case.
    pub const ALL: [DefenceName; 11] = [
        DefenceName::HangWatchdog,
        DefenceName::ScaleDraws,
        DefenceName::GuardRegions,
        DefenceName::InputChecksums,
        DefenceName::Determinism,
        DefenceName::StaleOutput,
        DefenceName::EdgeBattery,
        DefenceName::InputPermutations,
        DefenceName::TimedVerification,
        DefenceName::SideStream,
        DefenceName::Plausibility,
    ];

    /// The name as written in evidence (`"edge-battery"`).
    pub fn as_str(self) -> &'static str {
        match self {
            DefenceName::EdgeBattery => "edge-battery",
            DefenceName::InputPermutations => "input-permutations",
            DefenceName::GuardRegions => "guard-regions",
            DefenceName::InputChecksums => "input-checksums",
            DefenceName::Determinism => "determinism",
            DefenceName::ScaleDraws => "scale-draws",
            DefenceName::StaleOutput => "stale-output",
            DefenceName::TimedVerification => "timed-verification",
            DefenceName::Plausibility => "plausibility",
            DefenceName::HangWatchdog => "hang-watchdog",
            DefenceName::SideStream => "side-stream",
        }
    }
}

impl std::fmt::Display for DefenceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a defence found on a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DefenceOutcome {
    /// It ran and found nothing wrong.
    Passed,
    /// It ran and caught the candidate.
    Failed,
    /// It did not run on this case (`covered` says why).
    NotRun,
}

/// One defence on one case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Defence {
    /// Which defence.
    pub name: DefenceName,
    /// Whether it ran on this case.
    pub ran: bool,
    /// What it covered (`"6 shapes checked, 1 skipped"`), or why it did not run.
    pub covered: String,
    /// What it found.
    pub outcome: DefenceOutcome,
}

impl Defence {
    /// A defence that ran over `covered`, caught the candidate or not.
    pub fn ran(name: DefenceName, covered: impl Into<String>, caught: bool) -> Defence {
        Defence {
            name,
            ran: true,
            covered: covered.into(),
            outcome: if caught {
                DefenceOutcome::Failed
            } else {
                DefenceOutcome::Passed
            },
        }
    }

    /// A defence that did not run, and why.
    pub fn not_run(name: DefenceName, why: impl Into<String>) -> Defence {
        Defence {
            name,
            ran: false,
            covered: why.into(),
            outcome: DefenceOutcome::NotRun,
        }
    }
}

/// `"defences: 9 of 11 (not run: edge-battery, stale-output)"`, or `None` for a case recorded
/// before defences were: one wording for the gate's printed lines and the report.
pub fn defences_line(defences: &[Defence]) -> Option<String> {
    if defences.is_empty() {
        return None;
    }
    let ran = defences.iter().filter(|d| d.ran).count();
    let mut line = format!("defences: {ran} of {}", defences.len());
    let not_run: Vec<&str> = defences
        .iter()
        .filter(|d| !d.ran)
        .map(|d| d.name.as_str())
        .collect();
    if !not_run.is_empty() {
        line.push_str(&format!(" (not run: {})", not_run.join(", ")));
    }
    let caught: Vec<&str> = defences
        .iter()
        .filter(|d| d.outcome == DefenceOutcome::Failed)
        .map(|d| d.name.as_str())
        .collect();
    if !caught.is_empty() {
        line.push_str(&format!(" (caught by: {})", caught.join(", ")));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_counts_what_ran_and_names_what_did_not() {
        let defences = vec![
            Defence::ran(DefenceName::GuardRegions, "64 bytes each side", false),
            Defence::not_run(DefenceName::EdgeBattery, "not reached"),
            Defence::ran(DefenceName::Determinism, "2 launches", true),
        ];
        assert_eq!(
            defences_line(&defences).unwrap(),
            "defences: 2 of 3 (not run: edge-battery) (caught by: determinism)"
        );
        assert_eq!(defences_line(&[]), None);
        let json = serde_json::to_string(&defences[1]).unwrap();
        assert!(
            json.contains(r#""name":"edge-battery""#) && json.contains(r#""outcome":"not-run""#),
            "{json}"
        );
        for name in DefenceName::ALL {
            let written = serde_json::to_string(&name).unwrap();
            assert_eq!(written, format!("\"{name}\""));
        }
    }
}
