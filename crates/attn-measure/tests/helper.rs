//! The SDPA helper's row check (`check_rows` in `src/sdpa_helper.py`), the judge of every
//! baseline that is not SDPA (FlashAttention-3, PyTorch's varlen_attn) before it is timed: on a
//! packed batch with an empty sequence, grouped heads and `S_q ≠ S_kv` both ways, an output
//! computed with attn's mask passes and one computed with any other convention fails, NaN
//! included. Runs `tests/fixtures/helper_rows.py` on the CPU.
//!
//! Needs python3 with numpy. `cargo xtask test` installs numpy into `target/` when python3 has
//! none, passes its folder in `ATTN_HELPER_PYTHONPATH` and sets `ATTN_HELPER_TEST=required`, so
//! that a missing numpy fails the test there instead of skipping it. The helper's PyTorch paths
//! that need no GPU (FlexAttention's mask, varlen_attn's layouts) run on the CPU in an ignored
//! test, with the GPU tests where PyTorch is (`tests/fixtures/helper_torch.py`). FlashInfer's
//! block tables, indices and import error are pure Python (`tests/fixtures/helper_flashinfer.py`)
//! and run with python3 alone. The py baseline's defences (a Python callable that remembers
//! outputs, returns V, works on a side stream, down-casts, changes its inputs or patches the
//! timer, each refused for its own reason, and an honest one timed) run on the GPU
//! (`tests/fixtures/helper_callables.py`).

use std::path::Path;
use std::process::Command;

fn python() -> Command {
    let mut cmd = Command::new("python3");
    if let Some(path) = std::env::var_os("ATTN_HELPER_PYTHONPATH") {
        cmd.env("PYTHONPATH", path);
    }
    cmd
}

#[test]
fn the_baselines_row_check_passes_attns_mask_and_nothing_else() {
    let has_numpy = python()
        .args(["-c", "import numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_numpy {
        let required = std::env::var("ATTN_HELPER_TEST").as_deref() == Ok("required");
        assert!(
            !required,
            "python3 cannot import numpy (ATTN_HELPER_PYTHONPATH={:?})",
            std::env::var_os("ATTN_HELPER_PYTHONPATH")
        );
        eprintln!(
            "SKIPPED: python3 has no numpy (`cargo xtask test` installs it and requires this test)"
        );
        return;
    }
    let report = fixture_report("helper_rows.py");
    for passes in ["attn's causal window", "full attention"] {
        assert_eq!(report[passes], "passed", "{passes}: {report}");
    }
    for fails in [
        "top-left causal window",
        "window one key narrower",
        "no window",
        "heads grouped the wrong way",
        "NaN rows",
    ] {
        let why = report[fails].as_str().unwrap_or_default();
        assert!(
            why.contains("the yardstick's output differs from the reference"),
            "{fails} must fail the check: {report}"
        );
    }
    assert!(
        report["NaN rows"].as_str().unwrap().contains("nan"),
        "{report}"
    );
    // A dense batch is B sequences of its lengths.
    assert_eq!(
        report["dense lengths"],
        serde_json::json!([[12, 12, 12, 12, 12], [16, 16, 16, 16, 16]])
    );
}

#[test]
fn flashinfers_tables_and_indices_are_built_as_the_kernel_sides_are() {
    // Pure Python: always runs (its numpy case, the paged view under check_rows, only with numpy).
    let report = fixture_report("helper_flashinfer.py");
    for case in [
        "in-order",
        "shuffled",
        "interleaved",
        "shared-prefix",
        "paged batch",
        "unknown policy",
        "missing flashinfer",
    ] {
        assert_eq!(report[case], "passed", "{case}: {report}");
    }
    let rows = report["paged rows"].as_str().unwrap_or_default();
    assert!(rows == "passed" || rows == "skipped: no numpy", "{report}");
}

#[test]
fn flashinfers_block_tables_follow_the_oracles_page_policies() {
    // The helper's tables against attn_oracle::block_table, the kernel side's: the same lists for
    // every deterministic policy; for a shuffled one the same pool and pages per sequence.
    for text in [
        "decode B=4 q=1,2,4,1 kv=100,512,1000,17 H=8/2 D=64 page=16",
        "decode B=3 q=1,0,2 kv=48,0,32 H=8/2 D=64 page=16 pages=interleaved",
        "decode B=3 q=1,1,2 kv=64,16,40 H=8/2 D=64 page=16 pages=shared-prefix=2",
        "decode B=4 q=1,2,4,1 kv=100,512,1000,17 H=8/2 D=64 page=16 pages=shuffled",
        "decode B=5 q=1 kv=9 H=6/1 D=64 page=1 pages=interleaved",
    ] {
        let spec: attn_oracle::DecodeSpec = text.parse().unwrap();
        let table = attn_oracle::block_table(&spec, 9).unwrap().unwrap();
        let attn_oracle::KvLayout::Paged { page_size, policy } = spec.layout() else {
            unreachable!("{text} is paged")
        };
        let script = format!(
            "import json, sys; sys.path.insert(0, 'src'); import sdpa_helper as h; \
             print(json.dumps(h.page_lists({:?}, {page_size}, '{policy}', 9)), file=h.PROTOCOL)",
            spec.seqlens_kv()
        );
        let output = python()
            .args(["-c", &script])
            .output()
            .expect("python3 runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let (lists, pages): (Vec<Vec<i32>>, usize) =
            serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{text}: {e}: {stdout}"));
        assert_eq!(pages, table.num_pages(), "{text}");
        for (b, list) in lists.iter().enumerate() {
            if policy == attn_oracle::PagePolicy::Shuffled {
                assert_eq!(list.len(), table.pages(b).len(), "{text}: sequence {b}");
            } else {
                assert_eq!(list, table.pages(b), "{text}: sequence {b}");
            }
        }
    }
}

/// Runs `tests/fixtures/NAME` with the helper's folder; its one JSON object.
fn fixture_report(name: &str) -> serde_json::Value {
    // Test runners start in the crate folder (cargo test, and the bundle's script).
    let output = python()
        .arg(Path::new("tests/fixtures").join(name))
        .arg("src")
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("one JSON object")
}

#[test]
#[ignore = "needs PyTorch (run with the GPU tests)"]
fn flex_masks_and_varlen_layouts_follow_attns_mask() {
    let report = fixture_report("helper_torch.py");
    for case in [
        "causal window 64, GQA",
        "window 32,16, MQA",
        "causal, fewer queries than keys",
        "causal window 20, rows with no key",
        "right window 5",
        "run_varlen packed",
    ] {
        assert_eq!(report[case], "passed", "{case}: {report}");
    }
    let wrong = report["mask one key narrower"].as_str().unwrap_or_default();
    assert!(wrong.contains("differs from the reference"), "{report}");
    assert_eq!(report["run_varlen dense max abs"], 0.0, "{report}");
}

#[test]
#[ignore = "needs PyTorch and a GPU (run with the GPU tests)"]
fn sdpa_backward_gradients_match_float64_and_a_captured_replay_is_a_plain_call() {
    let report = fixture_report("helper_backward.py");
    let cases = report.as_object().expect("one JSON object");
    let mut checked = 0;
    for (case, verdict) in cases {
        if case == "torch" {
            continue;
        }
        // A backend PyTorch has no kernel for at a shape (flash or cuDNN on an older build) is
        // its own error; anything else that is not "passed" is a wrong gradient or timing.
        let text = verdict.as_str().unwrap_or_default();
        let no_kernel = text.contains("No available kernel") || text.contains("not supported");
        assert!(text == "passed" || no_kernel, "{case}: {text}\n{report}");
        checked += usize::from(text == "passed");
    }
    assert!(checked >= 20, "{report}");
    assert_eq!(report["flex refused"], "passed", "{report}");
}

#[test]
#[ignore = "needs PyTorch and a GPU (run with the GPU tests)"]
fn a_python_callable_baseline_is_refused_for_each_known_exploit() {
    let report = fixture_report("helper_callables.py");
    for mode in ["graph", "batch"] {
        let verdict = |name: &str| {
            report[format!("{name} {mode}")]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(verdict("honest"), "passed", "{report}");
        for (name, says) in [
            ("remembers_outputs", "a stale, remembered or wrong output"),
            ("returns_v", "memory of its input V"),
            ("side_stream", "another stream"),
            ("down_casts", "a down-cast"),
            ("zeros_inputs", "changed its inputs"),
            (
                "attend",
                "patched the timer (torch.cuda.Event.elapsed_time)",
            ),
        ] {
            let why = verdict(name);
            assert!(why.contains(says), "{name} {mode}: {why}\n{report}");
        }
    }
}
