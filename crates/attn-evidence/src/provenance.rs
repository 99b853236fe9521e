//! Where a measurement came from: the machine, the software stack, the commit, the command.

use serde::{Deserialize, Serialize};

/// Everything needed to judge whether two pieces of evidence are comparable, and to reproduce one.
///
/// Fields the writer could not determine are `None` (not an empty string), so a reader can tell
/// "unknown" from "known to be empty".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// GPU product name as the driver reports it, e.g. `"NVIDIA H100 80GB HBM3"`.
    pub gpu: String,
    /// The GPU's UUID, which tells two boards of the same product apart.
    #[serde(default)]
    pub gpu_uuid: Option<String>,
    /// Number of streaming multiprocessors (a MIG slice or a cut-down part has fewer).
    #[serde(default)]
    pub sm_count: Option<u32>,
    /// NVIDIA driver version, e.g. `"570.124.06"`.
    #[serde(default)]
    pub driver: Option<String>,
    /// CUDA version the driver API reports, e.g. `"12.8"`.
    #[serde(default)]
    pub cuda_driver_api: Option<String>,
    /// NVRTC version that compiled our kernels.
    #[serde(default)]
    pub nvrtc: Option<String>,
    /// PyTorch version of the SDPA baseline, when one ran.
    #[serde(default)]
    pub pytorch: Option<String>,
    /// CUDA version PyTorch was built against.
    #[serde(default)]
    pub torch_cuda: Option<String>,
    /// cuDNN version PyTorch loaded.
    #[serde(default)]
    pub cudnn: Option<String>,
    /// FlashInfer version of the `sdpa:flashinfer` decode baseline, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flashinfer: Option<String>,
    /// Full git commit hash of the working tree that produced the evidence.
    pub git_rev: String,
    /// Whether the working tree had uncommitted changes (then `git_rev` does not pin the code).
    pub git_dirty: bool,
    /// When the run started, RFC 3339 in UTC, e.g. `"2025-11-22T14:19:00Z"`. Evidence is ordered by it.
    pub date: String,
    /// Host name of the machine.
    #[serde(default)]
    pub host: Option<String>,
    /// The tool and its version, e.g. `"attn 0.1.0"`.
    pub tool: String,
    /// The command line (argv) that produced the evidence.
    #[serde(default)]
    pub command: Vec<String>,
    /// SM clock and temperature around the measurement.
    #[serde(default)]
    pub clocks: ClockReadings,
    /// The device's highest SM clock, MHz (absent in schema-1 files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sm_mhz: Option<u32>,
    /// The device's dense tensor-core peak for the run's dtype, TFLOP/s: SMs × max SM clock ×
    /// dense FLOP per clock per SM (absent in schema-1 files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_tflops: Option<f64>,
    /// The device's peak memory bandwidth, the L2 size and where they came from (absent in older
    /// files): what the physical floor of a launch ([`memory_floor_us`]) is computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryPeak>,
}

/// A device's peak DRAM bandwidth, and where the number came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryPeak {
    /// Peak bandwidth, GB/s (10⁹ bytes per second).
    pub bandwidth_gbs: f64,
    /// The L2 cache, bytes.
    #[serde(default)]
    pub l2_bytes: Option<u64>,
    /// How it was found, one line: the device attributes (`2 × 2619 MHz × 5120-bit bus`), the
    /// table by device name, or both (the larger, i.e. the lower floor, is used).
    pub source: String,
}

/// Peak DRAM bandwidth from the device attributes, GB/s: double data rate × the memory clock ×
/// the bus width (the formula of NVIDIA's `cudaDeviceProp` examples). `None` for a zero or
/// missing attribute.
///
/// ```
/// // An H100 SXM: 2619 MHz, 5120-bit HBM3.
/// let gbs = attn_evidence::bandwidth_from_attributes(2_619_000, 5120).unwrap();
/// assert!((gbs - 3352.3).abs() < 0.1, "{gbs}");
/// ```
pub fn bandwidth_from_attributes(memory_clock_khz: i64, bus_width_bits: i64) -> Option<f64> {
    (memory_clock_khz > 0 && bus_width_bits > 0)
        .then(|| 2.0 * memory_clock_khz as f64 * 1e3 * (bus_width_bits as f64 / 8.0) / 1e9)
}

/// Peak DRAM bandwidth by device name, GB/s, from the datasheets: the highest of the parts a
/// name may stand for (a higher bandwidth is a lower floor, so a guess never rejects an honest
/// kernel). `None` for a device not in the table.
///
/// ```
/// use attn_evidence::bandwidth_by_name;
/// assert_eq!(bandwidth_by_name("NVIDIA H100 80GB HBM3"), Some(3350.0));
/// assert_eq!(bandwidth_by_name("NVIDIA H100 PCIe"), Some(2000.0));
/// assert_eq!(bandwidth_by_name("NVIDIA H200"), Some(4800.0));
/// assert_eq!(bandwidth_by_name("a GPU nobody knows"), None);
/// ```
pub fn bandwidth_by_name(name: &str) -> Option<f64> {
    let n = name.to_ascii_uppercase();
    let has = |s: &str| n.contains(s);
    // Most specific first.
    let table: &[(&dyn Fn() -> bool, f64)] = &[
        (&|| has("GB200") || has("B200") || has("B100"), 8000.0),
        (&|| has("GH200"), 4900.0),
        (&|| has("H200"), 4800.0),
        (&|| has("H100") && has("PCIE"), 2000.0),
        (&|| has("H100") && has("HBM3"), 3350.0),
        (&|| has("H100") || has("H800"), 3900.0),
        (&|| has("A100") && has("PCIE") && has("40GB"), 1555.0),
        (&|| has("A100") || has("A800"), 2039.0),
        (&|| has("L40"), 864.0),
        (&|| has("RTX 4090"), 1008.0),
        (&|| has("RTX 3090"), 936.0),
        (&|| has("A10"), 600.0),
        (&|| has("L4"), 300.0),
        (&|| has("V100"), 900.0),
        (&|| has("T4"), 320.0),
    ];
    table
        .iter()
        .find(|(matches, _)| matches())
        .map(|(_, gbs)| *gbs)
}

/// The physical floor of one launch, µs: what must cross the DRAM interface at `bandwidth_gbs`.
/// With the L2 flushed before every sample, all of `read_bytes` comes from DRAM; written bytes
/// may stay in an L2 of `l2_bytes` (write-back), so only what does not fit counts.
///
/// ```
/// // 2,16,8192,128 fp16: Q, K, V 64 MiB each read, O 64 MiB written past a 50 MiB L2, at 3352 GB/s.
/// let mib = 1u64 << 20;
/// let floor = attn_evidence::memory_floor_us(192 * mib, 64 * mib, Some(50 * mib), 3352.0);
/// assert!((floor - 64.4).abs() < 0.1, "{floor}");
/// ```
pub fn memory_floor_us(
    read_bytes: u64,
    write_bytes: u64,
    l2_bytes: Option<u64>,
    bandwidth_gbs: f64,
) -> f64 {
    let written = write_bytes.saturating_sub(l2_bytes.unwrap_or(0));
    if bandwidth_gbs <= 0.0 || !bandwidth_gbs.is_finite() {
        return 0.0;
    }
    (read_bytes + written) as f64 / (bandwidth_gbs * 1e9) * 1e6
}

/// SM clock and GPU temperature read just before and just after a measurement. A clock that moved
/// (thermal or power throttling) makes timings from before and after incomparable.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockReadings {
    /// SM clock in MHz before the measurement.
    #[serde(default)]
    pub sm_mhz_before: Option<u32>,
    /// SM clock in MHz after the measurement.
    #[serde(default)]
    pub sm_mhz_after: Option<u32>,
    /// GPU temperature in °C before the measurement.
    #[serde(default)]
    pub temp_c_before: Option<u32>,
    /// GPU temperature in °C after the measurement.
    #[serde(default)]
    pub temp_c_after: Option<u32>,
}

impl ClockReadings {
    /// A flag line such as `"SM clock changed 1980 -> 1755 MHz"` when both readings exist and differ
    /// by more than `tolerance_mhz`; `None` otherwise.
    ///
    /// ```
    /// use attn_evidence::ClockReadings;
    /// let clocks = ClockReadings { sm_mhz_before: Some(1980), sm_mhz_after: Some(1755), ..Default::default() };
    /// assert_eq!(clocks.sm_clock_change(15).as_deref(), Some("SM clock changed 1980 -> 1755 MHz"));
    /// assert_eq!(clocks.sm_clock_change(300), None);
    /// ```
    pub fn sm_clock_change(&self, tolerance_mhz: u32) -> Option<String> {
        let (before, after) = (self.sm_mhz_before?, self.sm_mhz_after?);
        (before.abs_diff(after) > tolerance_mhz)
            .then(|| format!("SM clock changed {before} -> {after} MHz"))
    }
}

/// The current time as RFC 3339 in UTC with whole seconds, e.g. `"2025-11-22T14:19:00Z"`: the format
/// of [`Provenance::date`].
pub fn utc_now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let format =
        time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    // The format has no component that can fail for a valid date; fall back to the Unix epoch
    // rather than panicking if it ever did.
    now.format(&format)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned())
}

/// Dense tensor-core FLOP per clock per SM for fp16/bf16 with f32 accumulation, by compute
/// capability (the datasheets' dense rates over their SM counts and boost clocks): 4096 on
/// Hopper (sm_90), 2048 on Ampere sm_80, 1024 on the sm_86/89 parts. `None` elsewhere.
pub fn dense_flop_per_clock_per_sm(major: u32, minor: u32) -> Option<f64> {
    match (major, minor) {
        (9, 0) => Some(4096.0),
        (8, 0) => Some(2048.0),
        (8, 6) | (8, 7) | (8, 9) => Some(1024.0),
        _ => None,
    }
}

/// A device's dense fp16/bf16 tensor peak, TFLOP/s: SMs × max SM clock × FLOP/clock/SM (what
/// [`Provenance::peak_tflops`] records, and what readers derive for files that predate it).
pub fn dense_peak_tflops(sm_count: u32, max_sm_mhz: f64, major: u32, minor: u32) -> Option<f64> {
    let per_clock = dense_flop_per_clock_per_sm(major, minor)?;
    (sm_count > 0 && max_sm_mhz > 0.0)
        .then(|| f64::from(sm_count) * max_sm_mhz * 1e6 * per_clock / 1e12)
}
