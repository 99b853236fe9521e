//! Rank correlation against SciPy 1.17's `spearmanr` and `kendalltau` (default `method="auto"`),
//! whose values are pasted below.

use attn_stats::{average_ranks, kendall, spearman, StatsError};

/// Paired data and what SciPy says of it: ρ and its p-value, τ-b and its p-value, and whether
/// SciPy's `auto` picked the exact Kendall p-value.
struct Case {
    name: &'static str,
    x: Vec<f64>,
    y: Vec<f64>,
    rho: f64,
    rho_p: f64,
    tau: f64,
    tau_p: f64,
    exact: bool,
}

fn close(got: f64, want: f64, what: &str, name: &str) {
    // Relative for the tiny p-values, absolute near zero.
    let tolerance = 1e-9 * want.abs().max(1e-300) + 1e-12;
    assert!(
        (got - want).abs() <= tolerance.max(want.abs() * 1e-7),
        "{name}: {what} = {got:e}, SciPy says {want:e}"
    );
}

fn check(case: &Case) {
    let s = spearman(&case.x, &case.y).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    let k = kendall(&case.x, &case.y).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    assert_eq!((s.n, k.n), (case.x.len(), case.x.len()), "{}", case.name);
    close(s.rho, case.rho, "rho", case.name);
    close(k.tau, case.tau, "tau", case.name);
    assert_eq!(k.exact, case.exact, "{}: exact", case.name);
    close(k.p_value, case.tau_p, "tau p", case.name);
    if case.rho.abs() > 0.999_999 {
        // SciPy's ρ is 1 − 1e-16 there, so its p-value is tiny where an exact 1 gives 0.
        assert!(s.p_value < 1e-20, "{}: rho p {}", case.name, s.p_value);
    } else {
        close(s.p_value, case.rho_p, "rho p", case.name);
    }
    // Both statistics are symmetric in their arguments.
    let swapped = spearman(&case.y, &case.x).unwrap();
    assert_eq!(swapped.rho, s.rho, "{}", case.name);
    assert_eq!(
        kendall(&case.y, &case.x).unwrap().tau,
        k.tau,
        "{}",
        case.name
    );
}

fn v(values: &[i32]) -> Vec<f64> {
    values.iter().map(|&v| f64::from(v)).collect()
}

#[test]
fn spearman_and_kendall_match_scipy() {
    let n40_x: Vec<i32> = (0..40).map(|i| (i * 37) % 41).collect();
    let n40_y: Vec<i32> = (0..40).map(|i| (i * 37) % 41 + (i * 13) % 7).collect();
    let cases = [
        Case {
            name: "IQ and TV (Wikipedia)",
            x: v(&[106, 100, 86, 101, 99, 103, 97, 113, 112, 110]),
            y: v(&[7, 27, 2, 50, 28, 29, 20, 12, 6, 17]),
            rho: -0.17575757575757575,
            rho_p: 0.6271883447764846,
            tau: -0.1111111111111111,
            tau_p: 0.7274895282186948,
            exact: true,
        },
        Case {
            name: "ties on both sides",
            x: v(&[1, 2, 2, 3, 4, 5, 5, 5, 6, 7]),
            y: v(&[2, 1, 3, 3, 5, 4, 7, 6, 8, 8]),
            rho: 0.9319287424377442,
            rho_p: 8.647852611861799e-05,
            tau: 0.8335696394016967,
            tau_p: 0.0013041918629363403,
            exact: false,
        },
        Case {
            name: "ties in x only",
            x: vec![2.5, 2.5, 1.0, 4.0, 5.0, 5.0],
            y: v(&[1, 2, 3, 4, 5, 6]),
            rho: 0.7944613465542746,
            rho_p: 0.05902759992532669,
            tau: 0.6445033866354897,
            tau_p: 0.07945818974316925,
            exact: false,
        },
        Case {
            name: "perfect",
            x: v(&[1, 2, 3, 4, 5]),
            y: v(&[10, 20, 30, 40, 50]),
            rho: 1.0,
            rho_p: 0.0,
            tau: 1.0,
            tau_p: 0.016666666666666666,
            exact: true,
        },
        Case {
            name: "reversed",
            x: v(&[1, 2, 3, 4, 5, 6]),
            y: v(&[6, 5, 4, 3, 2, 1]),
            rho: -1.0,
            rho_p: 0.0,
            tau: -1.0,
            tau_p: 0.002777777777777778,
            exact: true,
        },
        Case {
            name: "one swap of four",
            x: v(&[1, 2, 3, 4]),
            y: v(&[1, 3, 2, 4]),
            rho: 0.8,
            rho_p: 0.2000000000000001,
            tau: 0.6666666666666669,
            tau_p: 0.3333333333333333,
            exact: true,
        },
        Case {
            name: "local swaps of twelve",
            x: v(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]),
            y: v(&[3, 1, 2, 6, 4, 5, 9, 7, 8, 12, 10, 11]),
            rho: 0.9160839160839163,
            rho_p: 2.8428045348547132e-05,
            tau: 0.7575757575757575,
            tau_p: 0.00024002425044091711,
            exact: true,
        },
        Case {
            name: "forty, past the exact limit",
            x: v(&n40_x),
            y: v(&n40_y),
            rho: 0.9869963083231684,
            rho_p: 8.863374292900584e-32,
            tau: 0.9164522535320644,
            tau_p: 1.6167402633089558e-16,
            exact: false,
        },
    ];
    for case in &cases {
        check(case);
    }
}

#[test]
fn ties_share_the_mean_of_their_ranks() {
    // SciPy's rankdata([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]).
    let ranks = average_ranks(&v(&[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]));
    assert_eq!(
        ranks,
        [4.5, 1.5, 6.0, 1.5, 8.0, 11.0, 3.0, 10.0, 8.0, 4.5, 8.0]
    );
    assert!(average_ranks(&[]).is_empty());
}

#[test]
fn the_interval_of_rho_is_fishers_z_with_fieller_s_error() {
    let iq = v(&[106, 100, 86, 101, 99, 103, 97, 113, 112, 110]);
    let tv = v(&[7, 27, 2, 50, 28, 29, 20, 12, 6, 17]);
    let s = spearman(&iq, &tv).unwrap();
    // tanh(atanh(ρ) ∓ z₀.₉₇₅·√(1.06 / 7)), computed with SciPy's norm.ppf.
    let (lower, upper) = s.interval(0.95).unwrap();
    close(lower, -0.7353594030660527, "lower", "IQ and TV");
    close(upper, 0.52635893369128, "upper", "IQ and TV");
    let wider = s.interval(0.99).unwrap();
    assert!(wider.0 < lower && wider.1 > upper);
    assert_eq!(s.interval(1.0), None);
    let three = spearman(&[1.0, 2.0, 3.0], &[1.0, 3.0, 2.0]).unwrap();
    assert_eq!(three.interval(0.95), None, "n − 3 = 0: no interval");
    let perfect = spearman(&[1.0, 2.0, 3.0, 4.0], &[2.0, 4.0, 6.0, 8.0]).unwrap();
    assert_eq!(perfect.interval(0.95), Some((1.0, 1.0)));
}

#[test]
fn bad_pairs_are_refused_with_a_reason() {
    let cases: [(&[f64], &[f64], StatsError); 4] = [
        (
            &[1.0, 2.0, 3.0],
            &[1.0, 2.0],
            StatsError::Unpaired { x: 3, y: 2 },
        ),
        (
            &[1.0, 2.0],
            &[2.0, 1.0],
            StatsError::TooFewPairs { n: 2, min: 3 },
        ),
        (
            &[1.0, 2.0, 3.0],
            &[5.0, 5.0, 5.0],
            StatsError::Constant { which: "second" },
        ),
        (
            &[1.0, f64::NAN, 3.0],
            &[1.0, 2.0, 3.0],
            StatsError::NonFinite {
                index: 1,
                value: f64::NAN,
            },
        ),
    ];
    for (x, y, want) in cases {
        for got in [spearman(x, y).unwrap_err(), kendall(x, y).unwrap_err()] {
            // NaN != NaN: compare the messages.
            assert_eq!(got.to_string(), want.to_string());
        }
    }
}
