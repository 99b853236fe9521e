//! `cargo xtask bundle`: release builds of `xtask` and of every test executable, in
//! `target/bundle/`, with `run-gpu-tests.sh`, for a GPU machine that has no Rust toolchain.
//!
//! The bundle is a folder to copy (or carry) into a checkout of the same revision at
//! `target/bundle/`: each test runs from its crate's folder, as `cargo test` would run it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

/// Arguments of `cargo xtask bundle`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to put the bundle (relative to the workspace root).
    #[arg(long, default_value = "target/bundle")]
    pub out: PathBuf,
    /// Keep only the test executables whose name (`<crate>-<kind>-<target>`, e.g.
    /// `attn-kernels-test-gpu`) contains one of these, comma-separated: a smaller bundle to copy
    /// when only some tests will run. xtask itself is always there.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
}

#[derive(Debug)]
struct TestExe {
    /// `<package>-<target>`, the file name inside `tests/`.
    name: String,
    /// The crate folder, relative to the workspace root: the working directory of the test.
    crate_dir: PathBuf,
    path: PathBuf,
}

/// Runs the subcommand; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let workspace = crate::workspace_root();
    let out = workspace.join(&args.out);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Stripped binaries keep the bundle small enough to travel.
    let release_env = [
        ("CARGO_PROFILE_RELEASE_STRIP", "true"),
        ("CARGO_PROFILE_RELEASE_DEBUG", "false"),
    ];

    let status = Command::new(&cargo)
        .current_dir(&workspace)
        .envs(release_env)
        .args(["build", "--release", "--package", "xtask"])
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("cargo build --release --package xtask failed");
    }
    let output = Command::new(&cargo)
        .current_dir(&workspace)
        .envs(release_env)
        .args([
            "test",
            "--release",
            "--workspace",
            "--no-run",
            "--message-format=json",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo test --no-run")?;
    if !output.status.success() {
        bail!("cargo test --release --no-run failed");
    }
    let tests = selected(
        test_executables(&String::from_utf8_lossy(&output.stdout), &workspace)?,
        &args.only,
    )?;

    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    std::fs::create_dir_all(out.join("tests"))?;
    // Where cargo put it: CARGO_TARGET_DIR (relative to the workspace) when set.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace.join("target"), |dir| workspace.join(dir));
    std::fs::copy(target.join("release/xtask"), out.join("xtask")).context("copying xtask")?;
    for test in &tests {
        std::fs::copy(&test.path, out.join("tests").join(&test.name))
            .with_context(|| format!("copying {}", test.path.display()))?;
    }
    let script = out.join("run-gpu-tests.sh");
    std::fs::write(&script, run_script(&tests, &args.out))?;
    set_executable(&script)?;
    let size: u64 = walk_size(&out);
    println!(
        "bundle: {} ({} test executables + xtask, {:.1} MiB); run {}/run-gpu-tests.sh on the GPU machine",
        out.display(),
        tests.len(),
        size as f64 / (1024.0 * 1024.0),
        args.out.display()
    );
    Ok(0)
}

/// The test executables whose name contains one of `only` (all of them when it is empty); none
/// is an error naming the filter.
fn selected(mut tests: Vec<TestExe>, only: &[String]) -> anyhow::Result<Vec<TestExe>> {
    if only.is_empty() {
        return Ok(tests);
    }
    tests.retain(|t| only.iter().any(|part| t.name.contains(part.as_str())));
    if tests.is_empty() {
        bail!("--only {} matches no test executable", only.join(","));
    }
    Ok(tests)
}

fn test_executables(messages: &str, workspace: &Path) -> anyhow::Result<Vec<TestExe>> {
    let mut tests = Vec::new();
    for line in messages.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" || msg["profile"]["test"] != true {
            continue;
        }
        let Some(exe) = msg["executable"].as_str() else {
            continue;
        };
        let package = msg["package_id"].as_str().unwrap_or_default();
        let manifest = PathBuf::from(msg["manifest_path"].as_str().unwrap_or_default());
        let crate_dir = manifest
            .parent()
            .and_then(|d| d.strip_prefix(workspace).ok())
            .map(Path::to_path_buf);
        let Some(crate_dir) = crate_dir else {
            bail!("test executable {exe} of {package} is outside the workspace");
        };
        let package_name = crate_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let target = msg["target"]["name"].as_str().unwrap_or("test");
        let kind = msg["target"]["kind"][0].as_str().unwrap_or("test");
        tests.push(TestExe {
            name: format!("{package_name}-{kind}-{target}"),
            crate_dir,
            path: exe.into(),
        });
    }
    tests.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(tests)
}

fn run_script(tests: &[TestExe], bundle_rel: &Path) -> String {
    let up = vec![".."; bundle_rel.components().count()].join("/");
    let mut s = format!(
        r#"#!/usr/bin/env bash
# Runs every test executable of the bundle, GPU tests included (--include-ignored).
# Generated by `cargo xtask bundle`; expects to sit in a checkout of the same revision.
# Extra arguments are passed to every test executable (e.g. a name filter, or --nocapture, which
# prints each failure as it happens rather than when the executable ends).
# ATTN_TEST_TIMEOUT=SECONDS bounds each executable, so that one that hangs is named as failed and
# the others still run (unset: no bound).
set -u
bundle=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$bundle/{up}" && pwd)
# Snapshot tests (insta) find their snapshots from the workspace root without cargo.
export INSTA_WORKSPACE_ROOT="$repo"
# Said first, not after a long run: the FlashAttention-3 test fails at its precondition without it.
if [ -z "${{ATTN_FA3_LIB:-}}" ]; then
  echo "note: ATTN_FA3_LIB is not set: gate_gpu's FlashAttention-3 test will fail (set it to FA3's library)"
fi
failed=()
"#
    );
    for test in tests {
        let (name, dir) = (&test.name, test.crate_dir.display());
        let _ = writeln!(
            s,
            r#"echo "== {name}"; (cd "$repo/{dir}" && timeout "${{ATTN_TEST_TIMEOUT:-0}}" "$bundle/tests/{name}" --include-ignored "$@") || failed+=("{name}")"#
        );
    }
    s.push_str("if [ ${#failed[@]} -ne 0 ]; then echo \"FAILED: ${failed[*]}\"; exit 1; fi\n");
    let _ = writeln!(s, "echo \"all {} test executables passed\"", tests.len());
    s
}

fn set_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut perms = std::fs::metadata(path)?.permissions();
    perms.set_mode(0o755);
    std::fs::set_permissions(path, perms)?;
    Ok(())
}

fn walk_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => walk_size(&e.path()),
                    _ => e.metadata().map(|m| m.len()).unwrap_or(0),
                })
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keeps_the_test_executables_it_names_and_refuses_a_filter_matching_none() {
        let exe = |name: &str| TestExe {
            name: name.into(),
            crate_dir: PathBuf::from("crates/x"),
            path: PathBuf::from(name),
        };
        let all = || {
            vec![
                exe("attn-kernels-test-gpu"),
                exe("attn-measure-test-helper"),
                exe("xtask-test-gate_gpu"),
            ]
        };
        let names = |tests: Vec<TestExe>| tests.into_iter().map(|t| t.name).collect::<Vec<_>>();
        assert_eq!(names(selected(all(), &[]).unwrap()).len(), 3);
        let only = ["test-gpu".to_string(), "gate_gpu".to_string()];
        assert_eq!(
            names(selected(all(), &only).unwrap()),
            ["attn-kernels-test-gpu", "xtask-test-gate_gpu"]
        );
        let err = selected(all(), &["nothing".to_string()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--only nothing") && !err.contains('\n'),
            "{err}"
        );
    }

    #[test]
    fn the_run_script_runs_every_executable_in_its_crate_and_says_which_failed() {
        // A fake checkout: two "test executables" (shell scripts) that print where they ran.
        let repo = tempfile::tempdir().unwrap();
        let bundle_rel = Path::new("target/bundle");
        let tests_dir = repo.path().join(bundle_rel).join("tests");
        std::fs::create_dir_all(&tests_dir).unwrap();
        let mut tests = Vec::new();
        // The third hangs: ATTN_TEST_TIMEOUT ends it, names it, and the others still run.
        for (name, code, pause) in [
            ("a-test-gpu", 0, 0),
            ("b-test-gate_gpu", 3, 0),
            ("c-test-hangs", 0, 60),
        ] {
            let crate_dir = PathBuf::from("crates").join(name);
            std::fs::create_dir_all(repo.path().join(&crate_dir)).unwrap();
            let path = tests_dir.join(name);
            std::fs::write(
                &path,
                format!(
                    "#!/bin/sh\necho \"{name} in $(basename $PWD): $*\"\nsleep {pause}\nexit {code}\n"
                ),
            )
            .unwrap();
            set_executable(&path).unwrap();
            tests.push(TestExe {
                name: name.into(),
                crate_dir,
                path,
            });
        }
        let script = repo.path().join(bundle_rel).join("run-gpu-tests.sh");
        std::fs::write(&script, run_script(&tests, bundle_rel)).unwrap();
        let started = std::time::Instant::now();
        let out = std::process::Command::new("bash")
            .arg(&script)
            .arg("a_filter")
            .env_remove("ATTN_FA3_LIB")
            .env("ATTN_TEST_TIMEOUT", "2")
            .output()
            .unwrap();
        assert!(
            started.elapsed().as_secs() < 30,
            "the hung executable was not ended"
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(text.contains("note: ATTN_FA3_LIB is not set"), "{text}");
        assert!(
            text.contains("a-test-gpu in a-test-gpu: --include-ignored a_filter"),
            "{text}"
        );
        assert!(
            text.contains("b-test-gate_gpu in b-test-gate_gpu: --include-ignored a_filter"),
            "{text}"
        );
        assert!(
            text.contains("FAILED: b-test-gate_gpu c-test-hangs")
                && !text.contains("a-test-gpu c")
                && !text.contains("FAILED: a-test-gpu"),
            "{text}"
        );
    }
}
