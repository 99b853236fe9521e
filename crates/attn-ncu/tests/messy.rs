//! Hand-made ncu output with everything real output throws at a parser, and the errors for
//! input that is not ncu CSV.

use attn_ncu::{group, parse, NcuError, Unit};

const DETAILS_HEADER: &str = r#""ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value""#;

/// A details row for launch `id` of `kernel` (already CSV-escaped).
fn row(id: u32, kernel: &str, metric: &str, unit: &str, value: &str) -> String {
    format!(
        r#""{id}","9","bench","host","{kernel}","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","{metric}","{unit}","{value}""#
    )
}

/// A kernel name with commas, quotes (doubled in CSV), brackets and 600 characters.
fn nasty_name() -> (String, String) {
    let name = format!(
        r#"void attn_fwd<64, "quoted", (anonymous namespace)::Tile<128, 64>>(const half*, int) {}"#,
        "x,".repeat(250)
    );
    let escaped = name.replace('"', "\"\"");
    (name, escaped)
}

#[test]
fn interleaved_messages_and_program_output_are_skipped() {
    let (name, escaped) = nasty_name();
    let text = [
        "bench: warming up".to_owned(),
        "==PROF== Connected to process 9 (/bench)".to_owned(),
        "==WARNING== Note: Running with unmodified GPU clocks.".to_owned(),
        DETAILS_HEADER.to_owned(),
        row(0, &escaped, "gpu__time_duration.sum", "usecond", "1.25"),
        "==PROF== Profiling \"attn_fwd\" - 1: 0%....50%....100% - 9 passes".to_owned(),
        row(0, &escaped, "dram__bytes_read.sum", "Mbyte", "1,024.50"),
        "bench: launch 2".to_owned(),
        row(1, &escaped, "gpu__time_duration.sum", "ns", "1,300"),
        row(1, &escaped, "dram__bytes_read.sum", "byte", "n/a"),
        row(2, "other_kernel", "gpu__time_duration.sum", "ns", "10"),
        row(3, &escaped, "gpu__time_duration.sum", "ns", "2,000"),
        row(3, &escaped, "frobnication.ratio", "frob/s", "7"),
        String::new(),
        "==PROF== Disconnected from process 9".to_owned(),
    ]
    .join("\r\n");
    let launches = parse(&text).unwrap();
    assert_eq!(
        launches.iter().map(|l| l.id).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert_eq!(launches[0].kernel, name);
    assert_eq!(launches[0].value("gpu__time_duration.sum"), Some(1250.0));
    assert_eq!(
        launches[0].value("dram__bytes_read.sum"),
        Some(1_024_500_000.0)
    );
    assert_eq!(launches[1].value("dram__bytes_read.sum"), None);
    let unknown = &launches[3].metrics["frobnication.ratio"];
    assert_eq!(
        (unknown.value, &unknown.unit),
        (Some(7.0), &Unit::Other("frob/s".into()))
    );

    let kernels = group(&launches, None);
    assert_eq!(kernels.len(), 2);
    let attn = &kernels[0];
    assert_eq!(attn.launch_ids, [0, 1, 3]);
    assert_eq!(
        attn.value("gpu__time_duration.sum"),
        Some(1300.0),
        "median of 1250, 1300, 2000"
    );
    assert_eq!(
        attn.metrics["dram__bytes_read.sum"].samples, 1,
        "n/a is not a sample"
    );
    assert_eq!(
        attn.metrics["frobnication.ratio"].samples, 1,
        "unknown metrics are kept"
    );
}

#[test]
fn same_kernel_at_two_launch_configurations_is_two_summaries() {
    let small = row(0, "attn_fwd", "gpu__time_duration.sum", "ns", "10");
    let large = row(1, "attn_fwd", "gpu__time_duration.sum", "ns", "99")
        .replace("(64, 1, 1)", "(512, 1, 1)");
    let kernels = group(
        &parse(&[DETAILS_HEADER, &small, &large].join("\n")).unwrap(),
        None,
    );
    assert_eq!(
        kernels
            .iter()
            .map(|k| k.grid.clone().unwrap())
            .collect::<Vec<_>>(),
        ["(64, 1, 1)", "(512, 1, 1)"]
    );
}

#[test]
fn raw_page_without_units_row_still_parses() {
    let text = "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\",\"launch__grid_size\"\n\"0\",\"k\",\"5\",\"1,024\"\n";
    let launches = parse(text).unwrap();
    assert_eq!(launches[0].value("launch__grid_size"), Some(1024.0));
    assert_eq!(
        launches[0].metrics["gpu__time_duration.sum"].unit,
        Unit::Count,
        "no unit row: dimensionless"
    );
}

fn check_error(text: &str, expected: &str) {
    let err: NcuError = parse(text).expect_err(expected);
    assert!(
        err.to_string().contains(expected),
        "{err:?} should mention {expected:?}"
    );
}

#[test]
fn inputs_that_are_not_ncu_csv_are_clear_errors() {
    let good = row(0, "k", "gpu__time_duration.sum", "ns", "1");
    let cases: &[(String, &str)] = &[
        (String::new(), "no ncu CSV header"),
        (
            "==PROF== Connected\n==ERROR== something broke\n".to_owned(),
            "no ncu CSV header",
        ),
        (
            "\"ID\",\"Name\"\n\"0\",\"k\"\n".to_owned(),
            "line 1: unrecognised ncu CSV header: missing column \"Kernel Name\"",
        ),
        (
            format!("x\n{DETAILS_HEADER}\n{good}\n\"1\",\"short row\"\n"),
            "line 4: malformed CSV row: 2 fields, header has 15",
        ),
        (
            format!(
                "{DETAILS_HEADER}\n{}\n",
                row(0, "k", "m", "", "1").replacen("\"0\"", "\"zero\"", 1)
            ),
            "line 2: launch ID \"zero\"",
        ),
        (
            format!("{DETAILS_HEADER}\n\"0\",\"unterminated\n"),
            "line 2: malformed CSV row",
        ),
    ];
    for (text, expected) in cases {
        check_error(text, expected);
    }
}
