//! A user's backward kernel (`--src`): its geometry and declarations from its defines, as
//! kernels/README.md's "Backward entry point" states them.

use crate::config::{Config, ConfigError};
use crate::error::{KernelError, Result};
use crate::registry::{DeviceLimits, Variants};

use super::registry::BackwardGeometry;

/// What a `--src` backward kernel's defines say: `BLOCK_M` (default 64) query rows per pre/post
/// block, `BLOCK_N` (default 64) keys per `attn_bwd` block, `NUM_WARPS` (default 4),
/// `SHARED_BYTES` (default 0) for every stage, `DETERMINISTIC` and `VARIANTS` (0 or 1, default 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceDeclarations {
    /// The stages' geometry.
    pub geometry: BackwardGeometry,
    /// `DETERMINISTIC=1`: its gradients are the same bits on every launch.
    pub deterministic: bool,
    /// `VARIANTS=1`: it reads the variant parameters (everything); else dense multi-head only.
    pub variants: Variants,
}

impl SourceDeclarations {
    /// The declarations of `defines`, checked against `limits`; one line naming `label` otherwise.
    pub fn of(defines: &Config, label: &str, limits: &DeviceLimits) -> Result<SourceDeclarations> {
        let get = |name: &str, default: i64| defines.get(name).unwrap_or(default);
        let (block_m, block_n, warps, shared) = (
            get("BLOCK_M", 64),
            get("BLOCK_N", 64),
            get("NUM_WARPS", 4),
            get("SHARED_BYTES", 0),
        );
        let invalid = |reason: String| KernelError::InvalidConfig {
            implementation: label.to_string(),
            reason: ConfigError::Rule(reason),
        };
        let threads = warps.saturating_mul(32);
        if block_m < 1
            || block_n < 1
            || warps < 1
            || threads > i64::from(limits.max_threads_per_block)
            || !(0..=i64::from(limits.max_shared_per_block)).contains(&shared)
            || block_m > i64::from(u32::MAX)
            || block_n > i64::from(u32::MAX)
        {
            return Err(invalid(format!(
                "BLOCK_M={block_m}, BLOCK_N={block_n}, NUM_WARPS={warps}, SHARED_BYTES={shared} do not fit the device"
            )));
        }
        let flag = |name: &str| match get(name, 0) {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(invalid(format!("{name}={other} must be 0 or 1"))),
        };
        let deterministic = flag("DETERMINISTIC")?;
        let variants = if flag("VARIANTS")? {
            Variants::ALL
        } else {
            Variants::NONE
        };
        Ok(SourceDeclarations {
            geometry: BackwardGeometry {
                rows_per_block: block_m as u32,
                keys_per_block: block_n as u32,
                block: threads as u32,
                main_shared: shared as u32,
                side_shared: shared as u32,
                // A `--src` kernel orders its dQ adds, if it declares DETERMINISTIC, within the ABI's
                // workspace.
                tickets: false,
            },
            deterministic,
            variants,
        })
    }
}
