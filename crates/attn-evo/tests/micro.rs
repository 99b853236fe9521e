//! The micro-benchmark's ranking, the seeds it gives a search, and its rank correlation with a
//! search, from fixture logs (`tests/fixtures/micro/README.md`).

use std::path::{Path, PathBuf};

use attn_evidence::{read_evo_log, MicroCorrelation, MicroTarget, SearchSpec};
use attn_evo::{
    micro_correlation, micro_results, project_micro, seed_from_micro, CorrelationInputs, EvoError,
    KnobDomain, Knobs, MicroOutcome, Space,
};

fn knobs(pairs: &[(&str, i64)]) -> Knobs {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// The fixtures, relative to the crate's folder: where `cargo test` starts a test and where the
/// bundle's `run-gpu-tests.sh` enters before running it. A compile-time path (`CARGO_MANIFEST_DIR`)
/// would name the build machine's checkout and fail wherever the bundle is run from.
fn fixtures() -> PathBuf {
    let relative = Path::new("tests/fixtures/micro");
    assert!(
        relative.join("hopper-log.csv").is_file(),
        "{} not found from {}: run from crates/attn-evo (as cargo test and run-gpu-tests.sh do)",
        relative.display(),
        std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default()
    );
    relative.to_path_buf()
}

fn outcome(cycles: Result<f64, &str>, blocks_per_sm: u32) -> MicroOutcome {
    MicroOutcome {
        cycles: cycles.map_err(str::to_string),
        blocks_per_sm,
        compile_s: 1.5,
        run_s: 0.25,
    }
}

#[test]
fn the_ranking_counts_flops_per_cycle_per_sm_best_first() {
    let config = |m, n, w| {
        knobs(&[
            ("BLOCK_M", m),
            ("BLOCK_N", n),
            ("NUM_WARPS", w),
            ("STAGES", 2),
            ("PRODUCER_WARPS", 4),
            ("SHARED_BYTES", 1),
        ])
    };
    let configs = [config(128, 128, 8), config(64, 128, 4), config(64, 64, 4)];
    let outcomes = [
        outcome(Ok(64_000.0), 1),
        // Half the FLOPs a block, the same cycles, but two blocks on each SM: as fast per SM.
        outcome(Ok(64_000.0), 2),
        outcome(Err("a block reported no cycles"), 0),
    ];
    let (rows, ranked) = micro_results(MicroTarget::Hopper, 128, &configs, outcomes, 64, 1000, 8);
    assert_eq!(rows.len(), 3);
    let flops = 4.0 * 128.0 * 128.0 * 128.0 * 64.0 / 64_000.0;
    assert_eq!(rows[0].score, Some(flops));
    assert_eq!(rows[1].score, Some(flops));
    assert_eq!(rows[0].median_us, Some(64.0), "64,000 cycles at 1000 MHz");
    assert!(!rows[2].status.is_ok() && rows[2].score.is_none());
    // Rows and ranking keep the ranked knobs only, not the launch defines.
    assert_eq!(rows[0].config.knobs.len(), 4);
    assert!(!rows[0].config.knobs.contains_key("SHARED_BYTES"));
    assert_eq!(ranked.len(), 2);
    assert_eq!(ranked[1].blocks_per_sm, 2);
    assert_eq!(ranked[0].cycles_per_tile, 1000.0);
    // The cp.async metric: one FMA per loaded K and V element.
    let cp = [knobs(&[
        ("BLOCK_N", 64),
        ("NUM_WARPS", 4),
        ("STAGES", 2),
        ("VEC_WIDTH", 16),
    ])];
    let (_, ranked) = micro_results(
        MicroTarget::CpAsync,
        64,
        &cp,
        [outcome(Ok(6400.0), 1)],
        64,
        1000,
        1,
    );
    assert_eq!(ranked[0].flops_per_cycle, 4.0 * 64.0 * 64.0 * 64.0 / 6400.0);
    assert_eq!(ranked[0].config.len(), 3, "VEC_WIDTH is not an mma knob");
}

/// hopper's knobs and constraints as its registry states them (BLOCK_M = 16 × NUM_WARPS, 12 warps
/// only at D = 64, PINGPONG needs 8+ warps and OVERLAP), at D = 128.
fn hopper_like() -> Space {
    Space::new(
        vec![
            KnobDomain::new("BLOCK_M", vec![64, 128, 192]).unwrap(),
            KnobDomain::new("BLOCK_N", vec![64, 128]).unwrap(),
            KnobDomain::new("NUM_WARPS", vec![4, 8, 12]).unwrap(),
            KnobDomain::new("STAGES", vec![2, 3, 4]).unwrap(),
            KnobDomain::new("OVERLAP", vec![0, 1]).unwrap(),
            KnobDomain::new("PINGPONG", vec![0, 1]).unwrap(),
        ],
        |k| {
            let (m, w) = (k["BLOCK_M"], k["NUM_WARPS"]);
            if m != 16 * w || w == 12 {
                return Err(format!("BLOCK_M={m}, NUM_WARPS={w}"));
            }
            if k["PINGPONG"] == 1 && (w < 8 || k["OVERLAP"] != 1) {
                return Err("PINGPONG=1 needs NUM_WARPS >= 8 and OVERLAP=1".into());
            }
            Ok(())
        },
    )
    .unwrap()
}

#[test]
fn micro_configs_complete_into_the_nearest_valid_config() {
    let space = hopper_like();
    let defaults = knobs(&[
        ("BLOCK_M", 128),
        ("BLOCK_N", 128),
        ("NUM_WARPS", 8),
        ("STAGES", 3),
        ("OVERLAP", 1),
        ("PINGPONG", 1),
    ]);
    let check = |micro: &[(&str, i64)], want: Option<&[(&str, i64)]>| {
        let got = project_micro(&space, &knobs(micro), &defaults);
        assert_eq!(got, want.map(knobs), "{micro:?}");
        if let Some(got) = got {
            assert!(space.check(&got).is_ok());
        }
    };
    // The defaults complete a two-warpgroup config as they are.
    check(
        &[
            ("BLOCK_M", 128),
            ("BLOCK_N", 64),
            ("NUM_WARPS", 8),
            ("STAGES", 2),
        ],
        Some(&[
            ("BLOCK_M", 128),
            ("BLOCK_N", 64),
            ("NUM_WARPS", 8),
            ("STAGES", 2),
            ("OVERLAP", 1),
            ("PINGPONG", 1),
        ]),
    );
    // One warpgroup cannot ping-pong: PINGPONG turns off, OVERLAP stays (one knob changed).
    check(
        &[
            ("BLOCK_M", 64),
            ("BLOCK_N", 128),
            ("NUM_WARPS", 4),
            ("STAGES", 4),
        ],
        Some(&[
            ("BLOCK_M", 64),
            ("BLOCK_N", 128),
            ("NUM_WARPS", 4),
            ("STAGES", 4),
            ("OVERLAP", 1),
            ("PINGPONG", 0),
        ]),
    );
    // Outside hopper's domain (the unpipelined reference) or its constraints: no seed.
    check(
        &[
            ("BLOCK_M", 128),
            ("BLOCK_N", 64),
            ("NUM_WARPS", 8),
            ("STAGES", 1),
        ],
        None,
    );
    check(
        &[
            ("BLOCK_M", 192),
            ("BLOCK_N", 64),
            ("NUM_WARPS", 12),
            ("STAGES", 2),
        ],
        None,
    );
    // Two knobs must move when neither alone makes the fill valid.
    let strict = Space::new(
        vec![
            KnobDomain::new("A", vec![0, 1]).unwrap(),
            KnobDomain::new("B", vec![0, 1]).unwrap(),
            KnobDomain::new("C", vec![0, 1]).unwrap(),
        ],
        |k| {
            if k["A"] == 1 && k["B"] + k["C"] != 0 {
                Err("A=1 needs B=C=0".into())
            } else {
                Ok(())
            }
        },
    )
    .unwrap();
    let fill = knobs(&[("B", 1), ("C", 1)]);
    assert_eq!(
        project_micro(&strict, &knobs(&[("A", 1)]), &fill),
        Some(knobs(&[("A", 1), ("B", 0), ("C", 0)]))
    );
}

#[test]
fn seeds_follow_micro_s_ranking_without_duplicates() {
    let rows = read_evo_log(&fixtures().join("hopper-log.csv")).unwrap();
    let space = hopper_like();
    let defaults = knobs(&[
        ("BLOCK_M", 128),
        ("BLOCK_N", 128),
        ("NUM_WARPS", 8),
        ("STAGES", 3),
        ("OVERLAP", 1),
        ("PINGPONG", 1),
    ]);
    let mut seeds = vec![defaults.clone()];
    let result = seed_from_micro(&mut seeds, &rows, &space, &defaults);
    // 8 ranked (one invalid row); STAGES 1 has no place in hopper's space; the best (STAGES 3 at
    // 128 × 128) is the default, already a seed.
    assert_eq!((result.ranked, result.unplaced, result.added), (8, 1, 6));
    assert_eq!(seeds.len(), 7);
    assert_eq!(
        seeds[1]["STAGES"], 2,
        "the second best: 128 x 128, STAGES 2"
    );
    assert!(seeds.iter().all(|s| space.check(s).is_ok()));
    let last = seeds.last().unwrap();
    assert_eq!(
        (last["BLOCK_N"], last["NUM_WARPS"], last["PINGPONG"]),
        (64, 4, 0)
    );
}

fn correlate(
    micro_head_dim: Option<usize>,
    evo_rows: &[attn_evidence::EvoCandidate],
) -> attn_evo::Result<MicroCorrelation> {
    let micro_log = fixtures().join("hopper-log.csv");
    let micro_rows = read_evo_log(&micro_log).unwrap();
    let run = fixtures().join("evo-hopper");
    let spec = SearchSpec::read(&run.join("search.json")).unwrap();
    micro_correlation(&CorrelationInputs {
        target: MicroTarget::Hopper,
        micro_rows: &micro_rows,
        micro_log: &micro_log,
        micro_head_dim,
        spec: &spec,
        evo_rows,
        evo_run: &run,
    })
}

#[test]
fn the_correlation_of_fixture_logs_matches_scipy() {
    let evo_rows = read_evo_log(&fixtures().join("evo-hopper/log.csv")).unwrap();
    let c = correlate(Some(128), &evo_rows).unwrap();
    assert_eq!(c.kind, MicroCorrelation::KIND);
    assert_eq!((c.pairs.len(), c.micro_configs, c.evo_configs), (7, 8, 8));
    // In micro's order, each with the best speedup of the configs sharing its knobs.
    let speedups: Vec<f64> = c.pairs.iter().map(|p| p.evo_speedup).collect();
    assert_eq!(speedups, [1.02, 0.97, 0.92, 0.95, 0.70, 0.72, 0.55]);
    assert_eq!(
        c.pairs[0].evo_configs, 2,
        "OVERLAP/PINGPONG 1/1 and 0/0 share micro's knobs"
    );
    assert_eq!(
        c.pairs[6].evo_configs, 1,
        "a row without a speedup does not count"
    );
    assert_eq!((c.pairs[2].micro_rank, c.pairs[2].evo_rank), (3.0, 4.0));
    // SciPy 1.17 on the same 7 pairs.
    assert!((c.spearman.rho - 0.9285714285714288).abs() < 1e-12);
    assert!((c.spearman.p_value - 0.0025194724037946887).abs() < 1e-9);
    assert!((c.kendall.tau - 0.8095238095238096).abs() < 1e-12);
    assert!(c.kendall.exact && (c.kendall.p_value - 0.010714285714285714).abs() < 1e-12);
    let [lo, hi] = c.spearman_ci95.unwrap();
    assert!((lo - 0.5641945707140115).abs() < 1e-9 && (hi - 0.9902013190029787).abs() < 1e-9);
    assert!(
        c.reading
            .starts_with("micro's ranking predicted the measured one"),
        "{}",
        c.reading
    );
    assert!(c.scope.contains("cannot predict"));
    let lines = attn_evo::correlation_lines(&c);
    assert!(
        lines.iter().any(|l| l.contains("Spearman's ρ = 0.93")),
        "{lines:?}"
    );
    assert!(lines
        .last()
        .unwrap()
        .starts_with("what micro cannot predict"));
    // Written and read back as evidence.
    let dir = std::env::temp_dir().join(format!("attn-micro-correlation-{}", std::process::id()));
    let path = dir.join("correlation.json");
    c.write(&path).unwrap();
    assert_eq!(MicroCorrelation::read(&path).unwrap(), c);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_correlation_it_cannot_compute_says_why() {
    let evo_rows = read_evo_log(&fixtures().join("evo-hopper/log.csv")).unwrap();
    let other_head_dim = correlate(Some(64), &evo_rows).unwrap_err();
    assert!(
        matches!(&other_head_dim, EvoError::Correlation(m) if m.contains("head dim 64") && m.contains("--head-dim 128")),
        "{other_head_dim}"
    );
    let two = correlate(None, &evo_rows[..3]).unwrap_err();
    assert!(
        matches!(&two, EvoError::Correlation(m) if m.starts_with("only 2 config(s)")),
        "{two}"
    );
}
