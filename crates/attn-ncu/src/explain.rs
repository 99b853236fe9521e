//! A short human reading of a kernel's counters: throughput against ceilings, and what bounds it.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::group::short_name;
use crate::metrics::{
    DRAM_BYTES_READ, DRAM_BYTES_WRITE, DURATION, LOCAL_BYTES_LD, LOCAL_BYTES_ST,
    REGISTERS_PER_THREAD, SHARED_BANK_CONFLICTS_LD, SHARED_BANK_CONFLICTS_ST, SM_BUSY_PCT,
    SM_CLOCK_HZ, SM_CLOCK_KHZ, SM_COUNT, STALL_PREFIX, STALL_SUFFIX, TENSOR_PIPE_PCT,
    WARPS_ACTIVE_PCT, WARP_INSTRUCTIONS, WAVES_PER_SM, WGMMA_INSTRUCTIONS,
};
use crate::KernelSummary;

/// What the device can do at best, as measured by the caller (not datasheet peaks).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ceilings {
    /// Dense fp16 tensor throughput, TFLOP/s (e.g. a large cuBLAS matmul).
    pub tensor_tflops: f64,
    /// DRAM bandwidth in bytes/s, counting read + write (e.g. a large device-to-device copy).
    pub dram_bytes_per_s: f64,
}

impl Ceilings {
    /// H100 SXM 80GB as measured for this project: 891 TFLOP/s dense fp16 (cuBLAS), copy
    /// bandwidth about 3.0 TB/s read + write.
    pub const H100_MEASURED: Ceilings = Ceilings {
        tensor_tflops: 891.0,
        dram_bytes_per_s: 3.0e12,
    };
}

/// The fraction of a ceiling above which that resource is called the bound.
pub const BOUND_THRESHOLD: f64 = 0.6;

/// What limits a kernel, judged from its counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Bound {
    /// The tensor pipe is the busiest resource and near its ceiling.
    TensorPipe,
    /// DRAM bandwidth is the busiest resource and near its ceiling.
    Memory,
    /// Neither is near its ceiling: the kernel waits (latency, too few warps, too few blocks).
    LatencyOrOccupancy,
    /// Neither time nor utilisation metrics were collected.
    Unknown,
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Bound::TensorPipe => "tensor pipe",
            Bound::Memory => "memory bandwidth",
            Bound::LatencyOrOccupancy => "latency/occupancy",
            Bound::Unknown => "unknown (metrics missing)",
        })
    }
}

/// The numbers behind the summary; every field is `None` when its metric was not collected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// The kernel.
    pub kernel: String,
    /// Launches aggregated (medians).
    pub launches: usize,
    /// Median duration, ns.
    pub duration_ns: Option<f64>,
    /// Achieved TFLOP/s from the caller's FLOP count.
    pub tflops: Option<f64>,
    /// `tflops` as a fraction of the tensor ceiling.
    pub tflops_fraction: Option<f64>,
    /// DRAM bytes read + written.
    pub dram_bytes: Option<f64>,
    /// Achieved DRAM bandwidth, bytes/s.
    pub dram_bytes_per_s: Option<f64>,
    /// Bandwidth as a fraction of the DRAM ceiling.
    pub dram_fraction: Option<f64>,
    /// Tensor pipe busy, %.
    pub tensor_pipe_pct: Option<f64>,
    /// Warpgroup (wgmma) instructions executed: > 0 on Hopper kernels that use them.
    #[serde(default)]
    pub wgmma_instructions: Option<f64>,
    /// SM clock over the kernel, MHz (a reading): compare kernels' speeds beside it.
    #[serde(default)]
    pub sm_clock_mhz: Option<f64>,
    /// Warp instructions executed, all pipes.
    #[serde(default)]
    pub warp_instructions: Option<f64>,
    /// SM throughput, %.
    pub sm_busy_pct: Option<f64>,
    /// Achieved occupancy, %.
    pub warps_active_pct: Option<f64>,
    /// Blocks per SM over the grid.
    pub waves_per_sm: Option<f64>,
    /// Registers per thread.
    pub registers_per_thread: Option<f64>,
    /// Local-memory bytes (spills) loaded + stored.
    pub spill_bytes: Option<f64>,
    /// Shared-memory bank conflicts, loads + stores.
    pub bank_conflicts: Option<f64>,
    /// Bank conflicts as a share of the SM cycles of the run, % (each costs about one cycle of the
    /// shared-memory pipe): the size of the problem, where the raw count depends on the run's length.
    #[serde(default)]
    pub bank_conflict_cycles_pct: Option<f64>,
    /// Where the warps wait: each stall reason collected (`stalls` purpose) with its warp cycles
    /// per issued instruction, largest first (`selected`, the issuing cycle itself, left out).
    #[serde(default)]
    pub stalls: Vec<Stall>,
    /// The verdict.
    pub bound: Bound,
}

/// One stall reason and how many warp cycles per issued instruction were spent in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    /// ncu's reason, e.g. `long_scoreboard`, `barrier`, `wait`.
    pub reason: String,
    /// Warp cycles stalled for it per issued instruction (the median over launches).
    pub cycles_per_issue: f64,
}

/// How many stall reasons the summary prints.
const STALLS_SHOWN: usize = 5;

/// The stall reasons among `summary`'s metrics, largest first.
fn stalls(summary: &KernelSummary) -> Vec<Stall> {
    let mut stalls: Vec<Stall> = summary
        .metrics
        .keys()
        .filter_map(|name| {
            let reason = name
                .strip_prefix(STALL_PREFIX)?
                .strip_suffix(STALL_SUFFIX)?;
            let cycles = summary.value(name)?;
            (reason != "selected").then(|| Stall {
                reason: reason.to_owned(),
                cycles_per_issue: cycles,
            })
        })
        .collect();
    stalls.sort_by(|a, b| b.cycles_per_issue.total_cmp(&a.cycles_per_issue));
    stalls
}

/// Reads a kernel's counters against the device's ceilings. `flops` is the work one launch does
/// (for attention forward, `4·B·H·N²·D`, halved when causal); pass `None` if unknown.
///
/// ```
/// use attn_ncu::{explain, group, parse_details, Bound, Ceilings, KernelFilter};
/// let launches = parse_details(include_str!("../tests/fixtures/h100_sdpa_cudnn_details.csv"))?;
/// let cudnn = &group(&launches, Some(&KernelFilter::parse("cudnn")?))[0];
/// // B·H = 8, N = 512, D = 64, not causal: the shape that fits the fixture's grid and DRAM bytes.
/// let flops = 4.0 * 8.0 * 512.0 * 512.0 * 64.0;
/// let e = explain(cudnn, Some(flops), &Ceilings::H100_MEASURED);
/// assert_eq!(e.bound, Bound::LatencyOrOccupancy);
/// println!("{e}");
/// # Ok::<(), attn_ncu::NcuError>(())
/// ```
pub fn explain(summary: &KernelSummary, flops: Option<f64>, ceilings: &Ceilings) -> Explanation {
    let v = |m: &str| summary.value(m);
    let sum = |a: &str, b: &str| match (v(a), v(b)) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0.0) + y.unwrap_or(0.0)),
    };
    let duration_ns = v(DURATION).filter(|d| *d > 0.0);
    let seconds = duration_ns.map(|ns| ns * 1e-9);
    let tflops = flops.zip(seconds).map(|(f, s)| f / s / 1e12);
    let dram_bytes = sum(DRAM_BYTES_READ, DRAM_BYTES_WRITE);
    let bank_conflicts = sum(SHARED_BANK_CONFLICTS_LD, SHARED_BANK_CONFLICTS_ST);
    let dram_bytes_per_s = dram_bytes.zip(seconds).map(|(b, s)| b / s);
    let tflops_fraction = tflops.map(|t| t / ceilings.tensor_tflops);
    let dram_fraction = dram_bytes_per_s.map(|b| b / ceilings.dram_bytes_per_s);
    let tensor_pipe_pct = v(TENSOR_PIPE_PCT);
    // The pipe counter and the FLOP-based figure both speak for the tensor cores; trust the larger.
    let tensor_use = max_option(tensor_pipe_pct.map(|p| p / 100.0), tflops_fraction);
    let bound = match (tensor_use, dram_fraction) {
        (None, None) => Bound::Unknown,
        (t, d) => {
            let (t, d) = (t.unwrap_or(0.0), d.unwrap_or(0.0));
            if t.max(d) < BOUND_THRESHOLD {
                Bound::LatencyOrOccupancy
            } else if t >= d {
                Bound::TensorPipe
            } else {
                Bound::Memory
            }
        }
    };
    Explanation {
        kernel: summary.kernel.clone(),
        launches: summary.launches,
        duration_ns,
        tflops,
        tflops_fraction,
        dram_bytes,
        dram_bytes_per_s,
        dram_fraction,
        tensor_pipe_pct,
        wgmma_instructions: v(WGMMA_INSTRUCTIONS),
        sm_clock_mhz: v(SM_CLOCK_HZ).map(|hz| hz / 1e6),
        warp_instructions: v(WARP_INSTRUCTIONS),
        sm_busy_pct: v(SM_BUSY_PCT),
        warps_active_pct: v(WARPS_ACTIVE_PCT),
        waves_per_sm: v(WAVES_PER_SM),
        registers_per_thread: v(REGISTERS_PER_THREAD),
        spill_bytes: sum(LOCAL_BYTES_LD, LOCAL_BYTES_ST),
        bank_conflicts,
        bank_conflict_cycles_pct: bank_conflicts
            .zip(seconds)
            .zip(v(SM_COUNT).zip(v(SM_CLOCK_KHZ)))
            .map(|((conflicts, s), (sms, khz))| 100.0 * conflicts / (sms * s * khz * 1e3))
            .filter(|pct| pct.is_finite()),
        stalls: stalls(summary),
        bound,
    }
}

/// Warps-active share below which an idle tensor pipe is blamed on too few warps.
const LOW_OCCUPANCY_PCT: f64 = 25.0;
/// Bank-conflict cycles (share of the run's SM cycles, %) below which they are not worth chasing.
const SIGNIFICANT_CONFLICT_PCT: f64 = 1.0;
/// Registers per thread from which occupancy counts as register-limited.
const MANY_REGISTERS: f64 = 200.0;

impl Explanation {
    /// The change these counters point to first, in one sentence: spills and bank conflicts before
    /// anything else, then what the bound suggests.
    ///
    /// ```
    /// use attn_ncu::{Bound, Explanation};
    /// let e = Explanation {
    ///     kernel: "attn_fwd".into(), launches: 1, duration_ns: Some(1e6), tflops: Some(290.0),
    ///     tflops_fraction: Some(0.33), dram_bytes: None, dram_bytes_per_s: None, dram_fraction: None,
    ///     tensor_pipe_pct: Some(47.0), wgmma_instructions: Some(0.0), sm_clock_mhz: Some(1755.0),
    ///     warp_instructions: Some(3.1e8), sm_busy_pct: Some(45.0), warps_active_pct: Some(12.5),
    ///     waves_per_sm: Some(2.0), registers_per_thread: Some(255.0), spill_bytes: Some(0.0),
    ///     bank_conflicts: Some(0.0), bank_conflict_cycles_pct: Some(0.0), stalls: vec![],
    ///     bound: Bound::LatencyOrOccupancy,
    /// };
    /// assert!(e.next_step().starts_with("occupancy is register-limited"));
    /// // 0.05% of the SM cycles lost to bank conflicts is not the first thing to fix.
    /// let e = Explanation { bank_conflicts: Some(1.3e5), bank_conflict_cycles_pct: Some(0.05), ..e };
    /// assert!(e.next_step().starts_with("occupancy is register-limited"));
    /// let e = Explanation { bank_conflict_cycles_pct: Some(4.0), ..e };
    /// assert!(e.next_step().starts_with("remove the 130000 shared-memory bank conflicts"));
    /// ```
    pub fn next_step(&self) -> String {
        if let Some(spills) = self.spill_bytes.filter(|b| *b > 0.0) {
            return format!(
                "remove the spills ({spills:.0} bytes of local memory traffic): fewer live accumulators or smaller tiles"
            );
        }
        let conflicts_matter = self
            .bank_conflict_cycles_pct
            .is_none_or(|pct| pct >= SIGNIFICANT_CONFLICT_PCT);
        if let Some(conflicts) = self.bank_conflicts.filter(|c| *c > 0.0 && conflicts_matter) {
            return format!(
                "remove the {conflicts:.0} shared-memory bank conflicts (swizzle the tiles)"
            );
        }
        match self.bound {
            Bound::TensorPipe if self.wgmma_instructions.is_some_and(|n| n > 0.0) => format!(
                "the wgmma pipe does most of the work ({} busy): keep it fed between tiles (less softmax \
                 work per key, larger key tiles, a deeper ring) or skip work (masked tiles)",
                self.tensor_pipe_pct.map_or_else(|| "n/a".to_owned(), |p| format!("{p:.1}%"))
            ),
            Bound::TensorPipe => "the tensor pipe is near its ceiling for these instructions: move the matrix products to a faster one (wgmma on Hopper) or skip work (masked tiles)".into(),
            Bound::Memory => "DRAM-bound: reuse each loaded tile more (larger tiles, TMA multicast across a cluster)".into(),
            Bound::Unknown => "collect the time and utilisation metrics first".into(),
            Bound::LatencyOrOccupancy => {
                if let Some(waves) = self.waves_per_sm.filter(|w| *w < 1.0) {
                    return format!("the grid fills {waves:.2} waves: launch more, smaller blocks or split the keys across blocks");
                }
                match (self.warps_active_pct, self.registers_per_thread) {
                    (Some(warps), Some(regs)) if warps < LOW_OCCUPANCY_PCT && regs >= MANY_REGISTERS => format!(
                        "occupancy is register-limited ({regs:.0} registers/thread, {warps:.1}% warps active): \
                         free registers so more warps fit, or hide the softmax behind the next tile's matrix \
                         products (ping-pong warpgroups, warp specialisation)"
                    ),
                    (Some(warps), _) if warps < LOW_OCCUPANCY_PCT => format!(
                        "few warps are active ({warps:.1}%): more independent work per SM (more blocks, deeper pipelining)"
                    ),
                    _ => "latency-bound with warps to spare: overlap loads, softmax and matrix products within each warp".into(),
                }
            }
        }
    }
}

fn max_option(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    }
}

/// `12.3` or `n/a`.
fn show(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.decimals$}"))
}

fn percent_of(fraction: Option<f64>) -> String {
    fraction.map_or_else(String::new, |f| format!(" ({:.1}% of ceiling)", f * 100.0))
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} ({} launches, medians)",
            short_name(&self.kernel, 100),
            self.launches
        )?;
        writeln!(
            f,
            "  time        {} us",
            show(self.duration_ns.map(|n| n / 1e3), 2)
        )?;
        match self.tflops {
            Some(t) => writeln!(
                f,
                "  compute     {t:.1} TFLOP/s{}",
                percent_of(self.tflops_fraction)
            )?,
            None => writeln!(f, "  compute     n/a (no FLOP count given)")?,
        }
        writeln!(
            f,
            "  dram        {} GB/s{}",
            show(self.dram_bytes_per_s.map(|b| b / 1e9), 1),
            percent_of(self.dram_fraction)
        )?;
        writeln!(
            f,
            "  busy        tensor pipe {}%, SM {}%, warps active {}%",
            show(self.tensor_pipe_pct, 1),
            show(self.sm_busy_pct, 1),
            show(self.warps_active_pct, 1)
        )?;
        if self.sm_clock_mhz.is_some() || self.warp_instructions.is_some() {
            writeln!(
                f,
                "  clock       {} MHz SM clock, {} M warp instructions",
                show(self.sm_clock_mhz, 0),
                show(self.warp_instructions.map(|n| n / 1e6), 1)
            )?;
        }
        writeln!(
            f,
            "  resources   {} registers/thread, spills {}, bank conflicts {}",
            show(self.registers_per_thread, 0),
            self.spill_bytes
                .map_or_else(|| "not measured".to_owned(), |b| format!("{b:.0} bytes")),
            match (self.bank_conflicts, self.bank_conflict_cycles_pct) {
                (None, _) => "not measured".to_owned(),
                (Some(c), None) => format!("{c:.0}"),
                (Some(c), Some(pct)) => format!("{c:.0} ({pct:.2}% of SM cycles)"),
            }
        )?;
        if !self.stalls.is_empty() {
            let top: Vec<String> = self
                .stalls
                .iter()
                .take(STALLS_SHOWN)
                .map(|s| format!("{} {:.2}", s.reason, s.cycles_per_issue))
                .collect();
            writeln!(
                f,
                "  stalls      {} (warp cycles per issued instruction)",
                top.join(", ")
            )?;
        }
        write!(f, "  bound by    {}", self.bound)?;
        if self.bound == Bound::LatencyOrOccupancy {
            if let Some(waves) = self.waves_per_sm.filter(|w| *w < 1.0) {
                write!(f, " ({waves:.2} waves: fewer blocks than SMs can hold)")?;
            }
        }
        write!(f, "\n  next step   {}", self.next_step())
    }
}
