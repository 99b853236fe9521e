//! `--time-budget`: a run on a machine lent for a fixed time stops starting new problems when the
//! next one would not finish in time, and writes the evidence of those it finished (a run killed
//! from outside writes none).

use std::time::{Duration, Instant};

/// The time a run may take, and how long its problems have taken.
#[derive(Debug)]
pub struct TimeBudget {
    limit: Option<Duration>,
    started: Instant,
    /// When the problem under way was admitted.
    current: Option<Instant>,
    longest: Duration,
}

impl TimeBudget {
    /// A budget of `seconds` from now (none: unlimited); a clear error for a non-positive one.
    pub fn new(seconds: Option<f64>) -> anyhow::Result<TimeBudget> {
        let limit = match seconds {
            None => None,
            Some(s) if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s)),
            Some(s) => anyhow::bail!("--time-budget must be a positive number of seconds, got {s}"),
        };
        Ok(TimeBudget {
            limit,
            started: Instant::now(),
            current: None,
            longest: Duration::ZERO,
        })
    }

    /// Before each problem: `Ok` to start it, or why not (the time spent and the longest problem
    /// so far would overrun the budget). The previous problem ends here.
    pub fn admit(&mut self) -> Result<(), String> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&mut self, now: Instant) -> Result<(), String> {
        if let Some(previous) = self.current.take() {
            self.longest = self.longest.max(now.saturating_duration_since(previous));
        }
        let spent = now.saturating_duration_since(self.started);
        match self.limit {
            Some(limit) if spent + self.longest > limit => Err(format!(
                "not run: the run's time budget of {:.0} s would run out ({:.0} s spent, the longest problem took {:.0} s)",
                limit.as_secs_f64(),
                spent.as_secs_f64(),
                self.longest.as_secs_f64()
            )),
            _ => {
                self.current = Some(now);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_starts_only_while_the_longest_so_far_still_fits() {
        let mut budget = TimeBudget::new(Some(100.0)).unwrap();
        let t0 = budget.started;
        let at = |s: u64| t0 + Duration::from_secs(s);
        // The first always starts; it takes 30 s, the next 20 s: at 60 s, 30 more fit in 100.
        assert!(budget.admit_at(at(0)).is_ok());
        assert!(budget.admit_at(at(30)).is_ok());
        assert!(budget.admit_at(at(50)).is_ok());
        // At 75 s (the third took 25 s) the longest, 30 s, would end at 105 s: refused.
        let why = budget.admit_at(at(75)).unwrap_err();
        assert_eq!(
            why,
            "not run: the run's time budget of 100 s would run out (75 s spent, the longest problem took 30 s)"
        );
        // Unlimited: always.
        let mut free = TimeBudget::new(None).unwrap();
        assert!(free
            .admit_at(free.started + Duration::from_secs(1_000_000))
            .is_ok());
        // Nonsense budgets are one clear line.
        for bad in [0.0, -5.0, f64::NAN] {
            let err = TimeBudget::new(Some(bad)).unwrap_err().to_string();
            assert!(err.starts_with("--time-budget must be a positive"), "{err}");
        }
    }
}
