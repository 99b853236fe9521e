//! The evidence schema's file behaviour: round trips, ordering, errors that name the file.

use std::fs;
use std::path::Path;

use attn_evidence::{
    evidence_file_name, load_dir, read, read_evo_log, write_bytes_atomic, write_evo_log,
    write_json_atomic, Evidence, EvidenceError, EvoCandidate, ImplConfig, ProblemError, ShapeSpec,
    TimingMode, BENCH_CSV_HEADER,
};

fn provenance_json(date: &str) -> String {
    format!(
        r#"{{"gpu":"NVIDIA H100 80GB HBM3","sm_count":132,"git_rev":"1f367d0c0ffee","git_dirty":false,
            "date":"{date}","tool":"attn 0.1.0","command":["cargo","xtask"],
            "clocks":{{"sm_mhz_before":1980,"sm_mhz_after":1980}}}}"#
    )
}

fn summary_json(median: f64) -> String {
    format!(
        r#"{{"n":5,"min":{lo},"max":{hi},"mean":{median},"median":{median},"p10":{lo},"p25":{median},
            "p75":{median},"p90":{hi},"p99":{hi},"std":0.1,"mad":0.1,"iqr":0.2,
            "outliers":{{"low_severe":0,"low_mild":0,"high_mild":1,"high_severe":0}}}}"#,
        lo = median - 1.0,
        hi = median + 1.0
    )
}

fn bench_json(date: &str) -> String {
    format!(
        r#"{{"schema":1,"kind":"bench","provenance":{prov},"suite":"small","entries":[
            {{"implementation":{{"name":"sdpa","backend":"flash","config":{{}}}},
              "shape":{{"batch":4,"heads":16,"seq_q":1024,"seq_kv":1024,"head_dim":64,"causal":true,"dtype":"fp16"}},
              "timing":{{"mode":"batch","unit":"us","warmup":10,"samples":[26.0,27.0,26.8,26.5,28.0],"launches_per_sample":100}},
              "summary":{summary},"tflops":320.5}}]}}"#,
        prov = provenance_json(date),
        summary = summary_json(26.8)
    )
}

fn gate_json(date: &str) -> String {
    let estimate = r#"{"point":0.9,"lower":0.85,"upper":0.95,"confidence":0.95,"standard_error":0.02,"method":"bca"}"#;
    format!(
        r#"{{"schema":1,"kind":"gate","provenance":{prov},
            "candidate":{{"name":"mma","config":{{"BLOCK_M":"128"}},"source_sha256":"ab"}},
            "baseline":{{"name":"sdpa","backend":"default","config":{{}}}},
            "suite":null,"options":{options},
            "cases":[{{"shape":{{"batch":1,"heads":8,"seq_q":512,"seq_kv":2048,"head_dim":128,"causal":false,"dtype":"bf16"}},
              "correctness":[{{"seed":7,"distribution":"normal","passed":true,"max_abs":0.001,"rel_l2":0.0002,
                               "nan_count":0,"poison_count":0,"sdpa_max_abs":0.0009,"closer_to":"oracle"}}],
              "candidate":{{"mode":"flushed","unit":"us","warmup":3,"samples":[30.0,31.0],"launches_per_sample":1}},
              "baseline":{{"mode":"flushed","unit":"us","warmup":3,"samples":[27.0,28.0],"launches_per_sample":1}},
              "comparison":{{"seed":42,"resamples":1000,"confidence":0.95,"baseline":{base},"candidate":{cand},
                 "speedup":{estimate},"diff_median":{estimate},"mann_whitney":{{"u":3.0,"p":0.2}},
                 "verdict":"slower","gate":{{"threshold":0.95,"passed":false}}}},
              "candidate_tflops":200.0,"baseline_tflops":220.0,"flags":["SM clock changed 1980 -> 1755 MHz"],
              "passed":false,"reason":"slower than sdpa"}}],
            "passed":false}}"#,
        prov = provenance_json(date),
        options = OPTIONS_JSON,
        base = summary_json(27.5),
        cand = summary_json(30.5),
    )
}

/// `attn_stats::CompareOptions` as JSON (its shape is owned by attn-stats).
const OPTIONS_JSON: &str = r#"{"bootstrap":{"resamples":1000,"confidence":0.95,"seed":42,"method":"bca"},"noise":0.01,"gate_threshold":0.95}"#;

#[test]
fn gate_and_bench_round_trip_through_files() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("gate.json", gate_json("2025-01-01T00:00:00Z")),
        ("bench.json", bench_json("2025-01-02T00:00:00Z")),
    ] {
        let path = dir.path().join(name);
        fs::write(&path, &text).unwrap();
        let evidence = read(&path).unwrap();
        // Write it back through the atomic writer and read again: nothing lost.
        let again = dir.path().join("again").join(name);
        write_json_atomic(&again, &evidence).unwrap();
        let reread = read(&again).unwrap();
        assert_eq!(
            serde_json::to_value(&evidence).unwrap(),
            serde_json::to_value(&reread).unwrap()
        );
    }
    let Evidence::Gate(gate) = read(&dir.path().join("gate.json")).unwrap() else {
        panic!("gate.json did not read as a gate run");
    };
    let case = &gate.cases[0];
    assert_eq!(case.shape.to_string(), "1,8,512,2048,128 bf16");
    assert_eq!(case.candidate.as_ref().unwrap().mode, TimingMode::Flushed);
    assert_eq!(gate.candidate.label(), "mma");
    assert_eq!(gate.baseline.label(), "sdpa:default");
    assert_eq!(case.correctness[0].reason, None);
}

#[test]
fn load_dir_orders_by_date_then_path_and_skips_other_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir_all(root.join("gate")).unwrap();
    fs::create_dir_all(root.join("bench")).unwrap();
    fs::create_dir_all(root.join("ncu")).unwrap();
    fs::write(root.join("gate/b.json"), gate_json("2025-03-01T00:00:00Z")).unwrap();
    fs::write(
        root.join("bench/z.json"),
        bench_json("2025-02-01T00:00:00Z"),
    )
    .unwrap();
    fs::write(
        root.join("bench/a.json"),
        bench_json("2025-03-01T00:00:00Z"),
    )
    .unwrap();
    fs::write(root.join("ncu/k.json"), r#"{"kernel":"attn_fwd"}"#).unwrap();
    fs::write(root.join("README.md"), "# not evidence").unwrap();
    fs::write(root.join("bench/.z.json.tmp-1-0"), "half a fi").unwrap();
    let loaded = load_dir(root).unwrap();
    let order: Vec<_> = loaded
        .iter()
        .map(|(p, e)| {
            (
                p.strip_prefix(root).unwrap().to_string_lossy().into_owned(),
                e.kind().as_str(),
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            ("bench/z.json".to_string(), "bench"),
            ("bench/a.json".into(), "bench"),
            ("gate/b.json".into(), "gate")
        ]
    );
    assert!(load_dir(&root.join("missing")).is_err());
}

/// Each broken file gives the expected error variant, and the message names the file.
#[test]
fn broken_files_are_errors_naming_the_file() {
    fn check(name: &str, text: &str, expected: fn(&EvidenceError) -> bool) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        fs::write(&path, text).unwrap();
        for err in [read(&path).unwrap_err(), load_dir(dir.path()).unwrap_err()] {
            assert!(expected(&err), "{name}: unexpected error {err:?}");
            assert!(
                err.to_string().contains(name),
                "{name}: message {err} lacks the file name"
            );
        }
    }
    check("not-json.json", "{", |e| {
        matches!(e, EvidenceError::Json { .. })
    });
    check(
        "newer.json",
        &bench_json("d").replace(r#""schema":1"#, r#""schema":99"#),
        |e| matches!(e, EvidenceError::SchemaTooNew { found: 99, .. }),
    );
    check(
        "bad-field.json",
        &bench_json("d").replace(r#""tflops":320.5"#, r#""tflops":"fast""#),
        |e| matches!(e, EvidenceError::Json { .. }),
    );
    check(
        "bad-mode.json",
        &bench_json("d").replace(r#""batch","unit""#, r#""slow","unit""#),
        |e| matches!(e, EvidenceError::Json { .. }),
    );
    // Only read() insists on a kind; load_dir skips foreign JSON, so check read() alone here.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ncu.json");
    fs::write(&path, r#"{"kind":"ncu"}"#).unwrap();
    assert!(matches!(read(&path), Err(EvidenceError::UnknownKind { kind, .. }) if kind == "ncu"));
    assert!(read(&dir.path().join("absent.json"))
        .unwrap_err()
        .to_string()
        .contains("absent.json"));
}

#[test]
fn bench_csv_has_one_row_per_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.json");
    fs::write(&path, bench_json("2025-01-01T00:00:00Z")).unwrap();
    let Evidence::Bench(mut bench) = read(&path).unwrap() else {
        panic!("not a bench run")
    };
    let csv = bench.to_csv().unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], BENCH_CSV_HEADER.join(","));
    // An older file has no clock: the last column is empty.
    assert_eq!(
        lines[1],
        "sdpa,flash,4,16,1024,1024,64,true,fp16,26.8,25.8,27.8,320.5,5,"
    );
    assert_eq!(lines.len(), 2);
    bench.entries[0].sm_mhz = Some(1754.6);
    assert!(bench
        .to_csv()
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .ends_with(",5,1755"));
}

#[test]
fn shapes_parse_display_and_count_flops() {
    fn check(text: &str, display: &str, flops: f64) {
        let shape: ShapeSpec = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(shape.to_string(), display);
        assert_eq!(shape.flops(), flops, "{text}");
        assert_eq!(display.parse::<ShapeSpec>().unwrap(), shape);
    }
    check("1,1,2,3", "1,1,2,3", 4.0 * 2.0 * 2.0 * 3.0);
    check(
        "1,1,2,3 causal",
        "1,1,2,3 causal",
        4.0 * 2.0 * 2.0 * 3.0 / 2.0,
    );
    check("2,4,8,8,16 fp16", "2,4,8,16", 4.0 * 2.0 * 4.0 * 64.0 * 16.0);
    check(
        "2,4,8,32,16 bf16 causal",
        "2,4,8,32,16 causal bf16",
        4.0 * 8.0 * 8.0 * 32.0 * 16.0 / 2.0,
    );
    for bad in ["", "1,2,3", "1,2,0,4", "a,b,c,d", "1,2,3,4 sliding"] {
        let err = bad.parse::<ShapeSpec>().unwrap_err();
        assert!(
            matches!(err, ProblemError::Shape { .. }),
            "{bad:?}: {err:?}"
        );
    }
    let shape: ShapeSpec = "1,1,1000,1000,1000".parse().unwrap();
    // 4e9 FLOPs in 4 µs is 1e15 FLOP/s.
    assert!((shape.tflops(4.0) - 1000.0).abs() < 1e-9);
}

/// The (query, key) pairs of one head that a causal mask and a window let through, counted one
/// pair at a time (FlashAttention's definition, bottom-right aligned).
fn brute_force_pairs(sq: usize, skv: usize, causal: bool, window: Option<(i64, i64)>) -> u64 {
    let (left, right) = window.unwrap_or((-1, -1));
    let mut pairs = 0;
    for i in 0..sq as i64 {
        let diag = i + skv as i64 - sq as i64;
        for j in 0..skv as i64 {
            let after = if causal {
                Some(0)
            } else {
                (right >= 0).then_some(right)
            };
            let visible = (left < 0 || j >= diag - left) && after.is_none_or(|r| j <= diag + r);
            pairs += u64::from(visible);
        }
    }
    pairs
}

#[test]
fn varlen_shapes_parse_display_and_round_trip() {
    let shape: ShapeSpec = "varlen=512,1024,0,3000 H=16/4 D=128".parse().unwrap();
    assert_eq!(shape.to_string(), "varlen=512,1024,0,3000 H=16/4 D=128");
    // The bounding dense shape: sequences, the longest lengths.
    assert_eq!(
        (
            shape.batch,
            shape.heads,
            shape.kv_heads(),
            shape.seq_q,
            shape.seq_kv
        ),
        (4, 16, 4, 3000, 3000)
    );
    assert_eq!(shape.tokens(), 4536);
    let varlen = shape.varlen.as_ref().unwrap();
    assert_eq!((varlen.non_empty(), varlen.total_kv()), (3, 4536));
    // The words in any order, with the usual ones; Q:KV where a sequence's lengths differ.
    let cross: ShapeSpec = "bf16 D=64 causal varlen=100:300,7,0:5 H=8 window=16,-1"
        .parse()
        .unwrap();
    assert_eq!(
        cross.to_string(),
        "varlen=100:300,7,0:5 H=8 D=64 causal window=16,-1 bf16"
    );
    assert_eq!((cross.seq_q, cross.seq_kv, cross.tokens()), (100, 300, 107));
    assert_eq!(cross.to_string().parse::<ShapeSpec>().unwrap(), cross);
    // Serde: the field is there for a varlen batch and absent otherwise, so old evidence (and
    // what it hashes to) is unchanged.
    let json = serde_json::to_string(&cross).unwrap();
    assert!(
        json.contains(r#""varlen":{"seqlens_q":[100,7,0],"seqlens_kv":[300,7,5]}"#),
        "{json}"
    );
    assert_eq!(serde_json::from_str::<ShapeSpec>(&json).unwrap(), cross);
    let dense: ShapeSpec = "2,16,1024,64".parse().unwrap();
    assert!(!serde_json::to_string(&dense).unwrap().contains("varlen"));
    let old = r#"{"batch":4,"heads":16,"seq_q":1024,"seq_kv":1024,"head_dim":64,"causal":true,"dtype":"fp16"}"#;
    let old: ShapeSpec = serde_json::from_str(old).unwrap();
    assert_eq!((old.varlen.is_none(), old.tokens()), (true, 4096));
}

#[test]
fn bad_varlen_text_is_one_line_naming_the_problem() {
    for (text, says) in [
        ("varlen= H=16 D=128", "lists no sequence lengths"),
        (
            "varlen=512,-5 H=16 D=128",
            "\"-5\" is not a non-negative integer",
        ),
        (
            "varlen=512,,3 H=16 D=128",
            "\"\" is not a non-negative integer",
        ),
        ("varlen=0,0 H=16 D=128", "every sequence is empty"),
        (
            "varlen=2000000000,2000000000 H=1 D=64",
            "too many query tokens",
        ),
        (
            "varlen=5:2000000000,5:2000000000 H=1 D=64",
            "too many key tokens",
        ),
        ("varlen=5 H=16", "varlen=L1,L2,... H=H D=D"),
        ("varlen=5 H=16 D=64 H=8", "given twice"),
        ("varlen=5 H=16/3 D=64", "do not divide"),
        ("varlen=5 H=16 D=0", "not a positive head dim"),
        ("varlen=5 H=16 D=64 sliding", "unknown word \"sliding\""),
        (
            "4,16,512,64 varlen=5 H=16 D=64",
            "unknown word \"4,16,512,64\"",
        ),
        ("4,16,512,64 H=16", "unknown word \"H=16\""),
    ] {
        let err = text.parse::<ShapeSpec>().unwrap_err();
        assert!(
            matches!(err, ProblemError::Shape { .. }),
            "{text:?}: {err:?}"
        );
        let line = err.to_string();
        assert!(line.contains(says), "{text:?}: {line}");
        assert!(!line.contains('\n'), "{text:?}: one line: {line}");
    }
}

#[test]
fn varlen_flops_are_the_visible_pairs_of_every_sequence() {
    let lens: [(usize, usize); 7] = [
        (512, 512),
        (1, 1),
        (0, 0),
        (100, 300),
        (300, 100),
        (0, 40),
        (17, 0),
    ];
    let (heads, head_dim) = (6.0, 64.0);
    for causal in [false, true] {
        for window in [None, Some((16, -1)), Some((8, 8)), Some((-1, 3))] {
            let mut text = format!(
                "varlen={} H=6/2 D=64",
                lens.iter()
                    .map(|(q, kv)| format!("{q}:{kv}"))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            if let Some((l, r)) = window {
                text.push_str(&format!(" window={l},{r}"));
            }
            // Set, not written: text refuses causal with a window's right side past 0, which
            // evidence may still hold (causal wins).
            let shape = ShapeSpec {
                causal,
                ..text.parse().unwrap()
            };
            let pairs: u64 = lens
                .iter()
                .map(|&(q, kv)| brute_force_pairs(q, kv, causal, window))
                .sum();
            assert_eq!(
                shape.flops(),
                4.0 * heads * head_dim * pairs as f64,
                "{text}"
            );
        }
    }
    // One sequence is the dense problem of its length (exact where the dense count is).
    let one: ShapeSpec = "varlen=1000 H=16 D=128".parse().unwrap();
    let dense: ShapeSpec = "1,16,1000,128".parse().unwrap();
    assert_eq!(one.flops(), dense.flops());
    let local: ShapeSpec = "varlen=1000 H=16 D=128 causal window=100,-1"
        .parse()
        .unwrap();
    let dense_local: ShapeSpec = "1,16,1000,128 causal window=100,-1".parse().unwrap();
    assert_eq!(local.flops(), dense_local.flops());
    assert!((one.tflops(1.0) - one.flops() / 1e12 * 1e6).abs() < 1e-9);
}

#[test]
fn evo_log_round_trips_with_missing_values_and_uneven_configs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evo/run1/log.csv");
    let row = |generation, keys: &[(&str, i64)], status: &str, median: Option<f64>| EvoCandidate {
        generation,
        config: ImplConfig {
            implementation: None,
            knobs: keys.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        },
        status: status.parse().unwrap(),
        median_us: median,
        speedup: median.map(|m| 27.0 / m),
        speedup_lower: None,
        speedup_upper: median.map(|m| 28.0 / m),
        score: Some(-1.5),
        compile_s: Some(0.25),
        run_s: None,
    };
    let rows = vec![
        row(0, &[("BLOCK_M", 64), ("NUM_WARPS", 4)], "ok", Some(31.0)),
        row(
            1,
            &[("BLOCK_M", 128), ("STAGES", 2)],
            "invalid: smem 260 KiB > 227 KiB, \"quoted\"",
            None,
        ),
    ];
    write_evo_log(&path, &rows).unwrap();
    assert_eq!(read_evo_log(&path).unwrap(), rows);
    let header = fs::read_to_string(&path).unwrap();
    assert!(header.starts_with("generation,BLOCK_M,NUM_WARPS,STAGES,status,"));

    let bad = dir.path().join("bad.csv");
    write_bytes_atomic(&bad, header.replacen("\n0,", "\nzero,", 1).as_bytes()).unwrap();
    let err = read_evo_log(&bad).unwrap_err().to_string();
    assert!(err.contains("bad.csv") && err.contains("line 2"), "{err}");
}

#[test]
fn atomic_writes_leave_no_temporaries_and_names_sort_by_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deep/er/x.json");
    write_json_atomic(&path, &serde_json::json!({"a": 1})).unwrap();
    write_json_atomic(&path, &serde_json::json!({"a": 2})).unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"a\":2}\n");
    let names: Vec<_> = fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["x.json"]);

    let early = evidence_file_name(
        "gate",
        "2025-01-09T23:59:59Z",
        "NVIDIA H100 80GB HBM3",
        "abcdef0123",
    );
    let late = evidence_file_name(
        "gate",
        "2025-01-10T00:00:00Z",
        "NVIDIA H100 80GB HBM3",
        "abcdef0123",
    );
    assert_eq!(
        early,
        "2025-01-09T23-59-59Z-nvidia-h100-80gb-hbm3-abcdef0.json"
    );
    assert!(early < late);
    assert!(!Path::new(&early).to_string_lossy().contains(':'));
}

/// `text` (a JSON file, pretty or compact) minified, with each value of its `"config"` objects
/// that is a string holding an integer (`"BLOCK_M":"64"`) written as that integer (`"BLOCK_M":64`).
fn config_knobs_unquoted(text: &str) -> String {
    // Works on the minified text: a config object holds knob names and values, no nested object.
    let text = minified(text);
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("\"config\":{") {
        let (before, from) = rest.split_at(at + "\"config\":{".len());
        out.push_str(before);
        let end = from.find('}').unwrap();
        let pairs: Vec<String> = from[..end]
            .split(',')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (key, value) = pair.split_once(':').unwrap();
                match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                    Some(number) if number.parse::<i64>().is_ok() => format!("{key}:{number}"),
                    _ => pair.to_string(),
                }
            })
            .collect();
        out.push_str(&pairs.join(","));
        rest = &from[end..];
    }
    out.push_str(rest);
    out
}

/// `text` (JSON) with the whitespace between tokens removed and one final newline: a pretty file
/// as the compact writer writes it.
fn minified(text: &str) -> String {
    let (mut out, mut in_string, mut escaped) = (String::new(), false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            (in_string, escaped) = (escaped || c != '"', !escaped && c == '\\');
        } else if !c.is_whitespace() {
            out.push(c);
            in_string = c == '"';
        }
    }
    out + "\n"
}

/// The committed search files (`evidence/evo/*/`) read into their types and write back byte for
/// byte but for whitespace (written compact, committed pretty by older writers): the typed schema is the one they
/// were written with, but for the knobs of `best.json` and `finalists.json`, which files from
/// before knobs were typed hold as strings (`"64"`) and which are written as integers.
#[test]
fn committed_search_files_read_and_write_back_unchanged() {
    use attn_evidence::{EvoBest, EvoFinalists, SearchSpec};
    // Tests run from the crate folder (cargo and the bundle alike).
    let root = Path::new("../../evidence/evo");
    let dir = tempfile::tempdir().unwrap();
    let mut runs = 0;
    for run in fs::read_dir(root).unwrap().flatten() {
        let run = run.path();
        runs += 1;
        let log = read_evo_log(&run.join("log.csv")).unwrap();
        assert!(log.iter().any(|r| r.status.is_ok()));
        let copy = dir.path().join("log.csv");
        write_evo_log(&copy, &log).unwrap();
        assert_eq!(
            fs::read_to_string(&copy).unwrap(),
            fs::read_to_string(run.join("log.csv")).unwrap()
        );
        let best = EvoBest::read(&run.join("best.json")).unwrap();
        assert_eq!(best.kind, EvoBest::KIND);
        best.write(&dir.path().join("best.json")).unwrap();
        let spec = SearchSpec::read(&run.join("search.json")).unwrap();
        spec.write(&dir.path().join("search.json")).unwrap();
        let mut names = vec!["best.json", "search.json"];
        if run.join("finalists.json").exists() {
            let finalists = EvoFinalists::read(&run.join("finalists.json")).unwrap();
            finalists.write(&dir.path().join("finalists.json")).unwrap();
            names.push("finalists.json");
        }
        for name in names {
            assert_eq!(
                fs::read_to_string(dir.path().join(name)).unwrap(),
                config_knobs_unquoted(&fs::read_to_string(run.join(name)).unwrap()),
                "{}",
                run.join(name).display()
            );
        }
    }
    assert!(runs > 0, "no committed search under {}", root.display());
}

#[test]
fn a_ratchet_rule_and_revision_round_trip_and_old_rules_read_as_faster() {
    use attn_evidence::{GateMode, GateRule, Implementation};
    // Files written before the mode existed: the usual gate; a usual rule is written as before.
    let old: GateRule =
        serde_json::from_str(r#"{"max_speedup":10.0,"allow_implausible":false}"#).unwrap();
    assert_eq!(old.mode, GateMode::Faster);
    let written = serde_json::to_string(&GateRule::default()).unwrap();
    assert!(!written.contains("mode"), "{written}");
    let ratchet = GateRule {
        mode: GateMode::NoRegression { tolerance: 0.02 },
        ..GateRule::default()
    };
    let text = serde_json::to_string(&ratchet).unwrap();
    assert!(
        text.contains(r#""mode":{"kind":"no-regression","tolerance":0.02}"#),
        "{text}"
    );
    assert_eq!(serde_json::from_str::<GateRule>(&text).unwrap(), ratchet);
    // A baseline read from an earlier commit names it; others write no revision.
    let mut before = Implementation::named("hopper");
    assert!(!serde_json::to_string(&before).unwrap().contains("revision"));
    before.revision = Some("8bbe183c0ffee".into());
    let text = serde_json::to_string(&before).unwrap();
    assert_eq!(
        serde_json::from_str::<Implementation>(&text).unwrap(),
        before
    );
    assert_eq!(before.label(), "hopper@8bbe183");
}

#[test]
fn cases_without_defences_read_as_none_recorded_and_recorded_ones_round_trip() {
    use attn_evidence::{Defence, DefenceName, DefenceOutcome};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gate.json");
    fs::write(&path, gate_json("2025-01-01T00:00:00Z")).unwrap();
    let Evidence::Gate(mut gate) = read(&path).unwrap() else {
        panic!("gate.json did not read as a gate run");
    };
    // A file written before defences were recorded: none, and none written back.
    assert!(gate.cases[0].defences.is_empty());
    assert!(!serde_json::to_string(&gate).unwrap().contains("defences"));
    gate.cases[0].defences = vec![
        Defence::ran(DefenceName::TimedVerification, "400 samples", false),
        Defence::not_run(DefenceName::EdgeBattery, "not reached"),
    ];
    let again = dir.path().join("again.json");
    write_json_atomic(&again, &gate).unwrap();
    let text = fs::read_to_string(&again).unwrap();
    assert!(
        text.contains(
            r#"{"name":"edge-battery","ran":false,"covered":"not reached","outcome":"not-run"}"#
        ),
        "{text}"
    );
    let Evidence::Gate(reread) = read(&again).unwrap() else {
        panic!("again.json did not read as a gate run");
    };
    assert_eq!(reread.cases[0].defences, gate.cases[0].defences);
    assert_eq!(reread.cases[0].defences[0].outcome, DefenceOutcome::Passed);
}

#[test]
fn a_decode_case_round_trips_and_older_cases_read_as_prefill() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gate.json");
    fs::write(&path, gate_json("2025-01-01T00:00:00Z")).unwrap();
    let Evidence::Gate(mut gate) = read(&path).unwrap() else {
        panic!("gate.json did not read as a gate run");
    };
    assert!(gate.cases[0].decode.is_none(), "an older case is prefill");
    let spec: attn_evidence::DecodeSpec = "decode B=64 q=1 kv=8192 H=32/8 D=128 page=16 bf16"
        .parse()
        .unwrap();
    let case = &mut gate.cases[0];
    case.shape = attn_evidence::decode_shape(&spec);
    case.decode = Some(attn_evidence::DecodeRecord {
        copy_gbs: Some(3900.0),
        copy_source: Some("1 GiB device-to-device copy, median of 5".into()),
        candidate_gbs: Some(3100.0),
        baseline_gbs: Some(2500.0),
        ..attn_evidence::DecodeRecord::new(&spec)
    });
    let again = dir.path().join("decode.json");
    write_json_atomic(&again, &gate).unwrap();
    let text = fs::read_to_string(&again).unwrap();
    assert!(text.contains(r#""text":"decode B=64 q=1 kv=8192 H=32/8 D=128 page=16 bf16""#));
    let Evidence::Gate(reread) = read(&again).unwrap() else {
        panic!("decode.json did not read as a gate run");
    };
    let record = reread.cases[0].decode.as_ref().unwrap();
    assert_eq!(record.spec, spec);
    assert_eq!(record.bytes, spec.bytes().total());
    assert!((record.candidate_fraction().unwrap() - 3100.0 / 3900.0).abs() < 1e-12);
    assert_eq!(reread.cases[0].shape, attn_evidence::decode_shape(&spec));
}
