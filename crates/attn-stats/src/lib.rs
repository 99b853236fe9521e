//! Statistics for timing data: summaries, quantiles, outliers, bootstrap intervals and rank tests.
