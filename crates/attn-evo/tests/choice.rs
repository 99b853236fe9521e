//! A search over several implementations: the implementation is a categorical knob with each
//! one's knobs beneath it. Operators stay valid, every implementation is reachable (one without
//! knobs too), a switch carries knobs over, logs round-trip and a resumed search loses nothing.

use std::collections::BTreeSet;

use attn_evo::{Branch, KnobDomain, Knobs, Options, Search, Space, IMPL_KNOB};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

const WIDE: i64 = 0;
const LIBRARY: i64 = 1;
const TILES: i64 = 2;

fn knobs(pairs: &[(&str, i64)]) -> Knobs {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// hopper-like (BLOCK_M = 16 × NUM_WARPS), cublas-like (no knobs), tiled-like.
fn three_implementations() -> Space {
    let wide = Branch::new(
        "wide",
        vec![
            KnobDomain::new("BLOCK_M", vec![64, 128, 192]).unwrap(),
            KnobDomain::new("NUM_WARPS", vec![4, 8, 12]).unwrap(),
        ],
        |k| {
            let ok = k["BLOCK_M"] == 16 * k["NUM_WARPS"];
            ok.then_some(())
                .ok_or_else(|| "BLOCK_M != 16 x NUM_WARPS".into())
        },
        knobs(&[("BLOCK_M", 128), ("NUM_WARPS", 8)]),
    );
    let library = Branch::new("library", vec![], |_| Ok(()), Knobs::new());
    let tiles = Branch::new(
        "tiles",
        vec![
            KnobDomain::new("BLOCK_M", vec![16, 32, 64, 128]).unwrap(),
            KnobDomain::new("BLOCK_N", vec![32, 64]).unwrap(),
            KnobDomain::new("NUM_WARPS", vec![2, 4, 8]).unwrap(),
            KnobDomain::new("STAGES", vec![1, 2]).unwrap(),
        ],
        |k| {
            let (m, w) = (k["BLOCK_M"], k["NUM_WARPS"]);
            let ok = m % w == 0 && m / w <= 16;
            ok.then_some(())
                .ok_or_else(|| format!("BLOCK_M={m}, NUM_WARPS={w}"))
        },
        knobs(&[
            ("BLOCK_M", 64),
            ("BLOCK_N", 64),
            ("NUM_WARPS", 4),
            ("STAGES", 2),
        ]),
    );
    Space::choice(vec![wide.unwrap(), library.unwrap(), tiles.unwrap()]).unwrap()
}

fn implementation(k: &Knobs) -> i64 {
    k[IMPL_KNOB]
}

/// The knobs a config of each implementation sets, without the choice.
fn own(k: &Knobs) -> Knobs {
    let mut own = k.clone();
    own.remove(IMPL_KNOB);
    own
}

#[test]
fn operators_over_a_choice_stay_valid_and_reach_every_implementation() {
    let space = three_implementations();
    assert_eq!(space.size(), 9 + 1 + 48);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut drawn = BTreeSet::new();
    let mut switched_to = BTreeSet::new();
    for _ in 0..3000 {
        let a = space.random(&mut rng).unwrap();
        let b = space.random(&mut rng).unwrap();
        assert!(space.check(&a).is_ok(), "{a:?}");
        drawn.insert(implementation(&a));

        let child = space.crossover(&a, &b, &mut rng).unwrap();
        assert!(space.check(&child).is_ok(), "{a:?} x {b:?} = {child:?}");
        let i = implementation(&child);
        assert!(
            i == implementation(&a) || i == implementation(&b),
            "{child:?}"
        );
        for (k, v) in own(&child) {
            let from = [&a, &b].iter().any(|p| p.get(&k) == Some(&v));
            assert!(from, "crossover invented {k}={v}: {a:?} x {b:?}");
        }

        let mutant = space.mutate(&child, &mut rng).unwrap();
        assert!(space.check(&mutant).is_ok(), "{mutant:?}");
        if implementation(&mutant) == i {
            let changed = own(&mutant)
                .iter()
                .filter(|(k, v)| own(&child)[*k] != **v)
                .count();
            assert_eq!(changed, 1, "one knob changes: {child:?} -> {mutant:?}");
        } else {
            switched_to.insert(implementation(&mutant));
        }
    }
    assert_eq!(drawn, [WIDE, LIBRARY, TILES].into());
    assert_eq!(switched_to, [WIDE, LIBRARY, TILES].into());
}

#[test]
fn a_switch_carries_knobs_that_fit_and_fills_the_rest_with_defaults() {
    let space = three_implementations();
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    // An implementation without knobs has only the choice to mutate: it always switches.
    let library = knobs(&[(IMPL_KNOB, LIBRARY)]);
    let tiles_parent = knobs(&[
        (IMPL_KNOB, TILES),
        ("BLOCK_M", 64),
        ("BLOCK_N", 32),
        ("NUM_WARPS", 4),
        ("STAGES", 1),
    ]);
    for _ in 0..200 {
        let from_library = space.mutate(&library, &mut rng).unwrap();
        match implementation(&from_library) {
            // Nothing to carry: the defaults.
            WIDE => assert_eq!(
                own(&from_library),
                knobs(&[("BLOCK_M", 128), ("NUM_WARPS", 8)])
            ),
            TILES => assert_eq!(
                own(&from_library),
                knobs(&[
                    ("BLOCK_M", 64),
                    ("BLOCK_N", 64),
                    ("NUM_WARPS", 4),
                    ("STAGES", 2)
                ])
            ),
            other => panic!("mutated to itself: {other}"),
        }
        let mutant = space.mutate(&tiles_parent, &mut rng).unwrap();
        if implementation(&mutant) == WIDE {
            // BLOCK_M=64 and NUM_WARPS=4 fit the wide kernel and are valid there: kept.
            assert_eq!(own(&mutant), knobs(&[("BLOCK_M", 64), ("NUM_WARPS", 4)]));
        }
    }
    // A config that cannot be valid is refused with its reason.
    let cases = [
        (knobs(&[("BLOCK_M", 64)]), "impl is not set"),
        (knobs(&[(IMPL_KNOB, 3)]), "not an implementation"),
        (
            knobs(&[(IMPL_KNOB, LIBRARY), ("BLOCK_M", 64)]),
            "library: unknown knob BLOCK_M",
        ),
        (
            knobs(&[(IMPL_KNOB, WIDE), ("BLOCK_M", 64), ("NUM_WARPS", 8)]),
            "wide: BLOCK_M != 16 x NUM_WARPS",
        ),
    ];
    for (config, why) in cases {
        let err = space.check(&config).unwrap_err();
        assert!(err.contains(why), "{config:?}: {err}");
    }
}

#[test]
fn rows_name_the_implementation_and_read_back() {
    let space = three_implementations();
    let config = knobs(&[(IMPL_KNOB, WIDE), ("BLOCK_M", 64), ("NUM_WARPS", 4)]);
    let row = space.to_row(&config);
    assert_eq!(row.implementation.as_deref(), Some("wide"));
    assert_eq!(space.from_row(&row).unwrap(), config);
    assert_eq!(space.describe(&config), "wide BLOCK_M=64,NUM_WARPS=4");
    assert_eq!(space.describe(&knobs(&[(IMPL_KNOB, LIBRARY)])), "library");
    let mut unknown = row.clone();
    unknown.implementation = Some("hopper".into());
    assert!(space.from_row(&unknown).unwrap_err().contains("\"hopper\""));
    assert_eq!(
        space.columns(),
        ["BLOCK_M", "BLOCK_N", "NUM_WARPS", "STAGES", IMPL_KNOB]
    );
    // A seed without an implementation (a micro tile config) seeds each one that has its knobs.
    let micro = knobs(&[("BLOCK_M", 64), ("BLOCK_K", 32)]);
    let seeded: Vec<i64> = space
        .projections(&micro, &Knobs::new())
        .iter()
        .map(implementation)
        .collect();
    assert_eq!(
        seeded,
        [TILES],
        "wide needs NUM_WARPS=4 for BLOCK_M=64, its default is 8"
    );
    let defaults = space.defaults();
    assert_eq!(
        defaults.iter().map(implementation).collect::<Vec<_>>(),
        [WIDE, LIBRARY, TILES]
    );
}

/// A fitness that prefers the tile kernel with big tiles, then the library.
fn fitness(k: &Knobs) -> Option<f64> {
    let own: i64 = own(k).values().sum();
    match implementation(k) {
        LIBRARY => Some(100.0),
        TILES if k["STAGES"] == 1 => None, // "crashes"
        _ => Some(own as f64),
    }
}

fn drive(search: &mut Search, stop_after: Option<usize>) {
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

fn options() -> Options {
    Options {
        population: 6,
        generations: 12,
        budget: 40,
        seed: 17,
        ..Options::default()
    }
}

#[test]
fn a_choice_search_seeds_every_default_measures_nothing_twice_and_resumes() {
    let space = three_implementations();
    let seeds = space.defaults();
    let mut whole = Search::new(space, options(), seeds.clone()).unwrap();
    let first = whole.next_generation().unwrap();
    assert_eq!(
        &first.candidates[..3],
        &seeds[..],
        "generation 0 starts with each default"
    );
    let mut whole = Search::new(three_implementations(), options(), seeds.clone()).unwrap();
    drive(&mut whole, None);
    let history = whole.history();
    assert_eq!(history.len(), 40);
    let unique: BTreeSet<&Knobs> = history.iter().map(|e| &e.knobs).collect();
    assert_eq!(unique.len(), history.len(), "never measured twice");
    assert!(history
        .iter()
        .all(|e| whole.space().check(&e.knobs).is_ok()));
    let library = history
        .iter()
        .filter(|e| implementation(&e.knobs) == LIBRARY);
    assert_eq!(library.count(), 1, "the library has one config");
    // The best: the wide kernel's biggest tile (204), above the tile kernel's (202).
    let best = knobs(&[(IMPL_KNOB, WIDE), ("BLOCK_M", 192), ("NUM_WARPS", 12)]);
    assert_eq!(whole.best().unwrap().knobs, best);

    for kill_at in [2, 7, 23] {
        let mut killed = Search::new(three_implementations(), options(), seeds.clone()).unwrap();
        drive(&mut killed, Some(kill_at));
        // Through the log's text, as a real resume reads it.
        let space = three_implementations();
        let log: Vec<_> = killed
            .history()
            .iter()
            .map(|e| (e.generation, space.to_row(&e.knobs), e.fitness))
            .collect();
        let history = log
            .into_iter()
            .map(|(generation, row, fitness)| attn_evo::Evaluation {
                generation,
                knobs: space.from_row(&row).unwrap(),
                fitness,
            })
            .collect();
        let mut resumed = Search::new(space, options(), seeds.clone())
            .unwrap()
            .resume(history)
            .unwrap();
        drive(&mut resumed, None);
        assert_eq!(resumed.history(), whole.history(), "killed at {kill_at}");
    }
}

#[test]
fn choices_are_declared_once() {
    let branch = |name: &str| Branch::new(name, vec![], |_| Ok(()), Knobs::new()).unwrap();
    assert!(Space::choice(vec![branch("a"), branch("a")]).is_err());
    assert!(Space::choice(vec![]).is_err());
    let only = Space::choice(vec![branch("cublas")]).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    assert_eq!(only.random(&mut rng), Some(knobs(&[(IMPL_KNOB, 0)])));
    assert_eq!(
        only.mutate(&knobs(&[(IMPL_KNOB, 0)]), &mut rng),
        None,
        "nothing to change"
    );
}
