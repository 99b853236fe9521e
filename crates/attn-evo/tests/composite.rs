//! `--fitness composite` on CPU: finalists ranked by the composite fitness from real ncu captures
//! (an H100 profile of PyTorch's SDPA: a fill kernel and cuDNN's attention kernel), the winner and
//! the evidence that records every term.

use attn_evidence::{CandidateStatus, EvoCandidate, EvoFinalists, ImplConfig, SearchSpec};
use attn_evo::{Composite, Knobs};
use attn_ncu::{group, parse_raw, FitnessWeights, KernelFilter, KernelSummary};

fn captured(filter: &str) -> Vec<KernelSummary> {
    let csv = include_str!("../../attn-ncu/tests/fixtures/h100_sdpa_cudnn_raw.csv");
    let launches = parse_raw(csv).unwrap();
    group(&launches, Some(&KernelFilter::parse(filter).unwrap()))
}

fn spec() -> SearchSpec {
    serde_json::from_value(serde_json::json!({
        "target": "cublas,mma", "implementation": null, "src": null, "entry": null,
        "implementations": [
            {"name": "cublas", "knobs": {}},
            {"name": "mma", "knobs": {"BLOCK_M": [64, 128]}},
        ],
        "defines": {}, "knobs": {}, "shape": {"batch": 2, "heads": 8, "seq_q": 1024, "seq_kv": 1024,
        "head_dim": 64, "causal": false, "dtype": "fp16"},
        "baseline": "sdpa", "seed": 3, "population": 4, "generations": 2,
    }))
    .unwrap()
}

fn row(
    generation: u32,
    implementation: &str,
    knobs: &[(&str, i64)],
    speedup: Option<f64>,
) -> EvoCandidate {
    EvoCandidate {
        generation,
        config: ImplConfig {
            implementation: Some(implementation.into()),
            knobs: knobs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        },
        status: match speedup {
            Some(_) => CandidateStatus::Ok,
            None => CandidateStatus::invalid("illegal address"),
        },
        median_us: speedup.map(|s| 20.0 / s),
        speedup,
        speedup_lower: speedup.map(|s| s - 0.01),
        speedup_upper: speedup.map(|s| s + 0.01),
        score: speedup,
        compile_s: None,
        run_s: Some(1.0),
    }
}

#[test]
fn finalists_are_ranked_by_the_composite_and_every_term_is_recorded() {
    let rows = vec![
        row(0, "cublas", &[], Some(0.99)),
        row(0, "mma", &[("BLOCK_M", 64)], Some(1.00)),
        row(1, "mma", &[("BLOCK_M", 128)], None),
        row(1, "mma", &[("BLOCK_M", 32)], Some(0.98)),
        row(1, "mma", &[("BLOCK_M", 16)], Some(0.50)),
    ];
    let composite = Composite {
        finalists: 3,
        syncs_per_tile: 1.0,
        weights: FitnessWeights::default(),
    };
    let mut asked = vec![];
    // The fastest (mma 64) profiles like the fill kernel: busy SMs, an idle tensor pipe; cublas
    // like cuDNN's kernel: tensor pipe 31% busy; mma 32's profile fails.
    let profile = |implementation: Option<&str>, knobs: &Knobs| {
        asked.push((implementation.map(str::to_owned), knobs.clone()));
        match (implementation, knobs.get("BLOCK_M")) {
            (Some("cublas"), None) => Ok(captured("cudnn")),
            (Some("mma"), Some(64)) => Ok(captured("distribution")),
            _ => Err("ncu: the profiled program failed (exit code 1): illegal address".into()),
        }
    };
    let finalists =
        attn_evo::rank_finalists(&spec(), "r", &rows, &composite, "ncu".into(), None, profile);
    assert_eq!(
        asked.len(),
        3,
        "the invalid and the slowest rows are not finalists"
    );
    let order: Vec<(usize, usize, Option<&str>)> = finalists
        .finalists
        .iter()
        .map(|f| (f.rank, f.speedup_rank, f.implementation.as_deref()))
        .collect();
    assert_eq!(
        order,
        [
            (1, 2, Some("cublas")),
            (2, 1, Some("mma")),
            (3, 3, Some("mma"))
        ]
    );
    let [cublas, mma, failed] = &finalists.finalists[..] else {
        panic!("three finalists")
    };
    // 1000·0.99 + 2·30.9 + 6.82 − 5·1 (168 registers: no register penalty, no spills).
    let score = cublas.fitness.unwrap();
    assert!((score.inputs.tensor_pct - 30.9).abs() < 1e-9, "{score:?}");
    assert!((score.inputs.sm_busy_pct - 6.82).abs() < 1e-9, "{score:?}");
    assert_eq!(
        (score.inputs.registers_per_thread, score.penalty),
        (168.0, 5.0)
    );
    assert!(
        (score.score - (990.0 + 61.8 + 6.82 - 5.0)).abs() < 1e-9,
        "{score:?}"
    );
    let fill = mma.fitness.unwrap();
    assert!(fill.score < score.score && mma.speedup > cublas.speedup);
    assert_eq!(cublas.kernels.len(), 1);
    assert!(cublas.kernels[0].kernel.contains("cudnn"));
    assert!(failed.fitness.is_none());
    assert_eq!(
        failed.status,
        CandidateStatus::invalid("ncu: the profiled program failed (exit code 1): illegal address")
    );
    assert!(finalists.syncs_per_tile_source.contains("--syncs-per-tile"));
    assert!(finalists.formula.starts_with("1000·speedup + 2·tensor%"));

    // The composite winner becomes best.json's config, with the section that says why.
    let (winner, fitness) = attn_evo::composite_winner(&spec(), &finalists, &rows).unwrap();
    assert_eq!(winner, &rows[0]);
    assert_eq!(
        (fitness.finalists, fitness.scored, fitness.speedup_rank),
        (3, 2, 2)
    );
    assert_eq!(fitness.winner, Some(score));
    let mut best = attn_evo::evo_best(&spec(), "r", &rows, winner, vec![], None);
    assert_eq!(best.implementation.as_deref(), Some("cublas"));
    assert!(best.config.is_empty());
    assert_eq!(
        best.reproduce,
        "cargo xtask gate --impl cublas --shape 2,8,1024,64 --dtype fp16 --baseline sdpa"
    );
    best.ncu = attn_evo::composite_note(&fitness);
    best.fitness = Some(fitness);
    assert!(
        best.ncu.contains("3 finalists profiled with ncu, 2 scored"),
        "{}",
        best.ncu
    );

    // Every term survives the files.
    let dir = tempfile::tempdir().unwrap();
    finalists.write(&dir.path().join("finalists.json")).unwrap();
    let back = EvoFinalists::read(&dir.path().join("finalists.json")).unwrap();
    assert_eq!(back, finalists);
    best.write(&dir.path().join("best.json")).unwrap();
    assert_eq!(
        attn_evidence::EvoBest::read(&dir.path().join("best.json")).unwrap(),
        best
    );
    let table = attn_evo::finalists_table(&finalists);
    assert_eq!(table.lines().count(), 5, "{table}");
    assert!(
        table.contains("cublas") && table.contains("illegal address"),
        "{table}"
    );
}

#[test]
fn a_path_of_several_kernels_is_scored_over_all_of_them_and_none_scored_keeps_the_fastest() {
    let rows = vec![
        row(0, "cublas", &[], Some(1.2)),
        row(0, "mma", &[("BLOCK_M", 64)], Some(1.1)),
    ];
    let composite = Composite {
        finalists: 8,
        syncs_per_tile: 2.0,
        weights: FitnessWeights::default(),
    };
    let both = |_: Option<&str>, _: &Knobs| Ok(captured("regex:."));
    let ranked =
        attn_evo::rank_finalists(&spec(), "r", &rows, &composite, String::new(), None, both);
    let inputs = ranked.finalists[0].fitness.unwrap().inputs;
    assert_eq!(ranked.finalists[0].kernels.len(), 2);
    assert!(
        inputs.sm_busy_pct > 6.82 && inputs.sm_busy_pct < 43.6,
        "{inputs:?}"
    );
    assert_eq!(
        (inputs.syncs_per_tile, inputs.registers_per_thread),
        (2.0, 168.0)
    );

    let none = |_: Option<&str>, _: &Knobs| Err("timeout after 1 s".to_string());
    let ranked =
        attn_evo::rank_finalists(&spec(), "r", &rows, &composite, String::new(), None, none);
    let (winner, fitness) = attn_evo::composite_winner(&spec(), &ranked, &rows).unwrap();
    assert_eq!(winner, &rows[0], "by speedup when nothing could be scored");
    assert_eq!((fitness.scored, fitness.winner), (0, None));
    assert!(attn_evo::composite_note(&fitness).contains("none could be scored"));
}
