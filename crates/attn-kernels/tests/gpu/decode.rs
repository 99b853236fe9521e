//! Decode kernels (`decode-naive`, `decode` under several configs) against the f64 decode oracle
//! through the block table: the decode battery and suite-like batches, every table policy, both
//! dtypes, the output poisoned before each launch and two launches bit-identical; and a test that a
//! kernel ignoring the block table would fail.

use std::collections::HashMap;

use attn_kernels::decode::PreparedDecode;
use attn_kernels::{Config, Gpu, KernelError};
use attn_oracle::{
    compare_decode, generate_decode, reference_decode, tolerance, BlockTable, DType, DecodeCase,
    DecodeInputs, DecodeSpec, Distribution, HostTensor, KvCache, KvLayout, PagePolicy, Reference,
    RowSelection,
};

use attn_problem::decode_battery;

use crate::oracle::base_seed;

/// The implementations and configs run: the yardstick, the defaults (SPLITS=auto, up to four
/// warps on distinct rows), one split (O written by the decode kernel), more splits than most
/// batches have tiles (empty splits), one warp without a pipeline, two row blocks per warp (head
/// dim 64 only), every warp on the same rows, two warps split either way, and the table read a
/// tile ahead; then the wgmma kernel (on sm_90 alone) with its defaults, one split, 128-key tiles,
/// and 128-key tiles with the table read ahead.
const RUNS: [(&str, &str); 13] = [
    ("decode-naive", ""),
    ("decode", ""),
    ("decode", "SPLITS=1"),
    ("decode", "SPLITS=64"),
    ("decode", "NUM_WARPS=1,STAGES=1"),
    ("decode", "BLOCK_M=32"),
    ("decode", "ROW_WARPS=1"),
    ("decode", "NUM_WARPS=2,ROW_WARPS=2"),
    ("decode", "PAGE_AHEAD=1"),
    ("decode-hopper", ""),
    ("decode-hopper", "SPLITS=1"),
    ("decode-hopper", "BLOCK_N=128,STAGES=2"),
    ("decode-hopper", "PAGE_AHEAD=1,BLOCK_N=128"),
];

/// Whether run `run` is selected by `ATTN_DECODE_RUNS` (unset: every run): `;`-separated entries,
/// each an implementation (all its runs) or `name[overrides]` (that run alone), e.g.
/// `decode[];decode-hopper`, so that a change to one kernel can be checked on the device without
/// compiling the others.
fn selected(run: usize) -> bool {
    let Ok(filter) = std::env::var("ATTN_DECODE_RUNS") else {
        return true;
    };
    let (name, overrides) = RUNS[run];
    let label = format!("{name}[{overrides}]");
    filter
        .split(';')
        .map(str::trim)
        .any(|entry| entry == name || entry == label)
}

/// Every table policy a paged batch is run under.
const POLICIES: [PagePolicy; 4] = [
    PagePolicy::InOrder,
    PagePolicy::Shuffled,
    PagePolicy::Interleaved,
    PagePolicy::SharedPrefix(2),
];

/// Suite-like batches (`{d}` is the head dim): B=1 at 32k keys, B=16 with 4 new tokens, pages of
/// 1, 7 and 256, MQA, a sliding window, a contiguous cache.
const SUITE_LIKE: [&str; 9] = [
    "decode B=1 q=1 kv=32768 H=32/8 D={d} page=16",
    "decode B=16 q=4 kv=4096 H=32/8 D={d} page=64",
    "decode q=1,4,16 kv=300,1000,77 H=8/2 D={d} page=1",
    "decode q=3,1,0,16 kv=700,7,0,130 H=8/2 D={d} page=7",
    "decode q=2,16 kv=5000,257 H=8/4 D={d} page=256",
    "decode q=2,1,16,3 kv=500,2000,16,64 H=16/1 D={d} page=16",
    "decode q=1,8,4 kv=3000,900,64 H=32/8 D={d} page=16 window=100,0",
    "decode q=1,5,2 kv=1000,70,3 H=8/2 D={d}",
    "decode q=4,1 kv=2000,129 H=12/4 D={d} window=37,0",
];

/// The decode batches of one head dim and dtype: the battery around a paged, a contiguous and a
/// windowed case, then the suite-like ones under every policy.
fn decode_cases(head_dim: usize, dtype: DType) -> Vec<DecodeSpec> {
    let parse = |text: String| -> DecodeSpec {
        text.parse::<DecodeSpec>()
            .and_then(|s| s.with_dtype(dtype))
            .unwrap_or_else(|e| panic!("{text}: {e}"))
    };
    let mut cases = Vec::new();
    for base in [
        "decode q=1 kv=100 H=8/2 D={d} page=16",
        "decode q=1 kv=100 H=8/2 D={d} page=7",
        "decode q=1 kv=100 H=8/2 D={d}",
        "decode q=1 kv=100 H=32/8 D={d} page=16 window=40,0",
    ] {
        cases.extend(decode_battery(&parse(
            base.replace("{d}", &head_dim.to_string()),
        )));
    }
    for text in SUITE_LIKE {
        let spec = parse(text.replace("{d}", &head_dim.to_string()));
        match spec.layout() {
            KvLayout::Contiguous => cases.push(spec),
            KvLayout::Paged { page_size, .. } => {
                for policy in POLICIES {
                    let layout = KvLayout::Paged { page_size, policy };
                    cases.push(spec.clone().with_layout(layout).unwrap());
                }
            }
        }
    }
    cases
}

/// Rows the oracle computes: every row, but two per (sequence, head) on batches whose exact f64
/// pass would take long on the CPU.
fn rows_for(spec: &DecodeSpec, seed: u64) -> RowSelection {
    let work = spec.flops() / 4.0;
    if work > 2e9 {
        RowSelection::Sampled {
            rows_per_head: 2,
            seed,
        }
    } else {
        RowSelection::All
    }
}

/// The compiled runs, by (run index, dtype, head dim); `None` where the config does not take the
/// head dim (BLOCK_M=32 at D=128) or the implementation not the GPU (decode-hopper off sm_90).
type Prepared = HashMap<(usize, DType, usize), Option<PreparedDecode>>;

fn prepared<'a>(
    gpu: &Gpu,
    cache: &'a mut Prepared,
    run: usize,
    dtype: DType,
    head_dim: usize,
) -> Option<&'a PreparedDecode> {
    cache
        .entry((run, dtype, head_dim))
        .or_insert_with(|| {
            let (name, overrides) = RUNS[run];
            let overrides: Config = overrides.parse().unwrap();
            match PreparedDecode::new(gpu, name, &overrides, dtype, head_dim) {
                Ok(p) => Some(p),
                Err(KernelError::InvalidConfig { .. } | KernelError::Unsupported { .. }) => None,
                Err(e) => panic!("{name} [{overrides}] {dtype} D={head_dim}: {e}"),
            }
        })
        .as_ref()
}

/// Runs `decode` twice on `inputs` (each output poisoned first: `run` allocates it so), and
/// returns the first output, or why not; two outputs that differ are a failure.
fn run_twice(
    gpu: &Gpu,
    decode: &PreparedDecode,
    inputs: &DecodeInputs,
) -> Result<HostTensor, String> {
    let spec = &inputs.case.spec;
    let first = decode
        .run(gpu, spec, &inputs.q, &inputs.cache)
        .map_err(|e| e.to_string())?;
    let second = decode
        .run(gpu, spec, &inputs.q, &inputs.cache)
        .map_err(|e| e.to_string())?;
    if first.as_bytes() != second.as_bytes() {
        return Err("two launches on the same inputs differ (a race?)".into());
    }
    Ok(first)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn decode_kernels_match_the_oracle_through_the_block_table() {
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    println!("decode: base seed {seed} (ATTN_TEST_SEED={seed} to replay)");
    assert!(
        (0..RUNS.len()).any(selected),
        "ATTN_DECODE_RUNS selects none of the runs"
    );
    let mut compiled = Prepared::new();
    // Per run: cases, failures, worst max abs error.
    let mut tally = vec![(0usize, Vec::<String>::new(), 0.0f64); RUNS.len()];
    let mut index = 0u64;
    for head_dim in [64usize, 128] {
        for dtype in [DType::F16, DType::Bf16] {
            for spec in decode_cases(head_dim, dtype) {
                index += 1;
                let case = DecodeCase {
                    spec: spec.clone(),
                    distribution: Distribution::Normal,
                    seed: seed.wrapping_add(index),
                };
                let inputs = generate_decode(&case).unwrap();
                let rows = rows_for(&spec, case.seed);
                let reference = reference_decode(&spec, &inputs.q, &inputs.cache, &rows).unwrap();
                let tol = tolerance(dtype, Distribution::Normal);
                for (run, (name, overrides)) in RUNS.iter().enumerate() {
                    if !selected(run) {
                        continue;
                    }
                    let Some(decode) = prepared(&gpu, &mut compiled, run, dtype, head_dim) else {
                        continue;
                    };
                    let label = format!("{name} [{overrides}] {case}");
                    let (count, failures, worst) = &mut tally[run];
                    *count += 1;
                    match run_twice(&gpu, decode, &inputs) {
                        Err(e) => failures.push(format!("{label}: {e}")),
                        Ok(out) => {
                            let verdict = compare_decode(&out, &reference, &spec, &tol);
                            if verdict.passed {
                                *worst = worst.max(verdict.max_abs);
                            } else {
                                failures.push(format!("{label}: {verdict}"));
                            }
                        }
                    }
                }
            }
        }
    }
    let mut all = Vec::new();
    for (run, (count, failures, worst)) in tally.into_iter().enumerate() {
        let (name, overrides) = RUNS[run];
        if !selected(run) {
            println!("{name} [{overrides}] decode: not selected by ATTN_DECODE_RUNS");
            continue;
        }
        println!(
            "{name} [{overrides}] decode: {count} cases, {} failed, worst max abs error {worst:.3e}",
            failures.len()
        );
        all.extend(failures);
    }
    assert!(
        all.is_empty(),
        "{} failures:\n{}",
        all.len(),
        all.join("\n")
    );
}

/// The in-order table of `spec` over `num_pages` pages: sequence b's pages one after another, as a
/// kernel that ignores the table would read a cache.
fn in_order_table(spec: &DecodeSpec, page_size: usize, num_pages: usize) -> BlockTable {
    let mut next = 0i32;
    let lists = (0..spec.sequences())
        .map(|b| {
            let n = spec.pages_of(b) as i32;
            next += n;
            (next - n..next).collect()
        })
        .collect();
    BlockTable::new(page_size, num_pages, lists).unwrap()
}

/// Largest elementwise difference of two references of the same rows (NaN counts as infinite).
fn difference(a: &Reference, b: &Reference) -> f64 {
    a.out
        .iter()
        .zip(&b.out)
        .map(|(x, y)| {
            let d = (x - y).abs();
            if d.is_nan() {
                f64::INFINITY
            } else {
                d
            }
        })
        .fold(0.0, f64::max)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn decode_kernels_read_through_the_block_table() {
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    println!("decode table: base seed {seed} (ATTN_TEST_SEED={seed} to replay)");
    let mut failures = Vec::new();
    for text in [
        "decode q=1,2,4,1 kv=100,512,1000,17 H=8/2 D=64 page=16",
        "decode q=1,3 kv=3000,40 H=32/8 D=128 page=7",
    ] {
        let spec: DecodeSpec = text.parse().unwrap();
        let KvLayout::Paged { page_size, .. } = spec.layout() else {
            unreachable!("paged batches")
        };
        let with = |policy| {
            let spec = spec
                .clone()
                .with_layout(KvLayout::Paged { page_size, policy })
                .unwrap();
            generate_decode(&DecodeCase {
                spec,
                distribution: Distribution::Normal,
                seed,
            })
            .unwrap()
        };
        let (in_order, shuffled) = (with(PagePolicy::InOrder), with(PagePolicy::Shuffled));
        let KvCache::Paged { k, v, table } = &shuffled.cache else {
            unreachable!("paged")
        };
        // The shuffled cache read as if its pages were in order: what a kernel ignoring the table
        // computes. The oracle must tell it apart, or this test has no teeth.
        let ignored = KvCache::Paged {
            k: k.clone(),
            v: v.clone(),
            table: in_order_table(&spec, page_size, table.num_pages()),
        };
        let shuffled_spec = &shuffled.case.spec;
        let truth = reference_decode(
            shuffled_spec,
            &shuffled.q,
            &shuffled.cache,
            &RowSelection::All,
        )
        .unwrap();
        let wrong =
            reference_decode(shuffled_spec, &shuffled.q, &ignored, &RowSelection::All).unwrap();
        let tol = tolerance(spec.dtype(), Distribution::Normal);
        assert!(
            difference(&truth, &wrong) > 10.0 * tol.max_abs,
            "{text}: reading the shuffled pages in order changes nothing, so the test has no teeth"
        );
        for (name, overrides) in [("decode-naive", ""), ("decode", ""), ("decode", "SPLITS=1")] {
            let label = format!("{name} [{overrides}] {text} seed={seed}");
            let decode = PreparedDecode::new(
                &gpu,
                name,
                &overrides.parse().unwrap(),
                spec.dtype(),
                spec.head_dim(),
            )
            .unwrap_or_else(|e| panic!("{label}: {e}"));
            let a = run_twice(&gpu, &decode, &in_order);
            let b = run_twice(&gpu, &decode, &shuffled);
            let c = decode
                .run(&gpu, shuffled_spec, &shuffled.q, &ignored)
                .map_err(|e| e.to_string());
            match (a, b, c) {
                (Ok(a), Ok(b), Ok(c)) => {
                    if a.as_bytes() != b.as_bytes() {
                        failures.push(format!(
                            "{label}: in-order and shuffled tables give different outputs"
                        ));
                    }
                    if !compare_decode(&b, &truth, shuffled_spec, &tol).passed {
                        failures.push(format!("{label}: the shuffled table's output is wrong"));
                    }
                    if compare_decode(&c, &truth, shuffled_spec, &tol).passed {
                        failures.push(format!(
                            "{label}: a wrong table still passes: the comparison has no teeth"
                        ));
                    }
                }
                (a, b, c) => failures.push(format!(
                    "{label}: {:?} {:?} {:?}",
                    a.err(),
                    b.err(),
                    c.err()
                )),
            }
            println!("{label}: in-order against shuffled and the ignored table checked");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
