//! `cargo xtask test`: makes sure NVRTC, ptxas and the CUDA headers are available (installing NVIDIA's
//! pinned wheels when no toolkit is found), then runs the whole workspace test suite, kernel compile
//! checks included. No GPU needed: GPU tests are `#[ignore]`d and run from the bundle.

use std::process::Command;

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
