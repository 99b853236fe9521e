//! `cargo xtask micro`: every micro config seeds a valid config of the implementations its target
//! seeds (projected onto the registry's own spaces and constraints); `--compare-evo` computes the
//! rank correlation of fixture logs without a GPU and says why when it cannot; on a GPU, the
//! hopper ranking is written with its scope and provenance.

mod common;
use common::{output_text, xtask};

use std::path::Path;
use std::process::Command;

use attn_evidence::{MicroBest, MicroCorrelation, MicroTarget, ShapeSpec};
use attn_evo::{project_micro, KnobDomain, Knobs, Space};
use attn_kernels::registry::Limits;
use attn_measure::micro::micro_configs;
use attn_measure::search::{default_knobs, registry_constraint, searchable_knobs};

/// The space `cargo xtask evo --impl NAME` searches at `head_dim` (its `spec::space`).
fn registry_space(name: &str, head_dim: usize) -> Space {
    let knobs = searchable_knobs(name, head_dim)
        .unwrap()
        .into_iter()
        .map(|(n, domain)| KnobDomain::new(n, domain.to_vec()).unwrap())
        .collect();
    Space::new(
        knobs,
        registry_constraint(name, head_dim, Limits::H100).unwrap(),
    )
    .unwrap()
}

/// Projects every micro config of `target` at `head_dim` onto `implementation`'s space: each seed
/// is valid and keeps micro's knobs; returns how many configs found a place.
fn seeds(target: MicroTarget, implementation: &str, head_dim: usize) -> (usize, usize) {
    let space = registry_space(implementation, head_dim);
    let shape: ShapeSpec = format!("2,16,8192,{head_dim}").parse().unwrap();
    let fill = default_knobs(implementation, &shape, &Limits::H100).unwrap();
    let configs = micro_configs(target, head_dim, &Limits::H100).unwrap();
    let mut placed = 0;
    for config in &configs {
        let micro: Knobs = attn_evo::micro_knobs(target, &config.0);
        match project_micro(&space, &micro, &fill) {
            Some(seed) => {
                space.check(&seed).unwrap();
                for (knob, value) in &micro {
                    if space.knobs().iter().any(|k| &k.name == knob) {
                        assert_eq!(seed[knob], *value, "{implementation}: {knob} of [{config}]");
                    }
                }
                placed += 1;
            }
            None => assert!(
                space.check(&micro).is_err() || micro.len() < space.knobs().len(),
                "{implementation}: [{config}] found no place"
            ),
        }
    }
    (placed, configs.len())
}

#[test]
fn micro_configs_seed_valid_configs_of_their_implementations() {
    for head_dim in [64, 128] {
        // hopper: every config but the unpipelined reference (STAGES 1, outside hopper's domain).
        let configs = micro_configs(MicroTarget::Hopper, head_dim, &Limits::H100).unwrap();
        let unpipelined = configs
            .iter()
            .filter(|c| c.get("STAGES") == Some(1))
            .count();
        assert_eq!(
            seeds(MicroTarget::Hopper, "hopper", head_dim),
            (configs.len() - unpipelined, configs.len()),
            "D={head_dim}"
        );
        // mma: most tile shapes have a valid completion (BLOCK_M, WARP_M, KV_SPLIT...).
        let (placed, total) = seeds(MicroTarget::CpAsync, "mma", head_dim);
        assert!(
            placed * 10 >= total * 8,
            "mma D={head_dim}: {placed} of {total}"
        );
        // tiled: its narrower domains (BLOCK_N 32/64, STAGES 1/2) take some.
        let (placed, _) = seeds(MicroTarget::CpAsync, "tiled", head_dim);
        assert!(placed >= 6, "tiled D={head_dim}: {placed}");
    }
}

/// A temporary evidence folder with the attn-evo fixtures: a hopper micro log and a hopper search.
fn fixture_evidence(with_micro: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Path::new("../crates/attn-evo/tests/fixtures/micro");
    let run = dir.path().join("evo").join("run");
    std::fs::create_dir_all(&run).unwrap();
    for file in ["search.json", "log.csv"] {
        std::fs::copy(fixtures.join("evo-hopper").join(file), run.join(file)).unwrap();
    }
    if with_micro {
        let micro = MicroTarget::Hopper.dir(dir.path());
        std::fs::create_dir_all(&micro).unwrap();
        std::fs::copy(fixtures.join("hopper-log.csv"), micro.join("log.csv")).unwrap();
    }
    dir
}

fn compare(evidence: &Path) -> (bool, String) {
    let out = Command::new(xtask())
        .arg("micro")
        .arg("--compare-evo")
        .arg(evidence.join("evo").join("run"))
        .arg("--evidence")
        .arg(evidence)
        .output()
        .expect("xtask runs");
    let text = output_text(&out);
    (out.status.success(), text)
}

#[test]
fn compare_evo_writes_the_correlation_of_a_search_and_what_micro_cannot_predict() {
    let evidence = fixture_evidence(true);
    let (ok, text) = compare(evidence.path());
    assert!(ok, "{text}");
    // The target comes from the search's implementation (hopper).
    assert!(text.contains("micro (hopper) vs"), "{text}");
    assert!(text.contains("7 configs measured by both"), "{text}");
    assert!(text.contains("Spearman's ρ = 0.93"), "{text}");
    assert!(text.contains("what micro cannot predict"), "{text}");
    let path = MicroTarget::Hopper
        .dir(evidence.path())
        .join("correlation.json");
    let written = MicroCorrelation::read(&path).unwrap();
    assert_eq!(
        (written.spearman.n, written.evo_target.as_str()),
        (7, "hopper")
    );
}

#[test]
fn compare_evo_without_a_micro_log_says_what_to_run() {
    let evidence = fixture_evidence(false);
    let (ok, text) = compare(evidence.path());
    assert!(!ok);
    assert!(
        text.contains("run `cargo xtask micro --target hopper --head-dim 128` first"),
        "{text}"
    );
    assert_eq!(text.trim().lines().count(), 1, "one line: {text}");
}

/// On an H100: the hopper micro at D = 128 ranks its configs into `micro/hopper/` with positive
/// scores, the scope and provenance, best first.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_hopper_micro_ranks_its_configs_into_the_evidence() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let evidence = tempfile::tempdir().unwrap();
    let out = Command::new(xtask())
        .args([
            "micro",
            "--target",
            "hopper",
            "--head-dim",
            "128",
            "--tiles",
            "32",
            "--top",
            "4",
        ])
        .arg("--evidence")
        .arg(evidence.path())
        .output()
        .expect("xtask runs");
    let text = output_text(&out);
    println!("{text}");
    if text.contains("needs an sm_90 GPU") {
        return; // not a Hopper GPU: nothing to measure
    }
    assert!(out.status.success(), "{text}");
    let dir = MicroTarget::Hopper.dir(evidence.path());
    let best = MicroBest::read(&dir.join("best.json")).unwrap();
    assert_eq!(
        (best.target, best.head_dim, best.top.len()),
        (MicroTarget::Hopper, Some(128), 4)
    );
    assert!(best
        .top
        .windows(2)
        .all(|w| w[0].flops_per_cycle >= w[1].flops_per_cycle));
    assert!(best
        .top
        .iter()
        .all(|r| r.flops_per_cycle > 0.0 && r.blocks_per_sm >= 1));
    assert!(best.scope.contains("cannot predict"));
    let rows = attn_evidence::read_evo_log(&dir.join("log.csv")).unwrap();
    assert_eq!(rows.len(), best.configs);
    assert!(rows.iter().all(|r| r.status.is_ok()), "every config ran");
}
