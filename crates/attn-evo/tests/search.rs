//! The search's contract: operators stay in the space, selection follows p(r) ∝ 1/(r + N), a
//! synthetic fitness is optimised within the budget, and a resumed search loses nothing.

use std::collections::BTreeSet;

use attn_evo::{pick_rank, rank_probabilities, KnobDomain, Knobs, Options, Search, Space};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The tiled kernel's knobs and constraints (BLOCK_M a multiple of NUM_WARPS, ≤ 16 rows a warp).
fn tiled_like() -> Space {
    Space::new(
        vec![
            KnobDomain::new("BLOCK_M", vec![16, 32, 64, 128]).unwrap(),
            KnobDomain::new("BLOCK_N", vec![32, 64]).unwrap(),
            KnobDomain::new("NUM_WARPS", vec![2, 4, 8]).unwrap(),
            KnobDomain::new("STAGES", vec![1, 2]).unwrap(),
        ],
        |k| {
            let (m, w) = (k["BLOCK_M"], k["NUM_WARPS"]);
            if m % w != 0 || m / w > 16 {
                Err(format!("BLOCK_M={m}, NUM_WARPS={w}"))
            } else {
                Ok(())
            }
        },
    )
    .unwrap()
}

/// Six knobs of five values (15 625 configs); one forbidden corner; a single optimum.
fn big_space() -> Space {
    let knobs = (0..6)
        .map(|i| KnobDomain::new(format!("K{i}"), vec![1, 2, 4, 8, 16]).unwrap())
        .collect();
    Space::new(knobs, |k| {
        if k["K0"] == 16 && k["K1"] == 16 {
            Err("K0 and K1 cannot both be 16".into())
        } else {
            Ok(())
        }
    })
    .unwrap()
}

const OPTIMUM: [i64; 6] = [4, 8, 2, 16, 1, 4];

/// Smooth and unimodal in log2 of each knob: 0 at the optimum, negative elsewhere.
fn synthetic_fitness(k: &Knobs) -> f64 {
    -(0..6)
        .map(|i| {
            let d = (k[&format!("K{i}")] as f64).log2() - (OPTIMUM[i] as f64).log2();
            d * d
        })
        .sum::<f64>()
}

/// Runs a search to its end, stopping after `stop_after` evaluations if given (a kill).
fn drive(search: &mut Search, fitness: &dyn Fn(&Knobs) -> Option<f64>, stop_after: Option<usize>) {
    while let Some(generation) = search.next_generation() {
        for knobs in generation.candidates {
            if stop_after.is_some_and(|n| search.evaluated() >= n) {
                return;
            }
            let f = fitness(&knobs);
            search.record(generation.number, knobs, f);
        }
    }
}

#[test]
fn operators_respect_domains_and_constraints() {
    let space = tiled_like();
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let a = space.random(&mut rng).unwrap();
    let b = space.random(&mut rng).unwrap();
    for _ in 0..2000 {
        let child = space.crossover(&a, &b, &mut rng).unwrap();
        assert!(space.check(&child).is_ok(), "{child:?}");
        for (k, v) in &child {
            assert!(a[k] == *v || b[k] == *v, "crossover invented {k}={v}");
        }
        let mutant = space.mutate(&child, &mut rng).unwrap();
        assert!(space.check(&mutant).is_ok(), "{mutant:?}");
        let changed = mutant.iter().filter(|(k, v)| child[*k] != **v).count();
        assert_eq!(changed, 1, "a mutation changes exactly one knob");
        assert!(space.check(&space.random(&mut rng).unwrap()).is_ok());
    }
    // Out of domain, unknown, missing and constraint-violating configs are all rejected.
    let ok: Knobs = [
        ("BLOCK_M", 64),
        ("BLOCK_N", 64),
        ("NUM_WARPS", 4),
        ("STAGES", 2),
    ]
    .map(|(k, v)| (k.to_string(), v))
    .into();
    assert!(space.check(&ok).is_ok());
    let with = |k: &str, v: i64| {
        let mut c = ok.clone();
        c.insert(k.to_string(), v);
        c
    };
    assert!(space
        .check(&with("BLOCK_M", 48))
        .unwrap_err()
        .contains("outside its domain"));
    assert!(space
        .check(&with("EXTRA", 1))
        .unwrap_err()
        .contains("unknown knob"));
    assert!(
        space.check(&with("NUM_WARPS", 2)).is_err(),
        "64/2 = 32 rows a warp"
    );
    let mut missing = ok.clone();
    missing.remove("STAGES");
    assert!(space.check(&missing).unwrap_err().contains("not set"));
    // Projection keeps matching names (micro seeds) and rejects invalid results.
    let partial: Knobs = [("BLOCK_M".to_string(), 128), ("BLOCK_K".to_string(), 32)].into();
    assert_eq!(
        space.project(&partial, &with("NUM_WARPS", 8)).unwrap()["BLOCK_M"],
        128
    );
    assert!(
        space.project(&partial, &ok).is_none(),
        "128/4 = 32 rows a warp"
    );
}

#[test]
fn knob_declarations_are_checked() {
    assert!(KnobDomain::parse("MODE=0,1,2").is_ok());
    for bad in ["MODE", "=1", "MODE=a", "MODE=", "MODE=1,1"] {
        assert!(KnobDomain::parse(bad).is_err(), "{bad}");
    }
    let dup = vec![
        KnobDomain::new("A", vec![1]).unwrap(),
        KnobDomain::new("A", vec![2]).unwrap(),
    ];
    assert!(Space::unconstrained(dup).is_err());
    assert!(Space::unconstrained(vec![]).is_err());
}

#[test]
fn selection_probabilities_follow_one_over_rank_plus_n() {
    for n in [1, 2, 5, 8, 20] {
        let p = rank_probabilities(n);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        for r in 1..n {
            // p(r-1)/p(r) = (r + n)/(r - 1 + n)
            let ratio = p[r - 1] / p[r];
            assert!((ratio - (r + n) as f64 / (r - 1 + n) as f64).abs() < 1e-12);
        }
    }
    // Empirical frequencies of pick_rank match, within 5 standard errors.
    let n = 6;
    let draws = 200_000;
    let mut counts = vec![0usize; n];
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for _ in 0..draws {
        counts[pick_rank(n, &mut rng)] += 1;
    }
    for (r, p) in rank_probabilities(n).iter().enumerate() {
        let observed = counts[r] as f64 / draws as f64;
        let se = (p * (1.0 - p) / draws as f64).sqrt();
        assert!(
            (observed - p).abs() < 5.0 * se,
            "rank {r}: {observed} vs {p}"
        );
    }
}

#[test]
fn synthetic_fitness_reaches_its_optimum_within_budget() {
    let optimum: Knobs = OPTIMUM
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("K{i}"), *v))
        .collect();
    for seed in 0..5 {
        let options = Options {
            population: 12,
            generations: 40,
            budget: 400,
            seed,
            ..Options::default()
        };
        let mut search = Search::new(big_space(), options, vec![]).unwrap();
        drive(&mut search, &|k| Some(synthetic_fitness(k)), None);
        assert!(search.evaluated() <= 400);
        let best = search.best().unwrap();
        assert_eq!(best.knobs, optimum, "seed {seed}: best {best:?}");
        // Never measured twice, never an invalid config.
        let unique: BTreeSet<&Knobs> = search.history().iter().map(|e| &e.knobs).collect();
        assert_eq!(unique.len(), search.evaluated());
        assert!(search
            .history()
            .iter()
            .all(|e| search.space().check(&e.knobs).is_ok()));
    }
}

#[test]
fn invalid_candidates_score_nothing_and_the_search_goes_on() {
    // Half the space "crashes"; the search still finds the best of the rest.
    let fitness = |k: &Knobs| (k["K5"] != 16).then(|| synthetic_fitness(k));
    let options = Options {
        population: 10,
        generations: 30,
        budget: 300,
        seed: 5,
        ..Options::default()
    };
    let mut search = Search::new(big_space(), options, vec![]).unwrap();
    drive(&mut search, &fitness, None);
    assert!(search.history().iter().any(|e| e.fitness.is_none()));
    assert_eq!(search.best().unwrap().fitness, Some(0.0));
    assert!(search.population().iter().all(|e| e.fitness.is_some()));
}

#[test]
fn seeds_start_generation_zero_and_invalid_seeds_are_dropped() {
    let good: Knobs = [
        ("BLOCK_M", 32),
        ("BLOCK_N", 32),
        ("NUM_WARPS", 2),
        ("STAGES", 1),
    ]
    .map(|(k, v)| (k.to_string(), v))
    .into();
    let mut bad = good.clone();
    bad.insert("BLOCK_M".into(), 128); // 128/2 = 64 rows a warp: invalid
    let options = Options {
        population: 4,
        ..Options::default()
    };
    let mut search = Search::new(tiled_like(), options, vec![bad, good.clone()]).unwrap();
    let first = search.next_generation().unwrap();
    assert_eq!(first.number, 0);
    assert_eq!(first.candidates[0], good);
    assert_eq!(first.candidates.len(), 4);
}

#[test]
fn a_resumed_search_loses_nothing_and_proposes_what_the_uninterrupted_one_would() {
    let fitness = |k: &Knobs| (k["K2"] != 1).then(|| synthetic_fitness(k));
    let options = Options {
        population: 6,
        generations: 12,
        budget: 60,
        seed: 42,
        ..Options::default()
    };
    let mut whole = Search::new(big_space(), options, vec![]).unwrap();
    drive(&mut whole, &fitness, None);
    for kill_at in [1, 5, 6, 17, 59] {
        let mut killed = Search::new(big_space(), options, vec![]).unwrap();
        drive(&mut killed, &fitness, Some(kill_at));
        let log = killed.history().to_vec();
        assert_eq!(log.len(), kill_at);
        let mut resumed = Search::new(big_space(), options, vec![])
            .unwrap()
            .resume(log.clone())
            .unwrap();
        drive(&mut resumed, &fitness, None);
        assert_eq!(&resumed.history()[..kill_at], &log[..], "kept as logged");
        assert_eq!(resumed.history(), whole.history(), "killed at {kill_at}");
    }
}

#[test]
fn planning_narrows_domains_and_constrains_source_kernels() {
    use attn_evo::{narrow_domains, source_constraint, EvoError};
    let available = [("BLOCK_M", &[64_i64, 128][..]), ("STAGES", &[1, 2, 3][..])];
    let declared = [("STAGES".to_string(), vec![2, 3])].into();
    let knobs = narrow_domains("mma", available, &declared).unwrap();
    assert_eq!(knobs["BLOCK_M"], [64, 128]);
    assert_eq!(knobs["STAGES"], [2, 3]);
    let outside = [("STAGES".to_string(), vec![7])].into();
    assert!(matches!(
        narrow_domains("mma", available, &outside),
        Err(EvoError::OutsideDomain { value: 7, .. })
    ));
    let unknown = [("NOPE".to_string(), vec![1])].into();
    assert!(matches!(
        narrow_domains("mma", available, &unknown),
        Err(EvoError::UnknownKnob { .. })
    ));
    let fits = source_constraint([("SHARED_BYTES".to_string(), 1024)].into(), 1024, 2048);
    assert!(fits(&[("NUM_WARPS".to_string(), 32)].into()).is_ok());
    assert!(fits(&[("NUM_WARPS".to_string(), 33)].into()).is_err());
    assert!(fits(&[("SHARED_BYTES".to_string(), 4096)].into()).is_err());
    // A warp-specialised kernel's producer warps count towards its block.
    let producers = |w: i64| {
        [
            ("NUM_WARPS".to_string(), w),
            ("PRODUCER_WARPS".to_string(), 4),
        ]
        .into()
    };
    assert!(fits(&producers(28)).is_ok());
    assert!(fits(&producers(29)).is_err());
}
