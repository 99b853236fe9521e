"""Compiles a Triton kernel written to the forward ABI of kernels/README.md ("Entry point") into
PTX that attn-kernels loads and launches like a `--src` kernel's: ahead of time, for a named GPU
architecture, with no GPU needed (Triton brings its own ptxas).

Reads one JSON request on stdin and writes one JSON answer on stdout:

  request: {"file": PATH, "kernel": NAME, "dtype": "fp16"|"bf16", "head_dim": D,
            "constexprs": {NAME: INT, ...}, "num_warps": N, "num_stages": S,
            "variants": BOOL, "arch": 90}
  answer:  {"name": ENTRY, "ptx": TEXT, "num_warps": N, "shared": BYTES, "params": COUNT,
            "triton": VERSION}

The kernel's parameters, in order: q, k, v, o (pointers to the dtype), batch, heads, seq_q,
seq_kv (i32), scale (fp32), causal (i32); with "variants" also kv_heads, window_left,
window_right (i32), cu_seqlens_q, cu_seqlens_kv (pointers to i32); then constexprs only
(HEAD_DIM is always given; the others come from the request's "constexprs"). Triton appends two
pointer parameters of its own (global and profile scratch), which the host passes as null: a
kernel that needs global scratch (on-device TMA descriptors) is refused, for no host allocates it.
No argument is specialised (no divisibility or equal-to-1 assumption), so one build serves every
shape. An error is one line on stderr and exit status 2.
"""

import importlib.util
import inspect
import json
import sys

POINTER = {"fp16": "*fp16", "bf16": "*bf16"}
ABI = ["q", "k", "v", "o", "batch", "heads", "seq_q", "seq_kv", "scale", "causal"]
VARIANTS = ["kv_heads", "window_left", "window_right", "cu_seqlens_q", "cu_seqlens_kv"]


def fail(message: str) -> None:
    print(message.replace("\n", " "), file=sys.stderr)
    sys.exit(2)


def signature(dtype: str, variants: bool) -> list[str]:
    elem = POINTER[dtype]
    types = [elem] * 4 + ["i32"] * 4 + ["fp32", "i32"]
    if variants:
        types += ["i32"] * 3 + ["*i32"] * 2
    return types


def load_kernel(path: str, name: str):
    spec = importlib.util.spec_from_file_location("attn_triton_kernel", path)
    if spec is None or spec.loader is None:
        fail(f"{path}: not a Python file Triton can import")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's module: any error is theirs, said in one line
        fail(f"{path}: importing it failed: {type(e).__name__}: {e}")
    kernel = getattr(module, name, None)
    if kernel is None:
        fail(f"{path} has no `{name}`")
    if not hasattr(kernel, "arg_names") or not hasattr(kernel, "fn"):
        fail(f"{path}:{name} is not a @triton.jit function")
    return kernel


def main() -> None:
    request = json.load(sys.stdin)
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as e:
        fail(f"Triton is not importable by this python ({e}): install triton (the device has it)")
    kernel = load_kernel(request["file"], request["kernel"])
    dtype = request["dtype"]
    if dtype not in POINTER:
        fail(f"dtype {dtype}: a Triton kernel is built for fp16 or bf16")
    runtime = ABI + (VARIANTS if request["variants"] else [])
    types = signature(dtype, request["variants"])
    params = list(inspect.signature(kernel.fn).parameters)
    constexprs = dict(request["constexprs"])
    constexprs["HEAD_DIM"] = request["head_dim"]
    if len(params) < len(runtime):
        fail(f"{request['kernel']} takes {len(params)} parameters; the ABI's first {len(runtime)} are "
             f"{', '.join(runtime)} (kernels/README.md)")
    declared = set(getattr(kernel, "constexprs", []))
    sig = {}
    for i, (param, abi_name) in enumerate(zip(params, runtime)):
        if i in declared or param in constexprs:
            fail(f"{request['kernel']}: parameter {i} ({param}) must be the ABI's {abi_name}, not a constexpr")
        sig[param] = types[i]
    missing = []
    for i, param in enumerate(params[len(runtime):], start=len(runtime)):
        if i not in declared:
            fail(f"{request['kernel']}: parameter {param} is past the ABI's {len(runtime)} and is not a "
                 f"tl.constexpr")
        if param not in constexprs:
            missing.append(param)
        sig[param] = "constexpr"
    if missing:
        fail(f"{request['kernel']}: no value for constexpr {', '.join(missing)} (give --define NAME=VALUE)")
    unused = sorted(set(constexprs) - set(params) - {"HEAD_DIM"})
    if unused:
        fail(f"{request['kernel']} has no constexpr {', '.join(unused)}")
    values = {p: constexprs[p] for p in params[len(runtime):]}
    source = ASTSource(fn=kernel, signature=sig, constexprs=values)
    target = GPUTarget("cuda", int(request["arch"]), 32)
    options = {"num_warps": int(request["num_warps"]), "num_stages": int(request["num_stages"])}
    try:
        compiled = triton.compile(source, target=target, options=options)
    except Exception as e:  # Triton's compile errors span many lines: their last says what
        lines = [line for line in str(e).splitlines() if line.strip()]
        fail(f"{request['kernel']}: Triton could not compile it: {lines[-1] if lines else type(e).__name__}")
    meta = compiled.metadata
    if getattr(meta, "global_scratch_size", 0):
        fail(f"{request['kernel']} needs {meta.global_scratch_size} bytes of global scratch per program "
             f"(on-device TMA descriptors?), which the host does not allocate")
    json.dump({"name": meta.name, "ptx": compiled.asm["ptx"], "num_warps": meta.num_warps,
               "shared": meta.shared, "params": len(runtime) + 2, "triton": triton.__version__},
              sys.stdout)


if __name__ == "__main__":
    main()
