//! Every committed evidence file (`evidence/**/*.json`) still reads, and the problem vocabulary
//! writes its shapes back as they were committed.

use std::path::Path;

use attn_evidence::{json_files, load_dir, read_json, SanitizeRun, ShapeSpec, Window};
use serde_json::Value;

/// Tests run from the crate folder (cargo and the bundle alike).
const ROOT: &str = "../../evidence";

/// Every object under `value` that is a problem (`"batch"`, `"heads"`, `"seq_q"`, `"head_dim"`)
/// or a window (exactly `"left"` and `"right"`).
fn problems_and_windows<'v>(value: &'v Value, found: &mut Vec<&'v Value>) {
    match value {
        Value::Object(map) => {
            let problem = ["batch", "heads", "seq_q", "head_dim"]
                .iter()
                .all(|k| map.contains_key(*k));
            let window = map.len() == 2 && map.contains_key("left") && map.contains_key("right");
            if problem || window {
                found.push(value);
            }
            map.values().for_each(|v| problems_and_windows(v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| problems_and_windows(v, found)),
        _ => {}
    }
}

#[test]
fn every_committed_shape_and_window_reads_and_writes_back_unchanged() {
    let (mut files, mut shapes, mut windows) = (0, 0, 0);
    for path in json_files(Path::new(ROOT)).unwrap() {
        let value: Value = read_json(&path).unwrap_or_else(|e| panic!("{e}"));
        files += 1;
        let mut found = vec![];
        problems_and_windows(&value, &mut found);
        for original in found {
            let again = if original.get("batch").is_some() {
                shapes += 1;
                let shape: ShapeSpec = serde_json::from_value(original.clone())
                    .unwrap_or_else(|e| panic!("{}: {original}: {e}", path.display()));
                // The text form reads back as the same problem.
                let text = shape.to_string();
                let parsed: ShapeSpec = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
                assert_eq!(parsed, shape, "{}: {text}", path.display());
                serde_json::to_value(&shape).unwrap()
            } else {
                windows += 1;
                let window: Window = serde_json::from_value(original.clone())
                    .unwrap_or_else(|e| panic!("{}: {original}: {e}", path.display()));
                serde_json::to_value(window).unwrap()
            };
            assert_eq!(&again, original, "{}", path.display());
        }
    }
    assert!(
        files > 100 && shapes > 100 && windows > 0,
        "{files} files, {shapes} shapes, {windows} windows under {ROOT}"
    );
}

#[test]
fn every_committed_gate_bench_and_sanitize_file_reads_into_its_type() {
    let loaded = load_dir(Path::new(ROOT)).unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.len() > 100, "{} gate and bench files", loaded.len());
    let sanitize = json_files(&Path::new(ROOT).join("sanitize")).unwrap();
    for path in &sanitize {
        SanitizeRun::read(path).unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(!sanitize.is_empty());
}
