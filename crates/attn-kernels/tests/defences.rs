//! GPU tests of the gate's defences at this crate's level (#23): canary guards and what they
//! measure, the inputs' checksums on the device against their host mirror, the device clock
//! probe, references stored masked (a copy of one is noise; a copy of a plain one would pass),
//! and work on another stream seen by device events. Run on a GPU machine with
//! `--include-ignored`.

use attn_kernels::guard::{
    checksum_host, span_mhz, ClockStamp, ClockStamps, GuardFill, Side, GUARD_BYTES,
};
use attn_kernels::planted::{ReferenceCopier, SideStreamWork};
use attn_kernels::timing::NoHooks;
use attn_kernels::{
    Candidate, Config, Counters, ElementBound, Gpu, GpuReference, GuardedTensor, Harness,
    HarnessKernels, Prepared, RowMask, TimingMode, TimingOptions,
};
use attn_oracle::{generate, tolerance, CaseSpec, DType, Distribution, Params, Shape};

fn inputs(shape: Shape, dtype: DType, seed: u64) -> attn_oracle::Inputs {
    generate(&CaseSpec {
        shape,
        dtype,
        distribution: Distribution::Normal,
        seed,
    })
}

/// A `--src` kernel that writes 64 elements past O's end, one before its start and one into Q.
const OUT_OF_BOUNDS: &str = r#"#include "attn_common.cuh"
extern "C" __global__ void attn_fwd(const elem_t* q, const elem_t* k, const elem_t* v, elem_t* o,
                                    int b, int h, int sq, int skv, float s, int c) {
    const size_t n = (size_t)b * h * sq * HEAD_DIM;
    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {
        if (threadIdx.x < 64) o[n + threadIdx.x] = from_float(2.0f);
        if (threadIdx.x == 0) o[-1] = from_float(2.0f);
        if (threadIdx.x == 0) const_cast<elem_t*>(q)[5] = from_float(0.0f);
    }
}
"#;

#[test]
#[ignore = "needs a CUDA GPU"]
fn guards_measure_writes_outside_and_checksums_see_writes_inside() {
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let harness = HarnessKernels::new(&gpu).unwrap();
    let shape = Shape::new(1, 2, 100, 100, 64).unwrap();
    let dtype = DType::F16;
    let x = inputs(shape, dtype, 11);
    let params = Params::new(64, false);
    let run = |candidate: &Candidate| {
        let prepared = Prepared::new(&gpu, candidate, dtype, 64).unwrap();
        let q = GuardedTensor::upload(&gpu, "Q", &x.q, 1).unwrap();
        let k = GuardedTensor::upload(&gpu, "K", &x.k, 2).unwrap();
        let v = GuardedTensor::upload(&gpu, "V", &x.v, 3).unwrap();
        let mut o = GuardedTensor::alloc_poisoned(&gpu, "O", q.dims, dtype, 4).unwrap();
        let sums = |t: &GuardedTensor| harness.checksum(&gpu, t, false, 9).unwrap();
        let before = [sums(&q), sums(&k), sums(&v)];
        prepared.launch(&gpu, &q, &k, &v, &mut o, &params).unwrap();
        gpu.synchronize().unwrap();
        let after = [sums(&q), sums(&k), sums(&v)];
        let outside: Vec<String> = [&q, &k, &v, &o]
            .iter()
            .filter_map(|t| t.check(&gpu).unwrap().map(|v| v.to_string()))
            .collect();
        let output = gpu.download(&o).unwrap();
        (outside, [0, 1, 2].map(|i| before[i] != after[i]), output)
    };

    // An honest kernel: clean guards, inputs unchanged, and its output as it is unguarded.
    let naive = Candidate::registered("naive", Config::default()).unwrap();
    let (outside, changed, output) = run(&naive);
    assert!(outside.is_empty(), "{outside:?}");
    assert_eq!(changed, [false; 3]);
    let prepared = Prepared::new(&gpu, &naive, dtype, 64).unwrap();
    let plain = prepared.run(&gpu, &x.q, &x.k, &x.v, &params).unwrap();
    assert_eq!(output.as_bytes(), plain.as_bytes());

    // The out-of-bounds kernel: measured from O, and Q's checksum moved.
    let mut defines = Config::default();
    defines.0.insert("NUM_WARPS".into(), 4);
    let bad = Candidate::Source {
        path: "out_of_bounds.cu".into(),
        source: OUT_OF_BOUNDS.into(),
        entry: "attn_fwd".into(),
        defines,
    };
    let (outside, changed, _) = run(&bad);
    assert_eq!(outside, ["2 bytes before O and 128 bytes after O"]);
    assert_eq!(changed, [true, false, false]);
}

/// A `--src` kernel whose every output element is 1 + 0 × (the element just past K's end).
const READS_PAST_K: &str = r#"#include "attn_common.cuh"
extern "C" __global__ void attn_fwd(const elem_t* q, const elem_t* k, const elem_t* v, elem_t* o,
                                    int b, int h, int sq, int skv, float s, int c) {
    const size_t n = (size_t)b * h * sq * HEAD_DIM;
    const float past = to_float(k[(size_t)b * h * skv * HEAD_DIM]);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        o[i] = from_float(1.0f + 0.0f * past);
}
"#;

#[test]
#[ignore = "needs a CUDA GPU"]
fn nan_guards_show_reads_outside_the_inputs_and_refill_in_place() {
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let shape = Shape::new(1, 2, 100, 100, 64).unwrap();
    for dtype in [DType::F16, DType::Bf16] {
        let x = inputs(shape, dtype, 12);
        let params = Params::new(64, false);
        let mut q = GuardedTensor::upload_for_reads(&gpu, "Q", &x.q, 1).unwrap();
        let mut k = GuardedTensor::upload_for_reads(&gpu, "K", &x.k, 2).unwrap();
        let v = GuardedTensor::upload_for_reads(&gpu, "V", &x.v, 3).unwrap();
        let mut o = GuardedTensor::alloc_poisoned(&gpu, "O", q.dims, dtype, 4).unwrap();
        assert_eq!(k.guard_bytes(), [GUARD_BYTES, GUARD_BYTES]);
        let clean = |ts: [&GuardedTensor; 4]| ts.iter().all(|t| t.check(&gpu).unwrap().is_none());
        // An honest kernel reads inside its inputs: NaN guards change nothing.
        let naive = Candidate::registered("naive", Config::default()).unwrap();
        let prepared = Prepared::new(&gpu, &naive, dtype, 64).unwrap();
        prepared.launch(&gpu, &q, &k, &v, &mut o, &params).unwrap();
        let output = gpu.download(&o).unwrap();
        let plain = prepared.run(&gpu, &x.q, &x.k, &x.v, &params).unwrap();
        assert_eq!(output.as_bytes(), plain.as_bytes(), "{dtype}");
        assert!(clean([&q, &k, &v, &o]));
        // A kernel that reads past K: NaN everywhere, then 1 everywhere once K's guard is finite.
        let mut defines = Config::default();
        defines.0.insert("NUM_WARPS".into(), 4);
        let past_k = Candidate::Source {
            path: "reads_past_k.cu".into(),
            source: READS_PAST_K.into(),
            entry: "attn_fwd".into(),
            defines,
        };
        let prepared = Prepared::new(&gpu, &past_k, dtype, 64).unwrap();
        let mut run = |q: &GuardedTensor, k: &GuardedTensor| {
            gpu.poison(&mut o).unwrap();
            prepared.launch(&gpu, q, k, &v, &mut o, &params).unwrap();
            gpu.download(&o).unwrap().to_f64()
        };
        assert!(run(&q, &k).iter().all(|x| x.is_nan()), "{dtype}");
        k.fill_guard(&gpu, Side::After, GuardFill::Finite).unwrap();
        assert!(run(&q, &k).iter().all(|&x| x == 1.0), "{dtype}");
        // Q's guards have nothing to do with it; refilled guards still check clean.
        q.fill_guard(&gpu, Side::Before, GuardFill::Finite).unwrap();
        k.fill_guard(&gpu, Side::After, GuardFill::Nan).unwrap();
        assert!(run(&q, &k).iter().all(|x| x.is_nan()), "{dtype}");
        assert!(clean([&q, &k, &v, &o]));
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_checksums_match_their_host_mirror() {
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let harness = HarnessKernels::new(&gpu).unwrap();
    let x = inputs(Shape::new(2, 3, 77, 77, 128).unwrap(), DType::Bf16, 5);
    let words: Vec<u16> =
        x.q.as_bytes()
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
    let q = gpu.upload(&x.q).unwrap();
    for invariant in [false, true] {
        for seed in [0, 77] {
            assert_eq!(
                harness.checksum(&gpu, &q, invariant, seed).unwrap(),
                checksum_host(&words, 128, invariant, seed),
                "invariant={invariant} seed={seed}"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn clock_stamps_around_busy_work_read_the_mean_sm_clock() {
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let harness = HarnessKernels::new(&gpu).unwrap();
    let info = gpu.info();
    let blocks = 2 * info.sm_count as usize;
    let (mut before, mut after) = (
        ClockStamps::new(&gpu, blocks).unwrap(),
        ClockStamps::new(&gpu, blocks).unwrap(),
    );
    // Work on every SM between the stamps: checksums of a 16 MiB tensor.
    let shape = Shape::new(4, 16, 1024, 1024, 128).unwrap();
    let x = gpu.upload(&inputs(shape, DType::F16, 5).q).unwrap();
    harness.stamp_clocks(&gpu, &mut before).unwrap();
    for seed in 0..200 {
        harness.checksum(&gpu, &x, false, seed).unwrap();
    }
    harness.stamp_clocks(&gpu, &mut after).unwrap();
    let (b, a) = (before.read(&gpu).unwrap(), after.read(&gpu).unwrap());
    let sms = |stamps: &[ClockStamp]| {
        let mut s: Vec<u32> = stamps.iter().map(|s| s.sm).collect();
        s.sort_unstable();
        s.dedup();
        s.len()
    };
    // Every SM is stamped (the clock of each comes from its own counter).
    assert_eq!(sms(&b), info.sm_count as usize, "SMs stamped before");
    assert_eq!(sms(&a), info.sm_count as usize, "SMs stamped after");
    let span_ms = (a[0].ns - b[0].ns) as f64 / 1e6;
    let mhz = span_mhz(&b, &a).expect("a measured span");
    let max = f64::from(info.max_sm_mhz);
    println!("mean SM clock over {span_ms:.1} ms of checksums: {mhz:.0} MHz (max {max:.0})");
    assert!(span_ms > 1.0, "{span_ms} ms");
    assert!(mhz > 0.2 * max && mhz < 1.1 * max, "{mhz} MHz of {max}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_masked_reference_verifies_alike_and_a_copy_of_it_is_noise() {
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let (dtype, d) = (DType::F16, 64);
    let shape = Shape::new(2, 4, 200, 200, d).unwrap();
    let x = inputs(shape, dtype, 21);
    let params = Params::new(d, true);
    let (q, k, v) = (
        gpu.upload(&x.q).unwrap(),
        gpu.upload(&x.k).unwrap(),
        gpu.upload(&x.v).unwrap(),
    );
    let reference = GpuReference::new(&gpu, dtype, d).unwrap();
    let rows = 2 * 4 * 200;
    let plain = reference.compute(&gpu, &q, &k, &v, &params, None).unwrap();
    let masked = reference
        .compute_with(&gpu, &q, &k, &v, &params, None, RowMask::secret(rows, 1234))
        .unwrap();
    assert!(masked.is_masked() && !plain.is_masked());
    assert_eq!(
        masked.download(&gpu).unwrap(),
        plain.download(&gpu).unwrap()
    );

    let naive = Prepared::new(
        &gpu,
        &Candidate::registered("naive", Config::default()).unwrap(),
        dtype,
        d,
    )
    .unwrap();
    let mut out = gpu.alloc_poisoned(q.dims, dtype).unwrap();
    naive.launch(&gpu, &q, &k, &v, &mut out, &params).unwrap();
    let atol = ElementBound::absolute(0.75 * tolerance(dtype, Distribution::Normal).max_abs);
    let mut counters = Counters::new(&gpu, 4).unwrap();
    reference
        .count_bad_async(&gpu, &out, &plain, atol, &mut counters, 0)
        .unwrap();
    reference
        .count_bad_async(&gpu, &out, &masked, atol, &mut counters, 1)
        .unwrap();
    // The cheat: copy what sits in device memory.
    let copier = ReferenceCopier::new(&gpu, dtype, d).unwrap();
    let mut copied_plain = gpu.alloc_poisoned(q.dims, dtype).unwrap();
    copier.copy(&gpu, &plain, &mut copied_plain).unwrap();
    reference
        .count_bad_async(&gpu, &copied_plain, &plain, atol, &mut counters, 2)
        .unwrap();
    let mut copied_masked = gpu.alloc_poisoned(q.dims, dtype).unwrap();
    copier.copy(&gpu, &masked, &mut copied_masked).unwrap();
    reference
        .count_bad_async(&gpu, &copied_masked, &masked, atol, &mut counters, 3)
        .unwrap();
    let counts = counters.read(&gpu).unwrap();
    let n = shape.q_len() as u32;
    assert_eq!(counts[0], 0, "an honest output against the plain reference");
    assert_eq!(counts[1], 0, "and against the masked one");
    assert_eq!(counts[2], 0, "a copy of a plain reference would pass");
    assert!(
        counts[3] > n * 99 / 100,
        "a copy of a masked reference is noise: {} of {n} bad",
        counts[3]
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn work_on_another_stream_is_seen_by_device_events_only() {
    let _device = attn_kernels::device_lock(0);
    let guard_pass = |with_side_work: bool| -> Vec<f64> {
        let gpu = Gpu::open(0).expect("a CUDA GPU");
        let (dtype, d) = (DType::F16, 64);
        let x = inputs(Shape::new(1, 8, 512, 512, d).unwrap(), dtype, 3);
        let (q, k, v) = (
            gpu.upload(&x.q).unwrap(),
            gpu.upload(&x.k).unwrap(),
            gpu.upload(&x.v).unwrap(),
        );
        let mut o = gpu.alloc_poisoned(q.dims, dtype).unwrap();
        let prepared = Prepared::new(
            &gpu,
            &Candidate::registered("mma", Config::default()).unwrap(),
            dtype,
            d,
        )
        .unwrap();
        let mut side = with_side_work.then(|| SideStreamWork::new(&gpu).unwrap());
        let params = Params::new(d, false);
        let mut launch = |_: usize| -> attn_kernels::Result<()> {
            prepared.launch(&gpu, &q, &k, &v, &mut o, &params)?;
            if let Some(side) = side.as_mut() {
                side.launch()?;
            }
            Ok(())
        };
        let opts = TimingOptions {
            warmup: 2,
            samples: 3,
            mode: TimingMode::Flushed,
            guard_launches: 5,
            ..TimingOptions::default()
        };
        let timings = Harness::new(&gpu)
            .unwrap()
            .time(1, &opts, &mut launch, &mut NoHooks)
            .unwrap();
        println!(
            "side work {with_side_work}: events {:?} µs, other streams {:?} µs, host wall {:?} µs",
            timings.guard_event_us, timings.guard_stream_residual_us, timings.wall_us
        );
        timings.guard_stream_residual_us
    };
    let honest = guard_pass(false);
    assert_eq!(
        honest,
        vec![0.0; 5],
        "no other stream, nothing outlives the timed one"
    );
    let mut hidden = guard_pass(true);
    hidden.sort_by(f64::total_cmp);
    // A 1 GiB memset at a few TB/s: hundreds of µs after an mma launch of a few.
    assert!(hidden[2] > 100.0, "{hidden:?}");
}
