//! `cargo xtask ncu`.

/// Arguments of `cargo xtask ncu`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the subcommand; returns the process exit code.
pub fn run(_args: Args) -> anyhow::Result<u8> {
    anyhow::bail!("`cargo xtask ncu` is not implemented yet")
}
