//! The resampling loop: fixed-size chunks of resamples, one RNG stream per chunk, rayon over chunks.
//!
//! Chunk `c` draws from ChaCha8 seeded with `seed` on stream `c`, so replicate `r` depends only on
//! `(seed, r / CHUNK)` and the data, never on how many threads ran or in which order. Within a
//! resample the samples are drawn one after the other, each index uniform by Lemire's
//! multiply-shift with rejection (our own, so a `rand` upgrade cannot change results).

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

/// Resamples per chunk (and RNG stream). Part of the reproducibility contract: changing it changes
/// every interval for a given seed.
pub(crate) const CHUNK: usize = 128;

/// The largest sample the index generator handles.
pub(crate) const MAX_LEN: usize = u32::MAX as usize;

/// Draws `resamples` bootstrap resamples of `samples` (each resampled independently, with
/// replacement) and lets `evaluate` write `outputs` statistics of each into its row.
///
/// Returns the replicates row-major: statistic `k` of resample `r` at `r * outputs + k`.
/// Callers guarantee every sample is non-empty and at most [`MAX_LEN`] long.
pub(crate) fn replicates<E>(
    samples: &[&[f64]],
    resamples: usize,
    seed: u64,
    outputs: usize,
    evaluate: E,
) -> Vec<f64>
where
    E: Fn(&mut [Vec<f64>], &mut [f64]) + Sync,
{
    replicates_in_blocks(samples, 1, resamples, seed, outputs, evaluate, &|_| {})
}

/// [`replicates`] resampling whole blocks, calling `progress(n)` from the worker threads each
/// time `n` more resamples are done (once per chunk; the replicates do not depend on it). Each
/// sample is cut into runs of `block` consecutive observations (the last run may be shorter) and a
/// resample draws as many runs, with replacement (a non-overlapping block bootstrap). Where
/// observations come in blocks that share a state (timing blocks under one clock), resampling
/// them one by one treats them as independent and draws intervals too narrow. `block` 1 is the
/// ordinary bootstrap, draw for draw.
pub(crate) fn replicates_in_blocks<E>(
    samples: &[&[f64]],
    block: usize,
    resamples: usize,
    seed: u64,
    outputs: usize,
    evaluate: E,
    progress: &(dyn Fn(usize) + Sync),
) -> Vec<f64>
where
    E: Fn(&mut [Vec<f64>], &mut [f64]) + Sync,
{
    let mut rows = vec![0.0; resamples * outputs];
    if outputs == 0 {
        return rows;
    }
    rows.par_chunks_mut(CHUNK * outputs)
        .enumerate()
        .for_each(|(chunk, chunk_rows)| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(chunk as u64);
            let mut buffers: Vec<Vec<f64>> = samples.iter().map(|s| vec![0.0; s.len()]).collect();
            for row in chunk_rows.chunks_mut(outputs) {
                for (buffer, sample) in buffers.iter_mut().zip(samples) {
                    if block <= 1 {
                        fill_resample(buffer, sample, &mut rng);
                    } else {
                        fill_block_resample(buffer, sample, block, &mut rng);
                    }
                }
                evaluate(&mut buffers, row);
            }
            progress(chunk_rows.len() / outputs);
        });
    rows
}

/// Overwrites `buffer` (as long as `sample`) with draws, with replacement, from `sample`.
fn fill_resample(buffer: &mut [f64], sample: &[f64], rng: &mut ChaCha8Rng) {
    // Callers guarantee `sample.len() <= u32::MAX`.
    let n = sample.len() as u32;
    for slot in buffer.iter_mut() {
        *slot = sample[index_below(rng, n)];
    }
}

/// Replaces `buffer` with as many runs of `block` consecutive observations of `sample` as it
/// holds, drawn with replacement (its length varies where the last run is shorter).
fn fill_block_resample(buffer: &mut Vec<f64>, sample: &[f64], block: usize, rng: &mut ChaCha8Rng) {
    let runs = sample.len().div_ceil(block);
    // Callers guarantee `sample.len() <= u32::MAX`, so the run count fits too.
    buffer.clear();
    for _ in 0..runs {
        let start = index_below(rng, runs as u32) * block;
        buffer.extend_from_slice(&sample[start..(start + block).min(sample.len())]);
    }
}

/// A uniform integer in `0..n` (`n > 0`): Lemire, "Fast random integer generation in an interval"
/// (2019). The rejection step keeps it exactly uniform.
fn index_below(rng: &mut ChaCha8Rng, n: u32) -> usize {
    let mut product = u64::from(rng.next_u32()) * u64::from(n);
    if (product as u32) < n {
        let threshold = n.wrapping_neg() % n;
        while (product as u32) < threshold {
            product = u64::from(rng.next_u32()) * u64::from(n);
        }
    }
    (product >> 32) as usize
}

/// Column `k` of row-major `rows` with `outputs` columns.
pub(crate) fn column(rows: &[f64], outputs: usize, k: usize) -> Vec<f64> {
    rows.iter().skip(k).step_by(outputs).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_in_range_and_cover_it() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut seen = [0usize; 7];
        for _ in 0..7_000 {
            seen[index_below(&mut rng, 7)] += 1;
        }
        // Each bucket expects 1000; 5 standard deviations is about ±150.
        assert!(
            seen.iter().all(|&count| (850..1150).contains(&count)),
            "{seen:?}"
        );
    }

    #[test]
    fn a_block_resample_is_made_of_whole_runs_and_block_one_is_the_plain_bootstrap() {
        // Runs of 3 equal values (the last one short): every resample is whole runs, so a value's
        // count is a multiple of its run's length.
        let sample = [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0];
        let counts = replicates_in_blocks(
            &[&sample],
            3,
            500,
            9,
            4,
            |buffers, row| {
                for (k, v) in [1.0, 2.0, 3.0, 4.0].iter().enumerate() {
                    row[k] = buffers[0].iter().filter(|x| *x == v).count() as f64;
                }
            },
            &|_| {},
        );
        for row in counts.chunks(4) {
            assert!(row[..3].iter().all(|c| c % 3.0 == 0.0), "{row:?}");
        }
        // Runs of 4 distinct values: some resample repeats a run, and none splits one.
        let distinct: Vec<f64> = (0..12).map(f64::from).collect();
        let sums = replicates_in_blocks(
            &[&distinct],
            4,
            200,
            5,
            1,
            |b, row| row[0] = b[0].iter().sum(),
            &|_| {},
        );
        assert!(sums.iter().any(|&s| s != 66.0));
        let plain = |block| {
            replicates_in_blocks(
                &[&distinct],
                block,
                300,
                3,
                1,
                |b, row| row[0] = b[0].iter().sum(),
                &|_| {},
            )
        };
        assert_eq!(
            plain(1),
            replicates(&[&distinct], 300, 3, 1, |b, row| row[0] = b[0].iter().sum())
        );
        assert_ne!(plain(1), plain(4));
    }

    #[test]
    fn replicates_do_not_depend_on_the_thread_count() {
        let sample: Vec<f64> = (0..50).map(f64::from).collect();
        let run = |threads| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                replicates(&[&sample], 1_000, 42, 1, |buffers, row| {
                    row[0] = buffers[0].iter().sum()
                })
            })
        };
        let one = run(1);
        assert_eq!(
            one.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            run(3).iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
    }
}
