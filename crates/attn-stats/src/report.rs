//! The human-readable table of a [`Comparison`] (its `Display`).

use std::fmt;

use crate::{CiMethod, Comparison, Estimate, Summary, Verdict};

impl fmt::Display for Comparison {
    /// A plain-text table: both summaries side by side, then the intervals, the test, the verdict
    /// with the rule that produced it, and the gate with the numbers that decided it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (b, c) = (&self.baseline, &self.candidate);
        writeln!(f, "{:<24}{:>14}{:>14}", "", "baseline", "candidate")?;
        writeln!(f, "{:<24}{:>14}{:>14}", "n", b.n, c.n)?;
        let rows: [(&str, SummaryField); 13] = [
            ("min", |s| s.min),
            ("p10", |s| s.p10),
            ("p25", |s| s.p25),
            ("median", |s| s.median),
            ("mean", |s| s.mean),
            ("p75", |s| s.p75),
            ("p90", |s| s.p90),
            ("p99", |s| s.p99),
            ("max", |s| s.max),
            ("std", |s| s.std),
            ("mad", |s| s.mad),
            ("iqr", |s| s.iqr),
            ("median / min", |s| s.median / s.min),
        ];
        for (name, field) in rows {
            writeln!(
                f,
                "{name:<24}{:>14}{:>14}",
                number(field(b)),
                number(field(c))
            )?;
        }
        let outliers = |s: &Summary| {
            let o = s.outliers;
            format!(
                "{}/{}/{}/{}",
                o.low_severe, o.low_mild, o.high_mild, o.high_severe
            )
        };
        writeln!(
            f,
            "{:<24}{:>14}{:>14}",
            "outliers (ls/lm/hm/hs)",
            outliers(b),
            outliers(c)
        )?;
        writeln!(f)?;
        // Rounded so 0.95 reads "95%", not "95.00000000000001%".
        let percent = (100.0 * self.confidence * 1e6).round() / 1e6;
        let level = format!("{percent}% {}", method(self.speedup.method));
        writeln!(
            f,
            "speedup (b/c medians)   {}  {level}",
            interval(&self.speedup)
        )?;
        writeln!(
            f,
            "diff median (c - b)     {}  {level}",
            interval(&self.diff_median)
        )?;
        writeln!(
            f,
            "Mann-Whitney            U = {}, p = {:.3e}",
            number(self.mann_whitney.u),
            self.mann_whitney.p
        )?;
        let rule = match self.verdict {
            Verdict::Faster => "speedup interval above the noise band",
            Verdict::Slower => "speedup interval below the noise band",
            Verdict::NoChange => "speedup interval reaches into the noise band",
        };
        writeln!(f, "verdict                 {} ({rule})", self.verdict)?;
        writeln!(f, "gate                    {}", self.gate_line())?;
        write!(
            f,
            "bootstrap               {} resamples, seed {}",
            self.resamples, self.seed
        )
    }
}

impl Comparison {
    /// The gate's outcome with the numbers that decided it (the table's `gate` row): which of its
    /// two conditions failed (candidate median <= threshold x baseline median, and the diff
    /// interval entirely below 0), or that both held.
    pub fn gate_line(&self) -> String {
        let threshold = self.gate.threshold;
        let bound = threshold * self.baseline.median;
        let median_ok = self.candidate.median <= bound;
        let median = format!(
            "candidate median {} {} {threshold} x baseline median {} = {}",
            number(self.candidate.median),
            if median_ok { "<=" } else { ">" },
            number(self.baseline.median),
            number(bound)
        );
        let ci_ok = self.diff_median.upper < 0.0;
        let ci = format!(
            "diff interval [{}, {}] {}",
            number(self.diff_median.lower),
            number(self.diff_median.upper),
            if ci_ok { "< 0" } else { "not entirely below 0" }
        );
        match (median_ok, ci_ok) {
            (true, true) => format!("passed: {median}, and {ci}"),
            (false, false) => format!("failed: {median}, and {ci}"),
            (false, true) => format!("failed: {median}"),
            (true, false) => format!("failed: {ci}"),
        }
    }
}

/// Reads one number off a summary, for a row of the table.
type SummaryField = fn(&Summary) -> f64;

fn method(method: CiMethod) -> &'static str {
    match method {
        CiMethod::Percentile => "percentile",
        CiMethod::Bca => "BCa",
    }
}

fn interval(estimate: &Estimate) -> String {
    format!(
        "{} [{}, {}]  se {}",
        number(estimate.point),
        number(estimate.lower),
        number(estimate.upper),
        number(estimate.standard_error)
    )
}

/// Five significant digits without a unit: timings may be in ns, µs or ms.
fn number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor();
    if !(-4.0..9.0).contains(&magnitude) {
        return format!("{x:.4e}");
    }
    let decimals = (4.0 - magnitude).max(0.0) as usize;
    format!("{x:.decimals$}")
}
