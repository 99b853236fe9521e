//! A search driven to its end: the caller measures (a [`Measurer`]), this schedules each
//! generation's candidates over the devices, scores and records them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use attn_evidence::{EvoCandidate, ImplConfig, SearchSpec};
use attn_stats::{BootstrapOptions, CompareOptions, Sample};

use crate::{Knobs, Measurement, Search};

/// Who measures a search's candidates (xtask: a worker process per candidate, one per GPU).
pub trait Measurer: Sync {
    /// What one generation's measurements share (xtask: the precompile of its candidates).
    type Generation: Sync;
    /// Generation `number` is about to be measured: its candidates' `configs`, each resolved
    /// ([`crate::resolve_config`]), in proposal order.
    fn begin(&self, number: u32, configs: &[ImplConfig]) -> Self::Generation;
    /// Waits until candidate `index` of the generation can be measured: its compile seconds,
    /// when known.
    fn ready(&self, generation: &Self::Generation, index: usize) -> Option<f64>;
    /// Measures `config` on `device`, its inputs from `seed` (the search's seed and the config's,
    /// [`crate::config_seed`]: a resumed run measures a candidate on the same inputs).
    fn measure(&self, config: &ImplConfig, seed: u64, device: usize) -> Measurement;
    /// The generation is measured.
    fn end(&self, generation: Self::Generation);
}

/// Measures `search` (of `spec`) to its end: each generation's candidates, each resolved once
/// into the [`ImplConfig`] the measurer gets, on `devices` (a thread each),
/// scored against the baseline of the device each ran on, recorded, and handed to `on_row` on
/// this thread in completion order (to log and show). Stops at `on_row`'s first error.
pub fn drive<M: Measurer, E>(
    spec: &SearchSpec,
    search: &mut Search,
    measurer: &M,
    devices: &[usize],
    baselines: &BTreeMap<usize, Sample>,
    compare: &CompareOptions,
    mut on_row: impl FnMut(&Search, &EvoCandidate) -> Result<(), E>,
) -> Result<(), E> {
    while let Some(generation) = search.next_generation() {
        let number = generation.number;
        let resolved: Vec<ImplConfig> = generation
            .candidates
            .iter()
            .map(|k| crate::resolve_config(spec, k))
            .collect();
        let state = measurer.begin(number, &resolved);
        let space = search.space();
        let configs: Vec<_> = generation
            .candidates
            .iter()
            .map(|k| space.to_row(k))
            .collect();
        let measured = |index: usize, knobs: &Knobs, device: usize| {
            let compile_s = measurer.ready(&state, index);
            let started = Instant::now();
            let seed = crate::config_seed(spec.seed, knobs);
            let measured = measurer.measure(&resolved[index], seed, device);
            let run_s = started.elapsed().as_secs_f64();
            let baseline = &baselines[&device];
            let config = configs[index].clone();
            let row = measured.log_row(number, config, baseline, compare, compile_s, run_s);
            (knobs.clone(), row)
        };
        for_each_on_devices(&generation.candidates, devices, measured, |(knobs, row)| {
            search.record(number, knobs, row.score);
            on_row(search, &row)
        })?;
        measurer.end(state);
    }
    Ok(())
}

/// Measures `items` on one thread per device (each takes the next item when free) and hands each
/// result to `record` on the calling thread, in completion order; stops at `record`'s first
/// error. `measure` gets an item's index, the item and the device.
pub fn for_each_on_devices<T: Sync, R: Send, E>(
    items: &[T],
    devices: &[usize],
    measure: impl Fn(usize, &T, usize) -> R + Sync,
    mut record: impl FnMut(R) -> Result<(), E>,
) -> Result<(), E> {
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for &device in devices {
            let (tx, next, measure) = (tx.clone(), &next, &measure);
            scope.spawn(move || loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(index) else { break };
                if tx.send(measure(index, item, device)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        rx.into_iter().try_for_each(&mut record)
    })
}

/// The baseline `name` measured once on each device by `measure`; one that fails is an error
/// (a search has nothing to compare with).
pub fn measure_baselines(
    devices: &[usize],
    name: &str,
    mut measure: impl FnMut(usize) -> Measurement,
) -> crate::Result<BTreeMap<usize, Sample>> {
    let measured = devices.iter().map(|&device| {
        let sample = measure(device).baseline_sample(name, device)?;
        Ok((device, sample))
    });
    measured.collect()
}

/// How a search compares each candidate with its baseline: `resamples` bootstrap resamples for
/// the speedup's CI, seeded by the search.
pub fn compare_options(resamples: usize, seed: u64) -> crate::Result<CompareOptions> {
    let compare = CompareOptions {
        bootstrap: BootstrapOptions {
            resamples,
            seed,
            ..BootstrapOptions::default()
        },
        ..CompareOptions::default()
    };
    compare.validate()?;
    Ok(compare)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_is_measured_once_across_devices() {
        let items: Vec<usize> = (0..20).collect();
        let mut seen = vec![];
        let measured = |index: usize, item: &usize, device: usize| (index, *item, device);
        let ok: Result<(), ()> =
            for_each_on_devices(&items, &[0, 1, 2], measured, |(i, item, d)| {
                assert!(i == item && d < 3);
                seen.push(item);
                Ok(())
            });
        assert!(ok.is_ok());
        seen.sort_unstable();
        assert_eq!(seen, items);
        let stopped = for_each_on_devices(&items, &[0], |_, _, _| (), |()| Err("stop"));
        assert_eq!(stopped, Err("stop"));
    }
}
