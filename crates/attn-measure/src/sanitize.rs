//! compute-sanitizer on a candidate (`cargo xtask sanitize`, `gate --sanitize`): the program is
//! found before anything runs, its command line runs a target-mode program (see
//! [`crate::profile::Target`]) under one tool, and its text report becomes typed findings.
//!
//! The report format (`=========` lines): a headline (`Invalid __global__ write of size 2 bytes`,
//! `Error: Race reported between Write access at ...`, `Program hit ...`) followed by indented
//! details (`at attn_fwd+0x1b0 [in file.cu:42]`, `by thread (0,0,0) in block (0,0,0)`, `Address
//! ...`, host frames), records separated by a bare prefix, and `ERROR SUMMARY: N errors` last.
//! Older releases print `at 0x1b0 in file.cu:42:kernel(args)`; both are read.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use attn_evidence::{Provenance, SanitizeRun, ShapeSpec};
pub use attn_evidence::{SanitizeFinding as Finding, SanitizeTool as Tool};

use crate::supervise::{classify_failure, run_supervised, Supervised};
use crate::{MeasureError, Problem, Result};

/// The program's name.
pub const SANITIZER: &str = "compute-sanitizer";

/// compute-sanitizer's line prefix.
const PREFIX: &str = "=========";

/// Finds compute-sanitizer: `given` itself when it is a path (has a `/`), else `given` on PATH,
/// then in `$CUDA_HOME/bin` and `/usr/local/cuda/bin`. Missing is one clear error.
pub fn find(given: &Path) -> Result<PathBuf> {
    crate::profile::find_program(given).ok_or_else(|| {
        let (name, looked) = if given.components().count() > 1 {
            (SANITIZER.into(), format!("at {}", given.display()))
        } else {
            let dirs = "on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin";
            (given.display().to_string(), dirs.into())
        };
        MeasureError::SanitizerNotFound { name, looked }
    })
}

/// compute-sanitizer's arguments for `tool` on `program args`: device backtraces only (the
/// finding is in the kernel), and for memcheck a padding after every allocation so that a write
/// just past one lands in no other.
pub fn arguments(tool: Tool, program: &Path, args: &[String]) -> Vec<OsString> {
    let mut out: Vec<OsString> = ["--tool", tool.as_str(), "--show-backtrace", "device"]
        .map(OsString::from)
        .to_vec();
    if tool == Tool::Memcheck {
        out.extend(["--padding", "512"].map(OsString::from));
    }
    out.push(program.into());
    out.extend(args.iter().map(OsString::from));
    out
}

/// The command, ready to run (add environment variables for the target here).
pub fn command(sanitizer: &Path, tool: Tool, program: &Path, args: &[String]) -> Command {
    let mut command = Command::new(sanitizer);
    command.args(arguments(tool, program, args));
    command
}

/// What one tool reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The tool.
    pub tool: Tool,
    /// Its findings, merged by kind, kernel and location, in the order first reported.
    pub findings: Vec<Finding>,
    /// Its `ERROR SUMMARY` count; `None` when it printed none (it did not finish).
    pub errors: Option<u64>,
    /// Its other messages (`Error: ...`, `Warning: ...`, `Target application returned an error`).
    pub notes: Vec<String>,
}

impl Report {
    /// No finding, and an error count of zero.
    pub fn clean(&self) -> bool {
        self.findings.is_empty() && self.errors == Some(0)
    }

    /// The verdict in one line: `memcheck: clean` or `racecheck: 2 findings (14 errors)`.
    pub fn verdict(&self) -> String {
        if self.clean() {
            return format!("{}: clean", self.tool);
        }
        let n = self.findings.len();
        let errors = self.errors.unwrap_or(0);
        format!(
            "{}: {n} finding{} ({errors} error{})",
            self.tool,
            if n == 1 { "" } else { "s" },
            if errors == 1 { "" } else { "s" }
        )
    }

    /// The evidence of this report on `candidate` (a forward's or a backward's, as evidence
    /// records it).
    pub fn evidence(
        &self,
        provenance: Provenance,
        candidate: attn_evidence::Implementation,
        shapes: &[ShapeSpec],
    ) -> SanitizeRun {
        SanitizeRun {
            schema: attn_evidence::SCHEMA_VERSION,
            kind: attn_evidence::EvidenceKind::Sanitize,
            provenance,
            candidate,
            shapes: shapes.to_vec(),
            tool: self.tool,
            findings: self.findings.clone(),
            errors: self.errors.unwrap_or(0),
            clean: self.clean(),
        }
    }
}

impl std::fmt::Display for Report {
    /// A line per finding (indented), then the verdict.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for finding in &self.findings {
            writeln!(f, "  {finding}")?;
        }
        writeln!(f, "{}", self.verdict())
    }
}

/// Reads compute-sanitizer's text (other lines, the program's own, are skipped).
pub fn parse(tool: Tool, text: &str) -> Report {
    let mut report = Report {
        tool,
        findings: vec![],
        errors: None,
        notes: vec![],
    };
    let mut record: Option<(String, Vec<String>)> = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(PREFIX) else {
            continue;
        };
        let rest = rest.trim_end();
        if rest.trim().is_empty() || !rest.starts_with("  ") {
            // A headline (or the blank line between records) ends the record before it.
            if let Some((head, details)) = record.take() {
                add(&mut report, &head, &details);
            }
            if !rest.trim().is_empty() {
                record = Some((rest.trim().to_string(), vec![]));
            }
        } else if let Some((_, details)) = record.as_mut() {
            details.push(rest.trim().to_string());
        }
    }
    if let Some((head, details)) = record.take() {
        add(&mut report, &head, &details);
    }
    report
}

/// One record: a finding, the summary, or a note.
fn add(report: &mut Report, head: &str, details: &[String]) {
    if let Some(count) = head.strip_prefix("ERROR SUMMARY:") {
        report.errors = count.split_whitespace().next().and_then(|n| n.parse().ok());
        return;
    }
    // racecheck's own summary (CUDA 13): `RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0
    // warnings)`; errors and warnings both count.
    if let Some(rest) = head.strip_prefix("RACECHECK SUMMARY:") {
        let numbers: Vec<u64> = rest
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect();
        if let [_, errors, warnings] = numbers[..] {
            report.errors = Some(report.errors.unwrap_or(0).max(errors + warnings));
        }
        return;
    }
    if head == "COMPUTE-SANITIZER" || head.contains("SUMMARY:") {
        return;
    }
    let finding = if let Some((severity, race)) = head.split_once("Race reported between ") {
        race_finding(report.tool, severity, race, details)
    } else if let Some(at) = head
        .find("Potential ")
        .filter(|_| head.contains("hazard detected"))
    {
        hazard_finding(report.tool, head, at, details)
    } else if let Some(api) = head.strip_prefix("Program hit ") {
        let call = api
            .rsplit_once("API call to ")
            .map(|(_, c)| c.trim_end_matches('.').to_string());
        Some(Finding {
            tool: report.tool,
            kind: "CUDA API error".into(),
            kernel: None,
            location: call,
            message: api.to_string(),
            count: 1,
        })
    } else if details
        .iter()
        .any(|d| d.starts_with("at ") || d.starts_with("by thread"))
    {
        let site = details
            .iter()
            .find_map(|d| d.strip_prefix("at "))
            .map(Site::parse);
        Some(Finding {
            tool: report.tool,
            kind: head.to_string(),
            kernel: site.as_ref().map(|s| s.kernel.clone()),
            location: site.map(|s| s.location),
            message: message(details.iter().filter(|d| !d.starts_with("at "))),
            count: 1,
        })
    } else {
        None
    };
    match finding {
        Some(f) => merge(&mut report.findings, f),
        None => report.notes.push(head.to_string()),
    }
}

/// `Error: Race reported between Write access at SITE` + `and Read access at SITE [4 hazards]`.
fn race_finding(tool: Tool, severity: &str, race: &str, details: &[String]) -> Option<Finding> {
    let (first, site) = race.split_once(" access at ")?;
    let site = Site::parse(site);
    let other = details.iter().find_map(|d| d.strip_prefix("and "));
    let second = other.and_then(|o| o.split_once(" access")).map(|(a, _)| a);
    let warning = severity.to_ascii_lowercase().contains("warn");
    let mut parts = vec![format!("{first} access at {}", site.text)];
    parts.extend(
        details
            .iter()
            .filter(|d| d.starts_with("and "))
            .take(3)
            .cloned(),
    );
    Some(Finding {
        tool,
        kind: format!(
            "{first}-{} race{}",
            second.unwrap_or("?"),
            if warning { " (warning)" } else { "" }
        ),
        kernel: Some(site.kernel),
        location: Some(site.location),
        message: message(parts.iter()),
        count: 1,
    })
}

/// `--racecheck-report hazard`: `ERROR: Potential WAR hazard detected at __shared__ 0x0 in block
/// (0, 0, 0) :` + `Read Thread (0, 0, 0) at 0xe8 in f.cu:18:k(int*)` + `Write Thread ...`.
fn hazard_finding(tool: Tool, head: &str, at: usize, details: &[String]) -> Option<Finding> {
    let (kind, place) = head[at..].split_once(" detected at ")?;
    let site = details
        .iter()
        .find(|d| d.contains(" Thread ("))
        .and_then(|d| d.split_once(") at "))
        .map(|(_, site)| Site::parse(site));
    let warning = head.starts_with("WARN");
    let mut parts = vec![format!("at {}", place.trim_end_matches(" :"))];
    parts.extend(details.iter().filter(|d| d.contains(" Thread (")).cloned());
    Some(Finding {
        tool,
        kind: format!("{kind}{}", if warning { " (warning)" } else { "" }),
        kernel: site.as_ref().map(|s| s.kernel.clone()),
        location: site.map(|s| s.location),
        message: message(parts.iter()),
        count: 1,
    })
}

/// Details worth a line: not host frames or backtrace headers; at most 300 characters.
fn message<'a>(details: impl Iterator<Item = &'a String>) -> String {
    let kept: Vec<&str> = details
        .map(String::as_str)
        .filter(|d| {
            !d.starts_with("Host Frame")
                && !d.starts_with("Device Frame")
                && !d.starts_with("Saved host backtrace")
                && !d.starts_with("in /")
        })
        .collect();
    let text = kept.join(", ");
    if text.chars().count() > 300 {
        text.chars().take(299).chain(['…']).collect()
    } else {
        text
    }
}

/// Findings of the same kind at the same place are one finding with a count.
fn merge(findings: &mut Vec<Finding>, f: Finding) {
    match findings
        .iter_mut()
        .find(|g| (&g.kind, &g.kernel, &g.location) == (&f.kind, &f.kernel, &f.location))
    {
        Some(same) => same.count += 1,
        None => findings.push(f),
    }
}

/// Where a report points: the kernel, and `file:line` or `kernel+0xOFFSET`.
#[derive(Debug, PartialEq)]
struct Site {
    kernel: String,
    location: String,
    /// As printed (without a `[N hazards]` suffix).
    text: String,
}

impl Site {
    /// `attn_fwd+0x1b0`, `attn_fwd+0x1b0 in f.cu:42`, `void k<int>(int *)+0x90 in f.cuh:324`;
    /// older: `0x1b0 in f.cu:42:k(int*)`, `0xdd0 in void k<int>(int *)`.
    fn parse(text: &str) -> Site {
        let text = match text.rfind(" [") {
            Some(at) if text.ends_with(']') => &text[..at],
            _ => text,
        };
        let (function, offset, file_line) = if let Some(rest) = text.strip_prefix("0x") {
            let (offset, rest) = rest.split_once(" in ").unwrap_or((rest, ""));
            match split_file_line(rest) {
                Some((file_line, function)) => (function, offset, Some(file_line)),
                None => (rest, offset, None),
            }
        } else {
            let (code, file_line) = match text.rsplit_once(" in ") {
                Some((code, fl)) if is_file_line(fl) => (code, Some(fl.to_string())),
                _ => (text, None),
            };
            let (function, offset) = code.rsplit_once("+0x").unwrap_or((code, ""));
            (function, offset, file_line)
        };
        let kernel = kernel_name(function);
        let location = match file_line {
            Some(fl) => fl,
            None if offset.is_empty() => kernel.clone(),
            None => format!("{kernel}+0x{offset}"),
        };
        Site {
            kernel,
            location,
            text: text.to_string(),
        }
    }
}

/// `file.cu:42` (a path, a colon, digits).
fn is_file_line(text: &str) -> bool {
    text.rsplit_once(':').is_some_and(|(file, line)| {
        !file.is_empty() && !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit())
    })
}

/// Old format `path/f.cu:75:function(args)` → (`path/f.cu:75`, `function(args)`).
fn split_file_line(text: &str) -> Option<(String, &str)> {
    for (i, _) in text.match_indices(':') {
        let rest = &text[i + 1..];
        let len = rest.find(':')?;
        if len > 0 && rest[..len].bytes().all(|b| b.is_ascii_digit()) {
            return Some((text[..i + 1 + len].to_string(), &rest[len + 1..]));
        }
    }
    None
}

/// A function as printed, without its parameters or return type: `void k<int, (int)4>(int *)`
/// → `k<int, (int)4>`.
fn kernel_name(function: &str) -> String {
    let function = function.trim();
    let mut depth = 0i32;
    let mut end = function.len();
    for (i, c) in function.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 && i > 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let name = function[..end].trim();
    name.strip_prefix("void ").unwrap_or(name).to_string()
}

/// Runs `command` (from [`command`]) within `timeout` and reads its report. A report with
/// findings is returned even when the target failed (a fault ends it); a target that failed
/// without one, a sanitizer that could not start it or a run past `timeout` is an error.
pub fn run(command: Command, tool: Tool, timeout: Duration) -> Result<Report> {
    let fail = |why: String| Err(MeasureError::Sanitizer(format!("{tool}: {why}")));
    let (status, stdout, stderr) = match run_supervised(command, timeout)? {
        Supervised::TimedOut => {
            return fail(format!(
                "did not finish within {:.0} s",
                timeout.as_secs_f64()
            ))
        }
        Supervised::Finished {
            status,
            stdout,
            stderr,
        } => (status, stdout, stderr),
    };
    let mut report = parse(tool, &format!("{stdout}\n{stderr}"));
    if report.findings.is_empty() && report.errors.unwrap_or(0) > 0 {
        // Counted but not understood: never read as clean.
        report.findings.push(Finding {
            tool,
            kind: "unrecognised report".into(),
            kernel: None,
            location: None,
            message: format!(
                "compute-sanitizer counted {} error(s) not recognised here; run it by hand",
                report.errors.unwrap_or(0)
            ),
            count: 1,
        });
    }
    if !report.findings.is_empty() || (status.success() && report.errors.is_some()) {
        return Ok(report);
    }
    let own = report
        .notes
        .iter()
        .find(|n| n.starts_with("Error") || n.contains("Internal"));
    let why = match own {
        Some(note) => note.clone(),
        None => {
            let text = format!("{stdout}\n{stderr}");
            let program: Vec<&str> = text.lines().filter(|l| !l.starts_with(PREFIX)).collect();
            classify_failure(&program.join("\n"), &format!("{status}"))
        }
    };
    fail(format!("the target failed without a finding: {why}"))
}

/// The tools `gate --sanitize` runs.
pub const GATE_TOOLS: [Tool; 2] = [Tool::Memcheck, Tool::Racecheck];

/// How long one tool may run on one target.
pub const TIMEOUT: Duration = Duration::from_secs(600);

/// Runs each of `tools` in turn on `program args` (a target-mode program, see
/// [`crate::profile::Target`]), each within [`TIMEOUT`]; `each` sees every report as it comes.
pub fn run_tools(
    sanitizer: &Path,
    tools: &[Tool],
    program: &Path,
    args: &[String],
    mut each: impl FnMut(&Report),
) -> Result<Vec<Report>> {
    let mut reports = Vec::new();
    for &tool in tools {
        let report = run(command(sanitizer, tool, program, args), tool, TIMEOUT)?;
        each(&report);
        reports.push(report);
    }
    Ok(reports)
}

/// Small versions of `problems` for the tools (which slow a kernel down 10-1000x): batch and
/// heads at most 2, sequences at most 197 (a ragged tail for every tile size), the same head dim,
/// mask and dtype; each also causal. Deduplicated, in order.
pub fn small_problems(problems: &[Problem]) -> Result<Vec<Problem>> {
    small_shapes(problems.iter().map(|p| &p.spec))
        .into_iter()
        .map(Problem::new)
        .collect()
}

/// [`small_problems`]' shapes.
pub fn small_shapes<'a>(specs: impl IntoIterator<Item = &'a ShapeSpec>) -> Vec<ShapeSpec> {
    let mut seen = BTreeSet::new();
    let mut out = vec![];
    for spec in specs {
        // Grouped heads stay grouped (at most 2 K/V heads of at most 2 query heads each) and a
        // window stays narrower than the sequences, so the small shape takes the same paths.
        let kv_heads = spec.kv_heads().min(2);
        let group = (spec.heads / spec.kv_heads()).min(2);
        let window = spec.window.map(|w| attn_evidence::Window {
            left: w.left.map(|l| l.min(48)),
            right: w.right.map(|r| r.min(48)),
        });
        let (heads, kv_heads) = (kv_heads * group, (group > 1).then_some(kv_heads));
        let small = match &spec.varlen {
            None => ShapeSpec {
                batch: spec.batch.min(2),
                heads,
                kv_heads,
                seq_q: spec.seq_q.min(197),
                seq_kv: spec.seq_kv.min(197),
                window,
                ..spec.clone()
            },
            // A varlen batch stays packed: its first 4 sequences (an empty one stays empty), at
            // most 197 rows each.
            Some(varlen) => {
                let cap = |lens: &[usize]| lens.iter().take(4).map(|&n| n.min(197)).collect();
                let lengths = attn_evidence::Varlen {
                    seqlens_q: cap(&varlen.seqlens_q),
                    seqlens_kv: cap(&varlen.seqlens_kv),
                };
                ShapeSpec {
                    causal: spec.causal,
                    window,
                    dtype: spec.dtype,
                    ..ShapeSpec::packed(lengths, heads, kv_heads, spec.head_dim)
                }
            }
        };
        let causal = ShapeSpec {
            causal: true,
            ..small.clone()
        };
        for s in [small, causal] {
            if seen.insert(s.clone()) {
                out.push(s);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_of_every_format_name_the_kernel() {
        let cases = [
            ("attn_fwd+0x1b0", "attn_fwd", "attn_fwd+0x1b0"),
            ("attn_fwd+0x1b0 in planted.cu:42", "attn_fwd", "planted.cu:42"),
            (
                "void k<int, (int)4>(const int *, int)+0x90 in /x/f.cuh:324 [16 hazards]",
                "k<int, (int)4>",
                "/x/f.cuh:324",
            ),
            (
                "0x000000c8 in /home/u/src/my_helper.cuh:75:void vector_projection<double>(double*, int)",
                "vector_projection<double>",
                "/home/u/src/my_helper.cuh:75",
            ),
            (
                "0xdd0 in void raft::kernel<int, float>(T2 *, int)",
                "raft::kernel<int, float>",
                "raft::kernel<int, float>+0xdd0",
            ),
        ];
        for (text, kernel, location) in cases {
            let site = Site::parse(text);
            assert_eq!(
                (site.kernel.as_str(), site.location.as_str()),
                (kernel, location),
                "{text}"
            );
        }
    }

    #[test]
    fn small_shapes_keep_head_dim_mask_and_dtype() {
        let specs: Vec<ShapeSpec> = ["1,8,512,64", "2,8,512,64", "4,16,100,300,128 bf16"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let small: Vec<String> = small_shapes(&specs).iter().map(|s| s.to_string()).collect();
        assert_eq!(
            small,
            [
                "1,2,197,64",
                "1,2,197,64 causal",
                "2,2,197,64",
                "2,2,197,64 causal",
                "2,2,100,197,128 bf16",
                "2,2,100,197,128 causal bf16",
            ]
        );
    }

    #[test]
    fn small_varlen_shapes_stay_packed_with_their_empty_sequences() {
        let specs: Vec<ShapeSpec> = ["varlen=512,0,3000:100,7,9000 H=32/8 D=128 window=64,-1 bf16"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let small: Vec<String> = small_shapes(&specs).iter().map(|s| s.to_string()).collect();
        assert_eq!(
            small,
            [
                "varlen=197,0,197:100,7 H=4/2 D=128 window=48,-1 bf16",
                "varlen=197,0,197:100,7 H=4/2 D=128 causal window=48,-1 bf16",
            ]
        );
        // Each a valid problem (its bounding shape as recorded).
        assert_eq!(
            small_problems(&[Problem::new(specs[0].clone()).unwrap()])
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn arguments_put_the_tool_before_the_program() {
        let args = arguments(Tool::Racecheck, Path::new("/bin/xtask"), &["target".into()]);
        let args: Vec<_> = args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            args,
            [
                "--tool",
                "racecheck",
                "--show-backtrace",
                "device",
                "/bin/xtask",
                "target"
            ]
        );
        let memcheck = arguments(Tool::Memcheck, Path::new("x"), &[]);
        assert!(memcheck.windows(2).any(|w| w[0] == "--padding"));
    }

    #[test]
    fn a_missing_sanitizer_is_one_clear_error() {
        let err = find(Path::new("/no/such/dir/compute-sanitizer"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("compute-sanitizer not found at /no/such/dir/compute-sanitizer ("),
            "{err}"
        );
        let err = find(Path::new("no-such-sanitizer-anywhere"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("no-such-sanitizer-anywhere not found on PATH, in $CUDA_HOME/bin"),
            "{err}"
        );
        assert!(!err.contains('\n'));
    }
}
