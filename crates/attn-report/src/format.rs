//! Number formatting shared by tables and charts, so the same value reads the same everywhere.

/// A time in µs with about three significant digits: `2870`, `26.8`, `1.23`, `0.0456`.
pub fn micros(value: f64) -> String {
    significant(value, 3)
}

/// A spread of times in µs, `low–high`, each as [`micros`] writes it: `26.8–27.4`.
pub fn micros_range(low: f64, high: f64) -> String {
    format!("{}–{}", micros(low), micros(high))
}

/// `value` rounded to `digits` significant digits, never in scientific notation, with at least the
/// integer part (large values are not rounded to tens).
pub fn significant(value: f64, digits: i32) -> String {
    if !value.is_finite() {
        return "–".into();
    }
    if value == 0.0 {
        return "0".into();
    }
    let magnitude = value.abs().log10().floor() as i32;
    let decimals = (digits - 1 - magnitude).max(0) as usize;
    format!("{value:.decimals$}")
}

/// A speedup as `0.91×`.
pub fn speedup(value: f64) -> String {
    format!("{value:.2}×")
}

/// A speedup with its interval: `0.91× [0.88, 0.95]`.
pub fn speedup_ci(point: f64, lower: f64, upper: f64) -> String {
    format!("{point:.2}× [{lower:.2}, {upper:.2}]")
}

/// TFLOP/s with one decimal.
pub fn tflops(value: f64) -> String {
    format!("{value:.1}")
}

/// A percentage with one decimal, from a value already in percent.
pub fn percent(value: f64) -> String {
    format!("{value:.1}%")
}

/// The first 7 characters of a commit hash.
pub fn short_rev(rev: &str) -> String {
    rev.chars().take(7).collect()
}

/// `2025-11-22T14:19:00Z` → `2025-11-22 14:19`: the evidence's own timestamp, shortened for tables.
pub fn short_date(date: &str) -> String {
    let trimmed = date.trim_end_matches('Z');
    match trimmed.split_once('T') {
        Some((day, time)) => format!("{day} {}", time.get(..5).unwrap_or(time)),
        None => trimmed.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_three_significant_digits() {
        for (value, text) in [
            (2870.4, "2870"),
            (26.84, "26.8"),
            (1.234, "1.23"),
            (0.04561, "0.0456"),
            (0.0, "0"),
        ] {
            assert_eq!(micros(value), text);
        }
        assert_eq!(micros(f64::NAN), "–");
        assert_eq!(short_date("2025-11-22T14:19:00Z"), "2025-11-22 14:19");
    }
}
