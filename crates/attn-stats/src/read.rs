//! Reading a [`Sample`] from text: one number a line, or a named column of a CSV file.

use std::path::Path;

use crate::{Sample, StatsError};

const CSV_HINT: &str = " (for a CSV file, name the column to read)";

/// Parses a sample from `text`. Without `column`: one number a line, blank lines and lines
/// starting with `#` skipped. With `column`: a CSV file with a header row, read from the column of
/// that name. Errors name the (one-based) line of the first bad value, and say so when there is no
/// number or only one.
///
/// ```
/// use attn_stats::parse_sample;
/// let sample = parse_sample("# times in ms\n1.5\n\n2.5\n", None)?;
/// assert_eq!(sample.values(), &[1.5, 2.5]);
/// let sample = parse_sample("run,ms\n1,0.25\n2,0.5\n", Some("ms"))?;
/// assert_eq!(sample.values(), &[0.25, 0.5]);
/// let err = parse_sample("1.0\nfast\n", None).unwrap_err();
/// assert_eq!(err.to_string(), "line 2: \"fast\" is not a finite number");
/// # Ok::<(), attn_stats::StatsError>(())
/// ```
pub fn parse_sample(text: &str, column: Option<&str>) -> Result<Sample, StatsError> {
    let numbered = match column {
        None => parse_lines(text)?,
        Some(column) => parse_csv_column(text, column)?,
    };
    into_sample(numbered)
}

/// The sample of `(line, value)` pairs; errors when there are fewer than two.
fn into_sample(numbered: Vec<(u64, f64)>) -> Result<Sample, StatsError> {
    match numbered.as_slice() {
        [] => Err(StatsError::Empty),
        [(line, _)] => Err(StatsError::SingleValue { line: *line }),
        _ => Sample::new(numbered.into_iter().map(|(_, value)| value).collect()),
    }
}

/// Parses a sample of timings: as [`parse_sample`], and every value must be positive (a speedup
/// divides by them); the error names the line of the first that is not.
///
/// ```
/// use attn_stats::parse_timings;
/// let err = parse_timings("1.0\n# warm\n-2\n", None).unwrap_err();
/// assert_eq!(err.to_string(), "line 3: -2 is not a positive timing");
/// ```
pub fn parse_timings(text: &str, column: Option<&str>) -> Result<Sample, StatsError> {
    let numbered = match column {
        None => parse_lines(text)?,
        Some(column) => parse_csv_column(text, column)?,
    };
    if let Some(&(line, value)) = numbered.iter().find(|(_, value)| *value <= 0.0) {
        return Err(StatsError::NotATiming { line, value });
    }
    into_sample(numbered)
}

/// Reads a sample from the file at `path`, as [`parse_sample`]; errors carry the path.
pub fn read_sample(path: &Path, column: Option<&str>) -> Result<Sample, StatsError> {
    read_with(path, |text| parse_sample(text, column))
}

/// Reads a sample of timings from the file at `path`, as [`parse_timings`]; errors carry the
/// path.
pub fn read_timings(path: &Path, column: Option<&str>) -> Result<Sample, StatsError> {
    read_with(path, |text| parse_timings(text, column))
}

fn read_with(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<Sample, StatsError>,
) -> Result<Sample, StatsError> {
    let in_file = |error| StatsError::InFile {
        path: path.to_path_buf(),
        error: Box::new(error),
    };
    let text = std::fs::read_to_string(path).map_err(|e| {
        in_file(StatsError::Io {
            message: e.to_string(),
        })
    })?;
    parse(&text).map_err(in_file)
}

/// `(line, value)` of every number in a one-number-a-line text.
fn parse_lines(text: &str) -> Result<Vec<(u64, f64)>, StatsError> {
    let mut numbers = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let line = index as u64 + 1;
        // A header or a comma on the first data line suggests a CSV file read without a column.
        let hint = if numbers.is_empty() || trimmed.contains(',') {
            CSV_HINT
        } else {
            ""
        };
        numbers.push((line, parse_number(trimmed, line, hint)?));
    }
    Ok(numbers)
}

/// `(line, value)` of every row's `column` in a CSV text with a header row.
fn parse_csv_column(text: &str, column: &str) -> Result<Vec<(u64, f64)>, StatsError> {
    let csv_error = |e: csv::Error| StatsError::Csv {
        line: e.position().map_or(0, csv::Position::line),
        message: match e.kind() {
            csv::ErrorKind::UnequalLengths {
                expected_len, len, ..
            } => {
                format!("{len} fields where the header has {expected_len}")
            }
            _ => e.to_string(),
        },
    };
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let headers = reader.headers().map_err(csv_error)?.clone();
    let Some(index) = headers.iter().position(|name| name == column) else {
        return Err(StatsError::MissingColumn {
            column: column.to_string(),
            available: headers.iter().collect::<Vec<_>>().join(", "),
        });
    };
    let mut numbers = Vec::new();
    for record in reader.records() {
        let record = record.map_err(csv_error)?;
        let line = record.position().map_or(0, csv::Position::line);
        numbers.push((
            line,
            parse_number(record.get(index).unwrap_or(""), line, "")?,
        ));
    }
    Ok(numbers)
}

fn parse_number(text: &str, line: u64, hint: &'static str) -> Result<f64, StatsError> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() => Ok(value),
        _ => Err(StatsError::NotANumber {
            line,
            text: text.to_string(),
            hint,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(text, column, expected values or error message)`.
    fn check(text: &str, column: Option<&str>, expected: Result<&[f64], &str>) {
        let got = parse_sample(text, column);
        match expected {
            Ok(values) => assert_eq!(got.expect(text).values(), values, "{text:?}"),
            Err(message) => assert_eq!(got.expect_err(text).to_string(), message, "{text:?}"),
        }
    }

    #[test]
    fn parses_good_input_and_names_the_line_of_bad_input() {
        check("1\n2\n3\n", None, Ok(&[1.0, 2.0, 3.0]));
        check("  1e-3 \r\n2E2\n", None, Ok(&[1e-3, 200.0]));
        check("", None, Err("no numbers found"));
        check("# nothing\n\n", None, Err("no numbers found"));
        check(
            "\n4.5\n",
            None,
            Err("only one number found (line 2); a sample needs at least 2"),
        );
        check(
            "1\n2\nNaN\n",
            None,
            Err("line 3: \"NaN\" is not a finite number"),
        );
        check(
            "1\ninf\n",
            None,
            Err("line 2: \"inf\" is not a finite number"),
        );
        check(
            "ms\n1\n2\n",
            None,
            Err("line 1: \"ms\" is not a finite number (for a CSV file, name the column to read)"),
        );
        check("a,ms\nx,1\ny,2\n", Some("ms"), Ok(&[1.0, 2.0]));
        check(
            "a, ms\nx, 1\n",
            Some("ms"),
            Err("only one number found (line 2); a sample needs at least 2"),
        );
        check(
            "a,ms\nx,1\ny,\n",
            Some("ms"),
            Err("line 3: \"\" is not a finite number"),
        );
        check(
            "a,ms\nx,1\n",
            Some("us"),
            Err("no column named \"us\" (columns: a, ms)"),
        );
        check(
            "a,ms\nx,1\ny,2,3\n",
            Some("ms"),
            Err("line 3: malformed CSV: 3 fields where the header has 2"),
        );
    }

    #[test]
    fn file_errors_name_the_file() {
        let err = read_sample(Path::new("/no/such/timings.txt"), None).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("/no/such/timings.txt: cannot read: "),
            "{err}"
        );
    }
}
