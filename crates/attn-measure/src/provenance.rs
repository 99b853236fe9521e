//! Provenance of a measuring run: GPU, driver, libraries, git revision, date, command, clocks.

use attn_evidence::{utc_now_rfc3339, ClockReadings, Provenance};
use attn_kernels::telemetry::ClockReading;
use attn_kernels::Gpu;

use crate::sdpa::SdpaInfo;

fn nvidia_smi(query: &str) -> Option<String> {
    let out = std::process::Command::new("nvidia-smi")
        .args([&format!("--query-gpu={query}"), "--format=csv,noheader"])
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string()
    })
}

/// Provenance for a run of this process on `gpu` from the code at `git_rev` (`git_dirty`: with
/// uncommitted changes), with the clock readings taken around it.
pub fn collect(
    gpu: &Gpu,
    torch: Option<&SdpaInfo>,
    before: Option<ClockReading>,
    after: Option<ClockReading>,
    git_rev: String,
    git_dirty: bool,
) -> Provenance {
    let info = gpu.info();
    Provenance {
        gpu: info.name.clone(),
        gpu_uuid: Some(info.uuid.clone()),
        sm_count: Some(info.sm_count),
        driver: nvidia_smi("driver_version"),
        cuda_driver_api: Some(info.driver_cuda.clone()),
        nvrtc: attn_kernels::toolkit::nvrtc_version().ok(),
        pytorch: torch.map(|t| t.torch.clone()),
        torch_cuda: torch.map(|t| t.cuda.clone()),
        cudnn: torch.map(|t| t.cudnn.clone()),
        git_rev,
        git_dirty,
        date: utc_now_rfc3339(),
        host: std::fs::read_to_string("/etc/hostname")
            .ok()
            .map(|h| h.trim().to_string()),
        tool: format!("attn {}", env!("CARGO_PKG_VERSION")),
        command: std::env::args().collect(),
        clocks: ClockReadings {
            sm_mhz_before: before.map(|c| c.sm_mhz),
            sm_mhz_after: after.map(|c| c.sm_mhz),
            temp_c_before: before.map(|c| c.temp_c),
            temp_c_after: after.map(|c| c.temp_c),
        },
        max_sm_mhz: Some(info.max_sm_mhz),
        peak_tflops: peak_tflops(gpu),
    }
}

/// A new seed for a run that was given none (recorded in its evidence for replay).
pub fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

/// The device's dense fp16/bf16 tensor peak from its properties (SMs × max SM clock × FLOP per
/// clock per SM), when its architecture's rate is known.
pub fn peak_tflops(gpu: &Gpu) -> Option<f64> {
    let info = gpu.info();
    crate::decide::peak_tflops(info.sm_count, info.max_sm_mhz, info.capability)
}
