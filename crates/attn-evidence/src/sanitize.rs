//! `cargo xtask sanitize` (and `gate --sanitize`): what compute-sanitizer found in a candidate.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::store::{evidence_path, write_json_atomic};
use crate::{EvidenceError, Implementation, Provenance, ShapeSpec};

/// One tool of compute-sanitizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SanitizeTool {
    /// Out-of-bounds and misaligned accesses, hardware exceptions.
    Memcheck,
    /// Shared-memory data races.
    Racecheck,
    /// Invalid uses of barriers (`__syncthreads` in divergent code...).
    Synccheck,
    /// Reads of uninitialised global memory.
    Initcheck,
}

impl SanitizeTool {
    /// Every tool, in the order above.
    pub const ALL: [SanitizeTool; 4] = [
        SanitizeTool::Memcheck,
        SanitizeTool::Racecheck,
        SanitizeTool::Synccheck,
        SanitizeTool::Initcheck,
    ];

    /// The name compute-sanitizer's `--tool` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            SanitizeTool::Memcheck => "memcheck",
            SanitizeTool::Racecheck => "racecheck",
            SanitizeTool::Synccheck => "synccheck",
            SanitizeTool::Initcheck => "initcheck",
        }
    }
}

impl fmt::Display for SanitizeTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SanitizeTool {
    type Err = EvidenceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        SanitizeTool::ALL
            .into_iter()
            .find(|t| t.as_str() == text)
            .ok_or_else(|| EvidenceError::SanitizeTool(text.to_owned()))
    }
}

/// One problem compute-sanitizer reported: the reports of one kind at one place, merged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SanitizeFinding {
    /// The tool that reported it.
    pub tool: SanitizeTool,
    /// What it is: the report's headline (`Invalid __global__ write of size 2 bytes`,
    /// `Barrier error detected. Divergent thread(s) in block`), `Write-Read race` (with
    /// ` (warning)` for racecheck's warnings) or `CUDA API error`.
    pub kind: String,
    /// The kernel it happened in, parameters left out (`attn_fwd`); absent for an API error.
    pub kernel: Option<String>,
    /// Where: `file:line` when the kernel has line information, else `kernel+0xOFFSET` (the
    /// instruction's offset); the API call for an API error.
    pub location: Option<String>,
    /// The rest of the first report: threads, address and allocation, the other access of a race.
    pub message: String,
    /// How many reports were merged into this finding (one per thread, or per access pair).
    pub count: u64,
}

impl fmt::Display for SanitizeFinding {
    /// One line: `memcheck: Invalid __global__ write of size 2 bytes in attn_fwd at
    /// attn_fwd+0x1b0 (x96): by thread (0,0,0) in block (49,1,0), Address 0x... is out of bounds`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.tool, self.kind)?;
        if let Some(kernel) = &self.kernel {
            write!(f, " in {kernel}")?;
        }
        if let Some(location) = &self.location {
            write!(f, " at {location}")?;
        }
        if self.count > 1 {
            write!(f, " (x{})", self.count)?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

/// `evidence/sanitize/*.json`: one compute-sanitizer tool run on a candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SanitizeRun {
    /// [`crate::SCHEMA_VERSION`] of the writer.
    pub schema: u32,
    /// Always [`crate::EvidenceKind::Sanitize`].
    pub kind: crate::EvidenceKind,
    /// Machine, software and commit.
    pub provenance: Provenance,
    /// The implementation checked.
    pub candidate: Implementation,
    /// The shapes it was launched on (once each), small so that the tools finish quickly.
    pub shapes: Vec<ShapeSpec>,
    /// The tool.
    pub tool: SanitizeTool,
    /// What it found, merged by kind, kernel and location.
    pub findings: Vec<SanitizeFinding>,
    /// compute-sanitizer's own count (`ERROR SUMMARY: N errors`).
    pub errors: u64,
    /// No finding and an error count of zero.
    pub clean: bool,
}

impl SanitizeRun {
    /// Its file under `root`: `sanitize/<date>-<gpu>-<rev7>-<tool>.json` (the tool in the name, as
    /// `gate --sanitize` writes two runs in the same second).
    pub fn path_in(&self, root: &Path) -> PathBuf {
        let p = &self.provenance;
        let path = evidence_path(root, "sanitize", &p.date, &p.gpu, &p.git_rev);
        path.with_file_name(format!(
            "{}-{}.json",
            path.file_stem().unwrap_or_default().to_string_lossy(),
            self.tool
        ))
    }

    /// Writes it atomically to [`SanitizeRun::path_in`] `root`; returns the path.
    pub fn write_in(&self, root: &Path) -> Result<PathBuf, EvidenceError> {
        let path = self.path_in(root);
        write_json_atomic(&path, self)?;
        Ok(path)
    }

    /// Reads one back, refusing another kind of file; errors name the file.
    pub fn read(path: &Path) -> Result<SanitizeRun, EvidenceError> {
        <SanitizeRun as crate::Kinded>::read(path)
    }
}

impl crate::Kinded for SanitizeRun {
    const KIND: crate::EvidenceKind = crate::EvidenceKind::Sanitize;

    fn kind(&self) -> crate::EvidenceKind {
        self.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_parse_and_findings_print_on_one_line() {
        for tool in SanitizeTool::ALL {
            assert_eq!(tool.as_str().parse::<SanitizeTool>().unwrap(), tool);
        }
        let err = "leakcheck".parse::<SanitizeTool>().unwrap_err().to_string();
        assert!(
            err.contains("leakcheck") && err.contains("racecheck"),
            "{err}"
        );
        let finding = SanitizeFinding {
            tool: SanitizeTool::Memcheck,
            kind: "Invalid __global__ write of size 2 bytes".into(),
            kernel: Some("attn_fwd".into()),
            location: Some("attn_fwd+0x1b0".into()),
            message: "Address 0x7f is out of bounds".into(),
            count: 96,
        };
        assert_eq!(
            finding.to_string(),
            "memcheck: Invalid __global__ write of size 2 bytes in attn_fwd at attn_fwd+0x1b0 (x96): Address 0x7f is out of bounds"
        );
        let api = SanitizeFinding {
            kind: "CUDA API error".into(),
            kernel: None,
            location: Some("cuStreamSynchronize".into()),
            message: String::new(),
            count: 1,
            ..finding
        };
        assert_eq!(
            api.to_string(),
            "memcheck: CUDA API error at cuStreamSynchronize"
        );
    }

    #[test]
    fn a_run_round_trips_through_its_file_named_by_tool() {
        let dir = tempfile::tempdir().unwrap();
        let run = SanitizeRun {
            schema: crate::SCHEMA_VERSION,
            kind: crate::EvidenceKind::Sanitize,
            provenance: Provenance {
                gpu: "NVIDIA H100 80GB HBM3".into(),
                gpu_uuid: None,
                sm_count: None,
                driver: None,
                cuda_driver_api: None,
                nvrtc: None,
                pytorch: None,
                torch_cuda: None,
                cudnn: None,
                flashinfer: None,
                git_rev: "1f367d0c0ffee".into(),
                git_dirty: false,
                date: "2025-11-22T14:19:00Z".into(),
                host: None,
                tool: "attn 0.1.0".into(),
                command: vec![],
                clocks: Default::default(),
                max_sm_mhz: None,
                peak_tflops: None,
                memory: None,
            },
            candidate: Implementation::named("mma"),
            shapes: vec!["1,2,197,64 causal".parse().unwrap()],
            tool: SanitizeTool::Racecheck,
            findings: vec![],
            errors: 0,
            clean: true,
        };
        let path = run.write_in(dir.path()).unwrap();
        assert!(path.ends_with(
            "sanitize/2025-11-22T14-19-00Z-nvidia-h100-80gb-hbm3-1f367d0-racecheck.json"
        ));
        assert_eq!(SanitizeRun::read(&path).unwrap(), run);
        // Readers of gate and bench files pass it by.
        assert!(crate::load_dir(dir.path()).unwrap().is_empty());
    }
}
