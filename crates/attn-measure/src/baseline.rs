//! What a candidate is compared with, and the evidence descriptions of both sides.

use std::path::Path;

use attn_evidence::{GateMode, Implementation, Timing};
use attn_kernels::{Candidate, Config, Timings};

use crate::revision::{at_revision, Repo};
use crate::sdpa::{Backend, Sdpa};
use crate::{MeasureError, Problem, Result};

/// A user's Python callable as a baseline (`--baseline py:FILE.py:FUNCTION`), as evidence names
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyCallable {
    /// The `.py` file.
    pub file: std::path::PathBuf,
    /// The function.
    pub function: String,
    /// The SHA-256 of the file's text when it was loaded.
    pub source_sha256: String,
}

impl PyCallable {
    /// `FILE.py:FUNCTION`, refused in one line when the file is not there or FUNCTION is no
    /// Python name.
    pub fn parse(spec: &str) -> Result<PyCallable> {
        PyCallable::parse_as("--baseline py:", spec)
    }

    /// [`PyCallable::parse`] for the option `flag` (`"--py "`), which its errors name.
    pub fn parse_as(flag: &str, spec: &str) -> Result<PyCallable> {
        let bad = |why: String| MeasureError::Invalid(format!("{flag}{spec}: {why}"));
        let (file, function) = spec
            .rsplit_once(':')
            .filter(|(_, f)| !f.contains('/'))
            .ok_or_else(|| bad("give FILE.py:FUNCTION".into()))?;
        if !attn_kernels::triton::is_python_name(function) {
            return Err(bad(format!("`{function}` is not a Python function name")));
        }
        let text = std::fs::read(file).map_err(|e| bad(format!("{file}: {e}")))?;
        Ok(PyCallable {
            file: file.into(),
            function: function.to_string(),
            source_sha256: attn_kernels::compile::sha256_hex(&text),
        })
    }

    /// Its evidence description: `py:<file name>:<function>` and the file's hash.
    pub fn implementation(&self) -> Implementation {
        let name = self
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut imp = Implementation::named(format!("py:{name}:{}", self.function));
        imp.source_sha256 = Some(self.source_sha256.clone());
        imp
    }
}

/// The baseline of a comparison.
#[derive(Debug)]
pub enum Baseline {
    /// PyTorch SDPA through the helper, with a backend (or FlashAttention-3 through the same
    /// helper: [`Backend::Fa3`]; or a user's Python callable: [`Backend::Py`]).
    Sdpa {
        /// The running helper.
        sdpa: Sdpa,
        /// The backend asked for.
        backend: Backend,
        /// The py backend's callable.
        callable: Option<Box<PyCallable>>,
    },
    /// A registered implementation (`cublas`, or any other, the candidate itself included), or
    /// the candidate at a git revision (a ratchet, [`Candidate::Revision`]).
    Registered(Candidate),
}

impl Baseline {
    /// `--baseline NAME`: `sdpa` (the `cublas` math path when PyTorch is unusable: the second
    /// value says so, one line; with a backend that is not SDPA's own, `varlen` or `flex`,
    /// PyTorch must be there, no fallback: it was asked for by name), `fa3` (FlashAttention-3
    /// through the helper; its library and PyTorch must be there, no fallback), `cublas`, or any
    /// registered implementation.
    pub fn from_name(name: &str, backend: Backend) -> Result<(Baseline, Option<String>)> {
        if let Some(spec) = name.strip_prefix("py:") {
            let callable = PyCallable::parse(spec)?;
            let sdpa = Sdpa::detect()?;
            sdpa.load_callable(&callable.file, &callable.function)?;
            let baseline = Baseline::Sdpa {
                sdpa,
                backend: Backend::Py,
                callable: Some(Box::new(callable)),
            };
            return Ok((baseline, None));
        }
        // A backend asked for by name (FA3, varlen_attn, FlexAttention): no fallback.
        let named = if name == "fa3" {
            Some(Backend::Fa3)
        } else {
            (name == "sdpa" && !backend.is_sdpa()).then_some(backend)
        };
        if let Some(backend) = named {
            if backend == Backend::Fa3 {
                Backend::fa3_library()?;
            }
            let sdpa = Sdpa::detect()?;
            let baseline = Baseline::Sdpa {
                sdpa,
                backend,
                callable: None,
            };
            return Ok((baseline, None));
        }
        if name == "sdpa" {
            return Ok(match Sdpa::detect() {
                Ok(sdpa) => (
                    Baseline::Sdpa {
                        sdpa,
                        backend,
                        callable: None,
                    },
                    None,
                ),
                Err(err) => (
                    Baseline::Registered(Candidate::registered("cublas", Config::default())?),
                    Some(format!(
                        "PyTorch SDPA is unavailable ({err}); the baseline is the cublas math path"
                    )),
                ),
            });
        }
        Ok((
            Baseline::Registered(Candidate::registered(name, Config::default())?),
            None,
        ))
    }

    /// `gate --baseline NAME` for `candidate`: as [`Baseline::from_name`], or `rev:REF`: the
    /// candidate as committed at git revision REF in the repository around the current folder
    /// ([`crate::revision`]), whose errors are one line before any GPU work.
    pub fn for_candidate(
        name: &str,
        backend: Backend,
        candidate: &Candidate,
    ) -> Result<(Baseline, Option<String>)> {
        match name.strip_prefix("rev:") {
            Some(reference) => {
                let repo = Repo::discover(Path::new("."))?;
                let at = at_revision(candidate, reference, &repo)?;
                Ok((Baseline::Registered(at), None))
            }
            None => Baseline::from_name(name, backend),
        }
    }

    /// Refuses, with one line, a problem this baseline cannot run as it is: a registered
    /// implementation outside its variants, or SDPA on a problem the helper cannot time as it is
    /// ([`crate::sdpa::refusal`]).
    pub fn check_supports(&self, problem: &Problem) -> Result<()> {
        match self {
            Baseline::Sdpa { backend, .. } => match crate::sdpa::refusal(problem, *backend) {
                Some(why) => Err(MeasureError::Invalid(why)),
                None => Ok(()),
            },
            Baseline::Registered(candidate) => problem.check_supported_by(candidate),
        }
    }

    /// Refuses, in one line, a timing mode this baseline cannot be timed in (FA3: batch only).
    pub fn check_mode(&self, mode: attn_kernels::TimingMode) -> Result<()> {
        match self {
            Baseline::Sdpa { backend, .. } => backend.check_mode(mode),
            Baseline::Registered(_) => Ok(()),
        }
    }

    /// The revision a ratchet's baseline was read from.
    pub fn revision(&self) -> Option<&str> {
        match self {
            Baseline::Registered(Candidate::Revision { revision, .. }) => Some(revision),
            _ => None,
        }
    }

    /// What the gate asks against this baseline: no regression beyond `tolerance` (a fraction,
    /// e.g. 0.02) against an earlier revision, else faster.
    pub fn gate_mode(&self, tolerance: f64) -> Result<GateMode> {
        if self.revision().is_none() {
            return Ok(GateMode::Faster);
        }
        if !(0.0..1.0).contains(&tolerance) {
            return Err(MeasureError::Invalid(format!(
                "the regression tolerance must be in [0, 1), got {tolerance}"
            )));
        }
        Ok(GateMode::NoRegression { tolerance })
    }

    /// The evidence description.
    pub fn implementation(&self) -> Implementation {
        match self {
            Baseline::Sdpa {
                callable: Some(c), ..
            } => c.implementation(),
            Baseline::Sdpa { backend, .. } => sdpa_implementation(*backend),
            Baseline::Registered(c) => candidate_implementation(c, None),
        }
    }

    /// The SDPA helper, when the baseline is SDPA.
    pub fn sdpa(&self) -> Option<&Sdpa> {
        match self {
            Baseline::Sdpa { sdpa, .. } => Some(sdpa),
            Baseline::Registered(_) => None,
        }
    }
}

/// The evidence description of SDPA with a backend; FlashAttention-3 as `fa3`, with the SHA-256
/// of its library as its source.
pub fn sdpa_implementation(backend: Backend) -> Implementation {
    if backend == Backend::Fa3 {
        // The library is megabytes and every bench entry and gate run describes it: hashed once.
        static SHA256: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        let mut imp = Implementation::named("fa3");
        imp.source_sha256 = SHA256
            .get_or_init(|| {
                let bytes = std::fs::read(Backend::fa3_library().ok()?).ok()?;
                Some(attn_kernels::compile::sha256_hex(&bytes))
            })
            .clone();
        return imp;
    }
    let mut imp = Implementation::named("sdpa");
    imp.backend = Some(backend.to_string());
    imp
}

/// The evidence description of a candidate (with its resolved config when prepared).
pub fn candidate_implementation(
    candidate: &Candidate,
    resolved: Option<&Config>,
) -> Implementation {
    let mut imp = Implementation::named(candidate.label());
    let source = match candidate {
        Candidate::Registered {
            implementation,
            overrides,
        } => {
            imp.config = resolved.unwrap_or(overrides).0.clone();
            // Our kernel's source (a library plan's cuBLAS GEMMs are the library's).
            Some(implementation.engine.kernel_file().1.to_string())
        }
        Candidate::Source {
            source, defines, ..
        }
        | Candidate::Triton {
            source, defines, ..
        } => {
            imp.config = defines.0.clone();
            Some(source.clone())
        }
        Candidate::Revision {
            of,
            source,
            revision,
            ..
        } => {
            // Today's name and config, the revision's source.
            imp = candidate_implementation(of, resolved);
            imp.revision = Some(revision.clone());
            Some(source.clone())
        }
    };
    imp.source_sha256 = source.map(|s| attn_kernels::compile::sha256_hex(s.as_bytes()));
    imp
}

/// The evidence form of harness timings.
pub fn timing_evidence(t: &Timings) -> Timing {
    let mode = match t.mode {
        attn_kernels::TimingMode::Flushed => attn_evidence::TimingMode::Flushed,
        attn_kernels::TimingMode::Graph => attn_evidence::TimingMode::Graph,
        attn_kernels::TimingMode::Batch => attn_evidence::TimingMode::Batch,
    };
    Timing::new(mode, t.warmup, t.samples_us.clone(), t.launches_per_sample)
        .with_input_sets(t.input_sets)
}

/// The median of a slice: of one value that value (a timing block of one sample), NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    attn_stats::statistic::median(&mut values.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_callable_is_named_file_colon_function_and_hashed() {
        let dir = std::env::temp_dir().join(format!("attn-py-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("mine.py");
        std::fs::write(&file, "def attend(q, k, v, scale, causal):\n    return q\n").unwrap();
        let spec = format!("{}:attend", file.display());
        let callable = PyCallable::parse(&spec).unwrap();
        let imp = callable.implementation();
        assert_eq!(imp.name, "py:mine.py:attend");
        assert_eq!(imp.source_sha256.as_deref().map(str::len), Some(64));
        for (bad, says) in [
            (file.display().to_string(), "FILE.py:FUNCTION"),
            (
                format!("{}:not-a-name", file.display()),
                "not a Python function name",
            ),
            ("missing.py:attend".to_string(), "missing.py"),
        ] {
            let err = PyCallable::parse(&bad).unwrap_err().to_string();
            assert!(err.contains(says) && !err.contains('\n'), "{bad}: {err}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn median_takes_a_single_sample_and_is_nan_only_for_none() {
        // The gate bounds its hang watchdog by the first baseline block's median: a block of one
        // sample (--block 1) must give that sample, not NaN.
        assert_eq!(median(&[42.0]), 42.0);
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn sdpa_refuses_varlen_and_windows_in_one_line_naming_the_alternative() {
        let varlen = Problem::parse("varlen=512,0,3000 H=16 D=128 causal").unwrap();
        let why = crate::sdpa::refusal(&varlen, Backend::Default).unwrap();
        assert!(
            why.contains("packed varlen batch")
                && why.contains("--baseline mma")
                && why.contains("--sdpa-backend varlen"),
            "{why}"
        );
        assert!(!why.contains('\n'));
        let window = Problem::parse("2,16,4096,128 causal window=512,-1").unwrap();
        let why = crate::sdpa::refusal(&window, Backend::Default).unwrap();
        assert!(
            why.contains("sliding-window") && why.contains("--sdpa-backend varlen"),
            "{why}"
        );
        // PyTorch's varlen_attn takes varlen batches, windows and dense batches alike;
        // FlexAttention all but varlen batches.
        assert_eq!(crate::sdpa::refusal(&window, Backend::Flex), None);
        let why = crate::sdpa::refusal(&varlen, Backend::Flex).unwrap();
        assert!(
            why.contains("flex is no baseline") && why.contains("--sdpa-backend varlen"),
            "{why}"
        );
        for problem in [
            &varlen,
            &window,
            &Problem::parse("2,32/8,4096,128").unwrap(),
        ] {
            assert_eq!(
                crate::sdpa::refusal(problem, Backend::Varlen),
                None,
                "{problem}"
            );
        }
        assert!(
            crate::sdpa::refusal(&Problem::parse("2,32/8,4096,128").unwrap(), Backend::Flash)
                .is_none()
        );
        // FlashAttention-3 has a window kernel, and is no varlen baseline through the helper.
        assert!(crate::sdpa::refusal(&window, Backend::Fa3).is_none());
        assert!(crate::sdpa::refusal(&varlen, Backend::Fa3).is_some());
        // A registered baseline is refused only outside its variants.
        let mma = Baseline::Registered(Candidate::registered("mma", Config::default()).unwrap());
        assert!(mma.check_supports(&varlen).is_ok());
        let cublas =
            Baseline::Registered(Candidate::registered("cublas", Config::default()).unwrap());
        let err = cublas.check_supports(&varlen).unwrap_err().to_string();
        assert!(err.contains("cublas") && err.contains("varlen"), "{err}");
    }

    #[test]
    fn pytorch_kernels_asked_for_by_name_need_pytorch_and_never_fall_back_to_cublas() {
        // No Python at all: SDPA falls back to the cublas math path and says so; varlen_attn and
        // FlexAttention are asked for by name (for what cuBLAS has no kernel for): an error.
        std::env::set_var("ATTN_PYTHON", "/nonexistent/python3");
        let (fallback, note) = Baseline::from_name("sdpa", Backend::Default).unwrap();
        assert_eq!(fallback.implementation().name, "cublas");
        assert!(note.is_some_and(|n| n.contains("cublas")));
        for backend in [Backend::Varlen, Backend::Flex] {
            let err = Baseline::from_name("sdpa", backend)
                .unwrap_err()
                .to_string();
            assert!(err.contains("no Python") && !err.contains('\n'), "{err}");
        }
        std::env::remove_var("ATTN_PYTHON");
    }
}

#[cfg(test)]
mod fa3_tests {
    use super::*;
    use attn_kernels::TimingMode;

    #[test]
    fn fa3_is_timed_in_batch_mode_only_and_named_fa3_in_evidence() {
        for mode in [TimingMode::Graph, TimingMode::Flushed] {
            let err = Backend::Fa3.check_mode(mode).unwrap_err().to_string();
            assert!(err.contains("--mode batch") && !err.contains('\n'), "{err}");
        }
        assert!(Backend::Fa3.check_mode(TimingMode::Batch).is_ok());
        assert!(Backend::Default.check_mode(TimingMode::Graph).is_ok());
        assert_eq!(sdpa_implementation(Backend::Fa3).name, "fa3");
        assert_eq!(sdpa_implementation(Backend::Fa3).backend, None);
        // FlashInfer is a reference beside SDPA's backends in evidence, as varlen_attn is.
        assert_eq!(
            sdpa_implementation(Backend::Flashinfer).label(),
            "sdpa:flashinfer"
        );
        assert_eq!("fa3".parse::<Backend>().unwrap(), Backend::Fa3);
    }

    #[test]
    fn the_fa3_baseline_without_its_library_is_one_line() {
        // The variable points nowhere: refused before any Python starts.
        std::env::set_var(crate::sdpa::FA3_LIB_VAR, "/nonexistent/libfa3.so");
        let err = Baseline::from_name("fa3", Backend::Default)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("is not a file") && !err.contains('\n'),
            "{err}"
        );
        std::env::remove_var(crate::sdpa::FA3_LIB_VAR);
        let err = Baseline::from_name("fa3", Backend::Default)
            .unwrap_err()
            .to_string();
        assert!(err.contains(crate::sdpa::FA3_LIB_VAR), "{err}");
    }
}
