//! Provenance of a measuring run: GPU, driver, libraries, git revision, date, command, clocks.

use attn_evidence::{utc_now_rfc3339, ClockReadings, Provenance};
use attn_kernels::telemetry::ClockReading;
use attn_kernels::Gpu;

/// The git revision and dirty flag of the code that runs: the ones this binary was built from.
/// Kernels are compiled into the binary, so the build's revision is the truth even where the
/// binary runs from another checkout (or from a bundle copied beside a stale `.git`); cargo
/// rebuilds it whenever HEAD or the index moves (`build.rs`).
pub fn git_revision() -> (String, bool) {
    (
        env!("ATTN_BUILD_GIT_REV").to_string(),
        env!("ATTN_BUILD_GIT_DIRTY") == "true",
    )
}

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

/// Provenance for a run on `gpu`, with the clock readings taken around it.
pub fn collect(
    gpu: &Gpu,
    torch: Option<&attn_measure::sdpa::SdpaInfo>,
    before: Option<ClockReading>,
    after: Option<ClockReading>,
) -> Provenance {
    let info = gpu.info();
    let (git_rev, git_dirty) = git_revision();
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

/// The device's dense fp16/bf16 tensor peak from its properties (SMs × max SM clock × FLOP per
/// clock per SM), when its architecture's rate is known.
pub fn peak_tflops(gpu: &Gpu) -> Option<f64> {
    let info = gpu.info();
    attn_measure::decide::peak_tflops(info.sm_count, info.max_sm_mhz, info.capability)
}
