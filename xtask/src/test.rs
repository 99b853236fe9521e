//! `cargo xtask test`: makes sure NVRTC, ptxas and the CUDA headers are available (installing NVIDIA's
//! pinned wheels when no toolkit is found) and a headless Chromium for the report's browser test
//! (installing Debian's `chromium` with apt-get when none is found), then runs the whole workspace
//! test suite, kernel compile checks included. No GPU needed: GPU tests are `#[ignore]`d and run
//! from the bundle.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Context;

use crate::toolkit;

/// Arguments of `cargo xtask test`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Extra arguments for `cargo test` (e.g. `-- --include-ignored` on a GPU machine).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub cargo_args: Vec<String>,
}

/// Runs the subcommand; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let workspace = crate::workspace_root();
    let toolkit = toolkit::find_or_install(&workspace)?;
    println!(
        "CUDA compile toolkit: {} ({})",
        toolkit.root.display(),
        toolkit.origin
    );
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(&workspace)
        .args(["test", "--workspace"])
        .args(&args.cargo_args);
    toolkit.apply(&mut cmd);
    if ensure_chromium() {
        // The browser test then fails (one line) instead of skipping if the browser is missing.
        cmd.env("ATTN_BROWSER_TEST", "required");
    }
    let status = cmd.status().context("running cargo test")?;
    if !status.success() {
        return Ok(crate::EXIT_FAILED);
    }
    // Show what the compile tests checked: every default variant through NVRTC and ptxas, with a
    // non-zero exit on any spill.
    // Through cargo: `cargo test` may have relinked this very executable.
    let mut kernels = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    kernels.current_dir(&workspace).args([
        "run",
        "--quiet",
        "--package",
        "xtask",
        "--",
        "kernels",
        "--ptxas",
    ]);
    toolkit.apply(&mut kernels);
    let status = kernels.status().context("running xtask kernels --ptxas")?;
    Ok(if status.success() {
        0
    } else {
        crate::EXIT_FAILED
    })
}

/// Names the report's browser test looks for on `PATH` (see `crates/attn-report/tests/browser.rs`).
const BROWSERS: [&str; 4] = [
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
];

fn browser_on_path() -> bool {
    if std::env::var_os("ATTN_CHROMIUM").is_some() {
        return true;
    }
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| BROWSERS.iter().any(|name| dir.join(name).is_file()))
}

/// Makes sure a headless Chromium is there for the report's browser test, installing Debian's
/// `chromium` with apt-get when it is missing. Returns whether the test must run: a browser was
/// found, or apt-get was there to install one (if that install failed, the test fails on one line
/// rather than skipping). Without a browser or apt-get, the test skips and says so.
fn ensure_chromium() -> bool {
    if browser_on_path() {
        return true;
    }
    if !Path::new("/usr/bin/apt-get").is_file() {
        println!("no chromium and no apt-get: the report's headless-browser test will be skipped");
        return false;
    }
    println!("installing chromium with apt-get (for the report's headless-browser test)");
    let installed = apt_get(&["install", "-y", "-q", "chromium"])
        || (apt_get(&["update", "-q"]) && apt_get(&["install", "-y", "-q", "chromium"]));
    if !installed || !browser_on_path() {
        println!(
            "could not install chromium with apt-get: the report's headless-browser test will fail"
        );
    }
    true
}

/// Runs `apt-get ARGS` quietly (through `sudo -n` when not root); whether it succeeded.
fn apt_get(args: &[&str]) -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
    let mut cmd = if root {
        Command::new("apt-get")
    } else {
        let mut sudo = Command::new("sudo");
        sudo.args(["-n", "apt-get"]);
        sudo
    };
    cmd.args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
