//! attn-stats against values computed independently with numpy and SciPy
//! (tests/fixtures/make_fixtures.py; the JSON files it wrote are committed beside it).

use attn_stats::interval::{acceleration, bca_interval, percentile_interval, standard_error};
use attn_stats::{
    bootstrap, bootstrap_two, compare, jackknife, mann_whitney, quantile, statistic,
    BootstrapOptions, CiMethod, CompareOptions, Estimate, Sample,
};
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = format!("tests/fixtures/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The numbers of a JSON array; null (how the fixtures write an undefined result) is NaN.
fn numbers(value: &Value) -> Vec<f64> {
    value
        .as_array()
        .expect("an array")
        .iter()
        .map(|v| v.as_f64().unwrap_or(f64::NAN))
        .collect()
}

fn sample(data: &Value, name: &str) -> Sample {
    Sample::new(numbers(&data[name])).expect("fixture data are valid")
}

/// `value[key]` as a number; null is NaN.
fn number(value: &Value, key: &str) -> f64 {
    match &value[key] {
        Value::Null if value.get(key).is_some() => f64::NAN,
        v => v
            .as_f64()
            .unwrap_or_else(|| panic!("{key} missing in {value}")),
    }
}

/// `got` equals `expected` to `relative` precision (absolute near zero).
fn assert_close(got: f64, expected: f64, relative: f64, what: &str) {
    let tolerance = relative * expected.abs().max(1.0);
    assert!(
        (got - expected).abs() <= tolerance,
        "{what}: got {got}, expected {expected} (±{tolerance})"
    );
}

#[test]
fn summaries_match_numpy() {
    for case in fixture("summary.json")["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let values = numbers(&case["values"]);
        let summary = Sample::new(values.clone()).unwrap().summary();
        let got = serde_json::to_value(summary).unwrap();
        let expected = &case["expected"];
        for key in [
            "min", "max", "mean", "median", "p10", "p25", "p75", "p90", "p99", "std", "mad", "iqr",
        ] {
            assert_close(
                number(&got, key),
                number(expected, key),
                1e-12,
                &format!("{name}.{key}"),
            );
        }
        assert_eq!(got["n"], expected["n"], "{name}.n");
        assert_eq!(got["outliers"], expected["outliers"], "{name}.outliers");

        let mut sorted = values;
        sorted.sort_by(f64::total_cmp);
        for (p, q) in case["quantile_grid"].as_object().unwrap() {
            let p: f64 = p.parse().unwrap();
            assert_close(
                quantile(&sorted, p),
                q.as_f64().unwrap(),
                1e-12,
                &format!("{name} quantile {p}"),
            );
        }
    }
}

#[test]
fn mann_whitney_matches_scipy_asymptotic() {
    let fixture = fixture("mann_whitney.json");
    for case in fixture["cases"].as_array().unwrap() {
        let (b, c) = (
            case["baseline"].as_str().unwrap(),
            case["candidate"].as_str().unwrap(),
        );
        let test = mann_whitney(&sample(&fixture["data"], b), &sample(&fixture["data"], c));
        assert_close(
            test.u,
            number(case, "u"),
            1e-12,
            &format!("U of {b} vs {c}"),
        );
        // Relative: the p-values go down to 1e-40.
        let p = number(case, "p");
        assert!(
            (test.p - p).abs() <= 1e-9 * p,
            "p of {b} vs {c}: got {}, expected {p}",
            test.p
        );
    }
}

/// Our interval formulas on SciPy's inputs: the same replicates must give the same interval.
#[test]
fn intervals_from_given_replicates_match_scipy_exactly() {
    let fixture = fixture("bca_exact.json");
    for case in fixture["cases"].as_array().unwrap() {
        let names: Vec<&str> = case["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        let samples: Vec<Sample> = names.iter().map(|n| sample(&fixture["data"], n)).collect();
        let replicates = numbers(&case["replicates"]);
        let confidence = number(case, "confidence");
        let what = format!("{} of {names:?}", case["statistic"]);

        let (lower, upper) = percentile_interval(&replicates, confidence);
        let expected = numbers(&case["percentile"]);
        assert_close(
            lower,
            expected[0],
            1e-12,
            &format!("percentile lower, {what}"),
        );
        assert_close(
            upper,
            expected[1],
            1e-12,
            &format!("percentile upper, {what}"),
        );
        assert_close(
            standard_error(&replicates),
            number(case, "standard_error"),
            1e-12,
            &what,
        );

        let jackknives: Vec<Vec<f64>> = match samples.as_slice() {
            [one] => vec![jackknife(one, statistic::median)],
            [baseline, candidate] => {
                let (m_b, m_c) = (baseline.median(), candidate.median());
                vec![
                    jackknife(baseline, |b| statistic::median(b) / m_c),
                    jackknife(candidate, |c| m_b / statistic::median(c)),
                ]
            }
            _ => unreachable!("one or two samples"),
        };
        let slices: Vec<&[f64]> = jackknives.iter().map(Vec::as_slice).collect();
        let expected = numbers(&case["bca"]);
        if expected.iter().any(|x| x.is_nan()) {
            // SciPy gives NaN when the jackknife does not vary; we use zero acceleration.
            assert_eq!(acceleration(&slices), 0.0, "{what}");
            continue;
        }
        let (lower, upper) = bca_interval(
            &replicates,
            number(case, "point"),
            acceleration(&slices),
            confidence,
        );
        assert_close(lower, expected[0], 1e-12, &format!("BCa lower, {what}"));
        assert_close(upper, expected[1], 1e-12, &format!("BCa upper, {what}"));
    }
}

/// One run of ours against the mean of 30 runs of `scipy.stats.bootstrap`, in units of the spread
/// of those runs: the two differ only by Monte Carlo error.
#[test]
fn bootstrap_intervals_agree_with_scipy_within_sampling_error() {
    let fixture = fixture("bootstrap.json");
    for case in fixture["cases"].as_array().unwrap() {
        let names: Vec<&str> = case["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        let samples: Vec<Sample> = names.iter().map(|n| sample(&fixture["data"], n)).collect();
        let method = match case["method"].as_str().unwrap() {
            "bca" => CiMethod::Bca,
            _ => CiMethod::Percentile,
        };
        let opts = BootstrapOptions {
            resamples: case["resamples"].as_u64().unwrap() as usize,
            confidence: number(case, "confidence"),
            method,
            ..BootstrapOptions::default()
        };
        let what = format!(
            "{} of {names:?} by {method:?}, seed {}",
            case["statistic"], opts.seed
        );
        let estimate = match samples.as_slice() {
            [one] => bootstrap(one, &[statistic::median], &opts).unwrap()[0],
            [baseline, candidate] => {
                let compare_opts = CompareOptions {
                    bootstrap: opts,
                    ..CompareOptions::default()
                };
                let speedup = compare(baseline, candidate, &compare_opts).unwrap().speedup;
                // The generic two-sample path draws the same resamples as compare's own.
                let ratio =
                    |b: &mut [f64], c: &mut [f64]| statistic::median(b) / statistic::median(c);
                let generic = bootstrap_two(baseline, candidate, &[ratio], &opts).unwrap()[0];
                assert_same_interval(&generic, &speedup, &what);
                speedup
            }
            _ => unreachable!("one or two samples"),
        };
        let repeats = number(case, "repeats");
        // Ours is one run, theirs a mean of `repeats`: the difference has this many of their sds.
        let spread = (1.0 + 1.0 / repeats).sqrt();
        for (got, key) in [
            (estimate.lower, "lower"),
            (estimate.upper, "upper"),
            (estimate.standard_error, "standard_error"),
        ] {
            let (mean, sd) = (
                number(case, &format!("{key}_mean")),
                number(case, &format!("{key}_sd")),
            );
            if mean.is_nan() {
                // SciPy's BCa is undefined here (a jackknife that does not vary); ours stays finite.
                assert!(
                    got.is_finite() && estimate.contains(estimate.point),
                    "{what}: {estimate:?}"
                );
                continue;
            }
            let tolerance = 4.0 * sd * spread + 1e-12 * mean.abs();
            assert!(
                (got - mean).abs() <= tolerance,
                "{what} {key}: got {got}, SciPy {mean} ± {sd}"
            );
        }
    }
}

fn assert_same_interval(a: &Estimate, b: &Estimate, what: &str) {
    assert_eq!(a.point.to_bits(), b.point.to_bits(), "{what}");
    assert_eq!(
        a.standard_error.to_bits(),
        b.standard_error.to_bits(),
        "{what}"
    );
    // BCa's acceleration sums the jackknife in a different order on the two paths.
    assert_close(a.lower, b.lower, 1e-12, what);
    assert_close(a.upper, b.upper, 1e-12, what);
}
