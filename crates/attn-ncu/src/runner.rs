//! Running ncu on a program: the command line as data, and ncu's failures as typed errors.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::parse::{parse, Launch, Page};
use crate::NcuError;

/// How to run ncu. [`ProfileOptions::new`] gives the project's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileOptions {
    /// The ncu executable; a bare `ncu` is looked up on PATH.
    pub ncu: PathBuf,
    /// Only kernels whose function name matches this regex are profiled (`--kernel-name
    /// regex:...`), so the random-fill kernels that prepare inputs are skipped.
    pub kernel_regex: String,
    /// Matching launches to skip first (warm-up), `--launch-skip`.
    pub launch_skip: u32,
    /// Matching launches to profile, `--launch-count`.
    pub launch_count: u32,
    /// `--clock-control none`: leave the card's clocks alone, so counters describe the clocks the
    /// benchmarks run at. With `false`, ncu locks clocks to base (its own default).
    pub clock_control_none: bool,
    /// `--cache-control all`: flush caches before each replay pass, so every pass sees cold
    /// caches. With `false`, `--cache-control none`.
    pub cache_control_all: bool,
    /// Metric names for `--metrics`; empty means ncu's default sections.
    pub metrics: Vec<String>,
    /// Which CSV page to ask for; the raw page is one row per launch and parses fastest.
    pub page: Page,
}

impl ProfileOptions {
    /// Defaults: `ncu` from PATH, skip 0, profile 5 launches, clocks left alone, caches flushed,
    /// raw page.
    pub fn new(kernel_regex: impl Into<String>, metrics: Vec<String>) -> Self {
        Self {
            ncu: PathBuf::from("ncu"),
            kernel_regex: kernel_regex.into(),
            launch_skip: 0,
            launch_count: 5,
            clock_control_none: true,
            cache_control_all: true,
            metrics,
            page: Page::Raw,
        }
    }

    /// A one-line note on clocks, for output and evidence.
    pub fn clock_note(&self) -> &'static str {
        if self.clock_control_none {
            "clocks: left as the card runs them (--clock-control none); counters match benchmark conditions, not a fixed base clock"
        } else {
            "clocks: locked to base by ncu (--clock-control base); durations are slower than in benchmarks"
        }
    }

    /// The argument ncu gets for `--kernel-name`.
    pub fn kernel_name_arg(&self) -> String {
        format!("regex:{}", self.kernel_regex)
    }
}

/// ncu's arguments (without the ncu program itself), then the program and its arguments.
///
/// ```
/// use attn_ncu::ProfileOptions;
/// let opts = ProfileOptions::new("flash_fwd", vec!["gpu__time_duration.sum".into()]);
/// let args = attn_ncu::arguments(&opts, "target/release/bench".as_ref(), &["--impl".into(), "v3".into()]);
/// let args: Vec<_> = args.iter().map(|a| a.to_str().unwrap()).collect();
/// assert_eq!(args[..2], ["--csv", "--page"]);
/// assert!(args.windows(2).any(|w| w == ["--kernel-name", "regex:flash_fwd"]));
/// assert_eq!(args[args.len() - 3..], ["target/release/bench", "--impl", "v3"]);
/// ```
pub fn arguments(opts: &ProfileOptions, program: &Path, args: &[String]) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    let mut push = |a: &str| out.push(a.into());
    push("--csv");
    push("--page");
    push(opts.page.as_arg());
    if opts.page == Page::Source {
        // Per SASS instruction: executions (SourceCounters) and warp-stall samples (WarpStateStats).
        for arg in [
            "--print-source",
            "sass",
            "--section",
            "WarpStateStats",
            "--section",
            "SourceCounters",
        ] {
            push(arg);
        }
    }
    // Base units make the numbers exact (no "1.59 Mbyte" rounding).
    push("--print-units");
    push("base");
    push("--kernel-name");
    push(&opts.kernel_name_arg());
    push("--launch-skip");
    push(&opts.launch_skip.to_string());
    push("--launch-count");
    push(&opts.launch_count.to_string());
    push("--clock-control");
    push(if opts.clock_control_none {
        "none"
    } else {
        "base"
    });
    push("--cache-control");
    push(if opts.cache_control_all {
        "all"
    } else {
        "none"
    });
    if !opts.metrics.is_empty() && opts.page != Page::Source {
        push("--metrics");
        push(&opts.metrics.join(","));
    }
    out.push(program.as_os_str().to_owned());
    out.extend(args.iter().map(OsString::from));
    out
}

/// The ncu program and [`arguments`] as text, for provenance.
pub fn command_line(opts: &ProfileOptions, program: &Path, args: &[String]) -> Vec<String> {
    let mut line = vec![opts.ncu.to_string_lossy().into_owned()];
    line.extend(
        arguments(opts, program, args)
            .iter()
            .map(|a| a.to_string_lossy().into_owned()),
    );
    line
}

/// The ncu command, ready to run (stdout and stderr are left for the caller to configure).
pub fn command(opts: &ProfileOptions, program: &Path, args: &[String]) -> Command {
    let mut cmd = Command::new(&opts.ncu);
    cmd.args(arguments(opts, program, args));
    cmd
}

/// What one ncu run produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// The full command line, for provenance.
    pub command_line: Vec<String>,
    /// See [`ProfileOptions::clock_note`].
    pub clock_note: String,
    /// ncu's `==WARNING==` lines, verbatim.
    pub warnings: Vec<String>,
    /// The profiled launches.
    pub launches: Vec<Launch>,
}

/// Runs ncu on `program args`, waits, and parses its CSV; ncu's failures become [`NcuError`]s.
pub fn profile(
    opts: &ProfileOptions,
    program: &Path,
    args: &[String],
) -> Result<Profile, NcuError> {
    let output = command(opts, program, args).output().map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            NcuError::NcuNotFound {
                path: opts.ncu.clone(),
            }
        } else {
            NcuError::Spawn {
                path: opts.ncu.clone(),
                source,
            }
        }
    })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let ended = Ended {
        success: output.status.success(),
        status: &output.status.to_string(),
        stdout: &stdout,
        stderr: &stderr,
    };
    Profile::from_output(opts, program, args, &ended)
}

/// How an ncu run ended, as its caller saw it (for [`Profile::from_output`]).
#[derive(Debug, Clone, Copy)]
pub struct Ended<'a> {
    /// Whether ncu exited with status 0.
    pub success: bool,
    /// Its exit status as text (`exit status: 1`, `signal: 9`...).
    pub status: &'a str,
    /// Everything it printed on stdout.
    pub stdout: &'a str,
    /// Everything it printed on stderr.
    pub stderr: &'a str,
}

impl Profile {
    /// The profile of an ncu run of `program args` with `opts` that the caller started its own way
    /// (e.g. supervised, with a time limit), from how it `ended`; ncu's failures become
    /// [`NcuError`]s as in [`profile`].
    pub fn from_output(
        opts: &ProfileOptions,
        program: &Path,
        args: &[String],
        ended: &Ended<'_>,
    ) -> Result<Profile, NcuError> {
        let (stdout, stderr) = (ended.stdout, ended.stderr);
        let launches = interpret(opts, ended.success, ended.status, stdout, stderr)?;
        Ok(Profile {
            command_line: command_line(opts, program, args),
            clock_note: opts.clock_note().to_owned(),
            warnings: stdout
                .lines()
                .chain(stderr.lines())
                .filter(|l| l.starts_with("==WARNING=="))
                .map(str::to_owned)
                .collect(),
            launches,
        })
    }
}

/// Turns ncu's exit status and output into launches or a classified error.
///
/// Public so callers that run ncu their own way (remotely, under a scheduler) get the same
/// error mapping.
pub fn interpret(
    opts: &ProfileOptions,
    success: bool,
    status: &str,
    stdout: &str,
    stderr: &str,
) -> Result<Vec<Launch>, NcuError> {
    check_ended(success, status, stdout, stderr)?;
    let all = || stdout.lines().chain(stderr.lines());
    if all().any(|l| l.starts_with("==WARNING== No kernels were profiled"))
        || !stdout.contains("\"ID\",")
    {
        return Err(NcuError::NoKernelsProfiled {
            kernel_filter: opts.kernel_name_arg(),
            launch_skip: opts.launch_skip,
        });
    }
    parse(stdout)
}

/// The source page of an ncu run with `opts.page` [`Page::Source`], or a classified error as
/// [`interpret`] gives.
pub fn interpret_source(
    opts: &ProfileOptions,
    ended: &Ended<'_>,
) -> Result<Vec<crate::source::SourceProfile>, NcuError> {
    let (stdout, stderr) = (ended.stdout, ended.stderr);
    check_ended(ended.success, ended.status, stdout, stderr)?;
    if !crate::source::is_source_page(stdout) {
        return Err(NcuError::NoKernelsProfiled {
            kernel_filter: opts.kernel_name_arg(),
            launch_skip: opts.launch_skip,
        });
    }
    crate::source::parse_source(stdout)
}

/// ncu's failures (counter permission, an unknown metric, the target's own failure, ncu's
/// errors, a non-zero exit) as [`NcuError`]s.
fn check_ended(success: bool, status: &str, stdout: &str, stderr: &str) -> Result<(), NcuError> {
    let all = || stdout.lines().chain(stderr.lines());
    let errors: Vec<&str> = all().filter(|l| l.starts_with("==ERROR==")).collect();
    if all().any(|l| l.contains("ERR_NVGPUCTRPERM")) {
        return Err(NcuError::CounterPermission);
    }
    if let Some(line) = errors.iter().find(|l| is_metric_error(l)) {
        return Err(NcuError::UnknownMetric {
            message: error_text(line),
        });
    }
    if let Some(code) = errors.iter().find_map(|l| application_exit_code(l)) {
        let detail = errors
            .iter()
            .find(|l| application_exit_code(l).is_none())
            .map(|l| error_text(l))
            .or_else(|| last_program_line(stdout, stderr))
            .unwrap_or_else(|| "no message".to_owned());
        return Err(NcuError::TargetFailed { code, detail });
    }
    if let Some(first) = errors.first() {
        return Err(NcuError::NcuFailed {
            status: status.to_owned(),
            detail: error_text(first),
        });
    }
    if !success {
        let detail = last_program_line(stdout, stderr).unwrap_or_else(|| "no output".to_owned());
        return Err(NcuError::NcuFailed {
            status: status.to_owned(),
            detail,
        });
    }
    Ok(())
}

/// `==ERROR== Failed to find metric foo` and its variants across ncu versions.
fn is_metric_error(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    lower.contains("metric")
        && (lower.contains("failed to find")
            || lower.contains("did not match")
            || lower.contains("invalid")
            || lower.contains("not found"))
}

/// `==ERROR== The application returned an error code (1).` -> 1.
fn application_exit_code(line: &str) -> Option<i32> {
    let rest = line.split_once("returned an error code (")?.1;
    rest.split_once(')')?.0.trim().parse().ok()
}

fn error_text(line: &str) -> String {
    line.trim_start_matches("==ERROR==").trim().to_owned()
}

/// The last line that is neither an ncu message nor CSV, from stderr first, then stdout:
/// usually the program's own complaint.
fn last_program_line(stdout: &str, stderr: &str) -> Option<String> {
    let is_program_line =
        |l: &&str| !l.trim().is_empty() && !l.starts_with("==") && !l.starts_with('"');
    let last = |text: &str| {
        text.lines()
            .rev()
            .find(is_program_line)
            .map(|l| l.trim().to_owned())
    };
    last(stderr).or_else(|| last(stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> ProfileOptions {
        ProfileOptions::new("attn_fwd", vec![])
    }

    fn check(stdout: &str, stderr: &str, success: bool, expected: &str) {
        let err =
            interpret(&opts(), success, "exit status: 1", stdout, stderr).expect_err(expected);
        assert!(
            err.to_string().contains(expected),
            "{err} does not contain {expected:?}"
        );
    }

    #[test]
    fn ncu_failures_map_to_clear_errors() {
        let cases: &[(&str, &str, bool, &str)] = &[
            (
                "==PROF== Connected to process 7 (/bench)\n",
                "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0.\n",
                false,
                "NVreg_RestrictProfilingToAdminUsers=0",
            ),
            ("", "==ERROR== Failed to find metric sm__nope.sum\n", false, "ncu rejected a metric: Failed to find metric sm__nope.sum"),
            (
                "thread panicked: CUDA_ERROR_OUT_OF_MEMORY\n==PROF== Disconnected\n",
                "==ERROR== The application returned an error code (101).\n",
                false,
                "exit code 101): thread panicked: CUDA_ERROR_OUT_OF_MEMORY",
            ),
            ("", "==ERROR== Profiling failed because a driver resource was unavailable.\n", false, "driver resource was unavailable"),
            ("", "Segmentation fault\n", false, "ncu failed (exit status: 1): Segmentation fault"),
            ("==PROF== Disconnected from process 7\n==WARNING== No kernels were profiled.\n", "", true, "--kernel-name regex:attn_fwd"),
            ("==PROF== Disconnected from process 7\n", "", true, "ncu profiled no kernel"),
        ];
        for (stdout, stderr, success, expected) in cases {
            check(stdout, stderr, *success, expected);
        }
    }

    #[test]
    fn clock_control_is_stated() {
        let mut o = opts();
        assert!(o.clock_note().contains("--clock-control none"));
        o.clock_control_none = false;
        assert!(arguments(&o, Path::new("x"), &[])
            .windows(2)
            .any(|w| w[0] == "--clock-control" && w[1] == "base"));
        assert!(o.clock_note().contains("locked"));
    }
}
