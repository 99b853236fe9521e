//! Provenance of a measuring run: GPU, driver, libraries, git revision, date, command, clocks.

use attn_evidence::{utc_now_rfc3339, ClockReadings, MemoryPeak, Provenance};
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
        gpu_uuid: Some(info.uuid.clone()),
        sm_count: Some(info.sm_count),
        driver: nvidia_smi("driver_version"),
        cuda_driver_api: Some(info.driver_cuda.clone()),
        nvrtc: attn_kernels::toolkit::nvrtc_version().ok(),
        pytorch: torch.map(|t| t.torch.clone()),
        torch_cuda: torch.map(|t| t.cuda.clone()),
        cudnn: torch.map(|t| t.cudnn.clone()),
        flashinfer: torch.and_then(|t| t.flashinfer.clone()),
        clocks: ClockReadings {
            sm_mhz_before: before.map(|c| c.sm_mhz),
            sm_mhz_after: after.map(|c| c.sm_mhz),
            temp_c_before: before.map(|c| c.temp_c),
            temp_c_after: after.map(|c| c.temp_c),
        },
        max_sm_mhz: Some(info.max_sm_mhz),
        peak_tflops: peak_tflops(gpu),
        memory: memory_peak(gpu),
        ..this_run(info.name.clone(), git_rev, git_dirty)
    }
}

/// The provenance of a run without a GPU (test mode): `synthetic` for the GPU, nothing of a
/// device or a software stack, the revision, date, host and command as they are.
pub fn synthetic(git_rev: String, git_dirty: bool) -> Provenance {
    this_run("synthetic".into(), git_rev, git_dirty)
}

/// What this process knows of its run whatever its GPU (`gpu`, by name): the revision, date,
/// host, tool and command; nothing of a device or a software stack.
fn this_run(gpu: String, git_rev: String, git_dirty: bool) -> Provenance {
    Provenance {
        gpu,
        gpu_uuid: None,
        sm_count: None,
        driver: None,
        cuda_driver_api: None,
        nvrtc: None,
        pytorch: None,
        torch_cuda: None,
        cudnn: None,
        flashinfer: None,
        git_rev,
        git_dirty,
        date: utc_now_rfc3339(),
        host: std::fs::read_to_string("/etc/hostname")
            .ok()
            .map(|h| h.trim().to_string()),
        tool: format!("attn {}", env!("CARGO_PKG_VERSION")),
        command: std::env::args().collect(),
        clocks: ClockReadings::default(),
        max_sm_mhz: None,
        peak_tflops: None,
        memory: None,
    }
}

/// The device's peak DRAM bandwidth: from its attributes (memory clock and bus width) and from
/// the table by name, the larger of the two when both are known (a higher bandwidth is a lower
/// floor: an uncertain number never rejects an honest kernel); the L2 size with it.
pub fn memory_peak(gpu: &Gpu) -> Option<MemoryPeak> {
    let info = gpu.info();
    memory_peak_of(
        &info.name,
        info.memory_clock_khz,
        info.memory_bus_bits,
        u64::from(info.l2_bytes),
    )
}

/// [`memory_peak`] from a device's name, attributes and L2 size.
pub fn memory_peak_of(
    name: &str,
    memory_clock_khz: i64,
    bus_bits: i64,
    l2_bytes: u64,
) -> Option<MemoryPeak> {
    let attributes = attn_evidence::bandwidth_from_attributes(memory_clock_khz, bus_bits);
    let table = attn_evidence::bandwidth_by_name(name);
    let from_attributes = |gbs: f64| {
        format!(
            "device attributes: 2 × {:.0} MHz × {bus_bits}-bit bus = {gbs:.0} GB/s",
            memory_clock_khz as f64 / 1e3
        )
    };
    let (bandwidth_gbs, source) = match (attributes, table) {
        (Some(a), Some(t)) if t > a => (
            t,
            format!(
                "table by name ({t:.0} GB/s), above the {}",
                from_attributes(a)
            ),
        ),
        (Some(a), Some(t)) => (
            a,
            format!("{} (table by name: {t:.0} GB/s)", from_attributes(a)),
        ),
        (Some(a), None) => (a, from_attributes(a)),
        (None, Some(t)) => (
            t,
            format!("table by name: {t:.0} GB/s (no memory clock or bus width from the driver)"),
        ),
        (None, None) => return None,
    };
    Some(MemoryPeak {
        bandwidth_gbs,
        l2_bytes: (l2_bytes > 0).then_some(l2_bytes),
        source,
    })
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

#[cfg(test)]
mod tests {
    use super::memory_peak_of;

    #[test]
    fn the_memory_peak_is_the_larger_of_the_attributes_and_the_table() {
        // An H100 SXM reporting its attributes: 3352 GB/s beats the table's 3350.
        let h100 = memory_peak_of("NVIDIA H100 80GB HBM3", 2_619_000, 5120, 50 << 20).unwrap();
        assert!((h100.bandwidth_gbs - 3352.3).abs() < 0.1, "{h100:?}");
        assert!(h100.source.contains("5120-bit"), "{}", h100.source);
        assert_eq!(h100.l2_bytes, Some(50 << 20));
        // A driver that reports a low memory clock: the table wins (a lower floor).
        let low = memory_peak_of("NVIDIA H100 80GB HBM3", 1_000_000, 5120, 0).unwrap();
        assert_eq!(low.bandwidth_gbs, 3350.0);
        assert!(low.source.starts_with("table by name"), "{}", low.source);
        assert_eq!(low.l2_bytes, None);
        // No attributes: the table alone; neither: unknown.
        let named = memory_peak_of("NVIDIA H200", 0, 0, 0).unwrap();
        assert_eq!(named.bandwidth_gbs, 4800.0);
        assert!(memory_peak_of("Some GPU", 0, 0, 0).is_none());
        let attrs = memory_peak_of("Some GPU", 1_000_000, 256, 0).unwrap();
        assert!((attrs.bandwidth_gbs - 64.0).abs() < 1e-9);
    }
}
