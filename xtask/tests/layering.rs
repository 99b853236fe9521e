//! The workspace's layering, checked on cargo's resolved dependency graph:
//! only `attn-kernels` (and the binaries above it) may reach `cudarc`; the leaves and the report
//! reach neither `cudarc` nor `attn-kernels`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// package name -> names of its normal (non-dev) dependencies, transitively closed.
fn reachable() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let name_of: BTreeMap<String, String> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_str().unwrap().to_string(),
                p["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut direct: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for node in meta["resolve"]["nodes"].as_array().unwrap() {
        let from = name_of[node["id"].as_str().unwrap()].clone();
        let deps = direct.entry(from).or_default();
        for dep in node["deps"].as_array().unwrap() {
            let normal = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null());
            if normal {
                deps.insert(name_of[dep["pkg"].as_str().unwrap()].clone());
            }
        }
    }
    let mut closed = BTreeMap::new();
    for start in direct.keys() {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start.clone()];
        while let Some(p) = stack.pop() {
            for d in direct.get(&p).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    stack.push(d.clone());
                }
            }
        }
        closed.insert(start.clone(), seen);
    }
    closed
}

#[test]
fn only_attn_kernels_touches_cuda() {
    let reach = reachable();
    for leaf in [
        "attn-stats",
        "attn-oracle",
        "attn-ncu",
        "attn-evidence",
        "attn-report",
    ] {
        let deps = reach
            .get(leaf)
            .unwrap_or_else(|| panic!("{leaf} is a workspace member"));
        for forbidden in ["cudarc", "attn-kernels"] {
            assert!(
                !deps.contains(forbidden),
                "{leaf} depends on {forbidden}: the layering is broken (see ARCHITECTURE.md)"
            );
        }
    }
    assert!(
        reach["attn-kernels"].contains("cudarc"),
        "attn-kernels is where cudarc lives"
    );
    for leaf in ["attn-stats", "attn-oracle", "attn-ncu"] {
        for sibling in [
            "attn-stats",
            "attn-oracle",
            "attn-ncu",
            "attn-report",
            "attn-evidence",
        ] {
            if sibling != leaf {
                assert!(
                    !reach[leaf].contains(sibling),
                    "{leaf} is a leaf but depends on {sibling}"
                );
            }
        }
    }
    assert!(
        !reach["attn-report"].contains("attn-kernels"),
        "attn-report reads evidence, never kernels"
    );
}
