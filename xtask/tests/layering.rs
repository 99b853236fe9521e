//! The workspace's layering, checked on the crates' manifests (no cargo needed, so it also runs
//! from the GPU bundle): only `attn-kernels` (and the binaries above it) may reach `cudarc`; the
//! leaves and the report reach neither `cudarc` nor `attn-kernels`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Workspace crate -> its normal dependencies (names), read from `crates/*/Cargo.toml` and `xtask/`.
fn direct_dependencies(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut manifests: Vec<_> = std::fs::read_dir(root.join("crates"))
        .expect("crates/ exists")
        .flatten()
        .map(|e| e.path().join("Cargo.toml"))
        .filter(|p| p.is_file())
        .collect();
    manifests.push(root.join("xtask/Cargo.toml"));
    manifests
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            let manifest: toml::Table = text
                .parse()
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let name = manifest["package"]["name"].as_str().unwrap().to_string();
            let deps = manifest
                .get("dependencies")
                .and_then(|d| d.as_table())
                .map(|t| t.keys().cloned().collect())
                .unwrap_or_default();
            (name, deps)
        })
        .collect()
}

/// Transitive closure over workspace crates (external crates never depend on ours; none of the
/// external crates we use pulls in cudarc).
fn reachable(direct: &BTreeMap<String, BTreeSet<String>>, start: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![start.to_string()];
    while let Some(p) = stack.pop() {
        for d in direct.get(&p).into_iter().flatten() {
            if seen.insert(d.clone()) {
                stack.push(d.clone());
            }
        }
    }
    seen
}

#[test]
fn only_attn_kernels_touches_cuda() {
    // Tests run from the package folder (cargo and the bundle alike).
    let root = Path::new("..");
    let direct = direct_dependencies(root);
    assert!(direct.len() >= 7, "found only {:?}", direct.keys());
    for leaf in [
        "attn-problem",
        "attn-stats",
        "attn-oracle",
        "attn-ncu",
        "attn-evidence",
        "attn-report",
        "attn-evo",
    ] {
        let deps = reachable(&direct, leaf);
        for forbidden in ["cudarc", "attn-kernels", "cublas-sys"] {
            assert!(
                !deps.contains(forbidden),
                "{leaf} depends on {forbidden}: the layering is broken (see ARCHITECTURE.md)"
            );
        }
    }
    for leaf in ["attn-problem", "attn-stats", "attn-ncu"] {
        let deps = reachable(&direct, leaf);
        let internal: Vec<_> = deps.iter().filter(|d| d.starts_with("attn-")).collect();
        assert!(
            internal.is_empty(),
            "{leaf} is a leaf but depends on {internal:?}"
        );
    }
    // The oracle builds on the one problem vocabulary and nothing else of the workspace.
    let oracle = reachable(&direct, "attn-oracle");
    let internal: Vec<_> = oracle.iter().filter(|d| d.starts_with("attn-")).collect();
    assert_eq!(
        internal,
        ["attn-problem"],
        "attn-oracle may build on attn-problem alone"
    );
    for user in [
        "attn-oracle",
        "attn-evidence",
        "attn-kernels",
        "attn-measure",
    ] {
        assert!(
            reachable(&direct, user).contains("attn-problem"),
            "{user} should take the problem vocabulary from attn-problem"
        );
    }
    // The measurement library sits between the kernels and the command line: it uses the
    // libraries below it (the pure search among them, whose searches it measures) and never a
    // command-line parser or xtask.
    let measure = reachable(&direct, "attn-measure");
    for needed in [
        "attn-kernels",
        "attn-oracle",
        "attn-stats",
        "attn-evidence",
        "attn-evo",
    ] {
        assert!(
            measure.contains(needed),
            "attn-measure should build on {needed}"
        );
    }
    for forbidden in ["clap", "xtask", "attn-report"] {
        assert!(
            !measure.contains(forbidden),
            "attn-measure depends on {forbidden}: it is a library under xtask"
        );
    }
    assert!(
        direct["attn-kernels"].contains("cudarc"),
        "attn-kernels is where cudarc lives"
    );
    for (name, deps) in &direct {
        if name != "attn-kernels" {
            assert!(
                !deps.contains("cudarc"),
                "{name} depends on cudarc directly; only attn-kernels may"
            );
        }
    }
}
