//! A suite matrix on a Ray cluster's GPUs (`bench --on ray`): each task is the bundle's own
//! command on one problem, run by one GPU's actor of [`RayPool`] (one task per GPU at a time,
//! each GPU taking the next task when it is free); each outcome goes to the caller as it comes
//! back, in the order tasks finish. A lost worker is Ray's to restart and retry; a task that still
//! fails comes back with why, never dropped.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::search::ray::{Place, RayPool, RaySlot};

/// A task's outcome as it comes back.
#[derive(Debug)]
pub struct Outcome<'p> {
    /// The task's index in the caller's list.
    pub index: usize,
    /// The GPU that ran it.
    pub slot: &'p RaySlot,
    /// The last JSON line the task printed, or why there is none.
    pub line: std::result::Result<String, String>,
    /// How long it took, Ray's retries included.
    pub elapsed: Duration,
}

/// Runs every task of `tasks` (its index and its program's arguments) on `pool`'s GPUs in `cwd`,
/// each within `timeout`; `done` sees each outcome as it comes back (from one thread per GPU).
pub fn run_on_pool(
    pool: &RayPool,
    tasks: &[(usize, Vec<String>)],
    cwd: &Path,
    timeout: Duration,
    done: &(dyn Fn(Outcome<'_>) + Sync),
) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for slot in &pool.slots {
            let next = &next;
            scope.spawn(move || {
                while let Some((index, args)) = tasks.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let started = Instant::now();
                    let line = pool.run_program(args, cwd, Place::Gpu(slot.slot), timeout);
                    done(Outcome {
                        index: *index,
                        slot,
                        line,
                        elapsed: started.elapsed(),
                    });
                }
            });
        }
    });
}
