//! The decode oracle: paged and contiguous caches against the varlen prefill oracle, block tables
//! by policy, sentinels, grouped heads, windows and empty sequences.

use attn_oracle::*;
use attn_problem::decode_battery;

fn case(text: &str, distribution: Distribution, seed: u64) -> DecodeCase {
    DecodeCase {
        spec: text.parse().unwrap_or_else(|e| panic!("{text}: {e}")),
        distribution,
        seed,
    }
}

fn with_policy(spec: &DecodeSpec, policy: PagePolicy) -> DecodeSpec {
    let page_size = spec.layout().page_size().expect("a paged spec");
    spec.clone()
        .with_layout(KvLayout::Paged { page_size, policy })
        .unwrap()
}

/// The prefill oracle of the decode batch's twin on packed K and V `k`, `v`.
fn prefill(spec: &DecodeSpec, q: &HostTensor, k: &HostTensor, v: &HostTensor) -> Reference {
    reference_varlen_rows(q, k, v, &spec.params(), spec.varlen(), &|_, _| {
        RowSelection::All
    })
    .unwrap()
}

fn battery_cases() -> Vec<DecodeCase> {
    let mut cases = vec![];
    for (i, text) in [
        "decode q=1 kv=100 H=8/2 D=16 page=16",
        "decode q=1 kv=100 H=8/2 D=16 page=5 window=7,0 bf16",
        "decode q=1 kv=100 H=8/2 D=16 page=1",
        "decode q=1 kv=100 H=8/2 D=16",
    ]
    .iter()
    .enumerate()
    {
        let small: DecodeSpec = text.parse().unwrap();
        for spec in decode_battery(&small) {
            let distribution = Distribution::CHECKS[i % Distribution::CHECKS.len()];
            cases.push(DecodeCase {
                spec,
                distribution,
                seed: 11 + i as u64,
            });
        }
    }
    cases
}

#[test]
fn the_decode_oracle_is_the_prefill_oracle_of_the_gathered_keys() {
    for case in battery_cases() {
        let inputs = generate_decode(&case).unwrap();
        let decode = reference_decode(&case.spec, &inputs.q, &inputs.cache, &RowSelection::All)
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        // The varlen generator's own packed K and V, never through the table: equal to what the
        // table reads wherever no page is shared.
        let spec = &case.spec;
        let per_head = Shape::new(1, spec.heads(), 1, 1, spec.head_dim())
            .unwrap()
            .with_kv_heads(spec.kv_heads())
            .unwrap();
        let packed = generate_varlen(
            &CaseSpec {
                shape: per_head,
                dtype: spec.dtype(),
                distribution: case.distribution,
                seed: case.seed,
            },
            spec.varlen(),
        );
        assert_eq!(packed.q, inputs.q, "{case}");
        let shared = matches!(
            spec.layout(),
            KvLayout::Paged {
                policy: PagePolicy::SharedPrefix(_),
                ..
            }
        );
        let (k, v) = if shared {
            first_writer(spec, &packed.k, &packed.v)
        } else {
            (packed.k, packed.v)
        };
        let twin = prefill(spec, &inputs.q, &k, &v);
        assert_eq!(decode.rows, twin.rows, "{case}");
        assert_eq!(decode.out, twin.out, "{case}: bitwise");
        assert_eq!(decode.lse, twin.lse, "{case}");
        assert_eq!(decode.rows.len(), spec.varlen().total_q() * spec.heads());
        assert!(
            decode.out.iter().all(|x| x.is_finite()),
            "{case}: a sentinel was read"
        );
        assert!(
            decode.lse.iter().all(|x| x.is_finite()),
            "{case}: every row sees a key"
        );
        // The oracle judges itself a pass, rounded to the dtype.
        let output = HostTensor::from_f64(
            [1, spec.varlen().total_q(), spec.heads(), spec.head_dim()],
            spec.dtype(),
            &packed_out(spec, &decode),
        );
        let verdict = compare_decode(
            &output,
            &decode,
            spec,
            &tolerance(spec.dtype(), case.distribution),
        );
        assert!(verdict.passed, "{case}: {verdict}");
    }
}

/// Packed K and V with a shared prefix's keys made each sharer's: token `t` of a sequence whose
/// `t` lies in the shared pages takes the first sequence's (in order) that has a token `t`.
fn first_writer(spec: &DecodeSpec, k: &HostTensor, v: &HostTensor) -> (HostTensor, HostTensor) {
    let KvLayout::Paged {
        page_size,
        policy: PagePolicy::SharedPrefix(n),
    } = spec.layout()
    else {
        unreachable!()
    };
    let row = spec.kv_heads() * spec.head_dim();
    let cu = spec.varlen().cu_seqlens_kv();
    let lens = spec.seqlens_kv();
    let fix = |t: &HostTensor| {
        let mut values = t.to_f64();
        for b in 0..lens.len() {
            for token in 0..lens[b].min(n * page_size) {
                let owner = (0..lens.len()).find(|&o| lens[o] > token).unwrap();
                let from = (cu[owner] as usize + token) * row;
                let to = (cu[b] as usize + token) * row;
                let copied: Vec<f64> = values[from..from + row].to_vec();
                values[to..to + row].copy_from_slice(&copied);
            }
        }
        HostTensor::from_f64(t.dims, spec.dtype(), &values)
    };
    (fix(k), fix(v))
}

/// A complete reference's rows (sequence, head, row) as a packed `[total_q, H, D]` output.
fn packed_out(spec: &DecodeSpec, reference: &Reference) -> Vec<f64> {
    let (heads, d) = (spec.heads(), spec.head_dim());
    let mut out = vec![f64::NAN; spec.varlen().total_q() * heads * d];
    for (i, id) in reference.rows.iter().enumerate() {
        let at = spec.varlen().packed_row(id, heads).unwrap() * d;
        out[at..at + d].copy_from_slice(reference.out_row(i));
    }
    out
}

#[test]
fn every_policy_reads_the_same_logical_cache() {
    let base = case(
        "decode q=1,4,16,0,2 kv=37,64,300,0,17 H=6/2 D=8 page=16",
        Distribution::Normal,
        5,
    );
    let in_order = generate_decode(&base).unwrap();
    let reference = |inputs: &DecodeInputs| {
        reference_decode(
            &inputs.case.spec,
            &inputs.q,
            &inputs.cache,
            &RowSelection::All,
        )
        .unwrap()
    };
    let expected = reference(&in_order);
    for policy in [PagePolicy::Shuffled, PagePolicy::Interleaved] {
        let other = DecodeCase {
            spec: with_policy(&base.spec, policy),
            ..base.clone()
        };
        let inputs = generate_decode(&other).unwrap();
        assert_ne!(
            inputs.cache.table(),
            in_order.cache.table(),
            "{policy}: the pages moved"
        );
        assert_eq!(
            inputs.cache.logical(&other.spec).unwrap(),
            in_order.cache.logical(&base.spec).unwrap(),
            "{policy}"
        );
        assert_eq!(reference(&inputs), expected, "{policy}");
    }
    // Contiguous holds the same logical keys.
    let contiguous = DecodeCase {
        spec: base.spec.clone().with_layout(KvLayout::Contiguous).unwrap(),
        ..base.clone()
    };
    let inputs = generate_decode(&contiguous).unwrap();
    assert_eq!(inputs.cache.k().dims, [5, 2, 300, 8]);
    assert_eq!(reference(&inputs), expected);
    // Its padding is the slot sentinel: sequence 0's slab past its 37 keys.
    let k = inputs.cache.k().to_f64();
    assert!(k[37 * 8..300 * 8].iter().all(|&x| x == SENTINEL_SLOT));
}

#[test]
fn block_tables_follow_their_policy() {
    let spec: DecodeSpec = "decode q=1,1,1,0,1 kv=33,16,1,0,40 H=2 D=4 page=16"
        .parse()
        .unwrap();
    let table = |policy| {
        block_table(&with_policy(&spec, policy), 3)
            .unwrap()
            .unwrap()
    };
    let lists = |t: &BlockTable| {
        (0..t.sequences())
            .map(|b| t.pages(b).to_vec())
            .collect::<Vec<_>>()
    };
    let in_order = table(PagePolicy::InOrder);
    assert_eq!(
        lists(&in_order),
        [vec![0, 1, 2], vec![3], vec![4], vec![], vec![5, 6, 7]]
    );
    assert_eq!(in_order.num_pages(), 9);
    let interleaved = table(PagePolicy::Interleaved);
    assert_eq!(
        lists(&interleaved),
        [vec![0, 5, 8], vec![1], vec![2], vec![], vec![3, 6, 9]]
    );
    assert_eq!(interleaved.num_pages(), 11);
    let shared = table(PagePolicy::SharedPrefix(2));
    assert_eq!(
        lists(&shared),
        [vec![0, 1, 2], vec![0], vec![0], vec![], vec![0, 1, 3]]
    );
    let shuffled = table(PagePolicy::Shuffled);
    let mut pages: Vec<i32> = lists(&shuffled).concat();
    assert_ne!(pages, lists(&in_order).concat());
    pages.sort_unstable();
    pages.dedup();
    assert_eq!(pages.len(), 8, "distinct pages");
    assert_eq!(shuffled.num_pages(), 9);
    assert_eq!(shuffled, table(PagePolicy::Shuffled), "seeded");
    let contiguous = spec.with_layout(KvLayout::Contiguous).unwrap();
    assert_eq!(block_table(&contiguous, 3).unwrap(), None);
}

#[test]
fn sentinels_fill_what_no_key_holds_and_a_wrong_page_shows() {
    let case = case(
        "decode q=1,2 kv=20,7 H=4/2 D=8 page=8 pages=interleaved",
        Distribution::Normal,
        9,
    );
    let inputs = generate_decode(&case).unwrap();
    let KvCache::Paged { k, v, table } = &inputs.cache else {
        panic!("paged");
    };
    let row = 2 * 8;
    let page_len = 8 * row;
    let values = k.to_f64();
    for page in 0..table.num_pages() {
        let page_values = &values[page * page_len..(page + 1) * page_len];
        if !table.is_used(page) {
            assert!(page_values.iter().all(|x| x.is_nan()), "page {page}");
        }
    }
    // Sequence 0's last page holds tokens 16..20: slots 4..8 are the slot sentinel.
    let last = table.pages(0)[2] as usize;
    let tail = &values[(last * 8 + 4) * row..(last + 1) * page_len];
    assert!(tail.iter().all(|&x| x == SENTINEL_SLOT));
    // A table that sends sequence 0's first page to a gap page reads NaN.
    let gap = (0..table.num_pages()).find(|&p| !table.is_used(p)).unwrap();
    let mut lists: Vec<Vec<i32>> = (0..2).map(|b| table.pages(b).to_vec()).collect();
    lists[0][0] = gap as i32;
    let wrong = KvCache::Paged {
        k: k.clone(),
        v: v.clone(),
        table: BlockTable::new(8, table.num_pages(), lists).unwrap(),
    };
    let good = reference_decode(&case.spec, &inputs.q, &inputs.cache, &RowSelection::All).unwrap();
    let bad = reference_decode(&case.spec, &inputs.q, &wrong, &RowSelection::All).unwrap();
    let output = HostTensor::from_f64([1, 3, 4, 8], DType::F16, &packed_out(&case.spec, &bad));
    let verdict = compare_decode(
        &output,
        &good,
        &case.spec,
        &tolerance(DType::F16, case.distribution),
    );
    assert!(!verdict.passed && verdict.nan_count > 0, "{verdict}");
}

#[test]
fn query_heads_read_their_group_s_kv_head_through_the_table() {
    // Every value of K/V head g is g + 1 and keys are equal, so query head h's output is
    // h / (H / H_kv) + 1 whatever the weights: 6 query heads over 2 K/V heads, groups of 3.
    let case = case(
        "decode q=3,1 kv=40,9 H=6/2 D=4 page=4 pages=shuffled window=5,0",
        Distribution::Normal,
        1,
    );
    let inputs = generate_decode(&case).unwrap();
    let KvCache::Paged { k, v, table } = &inputs.cache else {
        panic!("paged");
    };
    let head_of = |i: usize| (i / 4) % 2;
    let fill = |t: &HostTensor, value: &dyn Fn(usize) -> f64| {
        let values: Vec<f64> = t
            .to_f64()
            .iter()
            .enumerate()
            .map(|(i, x)| {
                if x.is_nan() || *x == SENTINEL_SLOT {
                    *x
                } else {
                    value(i)
                }
            })
            .collect();
        HostTensor::from_f64(t.dims, DType::F16, &values)
    };
    let cache = KvCache::Paged {
        k: fill(k, &|_| 0.5),
        v: fill(v, &|i| head_of(i) as f64 + 1.0),
        table: table.clone(),
    };
    let r = reference_decode(&case.spec, &inputs.q, &cache, &RowSelection::All).unwrap();
    for (i, id) in r.rows.iter().enumerate() {
        let expected = (id.head / 3) as f64 + 1.0;
        assert!(
            r.out_row(i).iter().all(|&x| (x - expected).abs() < 1e-12),
            "{id:?}"
        );
        // The window of 5 to the left: 6 keys, all equal, so lse = logit + ln 6.
        let logit = case.spec.params().scale
            * inputs.q.to_f64()[case.spec.varlen().packed_row(id, 6).unwrap() * 4..][..4]
                .iter()
                .sum::<f64>()
            * 0.5;
        assert!((r.lse[i] - logit - 6f64.ln()).abs() < 1e-9, "{id:?}");
    }
}

#[test]
fn empty_sequences_have_no_rows_and_selections_apply_per_sequence() {
    let case = case(
        "decode q=0,16,0,1 kv=0,500,0,1 H=2/1 D=8 page=7",
        Distribution::Peaky,
        4,
    );
    let inputs = generate_decode(&case).unwrap();
    let all = reference_decode(&case.spec, &inputs.q, &inputs.cache, &RowSelection::All).unwrap();
    assert_eq!(all.rows.len(), 17 * 2);
    assert!(all.rows.iter().all(|id| id.batch == 1 || id.batch == 3));
    // Sequence 3 has one key: its output is that value.
    let (_, v) = inputs.cache.logical(&case.spec).unwrap();
    let last = all.rows.iter().position(|id| id.batch == 3).unwrap();
    assert_eq!(all.out_row(last), &v.to_f64()[500 * 8..501 * 8]);
    let sampled = RowSelection::Sampled {
        rows_per_head: 4,
        seed: 2,
    };
    let some = reference_decode(&case.spec, &inputs.q, &inputs.cache, &sampled).unwrap();
    assert_eq!(some.rows.len(), 2 * 4 + 2);
    for (i, id) in some.rows.iter().enumerate() {
        let j = all.rows.iter().position(|a| a == id).unwrap();
        assert_eq!(some.out_row(i), all.out_row(j));
    }
}

#[test]
fn inputs_that_do_not_fit_are_refused_in_one_line() {
    let case = case(
        "decode q=1,2 kv=20,7 H=4/2 D=8 page=8",
        Distribution::Normal,
        9,
    );
    let inputs = generate_decode(&case).unwrap();
    let again = generate_decode(&case).unwrap().cache;
    assert_eq!(
        again.k().as_bytes(),
        inputs.cache.k().as_bytes(),
        "deterministic"
    );
    assert_eq!(again.table(), inputs.cache.table());
    let refuse = |q: &HostTensor, cache: &KvCache| {
        let message = reference_decode(&case.spec, q, cache, &RowSelection::All)
            .unwrap_err()
            .to_string();
        assert!(!message.contains('\n'), "{message}");
        message
    };
    let short_q = HostTensor::from_f64([1, 2, 4, 8], DType::F16, &[0.0; 64]);
    assert!(refuse(&short_q, &inputs.cache).contains("[1, total_q, H, D]"));
    let KvCache::Paged { k, v, table } = &inputs.cache else {
        panic!("paged");
    };
    let uncovered = KvCache::Paged {
        k: k.clone(),
        v: v.clone(),
        table: BlockTable::new(8, table.num_pages(), vec![vec![0, 1], vec![3]]).unwrap(),
    };
    assert!(refuse(&inputs.q, &uncovered).contains("do not cover its kv=20 keys"));
    let contiguous = KvCache::Contiguous {
        k: k.clone(),
        v: v.clone(),
    };
    assert!(refuse(&inputs.q, &contiguous)
        .contains("a paged cache with a block table, as the problem says"));
    let fewer_pages = KvCache::Paged {
        k: k.clone(),
        v: v.clone(),
        table: BlockTable::new(8, 4, vec![vec![0, 1, 2], vec![3]]).unwrap(),
    };
    assert!(refuse(&inputs.q, &fewer_pages).contains("[num_pages, page_size, H_kv, D]"));
}

#[test]
fn a_scaled_reference_is_the_reference_at_that_scale() {
    let case = case(
        "decode q=1,4 kv=300,40 H=4/2 D=16 page=8",
        Distribution::Normal,
        5,
    );
    let inputs = generate_decode(&case).unwrap();
    let (spec, rows) = (&case.spec, &RowSelection::All);
    let plain = reference_decode(spec, &inputs.q, &inputs.cache, rows).unwrap();
    let base = spec.params().scale;
    let same = reference_decode_scaled(spec, &inputs.q, &inputs.cache, rows, base).unwrap();
    assert_eq!(same.rows, plain.rows);
    assert!((0..plain.rows.len()).all(|i| same.out_row(i) == plain.out_row(i)));
    // Another scale changes the softmax, so a kernel ignoring its scale is caught.
    let other = reference_decode_scaled(spec, &inputs.q, &inputs.cache, rows, 1.7 * base).unwrap();
    assert!((0..plain.rows.len()).any(|i| other.out_row(i) != plain.out_row(i)));
}
