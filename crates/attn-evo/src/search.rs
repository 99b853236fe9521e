//! The search: an elitist population over a [`Space`], proposed a generation at a time.
//!
//! Generation 0 is the seeds (valid ones, in order) topped up with random valid configs. Each later
//! generation breeds `population` children: two parents drawn by rank ([`pick_rank`]), uniform
//! crossover (with probability `crossover_rate`), then a one-knob mutation (always when the child
//! is a copy of something already measured). Survival is elitist: the population is the best
//! `population` valid configs measured so far. A config is never proposed twice.
//!
//! Everything a generation proposes is a function of the seed, the generation number and the
//! evaluations of earlier generations, so a search resumed from its log proposes exactly what the
//! interrupted one would have, and skips what it had already measured.

use std::collections::BTreeSet;

use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::error::{EvoError, Result};
use crate::select::pick_rank;
use crate::space::{Knobs, Space};

/// How big and how long a search is, and its seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Survivors kept, and children bred per generation.
    pub population: usize,
    /// Generations at most (generation 0 included).
    pub generations: u32,
    /// Evaluations at most, over the whole search (a resumed one included).
    pub budget: usize,
    /// Seed of every random choice (recorded with the results).
    pub seed: u64,
    /// Probability that a child is a crossover of two parents rather than a copy of one.
    pub crossover_rate: f64,
    /// Probability that a fresh child is also mutated.
    pub mutation_rate: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            population: 8,
            generations: 8,
            budget: 48,
            seed: 0,
            crossover_rate: 0.7,
            mutation_rate: 0.5,
        }
    }
}

impl Options {
    /// The options of the search `spec` describes, with `budget` evaluations at most.
    pub fn for_spec(spec: &attn_evidence::SearchSpec, budget: usize) -> Options {
        Options {
            population: spec.population,
            generations: spec.generations,
            budget,
            seed: spec.seed,
            ..Options::default()
        }
    }

    fn validate(&self) -> Result<()> {
        if self.population == 0 || self.generations == 0 || self.budget == 0 {
            return Err(EvoError::Options(format!(
                "population ({}), generations ({}) and budget ({}) must all be at least 1",
                self.population, self.generations, self.budget
            )));
        }
        for (name, rate) in [
            ("crossover rate", self.crossover_rate),
            ("mutation rate", self.mutation_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(EvoError::Options(format!(
                    "{name} {rate} is outside [0, 1]"
                )));
            }
        }
        Ok(())
    }
}

/// One measured config: its generation and its fitness (`None`: invalid, it scores nothing).
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The generation that proposed it.
    pub generation: u32,
    /// The config.
    pub knobs: Knobs,
    /// Higher is better; `None` for a candidate that failed (wrong, crashed, timed out).
    pub fitness: Option<f64>,
}

/// The configs to evaluate for one generation.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// Its number (0 for the seed population).
    pub number: u32,
    /// The configs not measured yet, in proposal order.
    pub candidates: Vec<Knobs>,
}

/// A search in progress.
///
/// ```
/// use attn_evo::{KnobDomain, Options, Search, Space};
/// let space = Space::unconstrained(vec![
///     KnobDomain::new("A", vec![1, 2, 3, 4])?,
///     KnobDomain::new("B", vec![1, 2, 3, 4])?,
/// ])?;
/// let options = Options { population: 4, generations: 6, budget: 12, seed: 7, ..Options::default() };
/// let mut search = Search::new(space, options, vec![])?;
/// while let Some(generation) = search.next_generation() {
///     for knobs in generation.candidates {
///         let fitness = -((knobs["A"] - 3).pow(2) + (knobs["B"] - 2).pow(2)) as f64;
///         search.record(generation.number, knobs, Some(fitness));
///     }
/// }
/// assert!(search.evaluated() <= 12);
/// assert!(search.best().is_some());
/// # Ok::<(), attn_evo::EvoError>(())
/// ```
#[derive(Debug)]
pub struct Search {
    space: Space,
    options: Options,
    seeds: Vec<Knobs>,
    history: Vec<Evaluation>,
    next: u32,
}

impl Search {
    /// A new search; `seeds` start generation 0 (invalid ones are dropped, never built).
    pub fn new(space: Space, options: Options, seeds: Vec<Knobs>) -> Result<Search> {
        options.validate()?;
        let mut kept: Vec<Knobs> = Vec::new();
        for seed in seeds {
            if space.check(&seed).is_ok() && !kept.contains(&seed) {
                kept.push(seed);
            }
        }
        Ok(Search {
            space,
            options,
            seeds: kept,
            history: Vec::new(),
            next: 0,
        })
    }

    /// Continues from the evaluations of an interrupted run (its log): they count against the
    /// budget, are never proposed again, and the search resumes at the last logged generation.
    pub fn resume(mut self, history: Vec<Evaluation>) -> Result<Search> {
        for (i, e) in history.iter().enumerate() {
            if let Err(reason) = self.space.check(&e.knobs) {
                return Err(EvoError::LogRow { row: i + 1, reason });
            }
        }
        // Replaying from generation 0 re-proposes what the interrupted run proposed (it depends
        // only on earlier generations) and skips what it measured, wherever it stopped.
        self.next = 0;
        self.history = history;
        Ok(self)
    }

    /// The space searched.
    pub fn space(&self) -> &Space {
        &self.space
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Every evaluation so far, in the order recorded.
    pub fn history(&self) -> &[Evaluation] {
        &self.history
    }

    /// How many configs have been evaluated.
    pub fn evaluated(&self) -> usize {
        self.history.len()
    }

    /// Records the result of a candidate of `generation`.
    pub fn record(&mut self, generation: u32, knobs: Knobs, fitness: Option<f64>) {
        self.history.push(Evaluation {
            generation,
            knobs,
            fitness: fitness.filter(|f| f.is_finite()),
        });
    }

    /// The best valid evaluation so far (the earliest among equals).
    pub fn best(&self) -> Option<&Evaluation> {
        self.population_of(self.history.iter()).into_iter().next()
    }

    /// The current population: the best `population` valid evaluations, best first.
    pub fn population(&self) -> Vec<&Evaluation> {
        self.population_of(self.history.iter())
    }

    fn population_of<'a>(
        &self,
        evals: impl Iterator<Item = &'a Evaluation>,
    ) -> Vec<&'a Evaluation> {
        let mut valid: Vec<(usize, &Evaluation)> =
            evals.filter(|e| e.fitness.is_some()).enumerate().collect();
        // Stable order: fitness descending, then first measured first.
        valid.sort_by(|(ia, a), (ib, b)| {
            b.fitness
                .unwrap_or(f64::MIN)
                .total_cmp(&a.fitness.unwrap_or(f64::MIN))
                .then(ia.cmp(ib))
        });
        valid
            .into_iter()
            .take(self.options.population)
            .map(|(_, e)| e)
            .collect()
    }

    /// The next generation's unmeasured candidates, or `None` when the search is over (all
    /// generations done, budget spent, or no new valid config can be found).
    pub fn next_generation(&mut self) -> Option<Generation> {
        loop {
            let left = self.options.budget.saturating_sub(self.history.len());
            if self.next >= self.options.generations || left == 0 {
                return None;
            }
            let number = self.next;
            self.next += 1;
            let proposals = self.propose(number);
            if proposals.is_empty() {
                return None;
            }
            let measured: BTreeSet<&Knobs> = self.history.iter().map(|e| &e.knobs).collect();
            let candidates: Vec<Knobs> = proposals
                .into_iter()
                .filter(|k| !measured.contains(k))
                .take(left)
                .collect();
            if !candidates.is_empty() {
                return Some(Generation { number, candidates });
            }
        }
    }

    /// Everything generation `number` proposes, measured or not: a function of the seed, the
    /// number and the evaluations of earlier generations only.
    fn propose(&self, number: u32) -> Vec<Knobs> {
        let mut rng = ChaCha8Rng::seed_from_u64(
            self.options.seed ^ u64::from(number + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        let earlier: Vec<&Evaluation> = self
            .history
            .iter()
            .filter(|e| e.generation < number)
            .collect();
        let mut seen: BTreeSet<Knobs> = earlier.iter().map(|e| e.knobs.clone()).collect();
        let parents = self.population_of(earlier.iter().copied());
        let mut out = Vec::new();
        if number == 0 {
            for seed in self.seeds.iter().take(self.options.population) {
                seen.insert(seed.clone());
                out.push(seed.clone());
            }
        }
        while out.len() < self.options.population {
            match self.child(&parents, &seen, &mut rng) {
                Some(child) => {
                    seen.insert(child.clone());
                    out.push(child);
                }
                None => break, // the space is exhausted (or nearly): stop breeding
            }
        }
        out
    }

    /// One new valid config not in `seen`: bred from `parents`, or random when there are none
    /// (or breeding keeps producing known configs).
    fn child(
        &self,
        parents: &[&Evaluation],
        seen: &BTreeSet<Knobs>,
        rng: &mut ChaCha8Rng,
    ) -> Option<Knobs> {
        const TRIES: usize = 32;
        if !parents.is_empty() {
            for _ in 0..TRIES {
                let first = &parents[pick_rank(parents.len(), rng)].knobs;
                let mut child = first.clone();
                if parents.len() > 1 && rng.random_bool(self.options.crossover_rate) {
                    let second = &parents[pick_rank(parents.len(), rng)].knobs;
                    if let Some(mixed) = self.space.crossover(first, second, rng) {
                        child = mixed;
                    }
                }
                if seen.contains(&child) || rng.random_bool(self.options.mutation_rate) {
                    match self.space.mutate(&child, rng) {
                        Some(mutated) => child = mutated,
                        None => continue,
                    }
                }
                if !seen.contains(&child) {
                    return Some(child);
                }
            }
        }
        (0..TRIES * 4)
            .filter_map(|_| self.space.random(rng))
            .find(|k| !seen.contains(k))
    }
}
