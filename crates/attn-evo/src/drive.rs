//! Measuring a generation on several devices at once: the caller measures, this only schedules.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

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

/// The note `best.json` keeps on `--ncu` (`asked`): finalists are ranked by speedup alone.
pub fn ncu_note(asked: bool) -> String {
    if !asked {
        return String::new();
    }
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("ncu").is_file()));
    if found {
        "--ncu: finalists are ranked by speedup; profile the best with `cargo xtask ncu` (ncu scoring inside evo is not wired yet)".into()
    } else {
        "--ncu: Nsight Compute (ncu) is not on PATH: finalists are ranked by speedup alone".into()
    }
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
