//! A bench run as a session: every implementation and SDPA backend timed on every problem it
//! supports (a varlen batch also as the dense batch at its mean length), one entry each, with
//! what is skipped said and the run's progress reported to the caller.

use attn_evidence::{BenchEntry, BenchRun, DenseAtMean, Implementation};
use attn_kernels::{Candidate, Gpu, TimingOptions};

use super::{dense_at_mean, entry, time_candidate, time_sdpa};
use crate::baseline::sdpa_implementation;
use crate::sdpa::{Backend, Sdpa};
use crate::timing::PreparedCache;
use crate::{Problem, Result};

/// Everything `cargo xtask bench` asks for, typed and validated.
#[derive(Debug, Clone)]
pub struct BenchRequest {
    /// The problems, in order.
    pub problems: Vec<Problem>,
    /// The implementations timed, each on the problems it supports.
    pub candidates: Vec<Candidate>,
    /// The SDPA backends timed alongside (none: PyTorch is not looked for).
    pub backends: Vec<Backend>,
    /// Users' Python callables timed alongside, each in a helper process of its own, every timed
    /// output checked (`--py FILE.py:FUNCTION`).
    pub callables: Vec<crate::baseline::PyCallable>,
    /// The harness options of every entry.
    pub timing: TimingOptions,
    /// Base seed of the timing inputs.
    pub seed: u64,
    /// The suite's name, for the record.
    pub suite: Option<String>,
    /// The git revision and dirty flag of the code that runs, for provenance.
    pub git: (String, bool),
}

/// What a bench run tells its caller to show, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A line to show (above the progress once it has started).
    Line(String),
    /// The run's steps are about to be taken: this many.
    Start(u64),
    /// The step now under way.
    Step(String),
    /// This many steps are done.
    Done(u64),
    /// Every step is done.
    Finished,
}

/// Where a bench run's [`Event`]s go.
pub type Report<'r> = &'r mut dyn FnMut(Event);

/// A bench run opened on the caller's GPU: PyTorch's helper when backends are asked for, the dense batches
/// of varlen problems, the compiled kernels and the entries timed so far.
pub struct BenchSession<'r> {
    request: &'r BenchRequest,
    report: Report<'r>,
    gpu: Gpu,
    sdpa: Option<Sdpa>,
    /// Each callable with its own helper.
    callables: Vec<(crate::baseline::PyCallable, Sdpa)>,
    /// Each problem's dense batch at its mean length (varlen problems only).
    dense_at_mean: Vec<Option<Problem>>,
    cache: PreparedCache,
    entries: Vec<BenchEntry>,
}

impl std::fmt::Debug for BenchSession<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BenchSession")
            .field("problems", &self.request.problems.len())
            .field("entries", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl<'r> BenchSession<'r> {
    /// Opens PyTorch's helper beside the caller's `gpu` (without it, only our implementations
    /// are timed: said in a line), and finds each varlen problem's dense batch at its mean length.
    pub fn open(
        gpu: Gpu,
        request: &'r BenchRequest,
        report: Report<'r>,
    ) -> Result<BenchSession<'r>> {
        let sdpa = super::detect_sdpa(!request.backends.is_empty(), report, "our implementations");
        // Asked for by name: no PyTorch is an error, not a skip.
        let callables = (request.callables.iter())
            .map(|c| {
                let helper = Sdpa::detect()?;
                helper.load_callable(&c.file, &c.function)?;
                Ok((c.clone(), helper))
            })
            .collect::<Result<Vec<_>>>()?;
        let dense_at_mean = request
            .problems
            .iter()
            .map(dense_at_mean)
            .collect::<Result<_>>()?;
        let session = BenchSession {
            request,
            report,
            gpu,
            sdpa,
            callables,
            dense_at_mean,
            cache: PreparedCache::default(),
            entries: Vec::new(),
        };
        let steps = session
            .dense_at_mean
            .iter()
            .map(|d| session.steps(d.is_some()));
        let total = steps.sum();
        (session.report)(Event::Start(total));
        Ok(session)
    }

    /// The steps of a problem: each implementation (and on the dense batch at its mean length,
    /// for a varlen one) and each SDPA backend.
    fn steps(&self, dense: bool) -> u64 {
        let sdpa = if self.sdpa.is_some() {
            self.request.backends.len()
        } else {
            0
        };
        let callables = self.callables.len();
        (self.request.candidates.len() * (1 + usize::from(dense)) + sdpa + callables) as u64
    }

    /// Times every problem that `admit` lets start (it answers why not, to skip one: a time
    /// budget), after a warm-up; the run's record.
    pub fn run(mut self, admit: &mut dyn FnMut() -> Option<String>) -> Result<BenchRun> {
        self.warm_up();
        let before = attn_kernels::telemetry::read_clocks(0);
        let dense_at_mean = std::mem::take(&mut self.dense_at_mean);
        for (problem, dense) in self.request.problems.iter().zip(&dense_at_mean) {
            if let Some(why) = admit() {
                let steps = self.steps(dense.is_some());
                (self.report)(Event::Line(format!("  {problem}: {why}")));
                (self.report)(Event::Done(steps));
                continue;
            }
            for candidate in &self.request.candidates {
                self.time_implementation(candidate, problem, dense.as_ref())?;
            }
            self.time_backends(problem)?;
            self.time_callables(problem)?;
        }
        (self.report)(Event::Finished);
        let after = attn_kernels::telemetry::read_clocks(0);
        let helper = self.sdpa.as_ref().or(self.callables.first().map(|c| &c.1));
        let torch = helper.map(|s| &s.info);
        let (git_rev, git_dirty) = self.request.git.clone();
        let provenance =
            crate::provenance::collect(&self.gpu, torch, before, after, git_rev, git_dirty);
        Ok(BenchRun {
            schema: attn_evidence::SCHEMA_VERSION,
            kind: attn_evidence::EvidenceKind::Bench,
            provenance,
            suite: self.request.suite.clone(),
            entries: self.entries,
        })
    }

    /// The first implementation's first problem timed once and thrown away: entries are timed
    /// one after another and the GPU starts cool, which would favour whatever runs first (see
    /// evidence/METHOD.md, `bench-warm-up`). An error there shows again when it is timed.
    fn warm_up(&mut self) {
        let request = self.request;
        let first = request.problems.iter().find_map(|problem| {
            request
                .candidates
                .iter()
                .map(|c| c.for_problem(&problem.shape, &problem.params, &self.gpu.limits()))
                .find(|c| problem.check_supported_by(c).is_ok())
                .map(|c| (problem, c))
        });
        if let Some((problem, candidate)) = first {
            (self.report)(Event::Step(format!(
                "warm-up: {} {problem}",
                candidate.label()
            )));
            let (opts, seed) = (&request.timing, request.seed);
            let _ = time_candidate(&self.gpu, &mut self.cache, &candidate, problem, opts, seed);
        }
    }

    /// `any_shape` specialised for `problem` and timed on it, and for a varlen problem on its
    /// `dense` batch at the mean length too; a problem it does not support is skipped.
    fn time_implementation(
        &mut self,
        any_shape: &Candidate,
        problem: &Problem,
        dense: Option<&Problem>,
    ) -> Result<()> {
        let (opts, seed) = (&self.request.timing, self.request.seed);
        let candidate = &any_shape.for_problem(&problem.shape, &problem.params, &self.gpu.limits());
        let steps = 1 + u64::from(dense.is_some());
        if let Err(err) = problem.check_supported_by(candidate) {
            (self.report)(Event::Line(format!("  skipped on {problem}: {err}")));
            (self.report)(Event::Done(steps));
            return Ok(());
        }
        (self.report)(Event::Step(format!("{} {problem}", candidate.label())));
        let timed = time_candidate(&self.gpu, &mut self.cache, candidate, problem, opts, seed);
        let mut entry = match timed {
            Ok(timed) => entry(timed, problem)?,
            Err(err) => {
                let label = candidate.label();
                (self.report)(Event::Line(format!(
                    "  skipped {label} on {problem}: {err}"
                )));
                (self.report)(Event::Done(steps));
                return Ok(());
            }
        };
        (self.report)(Event::Done(1));
        let Some(dense) = dense else {
            self.entries.push(entry);
            return Ok(());
        };
        let dense_entry = self.time_dense_at_mean(any_shape, problem, dense)?;
        if let Some(dense_entry) = &dense_entry {
            entry.dense_at_mean = Some(DenseAtMean::of(&entry, dense_entry));
        }
        self.entries.push(entry);
        self.entries.extend(dense_entry);
        Ok(())
    }

    /// The same implementation, tuned for that shape, on `dense`, the batch at the mean length of
    /// varlen `problem`: its entry, or `None` when it could not be timed (said).
    fn time_dense_at_mean(
        &mut self,
        any_shape: &Candidate,
        problem: &Problem,
        dense: &Problem,
    ) -> Result<Option<BenchEntry>> {
        let (opts, seed) = (&self.request.timing, self.request.seed);
        let candidate = &any_shape.for_problem(&dense.shape, &dense.params, &self.gpu.limits());
        let label = candidate.label();
        (self.report)(Event::Step(format!(
            "{label} {dense} (dense at the mean length)"
        )));
        let timed = time_candidate(&self.gpu, &mut self.cache, candidate, dense, opts, seed);
        let dense_entry = match timed {
            Ok(timed) => Some(entry(timed, dense)?),
            Err(err) => {
                (self.report)(Event::Line(format!(
                    "  skipped {label} on {dense} (dense at the mean length of {problem}): {err}"
                )));
                None
            }
        };
        (self.report)(Event::Done(1));
        Ok(dense_entry)
    }

    /// Every callable on `problem` through its helper's protocol (fresh inputs per sample, every
    /// timed output checked).
    fn time_callables(&mut self, problem: &Problem) -> Result<()> {
        let callables = std::mem::take(&mut self.callables);
        let timed = (callables.iter()).try_for_each(|(callable, helper)| {
            let implementation = callable.implementation();
            self.time_in_helper(helper, Backend::Py, implementation, problem)
        });
        self.callables = callables;
        timed
    }

    /// Every SDPA backend asked for on `problem` (when PyTorch is there).
    fn time_backends(&mut self, problem: &Problem) -> Result<()> {
        let Some(sdpa) = self.sdpa.take() else {
            return Ok(());
        };
        let timed = (self.request.backends.iter()).try_for_each(|&backend| {
            self.time_in_helper(&sdpa, backend, sdpa_implementation(backend), problem)
        });
        self.sdpa = Some(sdpa);
        timed
    }

    /// `backend` of `helper` on `problem`, its entry named `implementation`; one that refuses
    /// the problem or fails on it is skipped, said.
    fn time_in_helper(
        &mut self,
        helper: &Sdpa,
        backend: Backend,
        implementation: Implementation,
        problem: &Problem,
    ) -> Result<()> {
        let (opts, seed) = (&self.request.timing, self.request.seed);
        let label = implementation.label();
        if let Some(why) = crate::sdpa::refusal(problem, backend) {
            (self.report)(Event::Line(format!("  {label} skipped: {why}")));
            (self.report)(Event::Done(1));
            return Ok(());
        }
        (self.report)(Event::Step(format!("{label} {problem}")));
        match time_sdpa(&self.gpu, helper, backend, problem, opts, seed) {
            Ok(mut timed) => {
                timed.implementation = implementation;
                self.entries.push(entry(timed, problem)?);
            }
            Err(err) => (self.report)(Event::Line(format!(
                "  skipped {label} on {problem}: {err}"
            ))),
        }
        (self.report)(Event::Done(1));
        Ok(())
    }
}
