//! `cargo xtask report`.

/// Arguments of `cargo xtask report`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the subcommand; returns the process exit code.
pub fn run(_args: Args) -> anyhow::Result<u8> {
    anyhow::bail!("`cargo xtask report` is not implemented yet")
}
