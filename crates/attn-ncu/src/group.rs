//! Grouping launches by kernel and aggregating repeated launches.

use std::collections::BTreeMap;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::{Launch, NcuError, Unit};

/// Selects kernels by name, with ncu's own syntax: `regex:PATTERN` or a plain substring.
#[derive(Debug, Clone)]
pub enum KernelFilter {
    /// The kernel name contains this text.
    Substring(String),
    /// The kernel name matches this regex (anywhere, unless anchored).
    Regex(Regex),
}

impl KernelFilter {
    /// Parses `regex:flash.*fwd` as a regex and anything else as a substring.
    ///
    /// ```
    /// use attn_ncu::KernelFilter;
    /// assert!(KernelFilter::parse("regex:^cudnn_.*sdpa")?.matches("cudnn_generated_sdpa_kernel"));
    /// assert!(KernelFilter::parse("sdpa")?.matches("cudnn_generated_sdpa_kernel"));
    /// # Ok::<(), attn_ncu::NcuError>(())
    /// ```
    pub fn parse(pattern: &str) -> Result<Self, NcuError> {
        match pattern.strip_prefix("regex:") {
            Some(re) => Regex::new(re)
                .map(Self::Regex)
                .map_err(|e| NcuError::BadPattern {
                    pattern: re.to_owned(),
                    message: one_line_regex_error(&e),
                }),
            None => Ok(Self::Substring(pattern.to_owned())),
        }
    }

    /// Whether a kernel name is selected.
    pub fn matches(&self, kernel: &str) -> bool {
        match self {
            Self::Substring(s) => kernel.contains(s.as_str()),
            Self::Regex(re) => re.is_match(kernel),
        }
    }
}

/// The regex crate's messages draw a caret under the pattern over several lines; the last line
/// says what is wrong.
fn one_line_regex_error(error: &regex::Error) -> String {
    let text = error.to_string();
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("invalid pattern");
    last.trim().trim_start_matches("error: ").to_owned()
}

/// One metric over the repeated launches of a kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    /// Median over the launches that have a number (mean of the middle two for an even count).
    pub median: Option<f64>,
    /// Smallest value seen.
    pub min: Option<f64>,
    /// Largest value seen.
    pub max: Option<f64>,
    /// How many launches had a number for this metric (the rest were `n/a` or text).
    pub samples: usize,
    /// Base unit of the numbers.
    pub unit: Unit,
    /// For text metrics (device name, policies): the first launch's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// A kernel (name and launch configuration) with its launches' metrics aggregated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelSummary {
    /// Kernel name as ncu printed it.
    pub kernel: String,
    /// Block size, e.g. `(384, 1, 1)`.
    pub block: Option<String>,
    /// Grid size, e.g. `(32, 1, 1)`.
    pub grid: Option<String>,
    /// How many launches were aggregated.
    pub launches: usize,
    /// Their ncu launch IDs, in input order.
    pub launch_ids: Vec<u32>,
    /// Every metric seen in any launch, aggregated.
    pub metrics: BTreeMap<String, Aggregate>,
}

impl KernelSummary {
    /// The median of a metric in base units, if any launch had a number for it.
    pub fn value(&self, metric: &str) -> Option<f64> {
        self.metrics.get(metric).and_then(|a| a.median)
    }

    /// Like [`KernelSummary::value`], but a missing metric is an error naming the kernel.
    pub fn require(&self, metric: &str) -> Result<f64, NcuError> {
        self.value(metric).ok_or_else(|| NcuError::MissingMetric {
            kernel: short_name(&self.kernel, 80),
            metric: metric.to_owned(),
        })
    }
}

/// Groups launches by (kernel name, block, grid), in order of first appearance, keeping those the
/// filter selects, and aggregates each group's metrics by median.
///
/// The launch configuration is part of the key because the same kernel at two shapes is two
/// different measurements; a median across them would describe neither.
///
/// ```
/// let launches = attn_ncu::parse_details(include_str!("../tests/fixtures/h100_sdpa_cudnn_details.csv"))?;
/// let cudnn = attn_ncu::KernelFilter::parse("cudnn")?;
/// let kernels = attn_ncu::group(&launches, Some(&cudnn));
/// assert_eq!(kernels.len(), 1);
/// assert_eq!(kernels[0].launch_ids, [3, 4]);
/// assert_eq!(kernels[0].value("launch__registers_per_thread"), Some(168.0));
/// # Ok::<(), attn_ncu::NcuError>(())
/// ```
pub fn group(launches: &[Launch], filter: Option<&KernelFilter>) -> Vec<KernelSummary> {
    let mut groups: Vec<Vec<&Launch>> = Vec::new();
    let same_kernel =
        |a: &Launch, b: &Launch| a.kernel == b.kernel && a.block == b.block && a.grid == b.grid;
    for launch in launches
        .iter()
        .filter(|l| filter.is_none_or(|f| f.matches(&l.kernel)))
    {
        match groups.iter_mut().find(|g| same_kernel(g[0], launch)) {
            Some(group) => group.push(launch),
            None => groups.push(vec![launch]),
        }
    }
    groups.into_iter().map(|g| summarise(&g)).collect()
}

fn summarise(launches: &[&Launch]) -> KernelSummary {
    let first = launches[0];
    let names: std::collections::BTreeSet<&String> =
        launches.iter().flat_map(|l| l.metrics.keys()).collect();
    let metrics = names
        .into_iter()
        .map(|name| {
            let values: Vec<&crate::Value> = launches
                .iter()
                .filter_map(|l| l.metrics.get(name))
                .collect();
            let mut numbers: Vec<f64> = values.iter().filter_map(|v| v.value).collect();
            numbers.sort_by(f64::total_cmp);
            let unit = values
                .iter()
                .find(|v| v.value.is_some())
                .or(values.first())
                .map_or(Unit::Count, |v| v.unit.clone());
            let text = (unit == Unit::Text).then(|| values[0].raw.clone());
            let aggregate = Aggregate {
                median: median(&numbers),
                min: numbers.first().copied(),
                max: numbers.last().copied(),
                samples: numbers.len(),
                unit,
                text,
            };
            (name.clone(), aggregate)
        })
        .collect();
    KernelSummary {
        kernel: first.kernel.clone(),
        block: first.block.clone(),
        grid: first.grid.clone(),
        launches: launches.len(),
        launch_ids: launches.iter().map(|l| l.id).collect(),
        metrics,
    }
}

/// Median of sorted numbers.
fn median(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// A kernel name cut to `max` characters with an ellipsis, for one-line messages.
pub fn short_name(kernel: &str, max: usize) -> String {
    if kernel.chars().count() <= max {
        kernel.to_owned()
    } else {
        let cut: String = kernel.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[1.0, 2.0, 10.0]), Some(2.0));
        assert_eq!(median(&[1.0, 2.0, 4.0, 10.0]), Some(3.0));
    }

    #[test]
    fn short_names_keep_short_ones_whole() {
        assert_eq!(short_name("abc", 5), "abc");
        assert_eq!(short_name("abcdefgh", 5), "abcd…");
    }
}
