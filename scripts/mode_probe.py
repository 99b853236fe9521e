"""Where the timing modes part: the kernel's own duration (CUPTI, through torch.profiler) beside
the time each timing method reports, for SDPA's cuDNN kernel and for FlashAttention-3, so that a
difference between graph mode (one launch, L2 flushed before it) and batch mode (back-to-back
launches over rotated input sets) splits into L2 state, gaps between launches and kernel time.

Usage on the GPU machine (PyTorch; JAX and FA3's library for --fa3):
    python3 scripts/mode_probe.py --shape 2,16,1024,128 [--shape ...] [--dtype fp16] [--samples 30]
        [--fa3 LIBFA3.so] --out DIR

Shapes are `B,H,S,D` or `B,H,S,D,causal`. Per shape and side, the methods are:
- cuDNN `graph`: the gate's graph mode (the L2 flush, then one replay of the set's CUDA graph
  between two events); `graph-warm`: the same with no flush, the set's inputs in L2 from an untimed
  replay just before; `batch`: the gate's batch mode (as many back-to-back replays as sets, each
  on its own set, between two events); `batch-1set`: the same replays all on one set (resident);
  `batch-direct`: direct calls instead of replays on rotated sets.
- FA3 `helper`: the gate's FA3 side (one jitted function of back-to-back calls over the rotated
  sets, as many as the gate's side makes; its timed column is the host clock to a sync, its span
  column what the gate's side reports); `helper-1set`: the same on one set; `loop`: a Python loop of single jitted calls on one set (the FA3 anchor's script).
Each method is timed unprofiled (its samples) and then profiled for a few samples (CUPTI kernel
durations, the gaps between consecutive attention kernels and each sample's span per call). DIR/mode-probe.json holds the
provenance and every raw sample; a table is printed last.
"""
import argparse, ctypes, datetime, json, os, platform, subprocess, tempfile, time

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

ap = argparse.ArgumentParser()
ap.add_argument("--shape", action="append", required=True)
ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
ap.add_argument("--samples", type=int, default=30)
ap.add_argument("--profiled", type=int, default=5, help="samples taken under the profiler per method")
ap.add_argument("--fa3", help="FlashAttention-3's library (JAX FFI target dew_flash3_mha_fwd)")
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--out", required=True)
args = ap.parse_args()

dev = torch.device("cuda")
tdt = torch.float16 if args.dtype == "fp16" else torch.bfloat16
props = torch.cuda.get_device_properties(0)
l2 = props.L2_cache_size
flush = torch.empty(2 * l2, dtype=torch.uint8, device=dev)
BATCH_SAMPLE_FLOP = 10e12  # as the gate's batch mode (evidence/METHOD.md, `batch-sample-flop`)


def parse(spec):
    parts = spec.split(",")
    b, h, s, d = (int(x) for x in parts[:4])
    return b, h, s, d, len(parts) > 4 and parts[4] == "causal"


def set_counts(b, h, s, d, causal):
    """The gate's batch-mode launches per sample and input sets (timing/sets.rs), on this GPU."""
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    launches = int(max(1, min(50, np.ceil(BATCH_SAMPLE_FLOP / flops))))
    set_bytes = 4 * b * h * s * d * 2
    wanted = int(min(8, max(2, -(-2 * l2 // set_bytes))))
    return launches, max(wanted, launches)


def is_attention(name):
    lowered = name.lower()
    return not any(w in lowered for w in ("fill", "memset", "memcpy", "elementwise", "copy"))


def kernels_of(prof):
    """(start µs, duration µs, name) of the attention kernels a profile recorded, in order."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    prof.export_chrome_trace(path)
    with open(path) as f:
        trace = json.load(f)
    os.unlink(path)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    out = [(float(e["ts"]), float(e["dur"]), e["name"]) for e in events
           if e.get("ph") == "X" and e.get("cat") == "kernel" and is_attention(e.get("name", ""))]
    return sorted(out)


def profiled(run, samples, per_sample):
    """Kernel durations and the gaps between consecutive kernels of one sample (µs)."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(samples):
            run()
        torch.cuda.synchronize()
    ks = kernels_of(prof)
    durations = [d for _, d, _ in ks]
    gaps = []
    for i in range(1, len(ks)):
        if per_sample > 1 and i % per_sample != 0:
            gaps.append(ks[i][0] - (ks[i - 1][0] + ks[i - 1][1]))
    # Each sample's span, first kernel's start to last kernel's end, per call: what the gate's
    # FA3 side reports (`fa3-device-span`), and what events around back-to-back launches measure.
    group = len(ks) // samples if samples and len(ks) % samples == 0 else 0
    spans = [(ks[i + group - 1][0] + ks[i + group - 1][1] - ks[i][0]) / per_sample
             for i in range(0, len(ks), group)] if group else []
    names = sorted({n for _, _, n in ks})
    # The raw trace too (start relative to the first, duration, name's index), to recount gaps.
    t0 = ks[0][0] if ks else 0.0
    trace = [[round(t - t0, 3), round(dur, 3), names.index(n)] for t, dur, n in ks]
    return {"kernel_us": durations, "gap_us": gaps, "span_us": spans, "kernels": names, "kernel_count": len(ks),
            "trace": trace}


def event_samples(run, samples, per_sample, before=None):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for i in range(samples):
        if before:
            before(i)
        start.record()
        run()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) * 1000.0 / per_sample)
    return out


def cudnn_methods(b, h, s, d, causal):
    launches, sets_n = set_counts(b, h, s, d, causal)
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    sets = [tuple(torch.randn((b, h, s, d), generator=gen, device=dev).to(tdt) for _ in range(3))
            for _ in range(sets_n)]
    call = lambda qkv: F.scaled_dot_product_attention(*qkv, is_causal=causal)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]), torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for qkv in sets:
                call(qkv)
        torch.cuda.current_stream().wait_stream(side)
        graphs = []
        for qkv in sets:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                call(qkv)
            graphs.append(g)
        counter = [0]

        def next_set():
            counter[0] += 1
            return counter[0] % sets_n

        def graph_one():
            graphs[next_set()].replay()

        def flush_before(i):
            flush.fill_(i % 251)

        def warm_before(i):
            graphs[(counter[0] + 1) % sets_n].replay()
            torch.cuda.synchronize()

        def batch():
            for _ in range(launches):
                graphs[next_set()].replay()

        def batch_one_set():
            for _ in range(launches):
                graphs[0].replay()

        def batch_direct():
            for _ in range(launches):
                call(sets[next_set()])

        methods = {
            "graph": (graph_one, 1, flush_before),
            "graph-warm": (graph_one, 1, warm_before),
            "batch": (batch, launches, None),
            "batch-1set": (batch_one_set, launches, None),
            "batch-direct": (batch_direct, launches, None),
        }
        results = {}
        for name, (run, per, before) in methods.items():
            for _ in range(3):
                run()
            torch.cuda.synchronize()
            samples = event_samples(run, args.samples, per, before)

            def once():
                if before:
                    before(0)
                run()

            results[name] = {"event_us": samples, "per_sample": per, **profiled(once, args.profiled, per)}
    return {"sets": sets_n, "launches_per_sample": launches, "methods": results}


def fa3_methods(lib_path, b, h, s, d, causal):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp
    global _fa3_registered
    if not globals().get("_fa3_registered"):
        lib = ctypes.cdll.LoadLibrary(lib_path)
        jax.ffi.register_ffi_target("dew_flash3_mha_fwd", jax.ffi.pycapsule(lib.dew_flash3_mha_fwd),
                                    platform="CUDA")
        _fa3_registered = True
    jdt = jnp.float16 if args.dtype == "fp16" else jnp.bfloat16
    launches, sets_n = set_counts(b, h, s, d, causal)

    def fa3(q, k, v, effect):
        results = (jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((b, h, s), jnp.float32),
                   jax.ShapeDtypeStruct((1, 1, 1, 1), jnp.float32), jax.ShapeDtypeStruct((1, 1, 1), jnp.float32))
        return jax.ffi.ffi_call("dew_flash3_mha_fwd", results, has_side_effect=effect)(
            q, k, v, softmax_scale=np.float64(d ** -0.5), is_causal=causal,
            window_size_left=np.int64(-1), window_size_right=np.int64(0 if causal else -1))[0]

    root = jax.random.key(args.seed)
    sets = [tuple(jax.random.normal(jax.random.fold_in(root, 3 * i + j), (b, s, h, d), jnp.float32).astype(jdt)
                  for j in range(3)) for i in range(sets_n)]
    flat = [x for qkv in sets for x in qkv]

    def unrolled(n_sets, calls):
        def body(*flat):
            out = None
            for i in range(calls):
                j = 3 * (i % n_sets)
                out = fa3(*flat[j:j + 3], True)
            return out
        return jax.jit(body)

    def wall_of(fn, args_):
        t0 = time.perf_counter()
        fn(*args_).block_until_ready()
        return (time.perf_counter() - t0) * 1e6

    # The gate's FA3 side (sdpa_helper.py's Fa3.prepare): as many calls per dispatch as make a
    # sample last 20 ms and the dispatch's own overhead under 1% of it, at most 1024.
    idle = jax.jit(lambda *flat: flat[0][0, 0, 0, 0])
    idle(*flat).block_until_ready()
    overhead = min(wall_of(idle, flat) for _ in range(5))
    probe_fn = unrolled(sets_n, launches)
    probe_fn(*flat).block_until_ready()
    per_call = wall_of(probe_fn, flat) / launches
    calls = int(min(1024, max(launches, int(max(20000.0, 100.0 * overhead) / max(per_call, 1e-3)) + 1)))
    helper, helper_one = unrolled(sets_n, calls), unrolled(1, calls)
    single = jax.jit(lambda q, k, v: fa3(q, k, v, False))

    def wall(run, per):
        t0 = time.perf_counter()
        run()
        return (time.perf_counter() - t0) * 1e6 / per

    loop_calls = launches
    state = {}

    def loop():
        for _ in range(loop_calls):
            state["o"] = single(*sets[0])
        state["o"].block_until_ready()

    methods = {
        "helper": (lambda: helper(*flat).block_until_ready(), calls),
        "helper-1set": (lambda: helper_one(*flat[:3]).block_until_ready(), calls),
        "loop": (loop, loop_calls),
    }
    results = {}
    for name, (run, per) in methods.items():
        for _ in range(3):
            run()
        samples = [wall(run, per) for _ in range(args.samples)]
        results[name] = {"wall_us": samples, "per_sample": per, **profiled(run, args.profiled, per)}
    return {"sets": sets_n, "launches_per_sample": launches, "helper_calls": calls,
            "dispatch_overhead_us": overhead, "methods": results}


def provenance():
    def smi(query):
        try:
            return subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception as e:  # the probe still runs without nvidia-smi
            return f"unavailable: {e}"

    return {"gpu": props.name, "sms": props.multi_processor_count, "l2_bytes": l2,
            "driver": smi("driver_version"), "clocks": smi("clocks.sm,clocks.max.sm,power.draw,temperature.gpu"),
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "host": platform.node(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "revision": os.environ.get("ATTN_REVISION", "unknown"), "seed": args.seed,
            "dtype": args.dtype, "samples": args.samples, "profiled_samples": args.profiled}


def median(xs):
    return float(np.median(xs)) if len(xs) else float("nan")


report = {"provenance": provenance(), "shapes": {}}
rows = []
for spec in args.shape:
    b, h, s, d, causal = parse(spec)
    entry = {"cudnn": cudnn_methods(b, h, s, d, causal)}
    if args.fa3:
        entry["fa3"] = fa3_methods(args.fa3, b, h, s, d, causal)
    report["shapes"][spec] = entry
    for side, result in entry.items():
        for name, m in result["methods"].items():
            timed = m.get("event_us") or m.get("wall_us")
            rows.append((spec, side, name, median(timed), median(m["kernel_us"]), median(m["span_us"]),
                         median(m["gap_us"]), m["kernel_count"]))
    torch.cuda.empty_cache()

os.makedirs(args.out, exist_ok=True)
path = os.path.join(args.out, "mode-probe.json")
with open(path + ".tmp", "w") as f:
    json.dump(report, f, separators=(",", ":"))
os.replace(path + ".tmp", path)
print(f"{'shape':24} {'side':6} {'method':13} {'timed µs':>9} {'kernel µs':>9} {'span µs':>8} {'gap µs':>7} {'kernels':>7}")
for r in rows:
    print(f"{r[0]:24} {r[1]:6} {r[2]:13} {r[3]:9.2f} {r[4]:9.2f} {r[5]:8.2f} {r[6]:7.2f} {r[7]:7d}")
print(f"wrote {path}")
