//! `cargo xtask stats`.

/// Arguments of `cargo xtask stats`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the subcommand; returns the process exit code.
pub fn run(_args: Args) -> anyhow::Result<u8> {
    anyhow::bail!("`cargo xtask stats` is not implemented yet")
}
