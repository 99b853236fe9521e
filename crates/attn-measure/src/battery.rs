//! The edge-shape battery: correctness (not timing) of the candidate on small shapes chosen to
//! break tiling, for the case's head dim, dtype and mask. A case's own shape is usually a multiple
//! of every tile; kernels go wrong at the edges:
//!
//! - ragged lengths at every tile size the registry knows ([`tile_sizes`]: every value of every
//!   implementation's `BLOCK_M` and `BLOCK_N` domain, the candidate's own, and 176): `t − 1` and
//!   `t + 1` query rows and keys, `S_q ≠ S_kv` both ways;
//! - `S = 1` (one query, one key), one query against many keys, many queries against one key;
//! - batch and heads of 1 and odd counts (3, 5);
//! - `S_q > S_kv`: with a causal mask its first rows see no key and must be zeros;
//! - for a varlen problem, packed batches too ([`varlen_battery_lengths`]): empty sequences
//!   first, in the middle and last, single rows, one past every tile size, one long sequence
//!   among many short ones, queries and keys of different lengths.
//!
//! Inputs are [`Distribution::Distinct`] (every element a distinct value in ±[0.25, 2), so a
//! misplaced row, head or element shows, and the tolerance's bound on |V| holds everywhere), the
//! scale is drawn per shape like the checks'. Each shape is one check of [`check::check_one`]
//! (guards, input checksums and the determinism launch included); the battery stops at the
//! first failing shape, which names it.

use std::collections::BTreeSet;

use attn_evidence::EdgeBattery;
use attn_kernels::registry;
use attn_oracle::Distribution;

use crate::check::{check_one, scale_factor, CheckContext};
use crate::{Problem, Result};

/// Tile sizes in use beyond the registry's domains (a `--src` kernel's, earlier tunings): the
/// battery covers them too.
pub const EXTRA_TILES: [usize; 4] = [64, 128, 176, 192];

/// The tile sizes the battery is ragged at: every `BLOCK_M` and `BLOCK_N` any registered
/// implementation may take, [`EXTRA_TILES`], and `candidate`'s own, sorted; at least 16 (smaller
/// tiles are ragged wherever these are).
pub fn tile_sizes(candidate: &[usize]) -> Vec<usize> {
    let mut tiles: BTreeSet<usize> = EXTRA_TILES.iter().copied().collect();
    for implementation in registry() {
        for knob in implementation.knobs {
            if knob.name == "BLOCK_M" || knob.name == "BLOCK_N" {
                tiles.extend(knob.domain.iter().map(|&v| v as usize));
            }
        }
    }
    tiles.extend(candidate.iter().copied());
    tiles.into_iter().filter(|&t| t >= 16).collect()
}

/// The battery's `(batch, heads, seq_q, seq_kv)`, for any head dim and mask: `S = 1`, one query
/// against many keys and many queries against one key, then for every tile `t` both `t − 1`
/// queries against `t + 1` keys and the reverse (batch and heads cycling through 1, 3, 5), and
/// `S_q > S_kv` by a long way (a causal mask leaves its first rows without a key).
pub fn battery_sizes(tiles: &[usize]) -> Vec<(usize, usize, usize, usize)> {
    let largest = tiles.iter().copied().max().unwrap_or(128);
    let counts = [(1, 1), (1, 3), (3, 1), (1, 5), (3, 3)];
    let mut sizes = vec![
        (1, 1, 1, 1),
        (1, 1, 1, largest + 1),
        (1, 1, largest + 1, 1),
        (3, 5, 1, 37),
    ];
    for (i, &t) in tiles.iter().enumerate() {
        let (b, h) = counts[i % counts.len()];
        sizes.push((b, h, t - 1, t + 1));
        sizes.push((h, b, t + 1, t - 1));
    }
    sizes.push((1, 3, largest + 65, 65));
    sizes.push((2, 1, 2 * largest + 1, 3));
    let mut seen = BTreeSet::new();
    sizes.retain(|s| seen.insert(*s));
    sizes
}

/// The varlen batches of the battery, each as its sequences' `(queries, keys)`: an empty
/// sequence first, in the middle and last; sequences of one row; one past (and one short of)
/// every tile size in one batch; one long sequence among many short ones; queries and keys of
/// different lengths (causal rows that see no key, a sequence with keys but no query and one with
/// queries but no key).
pub fn varlen_battery_lengths(tiles: &[usize]) -> Vec<Vec<(usize, usize)>> {
    let largest = tiles.iter().copied().max().unwrap_or(128);
    let same = |lens: &[usize]| lens.iter().map(|&n| (n, n)).collect::<Vec<_>>();
    let one_past: Vec<usize> = tiles.iter().map(|&t| t + 1).collect();
    let one_short: Vec<usize> = tiles.iter().map(|&t| t - 1).collect();
    let mut long_and_short = vec![2 * largest + 1];
    long_and_short.extend([1, 2, 3, 5, 8, 13, 21, 34, 55].iter().cycle().take(24));
    vec![
        same(&[0, 65, 130]),
        same(&[77, 0, 129]),
        same(&[129, 3, 0]),
        same(&[1, 1, 1]),
        same(&[1, largest + 1, 1]),
        same(&one_past),
        same(&one_short),
        same(&long_and_short),
        vec![(100, 30), (30, 100), (0, 50), (50, 0), (largest + 1, 1)],
    ]
}

/// The battery's problems for `problem`'s head dim, dtype, mask, window and K/V head group: the
/// dense edge shapes ([`battery_sizes`]) and, for a varlen problem, the varlen edge batches
/// ([`varlen_battery_lengths`]) too.
pub fn battery_problems(problem: &Problem, tiles: &[usize]) -> Result<Vec<Problem>> {
    let spec = &problem.spec;
    // Grouped heads keep their group (`kv` K/V heads of `group` query heads each) and a window
    // stays: the battery takes the problem's own variant paths at every edge.
    let group = spec.heads / spec.kv_heads();
    let heads = |kv: usize| {
        if group > 1 {
            format!("{}/{kv}", kv * group)
        } else {
            kv.to_string()
        }
    };
    // Through the text, like a user's --shape: whatever else a shape carries keeps its default.
    let parse = |dims: String| {
        let mut text = dims;
        if spec.causal {
            text.push_str(" causal");
        }
        if let Some(window) = spec.window {
            text.push_str(&format!(" window={window}"));
        }
        text.push_str(&format!(" {}", spec.dtype));
        Problem::parse(&text)
    };
    let dense = battery_sizes(tiles)
        .into_iter()
        .map(|(b, h, sq, skv)| parse(format!("{b},{},{sq},{skv},{}", heads(h), spec.head_dim)));
    let packed = varlen_battery_lengths(tiles)
        .into_iter()
        .enumerate()
        .filter(|_| problem.varlen.is_some())
        .map(|(i, lens)| {
            let lengths = attn_evidence::Varlen {
                seqlens_q: lens.iter().map(|l| l.0).collect(),
                seqlens_kv: lens.iter().map(|l| l.1).collect(),
            };
            let kv = [1, 3][i % 2];
            parse(format!(
                "varlen={lengths} H={} D={}",
                heads(kv),
                spec.head_dim
            ))
        });
    dense.chain(packed).collect()
}

/// Runs the battery of `problem` (see the module), seeds from `seed`.
pub(crate) fn run_battery(
    cx: &CheckContext<'_>,
    problem: &Problem,
    tiles: &[usize],
    seed: u64,
) -> Result<EdgeBattery> {
    let problems = battery_problems(problem, tiles)?;
    let mut battery = EdgeBattery {
        shapes: problems.iter().map(|p| p.to_string()).collect(),
        checks: vec![],
        skipped: vec![],
        checked_in: None,
    };
    for (i, edge) in problems.iter().enumerate() {
        let edge_seed = seed.wrapping_add(7919 * i as u64);
        let distribution = Distribution::Distinct;
        // Any factor, 1 included (index 1 of the draw allows it).
        let scale = edge.params.scale * scale_factor(edge_seed, 1, distribution);
        match check_one(cx, edge, edge_seed, distribution, scale, None) {
            Ok(run) => {
                let mut check = run.check;
                check.shape = Some(edge.to_string());
                let failed = !check.passed;
                battery.checks.push(check);
                if failed {
                    break;
                }
            }
            // A shape the candidate declines before launching (an implementation's own limits):
            // recorded, not held against it. Faults and everything else end the case as usual.
            Err(crate::MeasureError::Kernel(
                e @ (attn_kernels::KernelError::Unsupported { .. }
                | attn_kernels::KernelError::InvalidConfig { .. }),
            )) => battery.skipped.push(format!("{edge}: {e}")),
            Err(e) => return Err(e),
        }
    }
    Ok(battery)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_tiles_and_the_listed_ones_are_all_covered() {
        let tiles = tile_sizes(&[80]);
        for t in [16, 32, 48, 64, 96, 128, 176, 192, 256, 80] {
            assert!(tiles.contains(&t), "{t} in {tiles:?}");
        }
        assert!(tiles.windows(2).all(|w| w[0] < w[1]), "sorted, no repeats");
        assert!(!tile_sizes(&[8]).contains(&8), "tiles under 16 add nothing");
    }

    #[test]
    fn the_battery_is_ragged_at_every_tile_both_ways_and_has_every_edge() {
        let tiles = tile_sizes(&[]);
        let sizes = battery_sizes(&tiles);
        for &t in &tiles {
            // Ragged at t for queries and keys, S_q ≠ S_kv both ways.
            assert!(
                sizes.iter().any(|&(_, _, q, k)| q == t + 1 && k == t - 1),
                "{t}"
            );
            assert!(
                sizes.iter().any(|&(_, _, q, k)| q == t - 1 && k == t + 1),
                "{t}"
            );
        }
        assert!(sizes.contains(&(1, 1, 1, 1)), "S = 1");
        assert!(sizes.iter().any(|&(_, _, q, k)| q == 1 && k > 1));
        assert!(sizes.iter().any(|&(_, _, q, k)| k == 1 && q > 1));
        // Odd batch and head counts, and 1s.
        assert!(sizes.iter().any(|&(b, _, _, _)| b == 3));
        assert!(sizes.iter().any(|&(_, h, _, _)| h == 5));
        assert!(sizes.iter().any(|&(b, h, _, _)| b == 1 && h == 1));
        // Causal rows that see no key: S_q − S_kv rows of them, more than a tile.
        let largest = *tiles.iter().max().unwrap();
        assert!(sizes.iter().any(|&(_, _, q, k)| q > k + largest));
        // Small enough to be fast: at most ~2M query elements at D = 128 in all.
        let total: usize = sizes.iter().map(|&(b, h, q, _)| b * h * q * 128).sum();
        assert!(total < 2_000_000, "{total}");
        assert!(sizes.len() < 40, "{}", sizes.len());
    }

    #[test]
    fn battery_problems_keep_the_case_group_and_window() {
        let case = Problem::parse("2,32/8,8192,128 causal window=100,-1").unwrap();
        let problems = battery_problems(&case, &tile_sizes(&[])).unwrap();
        assert!(problems
            .iter()
            .all(|p| p.shape.group() == 4 && p.params.window.left == Some(100) && p.params.causal));
    }

    #[test]
    fn a_varlen_case_adds_packed_edge_batches_with_its_group_window_and_mask() {
        let case =
            Problem::parse("varlen=4096,0,8192 H=32/8 D=128 causal window=100,-1 bf16").unwrap();
        let tiles = tile_sizes(&[]);
        let problems = battery_problems(&case, &tiles).unwrap();
        let packed: Vec<&Problem> = problems.iter().filter(|p| p.varlen.is_some()).collect();
        // The dense edge shapes, and every varlen edge batch after them.
        assert_eq!(problems.len(), battery_sizes(&tiles).len() + packed.len());
        assert_eq!(packed.len(), varlen_battery_lengths(&tiles).len());
        assert!(problems.iter().all(|p| p.shape.group() == 4
            && p.params.window.left == Some(100)
            && p.params.causal
            && p.spec.head_dim == 128
            && p.dtype == case.dtype));
        let lengths: Vec<&Vec<usize>> = packed
            .iter()
            .map(|p| &p.varlen.as_ref().unwrap().seqlens_q)
            .collect();
        // Empty sequences first, in the middle and last; single rows.
        assert!(lengths.iter().any(|l| l[0] == 0));
        assert!(lengths.iter().any(|l| l[l.len() - 1] == 0));
        assert!(lengths
            .iter()
            .any(|l| l.len() > 2 && l[1..l.len() - 1].contains(&0)));
        assert!(lengths.iter().any(|l| l.iter().all(|&n| n == 1)));
        // One past every tile, in one batch; one long sequence among many short ones.
        for &t in &tiles {
            assert!(lengths.iter().any(|l| l.contains(&(t + 1))), "{t}");
        }
        assert!(lengths
            .iter()
            .any(|l| l.len() > 20 && l.iter().filter(|&&n| n > 256).count() == 1));
        // Queries and keys of different lengths, either side empty.
        let cross = packed
            .iter()
            .map(|p| p.varlen.as_ref().unwrap())
            .find(|v| v.seqlens_q != v.seqlens_kv)
            .unwrap();
        assert!(cross
            .seqlens_q
            .iter()
            .zip(&cross.seqlens_kv)
            .any(|(&q, &k)| q > 0 && k == 0));
        assert!(cross
            .seqlens_q
            .iter()
            .zip(&cross.seqlens_kv)
            .any(|(&q, &k)| q == 0 && k > 0));
        // Small enough to be fast: the batches hold a few thousand tokens each at most.
        assert!(packed.iter().all(|p| p.q_elements() < 2_000_000));
        // A dense case keeps its battery as it was.
        let dense = Problem::parse("2,32/8,8192,128 causal").unwrap();
        assert!(battery_problems(&dense, &tiles)
            .unwrap()
            .iter()
            .all(|p| p.varlen.is_none()));
    }

    #[test]
    fn battery_problems_keep_the_case_head_dim_dtype_and_mask() {
        let case = Problem::parse("2,16,4096,128 causal bf16").unwrap();
        let problems = battery_problems(&case, &tile_sizes(&[])).unwrap();
        assert!(problems.iter().all(|p| p.spec.head_dim == 128
            && p.spec.causal
            && p.dtype == case.dtype
            && (p.params.scale - case.params.scale).abs() < 1e-15));
        // A causal problem with S_q > S_kv: its first rows see no key.
        let no_key = problems
            .iter()
            .find(|p| p.shape.seq_q > p.shape.seq_kv + 1)
            .unwrap();
        assert_eq!(
            no_key
                .params
                .kv_end(0, no_key.shape.seq_q, no_key.shape.seq_kv),
            0
        );
        let plain = Problem::parse("1,8,512,64").unwrap();
        assert!(battery_problems(&plain, &[64])
            .unwrap()
            .iter()
            .all(|p| !p.spec.causal && p.spec.head_dim == 64));
    }
}
