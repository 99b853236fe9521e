//! The real H100 captures (PyTorch SDPA, cuDNN backend) parse to the right numbers.

use attn_ncu::{
    explain, group, parse, parse_details, parse_raw, Ceilings, KernelFilter, Page, Unit,
};

const DETAILS: &str = include_str!("fixtures/h100_sdpa_cudnn_details.csv");
const RAW: &str = include_str!("fixtures/h100_sdpa_cudnn_raw.csv");
/// hopper at (4,16,1024,128) with `--section LaunchStats,Occupancy,SpeedOfLight,WarpStateStats,
/// SchedulerStats,ComputeWorkloadAnalysis` and four `--metrics` (ncu 2025.3, details page): the
/// sections' rules add five columns that metric rows leave out and rows that name no metric.
const SECTIONS: &str = include_str!("fixtures/h100_hopper_sections_details.csv");
const CUDNN: &str = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0";

/// (launch ID, metric, expected value in base units, expected unit)
type Expectation = (u32, &'static str, Option<f64>, Unit);

fn check(text: &str, cases: &[Expectation]) {
    let launches = parse(text).expect("fixture parses");
    for (id, metric, expected, unit) in cases {
        let launch = launches
            .iter()
            .find(|l| l.id == *id)
            .unwrap_or_else(|| panic!("launch {id}"));
        let value = launch
            .metrics
            .get(*metric)
            .unwrap_or_else(|| panic!("launch {id} has no {metric}"));
        assert_eq!(
            value.value, *expected,
            "launch {id} {metric} (raw {:?})",
            value.raw
        );
        assert_eq!(&value.unit, unit, "launch {id} {metric}");
    }
}

#[test]
fn details_page_numbers() {
    check(
        DETAILS,
        &[
            (3, "gpu__time_duration.sum", Some(9440.0), Unit::Nanoseconds),
            (3, "launch__registers_per_thread", Some(168.0), Unit::Count),
            (3, "dram__bytes_read.sum", Some(1_592_064.0), Unit::Bytes),
            (
                3,
                "launch__shared_mem_per_block_dynamic",
                Some(134_144.0),
                Unit::Bytes,
            ),
            (
                3,
                "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                Some(31.71),
                Unit::Percent,
            ),
            (
                3,
                "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                None,
                Unit::Count,
            ),
            (4, "gpu__time_duration.sum", Some(9664.0), Unit::Nanoseconds),
            (0, "gpu__time_duration.sum", Some(6432.0), Unit::Nanoseconds),
            (0, "launch__registers_per_thread", Some(44.0), Unit::Count),
        ],
    );
}

#[test]
fn details_page_with_rule_columns() {
    check(
        SECTIONS,
        &[
            (
                0,
                "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                Some(56.90),
                Unit::Percent,
            ),
            (
                0,
                "sm__inst_executed_pipe_tensor_op_gmma.sum",
                Some(524_288.0),
                Unit::Count,
            ),
        ],
    );
    let launches = parse(SECTIONS).unwrap();
    assert_eq!(launches.len(), 1, "one launch, its rule rows included");
    let launch = &launches[0];
    assert_eq!(launch.kernel, "attn_fwd");
    assert_eq!(launch.grid.as_deref(), Some("(8, 16, 4)"));
    assert!(
        !launch.metrics.contains_key(""),
        "a rule's row adds no metric"
    );
    // The sections' own rows, by their display names.
    assert!(launch.metrics.contains_key("Achieved Occupancy"));
    assert!(launch
        .metrics
        .contains_key("Warp Cycles Per Issued Instruction"));
}

#[test]
fn raw_page_numbers() {
    check(
        RAW,
        &[
            (3, "gpu__time_duration.sum", Some(9472.0), Unit::Nanoseconds),
            (3, "launch__registers_per_thread", Some(168.0), Unit::Count),
            (4, "dram__bytes_read.sum", Some(1_595_136.0), Unit::Bytes),
            (3, "dram__bytes_read.avg", Some(39_801.6), Unit::Bytes),
            (
                3,
                "launch__waves_per_multiprocessor",
                Some(0.24),
                Unit::Count,
            ),
            (
                3,
                "device__attribute_total_memory",
                Some(85_017_493_504.0),
                Unit::Count,
            ),
            (3, "device__attribute_display_name", None, Unit::Text),
            (3, "launch__kernel_name", None, Unit::Count),
        ],
    );
}

#[test]
fn both_pages_describe_the_same_launches() {
    let details = parse_details(DETAILS).unwrap();
    let raw = parse_raw(RAW).unwrap();
    let identity = |l: &attn_ncu::Launch| {
        (
            l.id,
            l.kernel.clone(),
            l.block.clone(),
            l.grid.clone(),
            l.device,
        )
    };
    assert_eq!(
        details.iter().map(identity).collect::<Vec<_>>(),
        raw.iter().map(identity).collect::<Vec<_>>()
    );
    assert_eq!(attn_ncu::detect_page(DETAILS).unwrap(), Page::Details);
    assert_eq!(attn_ncu::detect_page(RAW).unwrap(), Page::Raw);
    assert_eq!(details[3].kernel, CUDNN);
    assert_eq!(details[3].block.as_deref(), Some("(384, 1, 1)"));
    assert_eq!(details[3].compute_capability.as_deref(), Some("9.0"));
    assert!(
        details[0].kernel.len() > 1000,
        "the long PyTorch name survives its commas and brackets"
    );
    assert_eq!(
        details.iter().map(|l| l.metrics.len()).collect::<Vec<_>>(),
        [10; 5]
    );
    // Every column but the 11 identity ones is a metric.
    assert_eq!(raw[0].metrics.len(), 297 - 11);
}

#[test]
fn repeated_launches_aggregate_by_median() {
    let launches = parse_details(DETAILS).unwrap();
    let kernels = group(&launches, None);
    assert_eq!(kernels.len(), 2);
    assert_eq!((kernels[0].launches, kernels[1].launches), (3, 2));
    let cudnn = &kernels[1];
    assert_eq!(cudnn.kernel, CUDNN);
    let time = &cudnn.metrics["gpu__time_duration.sum"];
    assert_eq!(
        (time.median, time.min, time.max, time.samples),
        (Some(9552.0), Some(9440.0), Some(9664.0), 2)
    );
    assert_eq!(kernels[0].value("gpu__time_duration.sum"), Some(6368.0));
    let gmma =
        &cudnn.metrics["sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"];
    assert_eq!((gmma.median, gmma.samples), (None, 0));
}

#[test]
fn kernel_filters_select_by_substring_and_regex() {
    let launches = parse_raw(RAW).unwrap();
    let count =
        |pattern: &str| group(&launches, Some(&KernelFilter::parse(pattern).unwrap())).len();
    assert_eq!(count("cudnn"), 1);
    assert_eq!(count("distribution_elementwise"), 1);
    assert_eq!(count("regex:^void at::"), 1);
    assert_eq!(count("regex:flash_fprop_wgmma_f16_knob_\\d+"), 1);
    assert_eq!(count("regex:."), 2);
    assert_eq!(count("flash_attn"), 0);
    let err = KernelFilter::parse("regex:(").unwrap_err().to_string();
    assert_eq!(
        err,
        "kernel filter \"(\" is not a valid regex: unclosed group"
    );
}

#[test]
fn details_summary_snapshot() {
    let kernels = group(&parse_details(DETAILS).unwrap(), None);
    insta::assert_json_snapshot!("details_summary", kernels);
}

#[test]
fn raw_cudnn_summary_snapshot() {
    let filter = KernelFilter::parse("cudnn").unwrap();
    let kernels = group(&parse_raw(RAW).unwrap(), Some(&filter));
    insta::assert_json_snapshot!("raw_cudnn_summary", kernels);
}

#[test]
fn text_rendering_snapshot() {
    let kernels = group(&parse_details(DETAILS).unwrap(), None);
    insta::assert_snapshot!("details_text", attn_ncu::render_text(&kernels));
}

#[test]
fn cudnn_explanation() {
    let filter = KernelFilter::parse("cudnn").unwrap();
    let cudnn = &group(&parse_details(DETAILS).unwrap(), Some(&filter))[0];
    // B·H = 8, N = 512, D = 64, not causal: fits the grid (4 query tiles × 8 heads) and the
    // DRAM bytes read (Q, K, V at 512 KiB each).
    let flops = 4.0 * 8.0 * 512.0 * 512.0 * 64.0;
    let e = explain(cudnn, Some(flops), &Ceilings::H100_MEASURED);
    assert_eq!(e.bound, attn_ncu::Bound::LatencyOrOccupancy);
    let tflops = e.tflops.unwrap();
    assert!((tflops - flops / 9552e-9 / 1e12).abs() < 1e-9, "{tflops}");
    let bandwidth = e.dram_bytes_per_s.unwrap();
    assert!(
        (bandwidth - 1_592_192.0 / 9552e-9).abs() < 1.0,
        "{bandwidth}"
    );
    insta::assert_snapshot!("cudnn_explanation", e.to_string());
}

/// cuDNN's kernel under SDPA's GQA path at (2, 32/8, 4096, 128), fp16, on an H200 (ncu 2025,
/// `--page raw --clock-control none`, four calls after three random-input kernels): the clock it
/// ran at and its instruction count, beside its tensor-pipe share.
const H200_GQA: &str = include_str!("fixtures/h200_sdpa_gqa_cudnn_raw.csv");

#[test]
fn the_sm_clock_and_instruction_count_are_read_and_shown() {
    let filter = KernelFilter::parse("cudnn").unwrap();
    let kernels = group(&parse_raw(H200_GQA).unwrap(), Some(&filter));
    assert_eq!(kernels.len(), 1, "one cuDNN kernel");
    let flops = 4.0 * 2.0 * 32.0 * 4096.0 * 4096.0 * 128.0;
    let e = explain(&kernels[0], Some(flops), &Ceilings::H100_MEASURED);
    assert_eq!(e.launches, 4);
    // The median of four launches, the mean of the middle two: 1676.16 and 1676.59 MHz,
    // 310,860,768 and 310,863,648 instructions.
    let mhz = e.sm_clock_mhz.unwrap();
    assert!((mhz - 1676.37).abs() < 0.1, "{mhz}");
    let instructions = e.warp_instructions.unwrap();
    assert!((instructions - 310_862_208.0).abs() < 1.0, "{instructions}");
    assert_eq!(e.tensor_pipe_pct, Some(75.94));
    assert_eq!(e.bound, attn_ncu::Bound::TensorPipe);
    let text = e.to_string();
    assert!(
        text.contains("clock       1676 MHz SM clock, 310.9 M warp instructions"),
        "{text}"
    );
}

/// hopper at (2, 16, 8192, 128) on an H100 with `--metrics regex:smsp__average_warps_issue_stalled_
/// .*_per_issue_active\.ratio` beside time, clock and the tensor pipe (ncu 2025.3, details page;
/// evidence/ncu/captures/2026-11-27-s1024/hopper-2-16-8192.stall.csv): every stall reason's warp
/// cycles per issued instruction, what `--purpose stalls` collects.
const H100_STALLS: &str = include_str!("fixtures/h100_hopper_stalls_details.csv");

#[test]
fn stall_reasons_are_read_largest_first_and_the_top_ones_shown() {
    let kernels = group(&parse_details(H100_STALLS).unwrap(), None);
    assert_eq!(kernels.len(), 1, "one hopper kernel");
    let e = explain(&kernels[0], None, &Ceilings::H100_MEASURED);
    let reasons: Vec<(&str, f64)> = e
        .stalls
        .iter()
        .map(|s| (s.reason.as_str(), s.cycles_per_issue))
        .collect();
    // Every reason of the capture but `selected` (the issuing cycle, 1.00), largest first.
    assert_eq!(reasons.len(), 18, "{reasons:?}");
    assert_eq!(
        reasons[..4],
        [
            ("wait", 1.67),
            ("barrier", 1.35),
            ("long_scoreboard", 0.77),
            ("dispatch_stall", 0.44)
        ]
    );
    assert!(reasons.windows(2).all(|w| w[0].1 >= w[1].1));
    assert!(reasons.iter().all(|(r, _)| *r != "selected"));
    let text = e.to_string();
    assert!(
        text.contains(
            "stalls      wait 1.67, barrier 1.35, long_scoreboard 0.77, dispatch_stall 0.44, not_selected 0.29 (warp cycles per issued instruction)"
        ),
        "{text}"
    );
    // A purpose that collects them, by name.
    let stalls: attn_ncu::metrics::Purpose = "stalls".parse().unwrap();
    assert!(attn_ncu::metrics::hopper(stalls)
        .metrics
        .contains(&attn_ncu::metrics::STALL_REASONS));
}
