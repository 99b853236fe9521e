//! The full `compare` (summaries, 2 BCa intervals from one bootstrap pass, Mann–Whitney) on
//! lognormal timings: the headline case (n = 1,000 each, 10,000 resamples) and its scaling.

use std::hint::black_box;

use attn_stats::{compare, BootstrapOptions, CompareOptions, Sample};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `n` lognormal timings around `median` (σ = 0.05), from a seeded generator.
fn timings(n: usize, median: f64, seed: u64) -> Sample {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let values = (0..n)
        .map(|_| {
            // Box–Muller: one standard normal from two uniforms.
            let (u, v): (f64, f64) = (1.0 - rng.random::<f64>(), rng.random());
            let normal = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
            median * (0.05 * normal).exp()
        })
        .collect();
    Sample::new(values).expect("finite timings")
}

fn options(resamples: usize) -> CompareOptions {
    CompareOptions {
        bootstrap: BootstrapOptions {
            resamples,
            ..BootstrapOptions::default()
        },
        ..CompareOptions::default()
    }
}

fn headline(c: &mut Criterion) {
    let (baseline, candidate) = (timings(1_000, 1.5, 1), timings(1_000, 1.4, 2));
    let opts = options(10_000);
    let mut group = c.benchmark_group("compare");
    group.sample_size(30);
    group.bench_function("n=1000/resamples=10000", |bench| {
        bench.iter(|| {
            compare(black_box(&baseline), black_box(&candidate), &opts).expect("valid input")
        })
    });
    group.finish();
}

fn scaling(c: &mut Criterion) {
    let mut group = c.benchmark_group("compare-scaling");
    group.sample_size(10);
    let cases = [
        (100, 10_000),
        (1_000, 1_000),
        (1_000, 100_000),
        (10_000, 1_000),
        (10_000, 10_000),
    ];
    for (n, resamples) in cases {
        let (baseline, candidate) = (timings(n, 1.5, 1), timings(n, 1.4, 2));
        let opts = options(resamples);
        group.bench_with_input(
            BenchmarkId::new(format!("n={n}"), resamples),
            &opts,
            |bench, opts| bench.iter(|| compare(&baseline, &candidate, opts).expect("valid input")),
        );
    }
    group.finish();
}

criterion_group!(benches, headline, scaling);
criterion_main!(benches);
