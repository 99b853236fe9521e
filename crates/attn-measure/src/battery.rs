//! The edge-shape battery: correctness (not timing) of the candidate on small shapes chosen to
//! break tiling, for the case's head dim, dtype and mask, and across every variant dimension the
//! candidate declares ([`Variants`]), beyond the case's own values. A case's own shape is usually a
//! multiple of every tile, and of one K/V head group and one window; kernels go wrong at the edges:
//!
//! - ragged lengths at every tile size the registry knows ([`tile_sizes`]: every value of every
//!   implementation's `BLOCK_M` and `BLOCK_N` domain, the candidate's own, and 176): `t − 1` and
//!   `t + 1` query rows and keys, `S_q ≠ S_kv` both ways;
//! - `S = 1` (one query, one key), one query against many keys, many queries against one key;
//! - batch and heads of 1 and odd counts (3, 5);
//! - `S_q > S_kv`: with a causal mask its first rows see no key and must be zeros;
//! - where the candidate declares grouped heads, other groups than the case's ([`group_sizes`]):
//!   odd and even non-powers of two (3, 5, 6, 7, Qwen2.5-7B's 28/4), `H_kv = 1` and `H_kv = H`,
//!   on ragged lengths and more than one batch, under the case's mask and window;
//! - where it declares windows, window edges beyond the case's own ([`window_edges`]), at the
//!   case's group, on any case: sides of 0, 1, a tile ± 1 and wider than the keys, left-only,
//!   right-only and both, with and without causal (a causal case keeps causal, its right bound 0),
//!   rows that see no key;
//! - for a varlen problem, packed batches too ([`varlen_battery_lengths`]): empty sequences
//!   first, in the middle and last, single rows, one past every tile size, one long sequence
//!   among many short ones, queries and keys of different lengths; every other batch at other
//!   K/V groups where the candidate declares grouped heads ([`VARLEN_GROUPS`]).
//!
//! Inputs are [`Distribution::Distinct`] (every element a distinct value in ±[0.25, 2), so a
//! misplaced row, head or element shows, and the tolerance's bound on |V| holds everywhere), the
//! scale is drawn per shape like the checks'. Each shape is one check of [`check::check_one`]
//! (guards, input checksums and the determinism launch included); the battery stops at the
//! first failing shape, which names it. A shape the compiled config declines before launching
//! ([`attn_kernels::Prepared::declines`]: hopper's pairs of query heads at an odd group) is
//! recorded under `skipped`, with the reason, as is a shape the host refuses before launching
//! (`Unsupported`, `InvalidConfig`: an implementation's declared limits); faults never are.

use std::collections::BTreeSet;

use attn_evidence::EdgeBattery;
use attn_kernels::registry::{registry, Variants};
use attn_kernels::KernelError;
use attn_oracle::{Distribution, Window};

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

/// Query heads per K/V head of the grouped-head shapes beyond a case's own: odd and even
/// non-powers of two, and a power of two for multi-query attention.
pub const GROUPS: [usize; 5] = [3, 5, 6, 7, 8];

/// The battery's grouped-head shapes `(batch, heads, kv_heads, seq_q, seq_kv)` for a case of
/// `group` query heads per K/V head: every group of [`GROUPS`] (7 as Qwen2.5-7B's 28/4), `H_kv = 1`
/// (5/1, 7/1, 8/1), `H_kv = H` (group 1) and the case's own group, each on lengths off every tile
/// and more than one batch (a wrong head mapping reads another batch's heads, not only past the
/// end), on few keys (what a wrong mapping reads past the last K/V head stays within the canary
/// guards: finite values, so a wrong output rather than a fault).
pub fn group_sizes(group: usize) -> Vec<(usize, usize, usize, usize, usize)> {
    let mut sizes = vec![
        (2, 6, 2, 97, 129),
        (2, 5, 1, 129, 65),
        (2, 12, 2, 65, 191),
        (2, 28, 4, 45, 130),
        (3, 7, 1, 63, 257),
        (2, 8, 1, 130, 97),
        (2, 6, 6, 65, 63),
        (2, 2 * group, 2, 100, 161),
    ];
    let mut seen = BTreeSet::new();
    sizes.retain(|s| seen.insert(*s));
    sizes
}

/// The `(heads, kv_heads)` a packed edge batch of a grouped-head candidate takes beside the
/// case's group: groups of 3, 7 (MQA), 6 and 1.
pub const VARLEN_GROUPS: [(usize, usize); 4] = [(3, 1), (7, 1), (12, 2), (5, 5)];

/// A window wider than every window shape's keys ([`WINDOW_LENGTHS`]).
pub const WIDE_WINDOW: usize = 1000;

/// The `(seq_q, seq_kv)` the window edges cycle through: more queries than keys first (rows that
/// see no key must be zeros), fewer, and many more keys than the widest window edge but
/// [`WIDE_WINDOW`].
pub const WINDOW_LENGTHS: [(usize, usize); 3] = [(200, 161), (161, 200), (131, 290)];

/// The battery's window edges `(window, causal)` for a case with a causal mask or without: sides
/// of 0, 1, one short of and one past the tiles of 64 and 128, and wider than the keys
/// ([`WIDE_WINDOW`]). A causal case keeps its mask (its windows' right bound is 0); one without
/// gets left-only, right-only and two-sided windows, right bounds of 0 through the window alone,
/// and a few windows under a causal mask.
pub fn window_edges(causal: bool) -> Vec<(Window, bool)> {
    let w = |left: Option<usize>, right: Option<usize>| Window { left, right };
    let wide = Some(WIDE_WINDOW);
    if causal {
        [0, 1, 63, 65, 127, 129, WIDE_WINDOW]
            .into_iter()
            .map(|left| (w(Some(left), Some(0)), true))
            .collect()
    } else {
        vec![
            (w(Some(0), Some(0)), false),
            (w(Some(1), None), false),
            (w(None, Some(1)), false),
            (w(None, Some(0)), false),
            (w(Some(63), Some(65)), false),
            (w(Some(65), Some(63)), false),
            (w(Some(127), None), false),
            (w(None, Some(129)), false),
            (w(Some(129), Some(127)), false),
            (w(wide, wide), false),
            (w(Some(1), Some(0)), true),
            (w(Some(129), Some(0)), true),
        ]
    }
}

/// The battery's problems for `problem`'s head dim, dtype, mask, window and K/V head group: the
/// dense edge shapes ([`battery_sizes`]); where `variants` declares grouped heads, the group
/// shapes ([`group_sizes`]) under the case's mask and window; where it declares windows, the
/// window edges ([`window_edges`]) at the case's group; and, for a varlen problem, the varlen
/// edge batches ([`varlen_battery_lengths`]) too.
pub fn battery_problems(
    problem: &Problem,
    tiles: &[usize],
    variants: Variants,
) -> Result<Vec<Problem>> {
    let spec = &problem.spec;
    // The dense edges keep the group (`kv` K/V heads of `group` query heads each) and the window:
    // the battery takes the problem's own variant paths at every edge.
    let group = spec.heads / spec.kv_heads();
    let heads_of = |h: usize, kv: usize| {
        if h == kv {
            h.to_string()
        } else {
            format!("{h}/{kv}")
        }
    };
    let heads = |kv: usize| heads_of(kv * group, kv);
    // Through the text, like a user's --shape: whatever else a shape carries keeps its default.
    let parse = |dims: String, causal: bool, window: Option<Window>| {
        let mut text = dims;
        if causal {
            text.push_str(" causal");
        }
        if let Some(window) = window {
            text.push_str(&format!(" window={window}"));
        }
        text.push_str(&format!(" {}", spec.dtype));
        Problem::parse(&text)
    };
    let own = |dims: String| parse(dims, spec.causal, spec.window);
    let d = spec.head_dim;
    let dense = battery_sizes(tiles)
        .into_iter()
        .map(|(b, h, sq, skv)| own(format!("{b},{},{sq},{skv},{d}", heads(h))));
    let groups = group_sizes(group)
        .into_iter()
        .filter(|_| variants.grouped_heads)
        .map(|(b, h, kv, sq, skv)| own(format!("{b},{},{sq},{skv},{d}", heads_of(h, kv))));
    // At least 4 query heads, so that a window's rows are found in more than one head.
    let window_heads = heads((4 / group).max(1));
    let windows = window_edges(spec.causal)
        .into_iter()
        .enumerate()
        .filter(|_| variants.window)
        .map(|(i, (window, causal))| {
            let (sq, skv) = WINDOW_LENGTHS[i % WINDOW_LENGTHS.len()];
            let b = 1 + i % 2;
            parse(
                format!("{b},{window_heads},{sq},{skv},{d}"),
                causal,
                Some(window),
            )
        });
    let packed = varlen_battery_lengths(tiles)
        .into_iter()
        .enumerate()
        .filter(|_| problem.varlen.is_some())
        .map(|(i, lens)| {
            let lengths = attn_evidence::Varlen {
                seqlens_q: lens.iter().map(|l| l.0).collect(),
                seqlens_kv: lens.iter().map(|l| l.1).collect(),
            };
            // Where grouped heads are declared, packed batches take other groups too (odd, even
            // and not powers of two, MQA and none), since a varlen kernel maps heads itself.
            let h = if variants.grouped_heads {
                let other = VARLEN_GROUPS[(i / 2) % VARLEN_GROUPS.len()];
                match i % 2 {
                    0 => heads(1),
                    _ => heads_of(other.0, other.1),
                }
            } else {
                heads([1, 3][i % 2])
            };
            own(format!("varlen={lengths} H={h} D={d}"))
        });
    dense.chain(groups).chain(windows).chain(packed).collect()
}

/// Runs the battery of `problem` (see the module) for a candidate of `variants`, seeds from
/// `seed`.
pub(crate) fn run_battery(
    cx: &CheckContext<'_>,
    problem: &Problem,
    tiles: &[usize],
    variants: Variants,
    seed: u64,
) -> Result<EdgeBattery> {
    let problems = battery_problems(problem, tiles, variants)?;
    let mut battery = EdgeBattery {
        shapes: problems.iter().map(|p| p.to_string()).collect(),
        checks: vec![],
        skipped: vec![],
        checked_in: None,
    };
    for (i, edge) in problems.iter().enumerate() {
        // A shape the compiled config declares it does not take (the host's own rules, never a
        // --src kernel's): recorded, not held against it. Faults and other errors end the case.
        if let Some(what) = cx.prepared.declines(&edge.shape)? {
            let refusal = KernelError::Unsupported {
                implementation: cx.prepared.label().to_string(),
                what,
            };
            battery.skipped.push(format!("{edge}: {refusal}"));
            continue;
        }
        let edge_seed = seed.wrapping_add(7919 * i as u64);
        let distribution = Distribution::Distinct;
        // Any factor, 1 included (index 1 of the draw allows it).
        let scale = edge.params.scale * scale_factor(edge_seed, 1, distribution);
        let run = match check_one(cx, edge, edge_seed, distribution, scale, None) {
            Ok(run) => run,
            // A shape the host refuses before launching (an implementation's declared limits,
            // never a --src kernel's own code): recorded, not held against it.
            Err(crate::MeasureError::Kernel(
                e @ (KernelError::Unsupported { .. } | KernelError::InvalidConfig { .. }),
            )) => {
                battery.skipped.push(format!("{edge}: {e}"));
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut check = run.check;
        check.shape = Some(edge.to_string());
        let failed = !check.passed;
        battery.checks.push(check);
        if failed {
            break;
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
        let tiles = tile_sizes(&[]);
        // A candidate that claims nothing beyond the case: its own group and window everywhere.
        let problems = battery_problems(&case, &tiles, Variants::NONE).unwrap();
        assert_eq!(problems.len(), battery_sizes(&tiles).len());
        assert!(problems
            .iter()
            .all(|p| p.shape.group() == 4 && p.params.window.left == Some(100) && p.params.causal));
        // Grouped heads and windows claimed: the group shapes keep the case's window and mask,
        // the window edges its group and mask.
        let all = battery_problems(&case, &tiles, Variants::DENSE).unwrap();
        let (dense, rest) = all.split_at(battery_sizes(&tiles).len());
        assert_eq!(dense, &problems[..]);
        let (groups, windows) = rest.split_at(group_sizes(4).len());
        assert!(groups
            .iter()
            .all(|p| p.params.window.left == Some(100) && p.params.causal));
        assert_eq!(windows.len(), window_edges(true).len());
        assert!(windows.iter().all(|p| p.shape.group() == 4
            && p.params.causal
            && p.params.window.right == Some(0)
            && p.shape.heads >= 4));
    }

    /// Query heads per K/V head of the battery's shapes.
    fn groups_of(problems: &[Problem]) -> BTreeSet<(usize, usize)> {
        problems
            .iter()
            .map(|p| (p.shape.heads, p.shape.kv_heads))
            .collect()
    }

    #[test]
    fn a_gqa_candidate_is_checked_at_groups_beyond_the_case() {
        let case = Problem::parse("2,32/8,4096,128").unwrap();
        let tiles = tile_sizes(&[]);
        let gqa = Variants {
            grouped_heads: true,
            ..Variants::NONE
        };
        let problems = battery_problems(&case, &tiles, gqa).unwrap();
        let heads = groups_of(&problems);
        let groups: BTreeSet<usize> = heads.iter().map(|(h, kv)| h / kv).collect();
        // Non-powers of two, odd and even (a `h >> log2(group)` mapping is wrong at each), and
        // the case's own.
        for g in GROUPS.into_iter().chain([4]) {
            assert!(groups.contains(&g), "group {g} in {groups:?}");
        }
        // Qwen2.5-7B's 28/4; multi-query (H_kv = 1) at an odd group and a power of two; H_kv = H.
        assert!(heads.contains(&(28, 4)));
        assert!(heads.contains(&(7, 1)) && heads.contains(&(8, 1)));
        assert!(heads.iter().any(|&(h, kv)| h == kv));
        let beyond: Vec<&Problem> = problems.iter().filter(|p| p.shape.group() != 4).collect();
        for p in &beyond {
            let s = &p.shape;
            // More than one batch (a wrong mapping reads another batch's heads), lengths off
            // every tile of 16, the case's head dim, dtype and mask, no window.
            assert!(s.batch > 1, "{p}");
            assert!(s.seq_q % 16 != 0 || s.seq_kv % 16 != 0, "{p}");
            assert!(
                s.head_dim == 128 && p.dtype == case.dtype && !p.spec.causal,
                "{p}"
            );
            assert!(!p.params.window.is_bounded(), "{p}");
            // Few keys: the K/V heads a wrong mapping (`h >> floor(log2 group)`, or `h / 4`) reads
            // past the last one stay within the canary guards.
            let g = s.group();
            let furthest = (0..s.heads)
                .map(|h| (h >> g.ilog2()).max(h / 4))
                .max()
                .unwrap();
            let over_read = furthest.saturating_sub(s.kv_heads - 1) * s.seq_kv * s.head_dim * 2;
            assert!(
                over_read < attn_kernels::guard::GUARD_BYTES,
                "{p}: {over_read}"
            );
        }
        // A config that takes two query heads of one K/V head together (hopper's CLUSTER_HEADS=1)
        // declines the odd groups: it still runs an even non-power of two (6), multi-query at 8/1
        // and the case's own group.
        let paired: BTreeSet<usize> = beyond
            .iter()
            .map(|p| p.shape.group())
            .filter(|g| g % 2 == 0)
            .collect();
        assert!(paired.contains(&6) && paired.contains(&8), "{paired:?}");
        assert!(problems
            .iter()
            .any(|p| p.shape.group() == 4 && p.shape.batch > 1 && p.shape.seq_q % 16 != 0));
        // A candidate without grouped heads gets the case's group only.
        let mha = Problem::parse("2,32,4096,128").unwrap();
        let plain = battery_problems(&mha, &tiles, Variants::NONE).unwrap();
        assert!(plain.iter().all(|p| p.shape.group() == 1));
        let windowed = Variants {
            window: true,
            ..Variants::NONE
        };
        let windows_only = battery_problems(&mha, &tiles, windowed).unwrap();
        assert!(windows_only.iter().all(|p| p.shape.group() == 1));
        // ... and a gqa candidate on a multi-head case gets the groups beyond it all the same.
        let on_mha = groups_of(&battery_problems(&mha, &tiles, gqa).unwrap());
        assert!(on_mha.contains(&(28, 4)) && on_mha.contains(&(7, 1)));
    }

    #[test]
    fn a_window_candidate_is_checked_at_window_edges_beyond_the_case() {
        let tiles = tile_sizes(&[]);
        let windows = |case: &str, variants| -> Vec<Problem> {
            let case = Problem::parse(case).unwrap();
            battery_problems(&case, &tiles, variants)
                .unwrap()
                .into_iter()
                .filter(|p| p.params.window != case.params.window)
                .collect()
        };
        let lefts = |ps: &[Problem]| -> BTreeSet<usize> {
            ps.iter().filter_map(|p| p.params.window.left).collect()
        };
        // A causal case keeps causal: its windows' right bound is 0, their left sides 0, 1, a
        // tile ± 1 and wider than the keys.
        let causal = windows("2,32/8,4096,128 causal window=128,0", Variants::DENSE);
        assert!(!causal.is_empty());
        assert!(causal
            .iter()
            .all(|p| p.params.causal && p.params.right_bound() == Some(0)));
        for left in [0, 1, 63, 65, 127, 129] {
            assert!(lefts(&causal).contains(&left), "{left}");
        }
        assert!(causal
            .iter()
            .any(|p| p.params.window.left.unwrap() > p.shape.seq_kv));
        // Rows that see no key (zeros, as the oracle says): S_q > S_kv under the causal mask.
        assert!(causal.iter().any(|p| p
            .params
            .kv_range(0, p.shape.seq_q, p.shape.seq_kv)
            .is_empty()));
        // A case without a window or mask gets edges too (the candidate claims windows):
        // left-only, right-only and both, right bounds through the window alone, a few causal.
        let plain = windows("2,32/8,4096,128", Variants::DENSE);
        let sides = |p: &Problem| (p.params.window.left, p.params.window.right, p.params.causal);
        let has = |f: &dyn Fn((Option<usize>, Option<usize>, bool)) -> bool| {
            plain.iter().map(sides).any(f)
        };
        assert!(
            has(&|(l, r, c)| l.is_some() && r.is_none() && !c),
            "left-only"
        );
        assert!(
            has(&|(l, r, c)| l.is_none() && r.is_some() && !c),
            "right-only"
        );
        assert!(has(&|(l, r, c)| l.is_some() && r.is_some() && !c), "both");
        assert!(has(&|(l, r, c)| l.is_some() && r == Some(0) && c), "causal");
        assert!(
            has(&|(_, r, c)| r == Some(0) && !c),
            "right 0 without causal"
        );
        assert!(
            has(&|(l, r, _)| l == Some(0) && r == Some(0)),
            "the diagonal alone"
        );
        let rights: BTreeSet<usize> = plain.iter().filter_map(|p| p.params.window.right).collect();
        for side in [0, 1, 63, 65, 127, 129] {
            assert!(
                rights.contains(&side) || lefts(&plain).contains(&side),
                "{side}"
            );
        }
        assert!(plain
            .iter()
            .any(|p| p.params.window.left.unwrap_or(0) > p.shape.seq_kv
                && p.params.window.right.unwrap_or(0) > p.shape.seq_kv));
        // Non-causal rows that see no key: the diagonal alone with S_q > S_kv.
        assert!(plain.iter().any(|p| !p.params.causal
            && p.params
                .kv_range(0, p.shape.seq_q, p.shape.seq_kv)
                .is_empty()));
        // The case's group, head dim and dtype; lengths off the tiles.
        assert!(plain
            .iter()
            .all(|p| p.shape.group() == 4 && p.shape.head_dim == 128 && p.shape.seq_kv % 16 != 0));
        // No window edges for a candidate that does not claim windows.
        let gqa = Variants {
            grouped_heads: true,
            ..Variants::NONE
        };
        assert!(windows("2,32/8,4096,128", gqa).is_empty());
        assert!(windows("2,32/8,4096,128 causal window=128,0", gqa).is_empty());
    }

    #[test]
    fn the_whole_battery_stays_small() {
        // At D = 128 for a candidate claiming every variant: the group shapes under 2M query
        // elements, the window edges under 2M at the case's group of 4 or less (4M at 8), beside
        // the dense edges' (under 2M at group 1, the test above; ×4 at group 4); fewer than 50
        // shapes in all.
        let tiles = tile_sizes(&[]);
        let elements = |ps: &[Problem]| ps.iter().map(|p| p.q_elements()).sum::<usize>();
        for (case, bound) in [
            ("2,32/8,4096,128", 2_000_000),
            ("2,32/8,4096,128 causal", 2_000_000),
            ("2,32,4096,128", 2_000_000),
            ("2,64/8,4096,128", 4_000_000),
        ] {
            let case = Problem::parse(case).unwrap();
            let all = battery_problems(&case, &tiles, Variants::ALL).unwrap();
            let (_, rest) = all.split_at(battery_sizes(&tiles).len());
            let (groups, windows) = rest.split_at(group_sizes(case.shape.group()).len());
            assert!(elements(groups) < 2_000_000, "{case}: {}", elements(groups));
            assert!(elements(windows) < bound, "{case}: {}", elements(windows));
            assert!(all.len() < 50, "{case}: {}", all.len());
        }
    }

    #[test]
    fn a_varlen_case_adds_packed_edge_batches_with_its_group_window_and_mask() {
        let case =
            Problem::parse("varlen=4096,0,8192 H=32/8 D=128 causal window=100,-1 bf16").unwrap();
        let tiles = tile_sizes(&[]);
        let problems = battery_problems(&case, &tiles, Variants::ALL).unwrap();
        let packed: Vec<&Problem> = problems.iter().filter(|p| p.varlen.is_some()).collect();
        // The dense edge shapes, the group shapes and window edges, then every varlen edge batch.
        let dense = battery_sizes(&tiles).len() + group_sizes(4).len() + window_edges(true).len();
        assert_eq!(problems.len(), dense + packed.len());
        assert_eq!(packed.len(), varlen_battery_lengths(&tiles).len());
        assert!(problems[dense..].iter().all(|p| p.varlen.is_some()));
        // Every other packed batch at the case's group, the rest at the other groups.
        let packed_groups: BTreeSet<usize> = packed.iter().map(|p| p.shape.group()).collect();
        for g in [4, 3, 7, 6, 1] {
            assert!(packed_groups.contains(&g), "group {g} in {packed_groups:?}");
        }
        let none = battery_problems(
            &case,
            &tiles,
            Variants {
                grouped_heads: false,
                ..Variants::ALL
            },
        )
        .unwrap();
        assert!(none
            .iter()
            .filter(|p| p.varlen.is_some())
            .all(|p| p.shape.group() == 4));
        assert!(packed.iter().all(|p| p.params.window.left == Some(100)
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
        assert!(battery_problems(&dense, &tiles, Variants::ALL)
            .unwrap()
            .iter()
            .all(|p| p.varlen.is_none()));
    }

    #[test]
    fn battery_problems_keep_the_case_head_dim_dtype_and_mask() {
        let case = Problem::parse("2,16,4096,128 causal bf16").unwrap();
        let problems = battery_problems(&case, &tile_sizes(&[]), Variants::ALL).unwrap();
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
        assert!(battery_problems(&plain, &[64], Variants::NONE)
            .unwrap()
            .iter()
            .all(|p| !p.spec.causal && p.spec.head_dim == 64));
        // A window candidate's non-causal case: causal only at a few of its window edges.
        let edges = battery_problems(&plain, &[64], Variants::ALL).unwrap();
        assert!(edges
            .iter()
            .all(|p| !p.spec.causal || p.params.window.is_bounded()));
    }
}
