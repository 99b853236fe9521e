//! Properties of the bootstrap and of compare, on generated data (proptest, fixed seed).

use attn_stats::{
    bootstrap, compare, speedup_replicates, statistic, BootstrapOptions, CiMethod, CompareOptions,
    Sample,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

fn config() -> Config {
    Config {
        cases: 48,
        rng_seed: RngSeed::Fixed(0x5EED),
        failure_persistence: None,
        ..Config::default()
    }
}

/// Timing-like data: positive, with a spread of a few percent up to 2×.
fn timings(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(1.0f64..2.0, len)
}

fn small(method: CiMethod, seed: u64) -> BootstrapOptions {
    BootstrapOptions {
        resamples: 1_000,
        seed,
        method,
        ..BootstrapOptions::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// A statistic that is 1 exactly when every resampled value is one of the sample's sees only
    /// 1s: the whole interval collapses onto 1.
    #[test]
    fn a_resample_only_holds_values_of_the_sample(values in prop::collection::vec(-1e6f64..1e6, 2..40), seed: u64) {
        let sample = Sample::new(values.clone()).unwrap();
        let all_from_sample = |resample: &mut [f64]| {
            f64::from(u8::from(resample.iter().all(|x| values.contains(x))))
        };
        let estimate = bootstrap(&sample, &[all_from_sample], &small(CiMethod::Percentile, seed)).unwrap()[0];
        prop_assert_eq!((estimate.point, estimate.lower, estimate.upper), (1.0, 1.0, 1.0));
    }

    #[test]
    fn the_interval_holds_the_point_estimate(values in timings(20..80), seed: u64) {
        let sample = Sample::new(values).unwrap();
        for method in [CiMethod::Percentile, CiMethod::Bca] {
            let estimates = bootstrap(&sample, &[statistic::mean, statistic::median], &small(method, seed)).unwrap();
            for estimate in estimates {
                prop_assert!(estimate.contains(estimate.point), "{:?}", estimate);
                prop_assert!(estimate.standard_error > 0.0);
            }
        }
    }

    /// Swapping the roles inverts the speedup: exactly for the point, up to Monte Carlo error for
    /// the interval (the two samples then draw from each other's random streams).
    #[test]
    fn swapping_baseline_and_candidate_inverts_the_speedup(a in timings(30..60), b in timings(30..60), seed: u64) {
        let (a, b) = (Sample::new(a).unwrap(), Sample::new(b).unwrap());
        let opts = CompareOptions { bootstrap: BootstrapOptions { resamples: 2_000, seed, ..Default::default() }, ..Default::default() };
        let forward = compare(&a, &b, &opts).unwrap();
        let backward = compare(&b, &a, &opts).unwrap();
        prop_assert!((forward.speedup.point * backward.speedup.point - 1.0).abs() < 1e-12);
        prop_assert_eq!(forward.diff_median.point, -backward.diff_median.point);
        let width = forward.speedup.upper.ln() - forward.speedup.lower.ln();
        prop_assert!((forward.speedup.lower.ln() + backward.speedup.upper.ln()).abs() <= 0.35 * width + 1e-12);
        prop_assert!((forward.speedup.upper.ln() + backward.speedup.lower.ln()).abs() <= 0.35 * width + 1e-12);
        prop_assert_eq!(forward.mann_whitney.u, (a.len() * b.len()) as f64 - backward.mann_whitney.u);
        prop_assert!((forward.mann_whitney.p - backward.mann_whitney.p).abs() < 1e-12);
    }
}

/// Bits of every interval end, for exact comparisons.
fn bits(values: &[f64]) -> Vec<u64> {
    values.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn same_seed_same_bits_on_any_number_of_threads() {
    let a = Sample::new(
        (0..300)
            .map(|i| 1.0 + f64::from(i * 37 % 101) / 100.0)
            .collect(),
    )
    .unwrap();
    let b = Sample::new(
        (0..250)
            .map(|i| 0.9 + f64::from(i * 53 % 97) / 100.0)
            .collect(),
    )
    .unwrap();
    let opts = CompareOptions {
        bootstrap: BootstrapOptions {
            resamples: 3_000,
            seed: 11,
            ..Default::default()
        },
        ..Default::default()
    };
    let run = |threads| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let c = compare(&a, &b, &opts).unwrap();
            let mut ends = vec![
                c.speedup.lower,
                c.speedup.upper,
                c.diff_median.lower,
                c.diff_median.upper,
            ];
            ends.extend(speedup_replicates(&a, &b, &opts.bootstrap));
            ends.extend(
                bootstrap(&a, &[statistic::mean], &opts.bootstrap)
                    .unwrap()
                    .iter()
                    .flat_map(|e| [e.lower, e.upper]),
            );
            bits(&ends)
        })
    };
    let single = run(1);
    assert_eq!(single, run(2));
    assert_eq!(single, run(5));
    // And another seed gives other resamples.
    let other = CompareOptions {
        bootstrap: BootstrapOptions {
            seed: 12,
            ..opts.bootstrap
        },
        ..opts
    };
    assert_ne!(
        speedup_replicates(&a, &b, &other.bootstrap),
        speedup_replicates(&a, &b, &opts.bootstrap)
    );
}

#[test]
fn compare_rejects_bad_options_and_non_positive_timings() {
    let good = Sample::new(vec![1.0, 2.0, 3.0]).unwrap();
    let with_zero = Sample::new(vec![1.0, 0.0, 3.0]).unwrap();
    let defaults = CompareOptions::default();
    let cases: [(&Sample, CompareOptions, &str); 6] = [
        (
            &with_zero,
            defaults,
            "candidate observation 1 is 0; a speedup needs positive timings",
        ),
        (
            &good,
            CompareOptions {
                noise: -0.1,
                ..defaults
            },
            "option noise = -0.1 is invalid: a fraction in [0, 1), e.g. 0.01 for ±1%",
        ),
        (
            &good,
            CompareOptions {
                gate_threshold: 0.0,
                ..defaults
            },
            "option threshold = 0 is invalid: a positive ratio, e.g. 0.95",
        ),
        (
            &good,
            CompareOptions {
                bootstrap: BootstrapOptions {
                    resamples: 1,
                    ..defaults.bootstrap
                },
                ..defaults
            },
            "option resamples = 1 is invalid: at least 2",
        ),
        (
            &good,
            CompareOptions {
                bootstrap: BootstrapOptions {
                    confidence: 1.0,
                    ..defaults.bootstrap
                },
                ..defaults
            },
            "option confidence = 1 is invalid: strictly between 0 and 1, e.g. 0.95",
        ),
        (
            &good,
            CompareOptions {
                bootstrap: BootstrapOptions {
                    confidence: f64::NAN,
                    ..defaults.bootstrap
                },
                ..defaults
            },
            "option confidence = NaN is invalid: strictly between 0 and 1, e.g. 0.95",
        ),
    ];
    for (candidate, opts, message) in cases {
        assert_eq!(
            compare(&good, candidate, &opts).unwrap_err().to_string(),
            message
        );
    }
}

#[test]
fn verdict_gate_and_json_schema() {
    let baseline =
        Sample::new((0..100).map(|i| 10.0 + f64::from(i % 10) * 0.01).collect()).unwrap();
    let slightly_faster =
        Sample::new((0..100).map(|i| 9.7 + f64::from(i % 10) * 0.01).collect()).unwrap();
    let much_faster =
        Sample::new((0..100).map(|i| 9.0 + f64::from(i % 10) * 0.01).collect()).unwrap();
    let opts = CompareOptions {
        bootstrap: BootstrapOptions {
            resamples: 2_000,
            ..Default::default()
        },
        ..Default::default()
    };
    // (candidate, verdict, gate passed): 3% faster is faster but misses the 5% gate.
    let cases = [
        (&slightly_faster, "faster", false),
        (&much_faster, "faster", true),
        (&baseline, "no-change", false),
    ];
    for (candidate, verdict, passed) in cases {
        let result = compare(&baseline, candidate, &opts).unwrap();
        let json = serde_json::to_value(&result).unwrap();
        assert_eq!(json["verdict"], verdict);
        assert_eq!(json["gate"]["passed"], passed);
        assert_eq!(json["gate"]["threshold"], 0.95);
        assert_eq!(result.passes_gate(0.95), passed);
        assert_eq!(json["speedup"]["method"], "bca");
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = [
            "seed",
            "resamples",
            "block",
            "confidence",
            "baseline",
            "candidate",
            "speedup",
            "diff_median",
            "mann_whitney",
            "verdict",
            "gate",
        ];
        let mut sorted_keys = keys.clone();
        sorted_keys.sort_unstable();
        expected.sort_unstable();
        assert_eq!(sorted_keys, expected);
        let summary_keys = json["baseline"].as_object().unwrap().len();
        assert_eq!(
            summary_keys, 14,
            "n, min, max, mean, median, 5 percentiles, std, mad, iqr, outliers"
        );
        let round_trip: attn_stats::Comparison = serde_json::from_value(json).unwrap();
        assert_eq!(round_trip, result);
    }
    let slower = compare(&much_faster, &baseline, &opts).unwrap();
    assert_eq!(slower.verdict, attn_stats::Verdict::Slower);
}

/// Resampling in blocks: block 1 is the plain comparison bit for bit; a block that leaves a side
/// one block, or 0, is refused; intervals over blocks of a drifting sample are wider.
#[test]
fn comparisons_in_blocks() {
    use attn_stats::compare_in_blocks;
    let opts = CompareOptions::default();
    // Ten blocks a side, the level moving from block to block as a clock would.
    let drifting = |side: f64| -> Vec<f64> {
        (0..40u32)
            .map(|i| 100.0 + side + f64::from((i / 4 * 7) % 10) + f64::from(i % 3) * 0.05)
            .collect()
    };
    let (b, c) = (
        Sample::new(drifting(1.0)).unwrap(),
        Sample::new(drifting(0.0)).unwrap(),
    );
    assert_eq!(
        compare_in_blocks(&b, &c, 1, &opts).unwrap(),
        compare(&b, &c, &opts).unwrap()
    );
    let plain = compare(&b, &c, &opts).unwrap().speedup;
    let blocked = compare_in_blocks(&b, &c, 4, &opts).unwrap();
    assert_eq!(blocked.block, 4);
    assert!(
        blocked.speedup.upper - blocked.speedup.lower > plain.upper - plain.lower,
        "{blocked:?} vs {plain:?}"
    );
    for block in [0, 40, 41] {
        let err = compare_in_blocks(&b, &c, block, &opts).unwrap_err();
        assert!(err.to_string().contains("block"), "{err}");
    }
}
