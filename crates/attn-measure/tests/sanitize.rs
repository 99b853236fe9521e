//! compute-sanitizer: its reports read into findings (CPU, on fixture texts in the documented
//! format), and on the GPU: a planted out-of-bounds write and a planted shared-memory race
//! (`fixtures/sanitize/planted.cu`) are each found by their tool, naming the kernel, and every
//! registered implementation is clean under memcheck and racecheck at small shapes.
//!
//! The GPU tests run compute-sanitizer on xtask's hidden target mode (the bundle's xtask on a GPU
//! machine, else cargo's build), exactly as `cargo xtask sanitize` does: under memcheck, the test
//! executable re-running itself through libtest failed without a finding on the H100. Run on a GPU
//! machine with `--include-ignored` (compute-sanitizer on PATH or in /usr/local/cuda/bin).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use attn_evidence::ShapeSpec;
use attn_kernels::{Candidate, Config, Gpu};
use attn_measure::profile::Target;
use attn_measure::sanitize::{self, Report, Tool};

const PLANTED: &str = include_str!("fixtures/sanitize/planted.cu");

fn fixture(name: &str) -> &'static str {
    match name {
        "memcheck-oob" => include_str!("fixtures/sanitize/memcheck-oob.txt"),
        "racecheck-race" => include_str!("fixtures/sanitize/racecheck-race.txt"),
        "racecheck-hazard-report" => include_str!("fixtures/sanitize/racecheck-hazard-report.txt"),
        "memcheck-clean" => include_str!("fixtures/sanitize/memcheck-clean.txt"),
        "racecheck-clean" => include_str!("fixtures/sanitize/racecheck-clean.txt"),
        "racecheck-clean-cuda13" => include_str!("fixtures/sanitize/racecheck-clean-cuda13.txt"),
        "memcheck-old-format" => include_str!("fixtures/sanitize/memcheck-old-format.txt"),
        "synccheck-divergent" => include_str!("fixtures/sanitize/synccheck-divergent.txt"),
        "initcheck-uninit" => include_str!("fixtures/sanitize/initcheck-uninit.txt"),
        "target-failed" => include_str!("fixtures/sanitize/target-failed.txt"),
        "sanitizer-error" => include_str!("fixtures/sanitize/sanitizer-error.txt"),
        other => panic!("no fixture {other}"),
    }
}

fn lines(report: &Report) -> Vec<String> {
    report.findings.iter().map(ToString::to_string).collect()
}

#[test]
fn an_out_of_bounds_write_is_one_finding_with_its_count() {
    let report = sanitize::parse(Tool::Memcheck, fixture("memcheck-oob"));
    assert_eq!(report.errors, Some(4));
    assert!(!report.clean());
    assert_eq!(
        lines(&report),
        [
            "memcheck: Invalid __global__ write of size 2 bytes in attn_fwd at attn_fwd+0x9d0 (x3): \
             by thread (0,0,0) in block (49,0,0), Address 0x7f3a1e006280 is out of bounds, and is 1 \
             bytes after the nearest allocation at 0x7f3a1e000000 of size 25216 bytes",
            "memcheck: CUDA API error at cuStreamSynchronize: CUDA_ERROR_LAUNCH_FAILED (error 719) \
             due to \"unspecified launch failure\" on CUDA API call to cuStreamSynchronize.",
        ]
    );
    assert_eq!(report.notes, ["Target application returned an error"]);
    assert_eq!(report.verdict(), "memcheck: 2 findings (4 errors)");
}

#[test]
fn races_name_both_accesses_and_their_severity() {
    let report = sanitize::parse(Tool::Racecheck, fixture("racecheck-race"));
    assert_eq!(report.errors, Some(2));
    let kinds: Vec<(&str, Option<&str>, Option<&str>)> = report
        .findings
        .iter()
        .map(|f| (f.kind.as_str(), f.kernel.as_deref(), f.location.as_deref()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("Write-Read race", Some("attn_fwd"), Some("attn_fwd+0x3c0")),
            ("Write-Read race", Some("attn_fwd"), Some("attn_fwd+0x3d0")),
            (
                "Read-Write race (warning)",
                Some("attn_fwd"),
                Some("planted.cu:52")
            ),
        ]
    );
    assert_eq!(
        report.findings[0].message,
        "Write access at attn_fwd+0x3c0, and Read access at attn_fwd+0x5f0 [6144 hazards], \
         and Read access at attn_fwd+0x8a0 [6144 hazards]"
    );
    assert_eq!(report.verdict(), "racecheck: 3 findings (2 errors)");
}

#[test]
fn the_older_hazard_report_is_read_too() {
    let report = sanitize::parse(Tool::Racecheck, fixture("racecheck-hazard-report"));
    assert_eq!(
        lines(&report),
        [
            "racecheck: Potential WAR hazard in sumKernel at raceWAR.cu:18 (x2): at __shared__ 0x0 \
             in block (0, 0, 0), Read Thread (0, 0, 0) at 0x000000e8 in \
             raceWAR.cu:18:sumKernel(int*, int*), Write Thread (1, 0, 0) at 0x00000130 in \
             raceWAR.cu:21:sumKernel(int*, int*)",
            "racecheck: Potential RAW hazard (warning) in scan at warp_scan.cuh:146: at __shared__ \
             0xf4 in block (0, 0, 0), Write Thread (24, 0, 0) at 0x00001ab0 in \
             warp_scan.cuh:146:scan(int*), Read Thread (25, 0, 0) at 0x00001ac0 in \
             warp_scan.cuh:151:scan(int*)",
        ]
    );
}

#[test]
fn clean_reports_are_clean() {
    for (tool, name) in [
        (Tool::Memcheck, "memcheck-clean"),
        (Tool::Racecheck, "racecheck-clean"),
        // As compute-sanitizer 2025 (CUDA 13.0) printed it on the H100.
        (Tool::Racecheck, "racecheck-clean-cuda13"),
    ] {
        let report = sanitize::parse(tool, fixture(name));
        assert!(report.clean(), "{name}: {report:?}");
        assert_eq!(report.verdict(), format!("{tool}: clean"));
    }
    // No summary: the sanitizer did not finish, which is not clean.
    assert!(!sanitize::parse(Tool::Memcheck, "========= COMPUTE-SANITIZER\n").clean());
}

#[test]
fn older_formats_and_the_other_tools_are_read() {
    let old = sanitize::parse(Tool::Memcheck, fixture("memcheck-old-format"));
    assert_eq!(
        lines(&old),
        [
            "memcheck: Invalid __global__ read of size 8 bytes in vector_projection<double> at \
             /home/u/src/my_helper.cuh:75: by thread (9,0,0) in block (0,0,0), Address 0x000370e8 \
             is out of bounds",
            "memcheck: Invalid __shared__ write of size 4 bytes in raft::lap::kernel_dualUpdate<int, \
             float> at raft::lap::kernel_dualUpdate<int, float>+0xdd0: by thread (2,0,0) in block \
             (0,0,0), Address 0x1008 is out of bounds",
            "memcheck: Warp Illegal Address in attn_fwd at attn_fwd+0x1f0: by thread (0,0,0) in \
             block (3,1,0)",
        ]
    );
    let sync = sanitize::parse(Tool::Synccheck, fixture("synccheck-divergent"));
    assert_eq!(
        lines(&sync),
        [
            "synccheck: Barrier error detected. Divergent thread(s) in block in attn_fwd at \
          planted.cu:61: by thread (32,0,0) in block (0,0,0)"
        ]
    );
    let init = sanitize::parse(Tool::Initcheck, fixture("initcheck-uninit"));
    assert_eq!(init.findings.len(), 1);
    assert_eq!(
        init.findings[0].kind,
        "Uninitialized __global__ memory read of size 2 bytes"
    );
    assert_eq!(init.findings[0].kernel.as_deref(), Some("attn_fwd"));
}

/// A stand-in for compute-sanitizer: prints `text` and exits with `code`.
fn fake_sanitizer(text: &str, code: i32) -> Command {
    let mut command = Command::new("sh");
    command.args([
        "-c",
        "printf '%s' \"$1\"; exit $2",
        "sh",
        text,
        &code.to_string(),
    ]);
    command
}

#[test]
fn a_run_is_findings_clean_or_could_not_run() {
    let limit = Duration::from_secs(20);
    // Findings stand even though the fault ended the target.
    let oob = sanitize::run(
        fake_sanitizer(fixture("memcheck-oob"), 2),
        Tool::Memcheck,
        limit,
    );
    assert_eq!(oob.unwrap().findings.len(), 2);
    let clean = sanitize::run(
        fake_sanitizer(fixture("racecheck-clean"), 0),
        Tool::Racecheck,
        limit,
    );
    assert!(clean.unwrap().clean());
    // A target that failed without a finding says why, in one line.
    let err = sanitize::run(
        fake_sanitizer(fixture("target-failed"), 2),
        Tool::Memcheck,
        limit,
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "compute-sanitizer memcheck: the target failed without a finding: NVRTC could not compile \
         mma.cu: mma.cu(88): error: identifier \"BLOCK_Q\" is undefined"
    );
    let err = sanitize::run(
        fake_sanitizer(fixture("sanitizer-error"), 1),
        Tool::Racecheck,
        limit,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.ends_with("Error: Target application terminated before first instrumented API call"),
        "{err}"
    );
    // Counted errors this parser does not know are a finding, never clean.
    let odd = "========= Something new happened\n========= ERROR SUMMARY: 1 error\n";
    let report = sanitize::run(fake_sanitizer(odd, 0), Tool::Memcheck, limit).unwrap();
    assert_eq!(report.findings[0].kind, "unrecognised report");
    let mut slow = Command::new("sh");
    slow.args(["-c", "sleep 20"]);
    let err = sanitize::run(slow, Tool::Memcheck, Duration::from_millis(200))
        .unwrap_err()
        .to_string();
    assert!(err.contains("did not finish within"), "{err}");
}

fn planted(plant: i64) -> (tempfile::TempDir, Candidate) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("planted.cu");
    std::fs::write(&path, PLANTED).unwrap();
    let defines = Config::from_pairs(&[("PLANT", plant), ("BLOCK_M", 4), ("NUM_WARPS", 4)]);
    let candidate = Candidate::from_file(&path, None, defines).unwrap();
    (dir, candidate)
}

#[test]
fn every_planted_sanitizer_kernel_compiles_with_nvrtc() {
    // CPU only (NVRTC; `cargo xtask test` provides it).
    use attn_kernels::compile::{compile, Arch};
    let arch = Arch("compute_90a".into());
    for plant in 0..=2 {
        let (_dir, candidate) = planted(plant);
        for head_dim in [64, 128] {
            let variant = candidate
                .variant(
                    attn_oracle::DType::F16,
                    head_dim,
                    &arch,
                    &attn_kernels::Limits::H100,
                )
                .unwrap();
            compile(&variant.request).unwrap_or_else(|e| panic!("PLANT={plant} D={head_dim}: {e}"));
        }
    }
}

/// The xtask binary, whose hidden `target` mode compute-sanitizer runs (as `xtask sanitize`
/// does): the bundle's on a GPU machine, else cargo's build. Tests start in this crate's folder.
fn xtask() -> std::path::PathBuf {
    [
        "../../target/bundle/xtask",
        "../../target/release/xtask",
        "../../target/debug/xtask",
    ]
    .iter()
    .map(Path::new)
    .find(|p| p.is_file())
    .unwrap_or_else(|| panic!("no xtask binary: build it (cargo build -p xtask) or bundle"))
    .canonicalize()
    .unwrap()
}

/// `tool` on `target`, run by xtask's target mode.
fn sanitized(target: &Target, tool: Tool) -> Report {
    let sanitizer = sanitize::find(Path::new(sanitize::SANITIZER)).unwrap();
    let args = vec!["target".to_string(), target.to_json()];
    let command = sanitize::command(&sanitizer, tool, &xtask(), &args);
    let started = std::time::Instant::now();
    let report = sanitize::run(command, tool, Duration::from_secs(300))
        .unwrap_or_else(|e| panic!("{tool} on {}: {e}", target.to_json()));
    println!(
        "  {} ({:.1} s)",
        report.verdict(),
        started.elapsed().as_secs_f64()
    );
    for finding in &report.findings {
        println!("    {finding}");
    }
    report
}

fn shapes(texts: &[&str]) -> Vec<ShapeSpec> {
    texts.iter().map(|s| s.parse().unwrap()).collect()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn planted_defects_are_found_by_their_tool_naming_the_kernel() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    // 197 rows in blocks of 4: the last block's rows 197..199 of the last head are past O's end
    // (384 bytes, inside the allocation's 512-byte alignment even without padding).
    let shape = shapes(&["1,1,197,64"]);
    let (_dir, oob) = planted(1);
    let report = sanitized(
        &Target::new(&oob, shape.clone(), 0).unwrap(),
        Tool::Memcheck,
    );
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.kind.starts_with("Invalid __global__ write")
                && f.kernel.as_deref() == Some("attn_fwd")),
        "memcheck missed the out-of-bounds write: {report:?}"
    );
    let (_dir, race) = planted(2);
    let report = sanitized(
        &Target::new(&race, shape.clone(), 0).unwrap(),
        Tool::Racecheck,
    );
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.kind.contains("race") && f.kernel.as_deref() == Some("attn_fwd")),
        "racecheck missed the shared-memory race: {report:?}"
    );
    // The same kernel without a defect is clean under both: the findings are the defects'.
    let (_dir, correct) = planted(0);
    for tool in [Tool::Memcheck, Tool::Racecheck] {
        let report = sanitized(&Target::new(&correct, shape.clone(), 0).unwrap(), tool);
        assert!(
            report.clean(),
            "the correct kernel is not clean: {report:?}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_registered_implementation_is_clean_under_memcheck_and_racecheck() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let arch = Gpu::open(0).expect("a CUDA GPU").arch();
    let mut dirty = Vec::new();
    for implementation in attn_kernels::registry() {
        if implementation.arch.is_some_and(|a| a != arch.0) {
            println!(
                "{}: skipped (compiles for {:?} only)",
                implementation.name, implementation.arch
            );
            continue;
        }
        let mut texts = Vec::new();
        for head_dim in [64, 128] {
            if implementation.check_head_dim(head_dim).is_ok() {
                texts.push(format!("2,2,197,{head_dim}"));
                texts.push(format!("2,2,197,{head_dim} causal"));
            }
        }
        texts.push(format!(
            "1,2,100,197,{} causal bf16",
            if implementation.check_head_dim(64).is_ok() {
                64
            } else {
                128
            }
        ));
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let candidate = Candidate::registered(implementation.name, Config::default()).unwrap();
        let target = Target::new(&candidate, shapes(&texts), 0).unwrap();
        println!("{} on {texts:?}", implementation.name);
        for tool in [Tool::Memcheck, Tool::Racecheck] {
            let report = sanitized(&target, tool);
            if !report.clean() {
                dirty.push(format!("{}: {}", implementation.name, report.verdict()));
                dirty.extend(report.findings.iter().map(|f| format!("  {f}")));
            }
        }
    }
    assert!(dirty.is_empty(), "not clean:\n{}", dirty.join("\n"));
}

/// hopper's persistent loop with two Q tiles (the tuning of every full grid), whose copy warp stores
/// each whole item's O with TMA from the Q tile while the consumers store a partial item's
/// themselves: at 197 rows a head's first row block is whole (the copy warp's) and its second is
/// not (the consumers'), and a packed batch's whole and partial tiles meet the next sequence's
/// rows. Under memcheck and racecheck at both head dims, causal and grouped too.
#[test]
#[ignore = "needs a CUDA GPU (Hopper, sm_90)"]
fn hopper_copy_warp_is_clean_under_memcheck_and_racecheck() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let two_q_tiles: Config = "SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2".parse().unwrap();
    let candidate = Candidate::registered("hopper", two_q_tiles).unwrap();
    let mut texts = Vec::new();
    for head_dim in [64, 128] {
        texts.push(format!("2,2,197,{head_dim}"));
        texts.push(format!("1,4/2,197,{head_dim} causal bf16"));
        texts.push(format!("varlen=197,0,128,77 H=4/2 D={head_dim}"));
    }
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let target = Target::new(&candidate, shapes(&texts), 0).unwrap();
    for tool in [Tool::Memcheck, Tool::Racecheck] {
        let report = sanitized(&target, tool);
        assert!(
            report.clean(),
            "hopper with two Q tiles under {tool:?}: {}\n{:?}",
            report.verdict(),
            report.findings
        );
    }
}

/// The backward kernels (all three stages, from the GPU reference's O and LSE) under memcheck and
/// racecheck, dense, causal, grouped and ragged: the "racecheck clean".
#[test]
#[ignore = "needs a CUDA GPU"]
fn every_backward_implementation_is_clean_under_memcheck_and_racecheck() {
    use attn_measure::backward::BackwardCandidate;
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let mut dirty = Vec::new();
    for implementation in attn_kernels::backward::backward_registry() {
        let texts = [
            "2,2,197,64",
            "2,2,197,128 causal",
            "1,4/2,100,197,64 causal bf16",
        ];
        let candidate =
            BackwardCandidate::registered(implementation.name, Config::default()).unwrap();
        let target = Target::backward(&candidate, shapes(&texts), 1);
        println!("{} on {texts:?}", implementation.name);
        for tool in [Tool::Memcheck, Tool::Racecheck] {
            let report = sanitized(&target, tool);
            println!("  {}", report.verdict());
            if !report.clean() {
                dirty.push(format!("{}: {}", implementation.name, report.verdict()));
                dirty.extend(report.findings.iter().map(|f| format!("  {f}")));
            }
        }
    }
    assert!(dirty.is_empty(), "not clean:\n{}", dirty.join("\n"));
}
