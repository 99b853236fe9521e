//! The decode shapes: named suites ([`DECODE_SUITES`]) and the edge battery ([`decode_battery`]).
//!
//! They live here, as text and pure functions, because attn-measure's suites build `Problem`s
//! from prefill [`crate::ShapeSpec`]s; wiring decode into `--suite` is the measuring side's step.

use crate::{DecodeSpec, KvLayout, PagePolicy, Varlen};

/// A named list of decode batches, as [`DecodeSpec`] text without a dtype (the caller's).
#[derive(Debug, Clone, Copy)]
pub struct DecodeSuite {
    /// `--suite NAME`.
    pub name: &'static str,
    /// Batches as `decode B=N q=Q kv=KV H=H D=D page=P ...`.
    pub shapes: &'static [&'static str],
    /// What it is for.
    pub purpose: &'static str,
}

/// Every decode suite. Each batch's cache stays within 1M tokens (16 GiB of bf16 K and V at
/// H_kv = 8, D = 128), so that a timing set of several fits one GPU.
pub const DECODE_SUITES: [DecodeSuite; 3] = [
    DecodeSuite {
        name: "decode-seed",
        shapes: &[
            "decode B=1 q=1 kv=512 H=8/2 D=64 page=16",
            "decode B=4 q=1,2,4,1 kv=100,512,1000,17 H=8/2 D=64 page=16 pages=shuffled",
        ],
        purpose: "small decode batches: launch- and latency-bound",
    },
    DecodeSuite {
        name: "decode-llama3-8b",
        shapes: &[
            "decode B=1 q=1 kv=1024 H=32/8 D=128 page=16",
            "decode B=1 q=1 kv=131072 H=32/8 D=128 page=16",
            "decode B=16 q=1 kv=8192 H=32/8 D=128 page=16",
            "decode B=64 q=1 kv=8192 H=32/8 D=128 page=16",
            "decode B=64 q=1 kv=8192 H=32/8 D=128 page=16 pages=shuffled",
            "decode B=256 q=1 kv=1024 H=32/8 D=128 page=16",
            "decode B=256 q=1 kv=4096 H=32/8 D=128 page=64",
            "decode B=32 q=1 kv=32768 H=32/8 D=128 page=256",
            "decode B=8 q=1 kv=131072 H=32/8 D=128 page=64",
            "decode B=64 q=2 kv=4096 H=32/8 D=128 page=16",
            "decode B=64 q=4 kv=8192 H=32/8 D=128 page=16",
            "decode B=32 q=8 kv=16384 H=32/8 D=128 page=64",
            "decode B=16 q=16 kv=32768 H=32/8 D=128 page=16",
            "decode B=8 q=1,1,4,1,16,1,8,2 kv=1024,131072,4096,2048,32768,1000,65536,8192 H=32/8 D=128 page=16 pages=shuffled",
        ],
        purpose: "Llama-3-8B decode (32 query heads over 8 K/V heads, D=128): batch 1 to 256, KV 1k to 128k, pages of 16, 64 and 256, 1 to 16 new tokens (speculative drafts), one ragged batch",
    },
    DecodeSuite {
        name: "decode-llama3-70b",
        shapes: &[
            "decode B=1 q=1 kv=1024 H=64/8 D=128 page=16",
            "decode B=1 q=1 kv=131072 H=64/8 D=128 page=16",
            "decode B=64 q=1 kv=8192 H=64/8 D=128 page=16",
            "decode B=64 q=1 kv=8192 H=64/8 D=128 page=16 pages=shuffled",
            "decode B=256 q=1 kv=2048 H=64/8 D=128 page=16",
            "decode B=128 q=1 kv=8192 H=64/8 D=128 page=64",
            "decode B=16 q=1 kv=65536 H=64/8 D=128 page=256",
            "decode B=64 q=2 kv=8192 H=64/8 D=128 page=16",
            "decode B=32 q=4 kv=16384 H=64/8 D=128 page=64",
            "decode B=16 q=8 kv=32768 H=64/8 D=128 page=16",
            "decode B=8 q=16 kv=65536 H=64/8 D=128 page=256",
            "decode B=8 q=4,1,1,16,2,1,8,1 kv=2048,131072,1024,16384,8192,4096,65536,1000 H=64/8 D=128 page=16 pages=shuffled",
        ],
        purpose: "Llama-3-70B decode per GPU of no tensor parallelism (64 query heads over 8 K/V heads, D=128): batch 1 to 256, KV 1k to 128k, pages of 16, 64 and 256, 1 to 16 new tokens, one ragged batch",
    },
];

/// One battery batch: `pairs` as (new tokens, keys) per sequence, `heads` as (H, H_kv), with
/// `case`'s head dim, dtype, window and layout, the page policy `policy` when paged.
fn battery_case(
    case: &DecodeSpec,
    pairs: &[(usize, usize)],
    (heads, kv_heads): (usize, usize),
    policy: PagePolicy,
) -> DecodeSpec {
    let layout = match case.layout() {
        KvLayout::Contiguous => KvLayout::Contiguous,
        KvLayout::Paged { page_size, .. } => KvLayout::Paged { page_size, policy },
    };
    let lengths = Varlen {
        seqlens_q: pairs.iter().map(|p| p.0).collect(),
        seqlens_kv: pairs.iter().map(|p| p.1).collect(),
    };
    let spec = DecodeSpec::new(lengths, heads, kv_heads, case.head_dim(), layout)
        .and_then(|s| s.with_dtype(case.dtype()));
    let spec = match case.window() {
        Some(window) => spec.and_then(|s| s.with_window(window)),
        None => spec,
    };
    spec.expect("battery batches are valid by construction")
}

/// The decode edge battery for `case`: small batches with its head dim, dtype, window and
/// layout (its page size `P`; a contiguous case uses 64 for `P`, a tile's edge), chosen to break
/// paging and masking:
///
/// - KV lengths 0 (an empty slot, first, in the middle and last) and 1, page boundaries
///   `P − 1`, `P`, `P + 1`, `2P ± 1`, and lengths that are not a multiple of the page;
/// - every query length 1 to 16, each against a KV length near a boundary;
/// - one long sequence (`16P + 65` keys) among many short ones;
/// - heads `H_kv = 1` (7/1), `H_kv = H` (5/5), groups of 3 (6/2, 12/4) and the case's own;
/// - when paged, block tables shuffled, interleaved (gaps), shared (a prefix of 2 pages and of
///   1, which short sequences share in part) and in order.
pub fn decode_battery(case: &DecodeSpec) -> Vec<DecodeSpec> {
    let p = case.layout().page_size().unwrap_or(64);
    // A sequence of q new tokens and kv keys, as valid as it can be: kv = 0 forces q = 0.
    let seq = |q: usize, kv: usize| (q.min(kv), kv);
    let edges = vec![
        seq(0, 0),
        seq(1, 1),
        seq(1, p - 1),
        seq(2, p),
        seq(0, 0),
        seq(1, p + 1),
        seq(3, 2 * p - 1),
        seq(1, 2 * p + 1),
        seq(4, 3 * p + 2),
        seq(0, 0),
    ];
    let offsets = [0, p - 1, p, p + 1, 2 * p + 3];
    let every_q: Vec<(usize, usize)> = (1..=16)
        .map(|q| seq(q, q + offsets[q % offsets.len()]))
        .collect();
    let mut long_among_short: Vec<(usize, usize)> =
        (0..11).map(|i| seq(1, [1, 2, 3, p + 1][i % 4])).collect();
    long_among_short.insert(5, seq(4, 16 * p + 65));
    let ragged = vec![seq(2, 5 * p + 3), seq(8, 3 * p - 1), seq(1, p / 2 + 1)];
    let own_heads = (case.heads(), case.kv_heads());
    let mut battery = vec![
        battery_case(case, &edges, (6, 2), PagePolicy::Shuffled),
        battery_case(case, &every_q, (5, 5), PagePolicy::Interleaved),
        battery_case(case, &long_among_short, (7, 1), PagePolicy::SharedPrefix(2)),
        battery_case(case, &ragged, (12, 4), PagePolicy::InOrder),
        battery_case(case, &edges, own_heads, PagePolicy::SharedPrefix(1)),
    ];
    let mut seen = Vec::new();
    battery.retain(|spec| {
        let new = !seen.contains(spec);
        seen.push(spec.clone());
        new
    });
    battery
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Window};

    #[test]
    fn suites_parse_fit_and_cover_the_issue_s_ranges() {
        let mut batches = std::collections::BTreeSet::new();
        let (mut pages, mut queries, mut kvs) = (
            std::collections::BTreeSet::new(),
            std::collections::BTreeSet::new(),
            std::collections::BTreeSet::new(),
        );
        for suite in DECODE_SUITES {
            for text in suite.shapes {
                let spec: DecodeSpec = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
                assert_eq!(spec.to_string(), *text, "suites are written canonically");
                let tokens: usize = (0..spec.sequences())
                    .map(|b| spec.pages_of(b) * spec.layout().page_size().unwrap())
                    .sum();
                assert!(tokens <= 1 << 20, "{text}: {tokens} cache tokens");
                if suite.name != "decode-seed" {
                    assert_eq!((spec.kv_heads(), spec.head_dim()), (8, 128), "{text}");
                    batches.insert(spec.sequences());
                    pages.extend(spec.layout().page_size());
                    queries.extend(spec.seqlens_q().iter().copied());
                    kvs.extend(spec.seqlens_kv().iter().copied());
                }
            }
        }
        assert!(
            batches.contains(&1) && batches.contains(&256),
            "{batches:?}"
        );
        assert_eq!(pages.into_iter().collect::<Vec<_>>(), [16, 64, 256]);
        assert!(
            [1, 2, 4, 8, 16].iter().all(|q| queries.contains(q)),
            "{queries:?}"
        );
        assert!(kvs.contains(&1024) && kvs.contains(&131072), "{kvs:?}");
        let heads: Vec<usize> = DECODE_SUITES[1..]
            .iter()
            .map(|s| s.shapes[0].parse::<DecodeSpec>().unwrap().heads())
            .collect();
        assert_eq!(heads, [32, 64], "8B and 70B");
    }

    fn cases() -> Vec<DecodeSpec> {
        [
            "decode B=1 q=1 kv=8192 H=32/8 D=128 page=16 bf16",
            "decode B=1 q=1 kv=8192 H=32/8 D=128 page=1",
            "decode B=1 q=1 kv=8192 H=64/8 D=128 page=256 window=1024,0",
            "decode B=1 q=4 kv=8192 H=8/8 D=64 page=3",
            "decode B=1 q=1 kv=8192 H=32/8 D=128",
        ]
        .iter()
        .map(|t| t.parse().unwrap())
        .collect()
    }

    #[test]
    fn the_battery_covers_every_edge_it_names() {
        for case in cases() {
            let battery = decode_battery(&case);
            let p = case.layout().page_size().unwrap_or(64);
            let all_kv: Vec<usize> = battery
                .iter()
                .flat_map(|s| s.seqlens_kv().to_vec())
                .collect();
            let all_q: Vec<usize> = battery
                .iter()
                .flat_map(|s| s.seqlens_q().to_vec())
                .collect();
            for kv in [0, 1, p - 1, p, p + 1, 2 * p - 1, 2 * p + 1] {
                assert!(all_kv.contains(&kv), "{case}: no kv={kv}");
            }
            if p > 1 {
                assert!(all_kv.iter().any(|kv| kv % p != 0 && *kv > p), "{case}");
            }
            assert!((1..=16).all(|q| all_q.contains(&q)), "{case}: {all_q:?}");
            assert!(
                battery.iter().any(|s| {
                    let mut kv = s.seqlens_kv().to_vec();
                    kv.sort_unstable();
                    s.sequences() >= 8 && kv[kv.len() - 1] >= 8 * kv[kv.len() - 2]
                }),
                "{case}: one long among many short"
            );
            let groups: Vec<(usize, usize)> =
                battery.iter().map(|s| (s.heads(), s.kv_heads())).collect();
            assert!(groups.iter().any(|&(_, kv)| kv == 1), "{case}");
            assert!(groups.iter().any(|&(h, kv)| h == kv), "{case}");
            assert!(
                groups.iter().any(|&(h, kv)| !(h / kv).is_power_of_two()),
                "{case}"
            );
            assert!(groups.contains(&(case.heads(), case.kv_heads())), "{case}");
            // The empty slot first, in the middle and last.
            assert!(battery.iter().any(|s| {
                let q = s.seqlens_q();
                q[0] == 0 && q[q.len() - 1] == 0 && q[1..q.len() - 1].contains(&0)
            }));
            for spec in &battery {
                assert_eq!(
                    (spec.head_dim(), spec.dtype()),
                    (case.head_dim(), case.dtype())
                );
                assert_eq!(spec.window(), case.window());
                assert_eq!(spec.layout().page_size(), case.layout().page_size());
                assert_eq!(spec.to_string().parse::<DecodeSpec>().unwrap(), *spec);
            }
            if case.layout().page_size().is_some() {
                let policies: Vec<PagePolicy> = battery
                    .iter()
                    .map(|s| match s.layout() {
                        KvLayout::Paged { policy, .. } => policy,
                        KvLayout::Contiguous => unreachable!(),
                    })
                    .collect();
                for policy in [
                    PagePolicy::InOrder,
                    PagePolicy::Shuffled,
                    PagePolicy::Interleaved,
                    PagePolicy::SharedPrefix(1),
                    PagePolicy::SharedPrefix(2),
                ] {
                    assert!(policies.contains(&policy), "{case}: no {policy}");
                }
            }
        }
    }

    #[test]
    fn the_battery_is_small() {
        for case in cases() {
            // The f64 oracle's work: query rows × heads × keys × D, summed over sequences.
            let work: usize = decode_battery(&case)
                .iter()
                .map(|s| {
                    (0..s.sequences())
                        .map(|b| s.seqlens_q()[b] * s.heads() * s.seqlens_kv()[b] * s.head_dim())
                        .sum::<usize>()
                })
                .sum();
            assert!(work < 200_000_000, "{case}: {work}");
            assert!(decode_battery(&case).len() <= 5);
        }
        let spec: DecodeSpec = "decode q=1 kv=9 H=4 D=8 page=4 window=2,0 bf16"
            .parse()
            .unwrap();
        assert!(decode_battery(&spec).iter().all(|s| s.window()
            == Some(Window {
                left: Some(2),
                right: Some(0)
            })
            && s.dtype() == DType::Bf16));
    }
}
