//! A search's definition beyond the space: which knob values to search, the constraint of a
//! `--src` kernel, the seeds of generation 0 from earlier bests, each candidate's input seed, and
//! the `gate` command that confirms a result.

use std::collections::BTreeMap;
use std::path::Path;

use attn_evidence::{EvoBest, SearchSpec};

use crate::error::{EvoError, Result};
use crate::log::knobs_from_strings;
use crate::space::{Knobs, Space};

/// `K=V,K=V` in name order (the text of `attn_kernels::Config`).
pub fn format_knobs(knobs: &Knobs) -> String {
    knobs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The knobs of a registered target (`available`: name and domain of each) narrowed to the values
/// `declared` for them; a knob not declared keeps its whole domain.
pub fn narrow_domains<'a>(
    target: &str,
    available: impl IntoIterator<Item = (&'a str, &'a [i64])>,
    declared: &BTreeMap<String, Vec<i64>>,
) -> Result<BTreeMap<String, Vec<i64>>> {
    let mut knobs = BTreeMap::new();
    for (name, domain) in available {
        let values = match declared.get(name) {
            Some(values) => {
                if let Some(v) = values.iter().find(|v| !domain.contains(v)) {
                    return Err(EvoError::OutsideDomain {
                        knob: name.to_string(),
                        value: *v,
                        domain: domain.to_vec(),
                    });
                }
                values.clone()
            }
            None => domain.to_vec(),
        };
        knobs.insert(name.to_string(), values);
    }
    match declared.keys().find(|k| !knobs.contains_key(*k)) {
        Some(unknown) => Err(EvoError::UnknownKnob {
            knob: unknown.clone(),
            target: target.to_string(),
        }),
        None => Ok(knobs),
    }
}

/// The constraint of a `--src` kernel's configs (its `defines` merged with the knobs): its block
/// ((`NUM_WARPS` + `PRODUCER_WARPS`) × 32 threads) and `SHARED_BYTES` must fit the device.
pub fn source_constraint(
    defines: BTreeMap<String, i64>,
    max_threads_per_block: u32,
    max_shared_per_block: u32,
) -> impl Fn(&Knobs) -> std::result::Result<(), String> + Send + Sync + 'static {
    move |knobs| {
        let get = |name: &str, default: i64| {
            knobs
                .get(name)
                .or_else(|| defines.get(name))
                .copied()
                .unwrap_or(default)
        };
        let (block_m, warps, shared) = (
            get("BLOCK_M", 64),
            get("NUM_WARPS", 4),
            get("SHARED_BYTES", 0),
        );
        let producers = get("PRODUCER_WARPS", 0);
        if block_m < 1
            || warps < 1
            || producers < 0
            || (warps + producers) * 32 > i64::from(max_threads_per_block)
            || !(0..=i64::from(max_shared_per_block)).contains(&shared)
        {
            Err(format!(
                "BLOCK_M={block_m}, NUM_WARPS={warps}, SHARED_BYTES={shared} do not fit the device"
            ))
        } else {
            Ok(())
        }
    }
}

/// A seed for a candidate's inputs from the run's seed and its config (FNV-1a of `K=V,...`): a
/// resumed run measures a candidate on the same inputs.
pub fn config_seed(seed: u64, knobs: &Knobs) -> u64 {
    format_knobs(knobs)
        .bytes()
        .fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// Adds to `seeds` the best configs of earlier searches of `target` (`<evo_dir>/*/best.json`;
/// unreadable files are skipped).
pub fn seed_from_bests(
    seeds: &mut Vec<Knobs>,
    evo_dir: &Path,
    target: &str,
    space: &Space,
    fill: &Knobs,
) {
    for entry in std::fs::read_dir(evo_dir).into_iter().flatten().flatten() {
        let Ok(best) = EvoBest::read(&entry.path().join("best.json")) else {
            continue;
        };
        if best.target == target {
            if let Ok(knobs) = knobs_from_strings(&best.config) {
                push_projected(seeds, space, &knobs, fill);
            }
        }
    }
}

fn push_projected(seeds: &mut Vec<Knobs>, space: &Space, partial: &Knobs, fill: &Knobs) {
    if let Some(k) = space.project(partial, fill) {
        if !seeds.contains(&k) {
            seeds.push(k);
        }
    }
}

/// The `cargo xtask gate` command that confirms `knobs` of `spec` independently.
///
/// ```
/// use attn_evidence::{SearchSpec, ShapeSpec};
/// let spec = SearchSpec {
///     target: "mma".into(), implementation: Some("mma".into()), src: None, entry: None,
///     defines: Default::default(), knobs: Default::default(), shape: "2,8,1024,64".parse()?,
///     baseline: "sdpa".into(), seed: 1, population: 8, generations: 8,
/// };
/// let knobs = [("BLOCK_M".to_string(), 128)].into();
/// assert_eq!(
///     attn_evo::gate_command(&spec, &knobs),
///     "cargo xtask gate --impl mma --config BLOCK_M=128 --shape 2,8,1024,64 --dtype fp16 --baseline sdpa"
/// );
/// # Ok::<(), attn_evidence::EvidenceError>(())
/// ```
pub fn gate_command(spec: &SearchSpec, knobs: &Knobs) -> String {
    let s = &spec.shape;
    let mut shape = format!("{},{},{}", s.batch, s.heads, s.seq_q);
    if s.seq_kv != s.seq_q {
        shape.push_str(&format!(",{}", s.seq_kv));
    }
    shape.push_str(&format!(",{}", s.head_dim));
    let mut cmd = String::from("cargo xtask gate ");
    match (&spec.implementation, &spec.src) {
        (Some(name), _) => cmd.push_str(&format!("--impl {name} --config {}", format_knobs(knobs))),
        (None, Some(src)) => {
            cmd.push_str(&format!("--src {}", src.display()));
            if let Some(entry) = &spec.entry {
                cmd.push_str(&format!(" --entry {entry}"));
            }
            for (k, v) in spec.defines.iter().chain(knobs.iter()) {
                cmd.push_str(&format!(" --define {k}={v}"));
            }
        }
        (None, None) => cmd.push_str("(synthetic search: nothing to gate)"),
    }
    cmd.push_str(&format!(" --shape {shape}"));
    if s.causal {
        cmd.push_str(" --causal");
    }
    cmd.push_str(&format!(
        " --dtype {} --baseline {}",
        s.dtype, spec.baseline
    ));
    cmd
}
