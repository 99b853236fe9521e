//! ncu's source page (`--csv --page source --print-source sass` with the `WarpStateStats` and
//! `SourceCounters` sections): warp-stall samples and executions per SASS instruction.
//!
//! A kernel's time, as its warps spent it, splits by how often each instruction ran: in an
//! attention kernel the steady key tile's instructions run once per tile and warp, an item's
//! prologue and epilogue once per item and warp, the setup once per block. [`SourceProfile::classes`]
//! sums the samples of each execution count, so that "how much of the time is per-item code" is
//! one line, and [`SourceProfile::hottest`] names the instructions the warps sat on, with their
//! largest stall reasons.
//!
//! ```
//! let csv = include_str!("../tests/fixtures/h200_hopper_source_sass.csv");
//! let profile = &attn_ncu::source::parse_source(csv)?[0];
//! assert_eq!(profile.kernel, "attn_fwd");
//! assert!(profile.total_samples() > 0);
//! # Ok::<(), attn_ncu::NcuError>(())
//! ```

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::parse::split_row as fields;
use crate::NcuError;

/// The columns a source page must have.
const ADDRESS: &str = "Address";
const SOURCE: &str = "Source";
const SAMPLES: &str = "Warp Stall Sampling (All Samples)";
const EXECUTED: &str = "Instructions Executed";
/// Per-reason sample columns start with this (`stall_wait`, ...; their "(Not Issued)" twins are
/// left out).
const STALL_PREFIX: &str = "stall_";

/// One SASS instruction of a source page.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceLine {
    /// Its position in the kernel's listing (0-based).
    pub index: usize,
    /// The address ncu printed.
    pub address: String,
    /// The instruction text, trimmed.
    pub source: String,
    /// Warp-stall samples taken on it (issued or not).
    pub samples: u64,
    /// Warp-level executions.
    pub executed: u64,
    /// Samples per stall reason (`wait`, `barrier`, ...), the non-zero ones.
    pub stalls: BTreeMap<String, u64>,
}

impl SourceLine {
    /// The opcode, without a predicate or modifiers (`@!P0 BRA 0x..` → `BRA`, `HGMMA.64x160x16.F32`
    /// → `HGMMA`).
    pub fn opcode(&self) -> &str {
        let mut words = self.source.split_whitespace();
        let first = words.next().unwrap_or("");
        let op = if first.starts_with('@') {
            words.next().unwrap_or("")
        } else {
            first
        };
        op.split('.').next().unwrap_or(op)
    }

    /// Its `n` largest stall reasons, largest first.
    pub fn top_stalls(&self, n: usize) -> Vec<(&str, u64)> {
        let mut stalls: Vec<(&str, u64)> =
            self.stalls.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        stalls.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        stalls.truncate(n);
        stalls
    }
}

/// The instructions that ran the same number of times, and the samples they took together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutionClass {
    /// Warp-level executions of each instruction of the class.
    pub executed: u64,
    /// Instructions in the class.
    pub instructions: usize,
    /// Their samples.
    pub samples: u64,
}

/// One kernel's source page.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceProfile {
    /// The kernel's name as ncu printed it.
    pub kernel: String,
    /// Its instructions in listing order.
    pub lines: Vec<SourceLine>,
}

impl SourceProfile {
    /// All samples of the kernel.
    pub fn total_samples(&self) -> u64 {
        self.lines.iter().map(|l| l.samples).sum()
    }

    /// The execution classes, most samples first (instructions that never ran left out).
    pub fn classes(&self) -> Vec<ExecutionClass> {
        let mut by: BTreeMap<u64, ExecutionClass> = BTreeMap::new();
        for line in self.lines.iter().filter(|l| l.executed > 0) {
            let class = by.entry(line.executed).or_insert(ExecutionClass {
                executed: line.executed,
                instructions: 0,
                samples: 0,
            });
            class.instructions += 1;
            class.samples += line.samples;
        }
        let mut classes: Vec<ExecutionClass> = by.into_values().collect();
        classes.sort_by(|a, b| b.samples.cmp(&a.samples).then(b.executed.cmp(&a.executed)));
        classes
    }

    /// The `n` instructions with the most samples, most first (ties in listing order).
    pub fn hottest(&self, n: usize) -> Vec<&SourceLine> {
        let mut lines: Vec<&SourceLine> = self.lines.iter().filter(|l| l.samples > 0).collect();
        lines.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.index.cmp(&b.index)));
        lines.truncate(n);
        lines
    }
}

/// Whether `text` is a source page (its header names the `Address` and `Source` columns).
pub fn is_source_page(text: &str) -> bool {
    text.lines()
        .any(|l| l.starts_with("\"Address\",\"Source\""))
}

/// Parses `ncu --csv --page source` output: one profile per `"Kernel Name"` block.
pub fn parse_source(text: &str) -> Result<Vec<SourceProfile>, NcuError> {
    let mut profiles = Vec::new();
    let mut kernel: Option<String> = None;
    let mut columns: Option<Columns> = None;
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        if line.starts_with("\"Kernel Name\"") {
            let fields = fields(line, number)?;
            kernel = Some(fields.get(1).cloned().unwrap_or_default());
            columns = None;
        } else if line.starts_with("\"Address\",") {
            let header = fields(line, number)?;
            columns = Some(Columns::find(&header, number)?);
            profiles.push(SourceProfile {
                kernel: kernel.clone().unwrap_or_default(),
                lines: Vec::new(),
            });
        } else if let (Some(columns), Some(profile)) = (&columns, profiles.last_mut()) {
            if !line.starts_with('"') {
                continue; // ncu's own `==PROF==` or `==WARNING==` lines
            }
            let row = fields(line, number)?;
            let index = profile.lines.len();
            profile.lines.push(columns.line(&row, index, number)?);
        }
    }
    if profiles.is_empty() {
        return Err(NcuError::UnrecognisedHeader {
            line: 1,
            missing: format!(
                "{ADDRESS},{SOURCE} (a source page: ncu --page source --print-source sass)"
            ),
        });
    }
    Ok(profiles)
}

/// Where the source page's columns are.
struct Columns {
    address: usize,
    source: usize,
    samples: usize,
    executed: usize,
    stalls: Vec<(usize, String)>,
    width: usize,
}

impl Columns {
    fn find(header: &[String], line: usize) -> Result<Columns, NcuError> {
        let at = |name: &str| {
            header
                .iter()
                .position(|h| h == name)
                .ok_or_else(|| NcuError::UnrecognisedHeader {
                    line,
                    missing: name.to_string(),
                })
        };
        let stalls = header
            .iter()
            .enumerate()
            .filter(|(_, h)| h.starts_with(STALL_PREFIX) && !h.contains('('))
            .map(|(i, h)| (i, h[STALL_PREFIX.len()..].to_string()))
            .collect();
        Ok(Columns {
            address: at(ADDRESS)?,
            source: at(SOURCE)?,
            samples: at(SAMPLES)?,
            executed: at(EXECUTED)?,
            stalls,
            width: header.len(),
        })
    }

    fn line(&self, row: &[String], index: usize, line: usize) -> Result<SourceLine, NcuError> {
        if row.len() < self.width {
            return Err(NcuError::MalformedRow {
                line,
                message: format!("{} fields, the header has {}", row.len(), self.width),
            });
        }
        let count = |i: usize| -> Result<u64, NcuError> {
            let text = row[i].replace(',', "");
            match text.trim() {
                "" | "-" | "n/a" => Ok(0),
                t => t.parse::<u64>().map_err(|_| NcuError::MalformedRow {
                    line,
                    message: format!("column {} holds {:?}, not a count", i + 1, row[i]),
                }),
            }
        };
        let mut stalls = BTreeMap::new();
        for (i, name) in &self.stalls {
            let n = count(*i)?;
            if n > 0 {
                stalls.insert(name.clone(), n);
            }
        }
        Ok(SourceLine {
            index,
            address: row[self.address].clone(),
            source: row[self.source].trim().to_string(),
            samples: count(self.samples)?,
            executed: count(self.executed)?,
            stalls,
        })
    }
}

/// The profile as text: the execution classes that hold the samples (the top `classes`), then
/// the `hottest` instructions with their three largest stall reasons.
pub fn render_source(profile: &SourceProfile, classes: usize, hottest: usize) -> String {
    let total = profile.total_samples().max(1);
    let pct = |n: u64| 100.0 * n as f64 / total as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} instructions, {} warp-stall samples",
        profile.kernel,
        profile.lines.len(),
        profile.total_samples()
    );
    let _ = writeln!(
        out,
        "  by executions per instruction (code that runs as often):"
    );
    for class in profile.classes().iter().take(classes) {
        let _ = writeln!(
            out,
            "  {:>10} x  {:>5} instructions  {:>7} samples  {:>5.1}%",
            class.executed,
            class.instructions,
            class.samples,
            pct(class.samples)
        );
    }
    let _ = writeln!(out, "  hottest instructions:");
    for line in profile.hottest(hottest) {
        let stalls: Vec<String> = line
            .top_stalls(3)
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(
            out,
            "  {:>5}  {:>5.1}%  {:>10} x  {:<48}  {}",
            line.index,
            pct(line.samples),
            line.executed,
            truncate(&line.source, 48),
            stalls.join(", ")
        );
    }
    out
}

fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let kept: String = text.chars().take(width - 1).collect();
    format!("{kept}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 250 consecutive rows of a real capture of hopper at 2,32/8,2048,128 on an H200 (the end of an
    /// item's code and the start of the steady key tile), kept as a fixture.
    const FIXTURE: &str = include_str!("../tests/fixtures/h200_hopper_source_sass.csv");
    /// Its rows and samples as Python's csv module counts them.
    const FIXTURE_ROWS: usize = 250;
    const FIXTURE_SAMPLES: u64 = 7218;

    #[test]
    fn a_real_source_page_parses_into_instructions_and_classes() {
        let profiles = parse_source(FIXTURE).unwrap();
        assert_eq!(profiles.len(), 1);
        let profile = &profiles[0];
        assert_eq!(profile.kernel, "attn_fwd");
        let lines = &profile.lines;
        assert_eq!(lines.len(), FIXTURE_ROWS);
        assert_eq!(profile.total_samples(), FIXTURE_SAMPLES);
        // The classes partition the instructions that ran and their samples.
        let classes = profile.classes();
        let ran = lines.iter().filter(|l| l.executed > 0).count();
        assert_eq!(classes.iter().map(|c| c.instructions).sum::<usize>(), ran);
        assert_eq!(
            classes.iter().map(|c| c.samples).sum::<u64>(),
            profile.total_samples()
        );
        assert!(classes.windows(2).all(|w| w[0].samples >= w[1].samples));
        // The steady key tile (once per tile and warp: 1024 items x 8 warps x 12 tiles) holds most
        // of these rows' samples, the item's own code (once per item and warp) the rest.
        assert_eq!(
            classes
                .iter()
                .map(|c| (c.executed, c.instructions))
                .collect::<Vec<_>>(),
            [(98_304, 180), (8_192, 70)]
        );
        // The hottest: a wait for the tile's wgmma (wait_group 1), a barrier stall.
        let hottest = profile.hottest(3);
        assert!(
            hottest[0]
                .source
                .starts_with("WARPGROUP.DEPBAR.LE gsb0, 0x1"),
            "{:?}",
            hottest[0]
        );
        assert_eq!(hottest[0].samples, 1689);
        assert_eq!(hottest[0].opcode(), "WARPGROUP");
        assert_eq!(hottest[0].top_stalls(1)[0].0, "barrier");
        assert!(hottest.windows(2).all(|w| w[0].samples >= w[1].samples));
        let text = render_source(profile, 3, 5);
        assert!(text.starts_with("attn_fwd: "), "{text}");
        assert!(text.contains("98304 x"), "{text}");
    }

    #[test]
    fn opcodes_drop_predicates_and_modifiers() {
        let line = |source: &str| SourceLine {
            index: 0,
            address: String::new(),
            source: source.to_string(),
            samples: 0,
            executed: 0,
            stalls: BTreeMap::new(),
        };
        assert_eq!(line("@!P0  BRA 0x7f58877aea00").opcode(), "BRA");
        assert_eq!(
            line("HGMMA.64x160x16.F32 R24, gdesc[UR20], R24, gsb0").opcode(),
            "HGMMA"
        );
        assert_eq!(line("").opcode(), "");
    }

    #[test]
    fn pages_without_a_source_header_are_refused_by_name() {
        let err = parse_source("\"ID\",\"Process ID\"\n").unwrap_err();
        assert!(err.to_string().contains("source page"), "{err}");
        assert!(!is_source_page("\"ID\",\"Process ID\"\n"));
        assert!(is_source_page(FIXTURE));
    }

    #[test]
    fn a_short_row_is_a_malformed_row_with_its_line() {
        let mut text: String = FIXTURE
            .lines()
            .take_while(|l| !l.starts_with("\"0x"))
            .collect::<Vec<_>>()
            .join("\n");
        text.push_str("\n\"0x1\",\"NOP\",\"1\"\n");
        let err = parse_source(&text).unwrap_err();
        assert!(matches!(err, NcuError::MalformedRow { .. }), "{err}");
    }
}
