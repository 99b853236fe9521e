//! One metric value: ncu's text and unit, normalised to a base unit.
//!
//! ncu scales units for humans (`Kbyte`, `usecond`, `Gbyte/second`) unless run with
//! `--print-units base`, and writes numbers with thousands separators (`"1,592,064"`). Everything
//! downstream wants plain numbers in one unit per dimension, so we convert here once.

use serde::{Deserialize, Serialize};

/// The base unit a [`Value`] is expressed in after normalisation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unit {
    /// Time, in nanoseconds (`ns`, `usecond`, `ms`... are converted).
    Nanoseconds,
    /// Size, in bytes (`Kbyte`, `Mbyte`, `byte/block`... are converted).
    Bytes,
    /// Throughput, in bytes per second (`Gbyte/second`... are converted).
    BytesPerSecond,
    /// A percentage, 0-100 (sometimes above 100 for per-unit maxima).
    Percent,
    /// A dimensionless count: instructions, registers, blocks, cycles, or no unit at all.
    Count,
    /// Not a number: a name or an enum such as `PolicySpread`; see [`Value::raw`].
    Text,
    /// A unit we do not know; the value is kept as ncu printed it, unscaled.
    Other(String),
}

/// A metric value as ncu printed it and as a number in its base [`Unit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Value {
    /// The number in base units; `None` for `n/a`, empty or non-numeric text.
    pub value: Option<f64>,
    /// The base unit of `value`.
    pub unit: Unit,
    /// The value text exactly as ncu printed it (`"1,592,064"`, `"n/a"`).
    pub raw: String,
    /// The unit text exactly as ncu printed it (`"Kbyte"`, `"register/thread"`, `""`).
    pub raw_unit: String,
}

impl Value {
    /// Parses ncu's value and unit texts.
    ///
    /// ```
    /// use attn_ncu::{Unit, Value};
    /// let v = Value::parse("1,592,064", "byte");
    /// assert_eq!((v.value, v.unit), (Some(1_592_064.0), Unit::Bytes));
    /// let t = Value::parse("9.44", "usecond");
    /// assert_eq!((t.value, t.unit), (Some(9440.0), Unit::Nanoseconds));
    /// assert_eq!(Value::parse("n/a", "").value, None);
    /// ```
    pub fn parse(raw: &str, raw_unit: &str) -> Self {
        let raw = raw.trim();
        let raw_unit = raw_unit.trim();
        let number = parse_number(raw);
        let (unit, scale) = match number {
            None if raw_unit.is_empty() && !is_not_available(raw) => (Unit::Text, 1.0),
            _ => normalise_unit(raw_unit),
        };
        Self {
            value: number.map(|n| n * scale),
            unit,
            raw: raw.to_owned(),
            raw_unit: raw_unit.to_owned(),
        }
    }

    /// A value that is already a number in base units (used for aggregates).
    pub fn number(value: Option<f64>, unit: Unit) -> Self {
        Self {
            value,
            raw: value.map_or_else(|| "n/a".to_owned(), |v| v.to_string()),
            raw_unit: String::new(),
            unit,
        }
    }
}

/// True for the texts ncu uses when a metric has no value.
fn is_not_available(raw: &str) -> bool {
    raw.is_empty() || raw.eq_ignore_ascii_case("n/a")
}

/// Parses `"1,592,064"`, `"31.71"`, `"-3"`, `"1e9"`; `None` for anything else.
fn parse_number(raw: &str) -> Option<f64> {
    if is_not_available(raw) {
        return None;
    }
    // Thousands separators only ever sit between digits; ncu uses '.' for the decimal point.
    let cleaned: String = raw.chars().filter(|&c| c != ',').collect();
    let starts_like_a_number = cleaned
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_digit() || c == '-' || c == '+' || c == '.');
    if !starts_like_a_number {
        // Keeps words like "inf" or "nan" inside kernel-ish text from becoming numbers.
        return None;
    }
    cleaned.parse::<f64>().ok().filter(|n| n.is_finite())
}

/// Maps ncu's unit text to a base unit and the factor that converts into it.
fn normalise_unit(raw_unit: &str) -> (Unit, f64) {
    if raw_unit.is_empty() {
        return (Unit::Count, 1.0);
    }
    if raw_unit == "%" {
        return (Unit::Percent, 1.0);
    }
    let (numerator, denominator) = match raw_unit.split_once('/') {
        Some((n, d)) => (n, Some(d)),
        None => (raw_unit, None),
    };
    let per_time = denominator.and_then(time_scale);
    if let Some(time) = time_scale(numerator) {
        if denominator.is_none() {
            return (Unit::Nanoseconds, time);
        }
    } else if let Some(bytes) = byte_scale(numerator) {
        return match (denominator, per_time) {
            (None, _) => (Unit::Bytes, bytes),
            // A rate: bytes per (scaled) second. time_scale gives ns per unit.
            (Some(_), Some(ns)) => (Unit::BytesPerSecond, bytes * 1e9 / ns),
            // byte/block, byte/thread: a size per something, named by the metric.
            (Some(_), None) => (Unit::Bytes, bytes),
        };
    } else if let Some(count) = count_scale(numerator) {
        if per_time.is_none() {
            return (Unit::Count, count);
        }
    }
    (Unit::Other(raw_unit.to_owned()), 1.0)
}

/// Splits an SI prefix off a unit: `Kbyte` -> (1e3, "byte").
fn si_prefix(unit: &str) -> (f64, &str) {
    const PREFIXES: [(&str, f64); 5] =
        [("K", 1e3), ("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12)];
    for (prefix, factor) in PREFIXES {
        if let Some(rest) = unit.strip_prefix(prefix) {
            if !rest.is_empty() && rest.starts_with(|c: char| c.is_ascii_lowercase()) {
                return (factor, rest);
            }
        }
    }
    (1.0, unit)
}

/// Nanoseconds per unit of a time unit, in both ncu spellings (`us` and `usecond`).
fn time_scale(unit: &str) -> Option<f64> {
    match unit {
        "ns" | "nsecond" | "nsec" => Some(1.0),
        "us" | "usecond" | "usec" => Some(1e3),
        "ms" | "msecond" | "msec" => Some(1e6),
        "s" | "second" | "sec" => Some(1e9),
        _ => None,
    }
}

/// Bytes per unit of a size unit (`byte`, `Kbyte`, `KB`, `KiB`...).
fn byte_scale(unit: &str) -> Option<f64> {
    match unit {
        "B" => return Some(1.0),
        "KB" => return Some(1e3),
        "MB" => return Some(1e6),
        "GB" => return Some(1e9),
        "TB" => return Some(1e12),
        "KiB" => return Some(1024.0),
        "MiB" => return Some(1024.0 * 1024.0),
        "GiB" => return Some(1024.0 * 1024.0 * 1024.0),
        _ => {}
    }
    let (factor, base) = si_prefix(unit);
    matches!(base, "byte" | "bytes").then_some(factor)
}

/// Scale of a counted thing (`inst`, `Kinst`, `register`, `cycle`...).
fn count_scale(unit: &str) -> Option<f64> {
    const COUNTED: [&str; 20] = [
        "inst",
        "register",
        "block",
        "warp",
        "thread",
        "SM",
        "pass",
        "cluster",
        "cycle",
        "sector",
        "request",
        "wavefront",
        "transaction",
        "instance",
        "launch",
        "kernel",
        "CTA",
        "TPC",
        "GPC",
        "channel",
    ];
    let (factor, base) = si_prefix(unit);
    let singular = base.strip_suffix('s').unwrap_or(base);
    (COUNTED.contains(&base) || COUNTED.contains(&singular)).then_some(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: &str, unit: &str, expected: Option<f64>, expected_unit: Unit) {
        let v = Value::parse(raw, unit);
        assert_eq!(v.unit, expected_unit, "unit of {raw:?} {unit:?}");
        match (v.value, expected) {
            (Some(got), Some(want)) => {
                assert!(
                    (got - want).abs() <= 1e-9 * want.abs().max(1.0),
                    "{raw:?} {unit:?}: {got} != {want}"
                )
            }
            (got, want) => assert_eq!(got, want, "{raw:?} {unit:?}"),
        }
    }

    #[test]
    fn values_normalise_to_base_units() {
        let cases: &[(&str, &str, Option<f64>, Unit)] = &[
            ("1,592,064", "byte", Some(1_592_064.0), Unit::Bytes),
            ("1.59", "Mbyte", Some(1_590_000.0), Unit::Bytes),
            ("131.07", "Kbyte/block", Some(131_070.0), Unit::Bytes),
            ("2", "KiB", Some(2048.0), Unit::Bytes),
            ("9,440", "ns", Some(9440.0), Unit::Nanoseconds),
            ("9.44", "usecond", Some(9440.0), Unit::Nanoseconds),
            ("1.5", "ms", Some(1.5e6), Unit::Nanoseconds),
            ("2.5", "Tbyte/second", Some(2.5e12), Unit::BytesPerSecond),
            ("168", "Gbyte/s", Some(168e9), Unit::BytesPerSecond),
            ("31.71", "%", Some(31.71), Unit::Percent),
            ("168", "register/thread", Some(168.0), Unit::Count),
            ("12,288", "inst", Some(12_288.0), Unit::Count),
            ("3.2", "Kcycle", Some(3200.0), Unit::Count),
            ("132", "SM", Some(132.0), Unit::Count),
            ("0.24", "", Some(0.24), Unit::Count),
            ("-1", "", Some(-1.0), Unit::Count),
            ("n/a", "", None, Unit::Count),
            ("n/a", "%", None, Unit::Percent),
            ("", "byte", None, Unit::Bytes),
            ("PolicySpread", "", None, Unit::Text),
            ("NVIDIA H100 80GB HBM3", "", None, Unit::Text),
            ("inf", "", None, Unit::Text),
            (
                "1.98",
                "cycle/nsecond",
                Some(1.98),
                Unit::Other("cycle/nsecond".into()),
            ),
            ("7", "frobs", Some(7.0), Unit::Other("frobs".into())),
        ];
        for (raw, unit, value, expected_unit) in cases {
            check(raw, unit, *value, expected_unit.clone());
        }
    }

    #[test]
    fn raw_texts_are_kept_verbatim() {
        let v = Value::parse(" 1,024 ", "byte/block");
        assert_eq!(
            (v.raw.as_str(), v.raw_unit.as_str()),
            ("1,024", "byte/block")
        );
    }
}
