"""attn's PyTorch SDPA helper: a long-lived process that times
torch.nn.functional.scaled_dot_product_attention with the same protocol as attn's own timing
harness, and computes SDPA's output on given inputs. The backend "fa3" is FlashAttention-3 instead
(its prebuilt library's XLA FFI target `dew_flash3_mha_fwd`, called through JAX; the library's path
in ATTN_FA3_LIB): JAX exposes no CUDA events, so FA3 is timed in batch mode only, one dispatch of
many back-to-back calls per sample, by its kernels' span on the device as CUPTI records it (see
Fa3.time; the host clock around the same dispatch is kept beside it). The backend
"varlen" is PyTorch's torch.nn.attention.varlen.varlen_attn (FlashAttention-2 over packed sequences
with cumulative offsets and a sliding window): PyTorch's kernel for varlen batches and windows,
which SDPA has none of; a dense batch runs through it as B sequences of equal length. The backend
"flex" is FlexAttention (torch.nn.attention.flex_attention, compiled once per process) with a block
mask of attn's mask: PyTorch's compiled kernel that skips the blocks a window or causal mask hides
(dense batches only). The backend "flashinfer" is FlashInfer's paged decode, for decode requests
only: its tensor-core decode wrapper when every sequence has one new token, else its paged prefill
wrapper (causal, bottom-right), on a paged cache of the request's page size and page policy and
its lengths as they are (ragged included), checked on sampled rows before it is timed by the same
protocol as SDPA's decode side. The backend "py" is a user's Python callable, loaded once by a
"callable" request (see PyCallable): called as fn(q, k, v, scale=, causal=) on [B, H, S, D] tensors
(K and V with their own heads), checked on sampled rows, then timed eagerly with every sample's
inputs drawn afresh in place and every timed output checked against a float32 reference, by a
timer bound before the callable's module ran.

Usage: python3 sdpa_helper.py   (requests on stdin, replies on stdout, one JSON object a line)
Requests (attn-measure's `sdpa::Request`):
  {"kind": "info"}
  {"kind": "flashinfer"}   (imports FlashInfer's attention modules: {"flashinfer": version})
  {"kind": "callable", "file": path, "function": name}   (loads the "py" backend's callable)
  {"kind": "run", "q": path, "k": path, "v": path, "out": path, "dtype": "fp16"|"bf16",
   "causal": bool, "window": [left, right] (-1 unbounded), "scale": float,
   "backend": "default"|"flash"|"efficient"|"cudnn"|"math"|"fa3"|"varlen"|"flex"|"py",
   "varlen": null | {"q": [lengths], "kv": [lengths]}, "second": path (py only)}
   (py: the callable called twice on the inputs, the second output written to "second")
  {"kind": "sync"}   (waits for all of this process's device work; the caller then stops it)
  {"kind": "time", "shape": [B, H, Sq, Skv, D], "kv_heads": int, "dtype": ..., "causal": bool,
   "window": [left, right], "scale": float, "varlen": null | {"q": [...], "kv": [...]},
   "backend": ..., "warmup": int, "samples": int, "mode": "graph"|"flushed"|"batch",
   "batch_launches": int, "guard_launches": int, "sets": int, "seed": int, "flush_bytes": int}
  {"kind": "decode", "q": [lengths], "kv": [lengths], "heads": int, "kv_heads": int, "head_dim": int,
   "dtype": ..., "window": [left, right], "scale": float,
   "layout": "contiguous" | {"paged": {"page_size": int, "policy": "in-order"|"shuffled"|...}},
   "backend": an SDPA backend or "flashinfer", "warmup": int, "samples": int, "mode": ...,
   "batch_launches": int, "guard_launches": int, "sets": int, "seed": int, "flush_bytes": int}
   (SDPA: a decode batch of equal lengths timed as the dense batch Q [B, H, q, D], K and V
   contiguous [B, H_kv, kv, D], the new tokens the last q keys of each sequence; flashinfer: a
   paged batch as FlashInfer's paged NHD cache; checked before it is timed; the reply's timings
   carry "flashinfer": its version, or null)
Replies: {"ok": {...}} or {"error": "one line"}, a py callable's broken contract
{"refused": kind, "error": "one line"} (see Refused). A reply {"fatal": "..."} to the first request
means PyTorch cannot be used at all. bf16 .npy files hold uint16 bit patterns (attn-oracle's
convention); a varlen batch's files are packed, Q and O [1, total_q, H, D], K and V
[1, total_kv, H_kv, D] (a varlen job's shape is its bounding dense shape). Repeated "time"
requests for the same problem reuse its inputs and CUDA graphs, so that the caller can interleave
short blocks of samples with its own.
"""
import json
import sys
import time

PROTOCOL = sys.stdout
sys.stdout = sys.stderr  # nothing but replies may reach the protocol stream


def reply(obj):
    PROTOCOL.write(json.dumps(obj) + "\n")
    PROTOCOL.flush()


def lengths(job):
    """Each sequence's (query, key) lengths: a varlen job's own, or a dense batch's B equal ones."""
    b, _, sq, skv, _ = job["shape"]
    packed = job.get("varlen")
    if packed is None:
        return [sq] * b, [skv] * b
    return list(packed["q"]), list(packed["kv"])


def to_packed(x):
    """A dense [B, H, S, D] tensor in the packed layout [B·S, H, D]: B sequences of length S."""
    return x.transpose(1, 2).reshape(-1, x.shape[1], x.shape[3])


def offsets(lens):
    """Cumulative offsets [0, l0, l0 + l1, ...] of sequences of lengths `lens`."""
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return out


class Unavailable(Exception):
    """A baseline that cannot run on this machine, said in one line as it is (no type name)."""


class Refused(ValueError):
    """A py callable that broke its calling contract, and how (its reply's "refused"): "wrong" (an
    output off the reference), "remembered" (two calls' outputs in one memory), "inputs" (it
    changed its inputs), "escaped" (work outlived the timed stream) or "contract" (a view of its
    inputs, a down-cast, another stream left current, a patched timer, not a tensor of Q's shape).
    A candidate's case takes its verdict from it; a baseline's cannot run."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


FLASHINFER_HEAD_DIMS = (64, 128, 256)  # attn-measure's FLASHINFER_HEAD_DIMS: what it is built for


def import_flashinfer():
    """FlashInfer with its decode and paged prefill modules (a slimmed wheel has little else),
    or Unavailable naming the package and how this project installs it."""
    try:
        import flashinfer
        import flashinfer.decode  # noqa: F401 - the wrappers live here, not on the package
        import flashinfer.prefill  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any failure to import is the same one line
        text = str(exc).splitlines()[0] if str(exc) else ""
        raise Unavailable(
            f"FlashInfer (package flashinfer-python) is not importable ({type(exc).__name__}: {text}): "
            "fetch its wheels with scripts/fetch-flashinfer.sh, install them with pip install --no-index "
            "--no-deps --target DIR, put DIR on PYTHONPATH and set FLASHINFER_CUDA_ARCH_LIST (9.0a on an H100/H200)"
        ) from None
    return flashinfer


def page_lists(lens_kv, page_size, policy, seed):
    """The block table attn's oracle builds for `policy` (attn_oracle::block_table): one list of
    physical pages per sequence, and the pool's page count, spare and gap pages included. The
    layout is the oracle's; a shuffled table's permutation is drawn from `seed` by Python's own
    generator (the same kind of table, not the same draw)."""
    import random
    counts = [(n + page_size - 1) // page_size for n in lens_kv]
    used = sum(counts)

    def in_order(first):
        lists, next_page = [], first
        for n in counts:
            lists.append(list(range(next_page, next_page + n)))
            next_page += n
        return lists, next_page

    if policy == "in-order":
        return in_order(0)[0], used + 1
    if policy == "shuffled":
        total = used + max(1, used // 8)
        order = list(range(total))
        random.Random(seed).shuffle(order)
        return [[order[p] for p in pages] for pages in in_order(0)[0]], total
    if policy == "interleaved":
        lists, next_page = [[] for _ in counts], 0
        for j in range(max(counts, default=0)):
            for pages, n in zip(lists, counts):
                if j < n:
                    pages.append(next_page)
                    next_page += 1
            next_page += 1  # the gap
        return lists, max(next_page, 1)
    if policy.startswith("shared-prefix="):
        shared = int(policy.split("=", 1)[1])
        lists, next_page = [], shared
        for n in counts:
            own = max(n - shared, 0)
            lists.append(list(range(min(n, shared))) + list(range(next_page, next_page + own)))
            next_page += own
        return lists, next_page + 1
    raise ValueError(f"unknown page policy {policy!r}")


def paged_batch(lens_q, lens_kv, lists, page_size):
    """FlashInfer's description of a paged batch as Python lists: qo_indptr, kv_indptr,
    kv_indices and kv_last_page_len of the sequences that have keys, with their indices into the
    batch. Idle slots (q = kv = 0) are left out: they do no work, and FlashInfer has no last-page
    length for a sequence without pages."""
    keep = [s for s, n in enumerate(lens_kv) if n > 0]
    indices, last = [], []
    for s in keep:
        pages = (lens_kv[s] + page_size - 1) // page_size
        indices.extend(lists[s][:pages])
        last.append(lens_kv[s] - (pages - 1) * page_size)
    kv_indptr = offsets([(lens_kv[s] + page_size - 1) // page_size for s in keep])
    return {"keep": keep, "qo_indptr": offsets([lens_q[s] for s in keep]), "kv_indptr": kv_indptr,
            "kv_indices": indices, "kv_last_page_len": last}


class PagedRows:
    """A paged K or V pool [pages, P, H_kv, D] read as check_rows' packed rows [total_kv, H_kv, D]
    of sequences with `lens_kv` keys and page `lists`: an index (one sequence's keys, a head,
    dims) gathers only that sequence's pages, so checking needs no contiguous copy of the cache."""

    def __init__(self, pool, lists, lens_kv):
        self.pool, self.lists, self.lens = pool, lists, lens_kv
        self.cu = offsets(lens_kv)
        self.shape = (self.cu[-1], pool.shape[2], pool.shape[3])
        self.first = {self.cu[s]: s for s, n in enumerate(lens_kv) if n > 0}

    def __getitem__(self, index):
        keys, head, dims = index
        s = self.first[keys.start]
        if keys.stop != self.cu[s + 1]:
            raise IndexError("PagedRows reads whole sequences only")
        page_size = self.pool.shape[1]
        pages = self.lists[s][:(self.lens[s] + page_size - 1) // page_size]
        rows = self.pool[pages].reshape(-1, self.shape[1], self.shape[2])[:self.lens[s]]
        return rows[:, head, dims]


def check_rows(np, host, out, q, k, v, cu_q, cu_kv, job, name, rows=8):
    """`name`'s output against a float64 reference on `rows` sampled rows, in the packed layout
    (out and q [total_q, H, D], k and v [total_kv, H_kv, D]; sequence s's rows from cu_q[s] and
    cu_kv[s]), with attn's mask (bottom-right causal, FlashAttention's window): a yardstick that
    computes something else (a wrong window convention, say) is an error, not a baseline. `host`
    brings one slice to the host as float64 (only the slices a row needs leave the device)."""
    h, hkv = q.shape[1], k.shape[1]
    left, right = job.get("window", [-1, -1])
    if job["causal"]:
        right = 0
    rng = np.random.default_rng(job["seed"] & 0xFFFFFFFF)
    sequences = [s for s in range(len(cu_q) - 1) if cu_q[s + 1] > cu_q[s]]
    errors = []
    for _ in range(rows if sequences else 0):
        s = sequences[int(rng.integers(len(sequences)))]
        sq, skv = cu_q[s + 1] - cu_q[s], cu_kv[s + 1] - cu_kv[s]
        hi, i = int(rng.integers(h)), int(rng.integers(sq))
        diag = i + skv - sq  # bottom-right alignment
        j = np.arange(skv)
        seen = np.ones(skv, dtype=bool)
        if left >= 0:
            seen &= j >= diag - left
        if right >= 0:
            seen &= j <= diag + right
        kv, row = hi // (h // hkv), cu_q[s] + i
        expected = np.zeros(q.shape[-1])
        if seen.any():
            keys = slice(cu_kv[s], cu_kv[s + 1])
            scores = host(k[keys, kv, :]) @ host(q[row, hi, :]) * job["scale"]
            p = np.exp(np.where(seen, scores, -np.inf) - scores[seen].max())
            expected = (p / p.sum()) @ host(v[keys, kv, :])
        errors.append(float(np.abs(host(out[row, hi, :]) - expected).max()))
    worst = float(np.max(errors, initial=0.0))  # NaN stays NaN (Python's max would drop it)
    if not worst < 2e-2:
        raise Refused("wrong", f"{name}'s output differs from the reference by {worst:.3g} on sampled rows")


def main():
    try:
        import numpy as np
        import torch
        import torch.nn.functional as F
    except Exception as exc:  # noqa: BLE001 - reported to the caller as one line
        reply({"fatal": f"PyTorch is not importable: {exc}"})
        return
    if not torch.cuda.is_available():
        reply({"fatal": "PyTorch sees no CUDA GPU"})
        return
    state = Helper(torch, F, np)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            reply({"ok": state.handle(request)})
        except Unavailable as exc:
            reply({"error": str(exc).splitlines()[0]})
        except Refused as exc:
            reply({"refused": exc.kind, "error": str(exc).splitlines()[0]})
        except Exception as exc:  # noqa: BLE001 - one line per failed request
            text = str(exc).splitlines()[0] if str(exc) else ""
            reply({"error": f"{type(exc).__name__}: {text}"})


class Helper:
    def __init__(self, torch, F, np):
        self.torch, self.F, self.np = torch, F, np
        self.dev = torch.device("cuda")
        self.dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
        self.timing_key, self.timing_state = None, None
        self._fa3 = None
        self._flex = None
        self._flashinfer = None
        self._flashinfer_workspace = None
        self.py = None

    def handle(self, request):
        kind = request["kind"]
        if kind == "info":
            torch = self.torch
            props = torch.cuda.get_device_properties(self.dev)
            return {"torch": torch.__version__, "cuda": torch.version.cuda or "",
                    "cudnn": str(torch.backends.cudnn.version()), "gpu": props.name}
        if kind == "run":
            return self.run(request)
        if kind == "sync":
            self.torch.cuda.synchronize()
            return {"synced": True}
        if kind == "time":
            return self.time(request)
        if kind == "decode":
            return self.decode(request)
        if kind in ("backward", "backward_run"):
            return self.backward().handle(request)
        if kind == "flashinfer":
            return {"flashinfer": self.flashinfer().__version__}
        if kind == "callable":
            self.py = PyCallable(self, request["file"], request["function"])
            return {"callable": f"{request['file']}:{request['function']}"}
        raise ValueError(f"unknown request kind {kind}")

    def backend(self, name):
        import contextlib
        if name in ("default", "varlen", "flex", "flashinfer"):
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        table = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                 "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
        return sdpa_kernel([table[name]])

    def sdpa(self, q, k, v, job):
        # Grouped-query heads through SDPA's own GQA path; K/V carry fewer heads than Q.
        gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
        sq, skv = q.shape[2], k.shape[2]
        if any(bound >= 0 for bound in job.get("window", [-1, -1])):
            # attn refuses it before asking (a boolean mask would time SDPA's dense masked paths).
            raise ValueError("SDPA has no sliding-window kernel: a window needs the varlen or flex backend")
        if job["causal"] and sq == 1:
            # One query, the last token: it sees every key, so no mask at all.
            return self.F.scaled_dot_product_attention(q, k, v, scale=job["scale"], **gqa)
        # Bottom-right causal alignment for Sq != Skv, as attn's ABI defines it.
        if job["causal"] and sq != skv:
            from torch.nn.attention.bias import causal_lower_right
            return self.F.scaled_dot_product_attention(
                q, k, v, attn_mask=causal_lower_right(sq, skv), scale=job["scale"], **gqa)
        return self.F.scaled_dot_product_attention(q, k, v, is_causal=job["causal"], scale=job["scale"], **gqa)

    def decode(self, job):
        """A decode batch through SDPA as the dense causal batch of its equal lengths (the new
        tokens the last q of kv keys: bottom-right, Helper.sdpa), or through FlashInfer on a paged
        cache (Helper.flashinfer_job), checked, then timed by time()."""
        if job["backend"] == "flashinfer":
            timed = self.time(self.flashinfer_job(job))
            timed["flashinfer"] = self.flashinfer().__version__
            return timed
        lens_q, lens_kv = list(job["q"]), list(job["kv"])
        if len(set(lens_q)) != 1 or len(set(lens_kv)) != 1 or lens_q[0] == 0:
            raise ValueError(f"SDPA takes equal lengths: q={lens_q} kv={lens_kv} — use --baseline decode-naive")
        if job["backend"] not in ("default", "flash", "efficient", "cudnn", "math"):
            raise ValueError(f"{job['backend']} is not an SDPA backend: decode runs through SDPA's own")
        dense = {k: job[k] for k in ("dtype", "window", "scale", "backend", "warmup", "samples", "mode",
                                     "batch_launches", "guard_launches", "sets", "seed", "flush_bytes")}
        dense.update(shape=[len(lens_q), job["heads"], lens_q[0], lens_kv[0], job["head_dim"]],
                     kv_heads=job["kv_heads"], causal=True, varlen=None, check=True)
        timed = self.time(dense)
        timed["flashinfer"] = None
        return timed

    def flashinfer(self):
        if self._flashinfer is None:
            self._flashinfer = import_flashinfer()
        return self._flashinfer

    def flashinfer_job(self, job):
        """A decode request as time()'s job for FlashInfer: its lengths as they are, its page size
        and policy, refused in one line where FlashInfer has no kernel (attn refuses these first)."""
        layout = job["layout"]
        if not isinstance(layout, dict) or "paged" not in layout:
            raise ValueError("flashinfer reads a paged KV cache: give the batch a page size (page=16)")
        if job["head_dim"] not in FLASHINFER_HEAD_DIMS:
            raise ValueError(f"flashinfer's paged decode is built for head dims 64, 128 and 256, not {job['head_dim']}")
        if job["window"][1] > 0:
            raise ValueError(f"a decode window bounds the left side only, not {job['window']}")
        lens_q, lens_kv = list(job["q"]), list(job["kv"])
        fi = {k: job[k] for k in ("dtype", "window", "scale", "backend", "warmup", "samples", "mode",
                                  "batch_launches", "guard_launches", "sets", "seed", "flush_bytes", "layout")}
        fi.update(shape=[len(lens_q), job["heads"], max(lens_q), max(lens_kv), job["head_dim"]],
                  kv_heads=job["kv_heads"], causal=True, varlen={"q": lens_q, "kv": lens_kv})
        return fi

    def flashinfer_plan(self, job):
        """FlashInfer's wrapper for `job`, planned: the tensor-core decode wrapper when every
        sequence with keys has one new token, else the paged prefill wrapper with causal=True (its
        causal mask is bottom-right aligned for fewer queries than keys, attn's convention); with
        the page lists, offsets and pool size its inputs are built for."""
        torch = self.torch
        fi = self.flashinfer()
        paged = job["layout"]["paged"]
        page_size, policy = int(paged["page_size"]), paged.get("policy", "in-order")
        lens_q, lens_kv = lengths(job)
        _, h, _, _, d = job["shape"]
        hkv = job["kv_heads"]
        # One table and one plan serve every input set: the sets differ in their values only, as
        # successive steps of one batch would.
        lists, num_pages = page_lists(lens_kv, page_size, policy, job["seed"])
        batch = paged_batch(lens_q, lens_kv, lists, page_size)
        keep = batch["keep"]

        def ints(values):
            return torch.tensor(values, dtype=torch.int32, device=self.dev)

        if self._flashinfer_workspace is None:
            # FlashInfer's float workspace (split-KV partial outputs), shared by every plan.
            self._flashinfer_workspace = torch.zeros(256 << 20, dtype=torch.uint8, device=self.dev)
        dtype = self.dtypes[job["dtype"]]
        left = int(job["window"][0])
        kv = (ints(batch["kv_indptr"]), ints(batch["kv_indices"]), ints(batch["kv_last_page_len"]))
        common = dict(q_data_type=dtype, kv_data_type=dtype, sm_scale=float(job["scale"]),
                      window_left=left if left >= 0 else -1)
        # plan() runs here, outside the timed region: a serving engine plans once per batch step,
        # outside attention, and every timed call then reuses the plan.
        if all(lens_q[s] == 1 for s in keep):
            wrapper = fi.decode.BatchDecodeWithPagedKVCacheWrapper(self._flashinfer_workspace, "NHD",
                                                                   use_tensor_cores=True)
            wrapper.plan(*kv, h, hkv, d, page_size, **common)
        else:
            wrapper = fi.prefill.BatchPrefillWithPagedKVCacheWrapper(self._flashinfer_workspace, "NHD")
            wrapper.plan(ints(batch["qo_indptr"]), *kv, h, hkv, d, page_size, causal=True, **common)
        return {"wrapper": wrapper, "lists": [lists[s] for s in keep], "lens_q": [lens_q[s] for s in keep],
                "lens_kv": [lens_kv[s] for s in keep], "num_pages": num_pages, "page_size": page_size}

    def packing(self, lens_q, lens_kv):
        """varlen_attn's offsets on the device and longest lengths, for sequences of these lengths."""
        torch = self.torch

        def cu(lens):
            return torch.tensor(offsets(lens), dtype=torch.int32, device=self.dev)

        return cu(lens_q), cu(lens_kv), max(lens_q, default=0), max(lens_kv, default=0)

    def varlen(self, q, k, v, packing, job):
        """PyTorch's varlen_attn on packed q [total_q, H, D], k and v [total_kv, H_kv, D]: its
        FlashAttention-2 kernel takes grouped heads as they are, and a window as (left, right)
        with causal its right bound 0 (FlashAttention's definition, bottom-right aligned). The
        public function, as a user calls it: its wrapper also zero-fills a 2-element RNG state
        per call (one tiny kernel, part of the API's cost)."""
        from torch.nn.attention.varlen import varlen_attn
        cu_q, cu_kv, max_q, max_kv = packing
        left, right = job.get("window", [-1, -1])
        if job["causal"]:
            right = 0
        return varlen_attn(q, k, v, cu_q, cu_kv, max_q, max_kv, scale=job["scale"],
                           window_size=(int(left), int(right)))

    def block_mask(self, job, sq, skv):
        """FlexAttention's block mask of attn's mask (bottom-right causal, FlashAttention's window:
        keys [i + skv - sq - left, i + skv - sq + right] of query row i), or None for none."""
        left, right = job.get("window", [-1, -1])
        if job["causal"]:
            right = 0
        if left < 0 and right < 0:
            return None
        from torch.nn.attention.flex_attention import create_block_mask
        offset = skv - sq

        def mask_mod(b, h, q_idx, kv_idx):
            diag = q_idx + offset
            keep = kv_idx >= diag - left if left >= 0 else kv_idx >= 0
            if right >= 0:
                keep = keep & (kv_idx <= diag + right)
            return keep

        return create_block_mask(mask_mod, None, None, sq, skv, device=self.dev)

    def flex(self, q, k, v, block_mask, job):
        """FlexAttention on [B, H, S, D] tensors (K and V with their own heads: enable_gqa), its
        function compiled once per process (the eager one is a slow reference implementation)."""
        if self._flex is None:
            import torch._dynamo
            from torch.nn.attention.flex_attention import flex_attention
            # One compile per problem: past dynamo's limit of 8 it would time the eager fallback,
            # a far slower baseline than PyTorch's real one; past a raised limit, an error.
            torch._dynamo.config.recompile_limit = 4096
            torch._dynamo.config.accumulated_recompile_limit = 4096
            torch._dynamo.config.fail_on_recompile_limit_hit = True
            self._flex = self.torch.compile(flex_attention, dynamic=False)
        return self._flex(q, k, v, block_mask=block_mask, scale=job["scale"], enable_gqa=k.shape[1] != q.shape[1])

    def attend(self, qkv, aux, job):
        """The job's backend on one input set, in that backend's layout: packed for varlen_attn
        (`aux` its Helper.packing), [B, H, S, D] for FlexAttention (`aux` its Helper.block_mask)
        and SDPA (no `aux`); FlashInfer's q packed, K and V its paged pools (`aux` its
        Helper.flashinfer_plan)."""
        if job["backend"] == "flashinfer":
            q, k, v = qkv
            return aux["wrapper"].run(q, (k, v))
        if job["backend"] == "py":
            return self.callable().call(*qkv, job)
        if job["backend"] == "varlen":
            return self.varlen(*qkv, aux, job)
        if job.get("varlen") is not None:
            raise ValueError(f"{job['backend']} takes dense batches: a packed varlen batch needs the varlen backend")
        if job["backend"] == "flex":
            return self.flex(*qkv, aux, job)
        return self.sdpa(*qkv, job)

    def load(self, path, dtype):
        np, torch = self.np, self.torch
        arr = np.load(path)
        t = torch.from_numpy(arr.astype(np.uint16) if dtype == "bf16" and arr.dtype != np.uint16 else arr)
        if dtype == "bf16":
            t = t.view(torch.bfloat16)
        return t.to(self.dev)

    def run(self, job):
        torch, np = self.torch, self.np
        if job["backend"] == "fa3":
            # FA3 is a timing baseline; its output is checked in Fa3.verify before it is timed.
            raise ValueError("FA3 runs no .npy inputs here: it is a timing baseline (--baseline fa3)")
        if job["backend"] == "flashinfer":
            raise ValueError("flashinfer runs no .npy inputs here: it is a decode timing baseline")
        if job["backend"] == "py":
            return self.run_callable(job)
        q, k, v = (self.load(job[x], job["dtype"]) for x in ("q", "k", "v"))
        with self.backend(job["backend"]), torch.no_grad():
            if job["backend"] == "varlen":
                o = self.run_varlen(q, k, v, job)
            else:
                mask = self.block_mask(job, q.shape[2], k.shape[2]) if job["backend"] == "flex" else None
                o = self.attend((q, k, v), mask, job)
        torch.cuda.synchronize()
        self.save(o, job["out"], job["dtype"])
        return {"out": job["out"]}

    def save(self, o, path, dtype):
        np, torch = self.np, self.torch
        np.save(path, o.view(torch.int16).cpu().numpy().view(np.uint16) if dtype == "bf16" else o.cpu().numpy())

    def run_callable(self, job):
        """The py callable on a check's .npy inputs (a candidate's check): called twice on them, each
        output validated as a timed one is, the inputs compared bit for bit after both calls with
        copies taken before, the first output written to "out" and the second to "second" (the
        caller judges the first and compares the two)."""
        torch = self.torch
        PyCallable.check_layout(job)
        py = self.callable()
        q, k, v = (self.load(job[x], job["dtype"]) for x in ("q", "k", "v"))
        copies = [t.clone() for t in (q, k, v)]
        with torch.no_grad():
            first = py.call(q, k, v, job)
            second = py.call(q, k, v, job)
        # Whatever it ran, on any stream, done before its inputs and outputs are read.
        py.bound["torch.cuda.synchronize"]()
        py.check_timer()
        for name, t, c in zip("QKV", (q, k, v), copies):
            if not torch.equal(t.view(torch.int16), c.view(torch.int16)):
                raise Refused("inputs", f"the callable changed its input {name}")
        if py.overlap(first, second):
            raise Refused("remembered", "two calls on the same inputs returned the same memory (a remembered output?)")
        self.save(first, job["out"], job["dtype"])
        if job.get("second"):
            self.save(second, job["second"], job["dtype"])
        return {"out": job["out"]}

    def run_varlen(self, q, k, v, job):
        """varlen_attn on a run's tensors: packed [1, total, H, D] files as they are, a dense
        [B, H, S, D] batch as B sequences of equal length (and its output back in that layout)."""
        if job.get("varlen") is not None:
            packing = self.packing(job["varlen"]["q"], job["varlen"]["kv"])
            return self.varlen(q[0], k[0], v[0], packing, job).unsqueeze(0)
        b, h, sq, d = q.shape
        skv = k.shape[2]
        o = self.varlen(to_packed(q), to_packed(k), to_packed(v), self.packing([sq] * b, [skv] * b), job)
        return o.reshape(b, sq, h, d).transpose(1, 2).contiguous()

    def prepare_timing(self, job):
        """Inputs, flush buffer and graphs of one problem, kept while the same problem is timed."""
        key = json.dumps({k: job.get(k) for k in ("shape", "kv_heads", "dtype", "causal", "window", "scale",
                                                  "varlen", "backend", "mode", "sets", "seed", "flush_bytes", "check",
                                                  "layout")},
                         sort_keys=True)
        if key == self.timing_key:
            return self.timing_state
        self.timing_key, self.timing_state = None, None
        torch = self.torch
        b, h, sq, skv, d = job["shape"]
        hkv = job.get("kv_heads", h)
        dtype = self.dtypes[job["dtype"]]
        gen = torch.Generator(device=self.dev)
        gen.manual_seed(job["seed"])
        aux = None
        lens_q, lens_kv = lengths(job)
        if job["backend"] == "flashinfer":
            aux = self.flashinfer_plan(job)
            pool = (aux["num_pages"], aux["page_size"], hkv, d)
            dims = [(sum(lens_q), h, d), pool, pool]
        elif job["backend"] == "varlen":
            aux = self.packing(lens_q, lens_kv)
            dims = [(sum(lens_q), h, d), (sum(lens_kv), hkv, d), (sum(lens_kv), hkv, d)]
        else:
            if job["backend"] == "flex":
                aux = self.block_mask(job, sq, skv)
            dims = [(b, h, sq, d), (b, hkv, skv, d), (b, hkv, skv, d)]
        sets = [tuple(torch.randn(dim, generator=gen, device=self.dev, dtype=torch.float32).to(dtype)
                      for dim in dims)
                for _ in range(max(1, job["sets"]))]
        if job["backend"] == "flashinfer":
            # Checked like FlashAttention-3 before it is timed, its K and V read through the table.
            with torch.no_grad():
                out = self.attend(sets[0], aux, job)
            q, k, v = sets[0]
            rows = [PagedRows(pool, aux["lists"], aux["lens_kv"]) for pool in (k, v)]
            check_rows(self.np, lambda x: x.double().cpu().numpy(), out, q, *rows,
                       offsets(aux["lens_q"]), offsets(aux["lens_kv"]), job, "FlashInfer")
        elif job["backend"] in ("varlen", "flex") or job.get("check"):
            # Not SDPA, or SDPA on a decode batch: checked like FlashAttention-3 before it is
            # timed ([B, H, S, D] as check_rows' packed layout: B sequences of equal length).
            with torch.no_grad():
                out = self.attend(sets[0], aux, job)
            packed = (lambda x: x) if job["backend"] == "varlen" else to_packed
            check_rows(self.np, lambda x: x.double().cpu().numpy(), packed(out), *map(packed, sets[0]),
                       offsets(lens_q), offsets(lens_kv), job,
                       {"varlen": "varlen_attn", "flex": "FlexAttention"}.get(job["backend"], "SDPA"))
        state = {"sets": sets, "counter": 0, "graphs": None, "aux": aux,
                 "flush": torch.empty(job["flush_bytes"], dtype=torch.uint8, device=self.dev)}
        if job["mode"] in ("graph", "batch"):
            # One graph per input set, captured after a warm-up on a side stream (PyTorch's
            # recipe), so that replays time the kernels and not Python's dispatch (in batch mode
            # too: back-to-back calls from Python leave the GPU idle between small kernels, and
            # a candidate launched from Rust would look many times faster for the wrong reason).
            with self.backend(job["backend"]), torch.no_grad():
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for qkv in sets:
                        self.attend(qkv, aux, job)
                torch.cuda.current_stream().wait_stream(side)
                graphs = []
                for qkv in sets:
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        self.attend(qkv, aux, job)
                    graphs.append(g)
            state["graphs"] = graphs
        self.timing_key, self.timing_state = key, state
        return state

    def callable(self):
        if self.py is None:
            raise ValueError("the py backend has no callable: send a callable request first")
        return self.py

    def fa3(self):
        if self._fa3 is None:
            self._fa3 = Fa3(self.np)
        return self._fa3

    def backward(self):
        if getattr(self, "_backward", None) is None:
            self._backward = Backward(self)
        return self._backward

    def time(self, job):
        if job["backend"] == "fa3":
            return self.fa3().time(job)
        if job["backend"] == "py":
            return self.callable().time(job)
        if job["backend"] == "flashinfer" and "layout" not in job:
            raise ValueError("flashinfer times decode batches only: a prefill problem has no paged cache to give it")
        torch = self.torch
        state = self.prepare_timing(job)
        sets, graphs = state["sets"], state["graphs"]

        def launch(i):
            return self.attend(sets[i], state["aux"], job)

        def replay(i):
            graphs[i].replay()

        with self.backend(job["backend"]), torch.no_grad():
            return event_protocol(torch, job, state, len(sets), launch,
                                  replay if graphs is not None else launch)


def event_protocol(torch, job, state, n_sets, launch, timed):
    """Every SDPA-side timing's protocol: warm-up, samples between CUDA events (one launch, or
    batch_launches of them on consecutive sets, the L2 flushed before each outside batch mode),
    then guard launches timed by the host clock and by events. `timed(i)` runs set i as timed (a
    graph's replay or a launch); `launch(i)` runs it uncaptured; state["counter"] rotates the sets
    across calls, state["flush"] is the flush buffer."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_sample = job["batch_launches"] if job["mode"] == "batch" else 1

    def next_timed():
        state["counter"] += 1
        timed(state["counter"] % n_sets)

    samples, wall, guard_events = [], [], []
    for _ in range(job["warmup"]):
        next_timed()
    torch.cuda.synchronize()
    for i in range(job["samples"]):
        if job["mode"] != "batch":
            state["flush"].fill_(i % 251)
        start.record()
        for _ in range(per_sample):
            next_timed()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / per_sample)
    torch.cuda.synchronize()
    for i in range(job["guard_launches"]):
        t0 = time.perf_counter()
        start.record()
        launch(i % n_sets)
        end.record()
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e6)
        guard_events.append(start.elapsed_time(end) * 1000.0)
    return {"samples_us": samples, "wall_us": wall, "guard_event_us": guard_events,
            "launches_per_sample": per_sample}


class PyCallable:
    """A user's Python callable as a baseline (backend "py"): fn(q, k, v, scale=, causal=) -> O.

    Its module runs in this process, so what it could reach is taken first: the timer's functions
    (CUDA events, device synchronisation, the host clock, the current stream) are bound before the
    module is imported, and the timing calls those bindings; a sample after which torch's own names
    no longer point at them is refused ("patched the timer"). Each call must return a new tensor of
    the inputs' shape, dtype and device, sharing no memory with them or with another call's output
    in the same sample (a view of V, a remembered output), and leave the current stream as it
    found it.
    Every sample's inputs are drawn afresh in place (the same addresses, new values: an output
    remembered by address is stale), its inputs must come back unchanged, and every timed output is
    checked against a float32 reference of those inputs within the request's tolerance (the oracle's
    table for normal inputs, from the request). Work that outlives the timed stream's last event in
    most samples (another stream) is refused: measured by the host's wait for the whole device, the
    one clock that sees streams it was not told of. Not covered: a callable that writes outside its
    own allocations, or that inspects this module's frames to find and patch the bound timer."""

    def __init__(self, helper, path, function):
        import importlib.util
        torch = helper.torch
        self.helper, self.torch = helper, torch
        self.bound = self.timer_names()
        spec = importlib.util.spec_from_file_location("attn_py_callable", path)
        if spec is None or spec.loader is None:
            raise ValueError(f"{path}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, function, None)
        if not callable(fn):
            raise ValueError(f"{path} has no callable `{function}`")
        self.fn, self.name = fn, f"{path}:{function}"

    def timer_names(self):
        torch = self.torch
        return {"torch.cuda.Event": torch.cuda.Event, "torch.cuda.Event.record": torch.cuda.Event.record,
                "torch.cuda.Event.synchronize": torch.cuda.Event.synchronize,
                "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
                "torch.cuda.synchronize": torch.cuda.synchronize, "time.perf_counter": time.perf_counter,
                "torch.cuda.current_stream": torch.cuda.current_stream}

    def check_timer(self):
        now = self.timer_names()
        patched = [name for name, fn in self.bound.items() if now[name] is not fn]
        if patched:
            raise Refused("contract", f"the callable patched the timer ({', '.join(patched)})")

    @staticmethod
    def check_layout(job):
        if job.get("varlen") is not None or any(w >= 0 for w in job.get("window", [-1, -1])):
            raise ValueError("a py callable takes dense batches without a window (fn(q, k, v, scale=, causal=))")

    @staticmethod
    def overlap(x, y):
        """Whether two tensors' storages share memory."""
        (a, b), (c, d) = PyCallable.span(x), PyCallable.span(y)
        return a < d and c < b

    @staticmethod
    def span(t):
        start = t.untyped_storage().data_ptr()
        return start, start + t.untyped_storage().nbytes()

    def call(self, q, k, v, job):
        """One checked call (outside the timed region): the output, or why it is refused."""
        stream = self.bound["torch.cuda.current_stream"]()
        o = self.fn(q, k, v, scale=job["scale"], causal=bool(job["causal"]))
        self.validate(o, (q, k, v), stream)
        return o

    def validate(self, o, qkv, stream):
        """A returned output: a new tensor of Q's shape, dtype and device, sharing no memory with
        the inputs, the current stream left as it was."""
        torch = self.torch
        q = qkv[0]
        if self.bound["torch.cuda.current_stream"]() != stream:
            raise Refused("contract", "the callable left another stream current")
        if not isinstance(o, torch.Tensor):
            raise Refused("contract", f"the callable returned {type(o).__name__}, not a tensor")
        if o.device != q.device or tuple(o.shape) != tuple(q.shape):
            raise Refused("contract", f"the callable returned {tuple(o.shape)} on {o.device}; Q is {tuple(q.shape)} on {q.device}")
        if o.dtype != q.dtype:
            raise Refused("contract", f"the callable returned {o.dtype} for {q.dtype} inputs (a down-cast?)")
        for name, t in zip(("Q", "K", "V"), qkv):
            if self.overlap(o, t):
                raise Refused("contract", f"the callable returned memory of its input {name} (a view of its inputs?)")

    def reference(self, q, k, v, job):
        helper = self.helper
        with helper.backend("math"):
            return helper.sdpa(q.float(), k.float(), v.float(), job)

    def judge(self, o, ref, job, what):
        tol = job["tolerance"]
        torch = self.torch
        err = (o.float() - ref).abs()
        bound = torch.clamp(ref.abs() * tol["rel_l2"], min=tol["max_abs"])
        bad = int((~(err <= bound)).sum())  # NaN counts as bad
        rel = float(torch.linalg.vector_norm(o.float() - ref) / torch.linalg.vector_norm(ref).clamp(min=1e-30))
        if bad or not rel <= tol["rel_l2"]:
            raise Refused("wrong", f"{what}: {bad} elements off a float32 reference (relative L2 {rel:.3g}): a stale, remembered or wrong output")

    def time(self, job):
        torch, helper = self.torch, self.helper
        b, h, sq, skv, d = job["shape"]
        self.check_layout(job)
        hkv = job.get("kv_heads", h)
        dtype = helper.dtypes[job["dtype"]]
        gen = torch.Generator(device=helper.dev)
        gen.manual_seed(job["seed"])
        n_sets = max(1, job["sets"])
        sets = [tuple(torch.empty(dim, device=helper.dev, dtype=dtype)
                      for dim in ((b, h, sq, d), (b, hkv, skv, d), (b, hkv, skv, d)))
                for _ in range(n_sets)]

        def refill(i):
            for t in sets[i]:
                t.copy_(torch.randn(t.shape, generator=gen, device=helper.dev, dtype=torch.float32))

        def sums(i):
            return [int(t.view(torch.int16).sum(dtype=torch.int64)) for t in sets[i]]

        for i in range(n_sets):
            refill(i)
        with torch.no_grad():
            before = sums(0)
            out = self.call(*sets[0], job)
            # Whatever it ran, on any stream, done before its inputs and output are read.
            self.bound["torch.cuda.synchronize"]()
            if sums(0) != before:
                raise Refused("inputs", "the callable changed its inputs")
            q, k, v = sets[0]
            check_rows(helper.np, lambda x: x.double().cpu().numpy(), to_packed(out), to_packed(q), to_packed(k),
                       to_packed(v), offsets([sq] * b), offsets([skv] * b), job, self.name)
        bound = self.bound
        start, end = bound["torch.cuda.Event"](enable_timing=True), bound["torch.cuda.Event"](enable_timing=True)
        record, ev_sync, elapsed = (bound["torch.cuda.Event.record"], bound["torch.cuda.Event.synchronize"],
                                    bound["torch.cuda.Event.elapsed_time"])
        sync, clock = bound["torch.cuda.synchronize"], bound["time.perf_counter"]
        flush = torch.empty(job["flush_bytes"], dtype=torch.uint8, device=helper.dev)
        per_sample = job["batch_launches"] if job["mode"] == "batch" else 1
        counter = [0]

        def next_sets():
            chosen = []
            for _ in range(per_sample):
                counter[0] += 1
                chosen.append(counter[0] % n_sets)
            return chosen

        samples, wall, guard_events, escaped = [], [], [], []
        with torch.no_grad():
            for _ in range(job["warmup"]):
                for i in next_sets():
                    self.call(*sets[i], job)
            sync()
            for n in range(job["samples"]):
                chosen = next_sets()
                for i in set(chosen):
                    refill(i)
                refs = {i: self.reference(*sets[i], job) for i in set(chosen)}
                before = {i: sums(i) for i in set(chosen)}
                if job["mode"] != "batch":
                    flush.fill_(n % 251)
                sync()
                # Nothing but the calls between the events; their outputs are judged after.
                stream = bound["torch.cuda.current_stream"]()
                fn, scale, causal = self.fn, job["scale"], bool(job["causal"])
                outs = []
                record(start)
                for i in chosen:
                    outs.append((i, fn(*sets[i], scale=scale, causal=causal)))
                record(end)
                ev_sync(end)
                t_end = clock()
                sync()
                escaped_us = (clock() - t_end) * 1e6
                sample_us = elapsed(start, end) * 1000.0
                self.check_timer()
                escaped.append(escaped_us if escaped_us > max(50.0, 0.25 * sample_us) else 0.0)
                for i, o in outs:
                    self.validate(o, sets[i], stream)
                    self.judge(o, refs[i], job, f"timed sample {n}, input set {i}")
                live = sorted(self.span(o) for _, o in outs)
                if any(a[1] > b[0] for a, b in zip(live, live[1:])):
                    raise Refused("remembered", f"timed sample {n}: two calls returned the same memory (a remembered output?)")
                for i in set(chosen):
                    if sums(i) != before[i]:
                        raise Refused("inputs", f"timed sample {n}: the callable changed its inputs (set {i})")
                samples.append(sample_us / per_sample)
            # The host's wait for the whole device after the timed stream's end, which another
            # process's use of the GPU can stretch now and then: work that escapes the timed
            # stream stretches most samples' wait, so most must.
            late = sorted(e for e in escaped if e > 0.0)
            if len(late) > len(escaped) // 2:
                raise Refused("escaped", f"work outlived the timed stream in {len(late)} of {len(escaped)} samples "
                                 f"(median {late[len(late) // 2]:.0f} us): the callable runs work on another stream")
            for n in range(job["guard_launches"]):
                i = n % n_sets
                t0 = clock()
                record(start)
                self.fn(*sets[i], scale=job["scale"], causal=bool(job["causal"]))
                record(end)
                sync()
                wall.append((clock() - t0) * 1e6)
                guard_events.append(elapsed(start, end) * 1000.0)
            self.check_timer()
        return {"samples_us": samples, "wall_us": wall, "guard_event_us": guard_events,
                "launches_per_sample": per_sample}


class Fa3:
    """FlashAttention-3 through JAX: the library loaded and its FFI targets (forward and backward)
    registered once. Its backward is a baseline of attn's backward gate too: each input set's
    forward runs once outside the timed region, and a timed call is FA3's backward alone (its own
    dO·O preprocessing and dQ conversion inside, as attn's attn_bwd_pre and attn_bwd_post are)."""

    # A batch-mode sample is one dispatch of back-to-back calls, timed on the device by its
    # kernels' span (`device_span`); its size keeps the host's overhead (measured in `prepare`)
    # under 1% of the host-timed sample kept beside it.
    SAMPLE_US = 20000.0
    MAX_CALLS = 1024  # calls unrolled into one jitted sample (compile time grows with it)

    def __init__(self, np):
        import ctypes
        import os
        path = os.environ.get("ATTN_FA3_LIB", "")
        if not path or not os.path.isfile(path):
            raise ValueError(f"ATTN_FA3_LIB does not name FlashAttention-3's library ({path!r})")
        # JAX takes most of the GPU's memory up front unless told not to; PyTorch shares it.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import jax
        import jax.numpy as jnp
        lib = ctypes.cdll.LoadLibrary(path)
        for target in ("dew_flash3_mha_fwd", "dew_flash3_mha_bwd"):
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, target)), platform="CUDA")
        self.jax, self.jnp, self.np = jax, jnp, np
        self.dtypes = {"fp16": jnp.float16, "bf16": jnp.bfloat16}
        self.key, self.state = None, None

    def attributes(self, job):
        """The FFI targets' mask and scale attributes of `job`."""
        np = self.np
        left, right = job.get("window", [-1, -1])
        return {"softmax_scale": np.float64(job["scale"]), "is_causal": bool(job["causal"]),
                "window_size_left": np.int64(left), "window_size_right": np.int64(0 if job["causal"] else right)}

    def forward(self, q, k, v, job):
        """FA3's forward on [B, S, H, D] arrays (K and V with their own heads: GQA natively): O and
        the row log-sum-exp [B, H, S]."""
        jax, jnp = self.jax, self.jnp
        b, sq, h, _ = q.shape
        results = (jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((b, h, sq), jnp.float32),
                   jax.ShapeDtypeStruct((1, 1, 1, 1), jnp.float32), jax.ShapeDtypeStruct((1, 1, 1), jnp.float32))
        # Side effects declared so that XLA neither merges nor drops repeated calls on one input.
        out = jax.ffi.ffi_call("dew_flash3_mha_fwd", results, has_side_effect=True)(
            q, k, v, **self.attributes(job))
        return out[0], out[1]

    def call(self, q, k, v, job):
        """FA3's forward's O."""
        return self.forward(q, k, v, job)[0]

    def backward(self, do, q, k, v, o, lse, job):
        """FA3's dQ, dK, dV on [B, S, H, D] arrays (dK and dV per key head) from the forward's O and
        LSE."""
        jax, jnp = self.jax, self.jnp
        b, sq, h, _ = q.shape
        # Two f32 buffers of rows per head: each sequence's queries rounded up to the backward's
        # row block (at most 128), and one block more.
        scratch = jax.ShapeDtypeStruct((h * (b * (sq + 128) + 128),), jnp.float32)
        results = (jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct(k.shape, k.dtype),
                   jax.ShapeDtypeStruct(v.shape, v.dtype), scratch, scratch)
        dq, dk, dv, _, _ = jax.ffi.ffi_call("dew_flash3_mha_bwd", results, has_side_effect=True)(
            do, q, k, v, o, lse, **self.attributes(job))
        return dq, dk, dv

    def run_backward(self, job):
        """FA3's gradients of .npy inputs (q, k, v, do, [B, H, S, D] as attn writes them), with the
        forward's O, written to .npy files (dq, dk, dv, o) for attn to judge against its float64
        oracle."""
        jax, jnp, np = self.jax, self.jnp, self.np
        bf16 = job["dtype"] == "bf16"

        def load(path):
            arr = np.load(path)
            x = jnp.asarray(arr.astype(np.uint16)).view(jnp.bfloat16) if bf16 else jnp.asarray(arr)
            return jnp.transpose(x, (0, 2, 1, 3))

        q, k, v, do = (load(job[x]) for x in ("q", "k", "v", "do"))

        def both(q, k, v, do):
            o, lse = self.forward(q, k, v, job)
            return (o, *self.backward(do, q, k, v, o, lse, job))

        o, dq, dk, dv = jax.jit(both)(q, k, v, do)
        for name, x in (("dq", dq), ("dk", dk), ("dv", dv), ("o", o)):
            x = jnp.transpose(x, (0, 2, 1, 3))
            np.save(job[name], np.asarray(x.view(jnp.uint16)) if bf16 else np.asarray(x))
        return {"dq": job["dq"], "dk": job["dk"], "dv": job["dv"], "o": job["o"]}

    def prepare(self, job, backward=False):
        """Input sets and the jitted sample of one problem (of its backward with `backward`), kept
        while the same problem is timed."""
        import json
        key = json.dumps({k: job.get(k) for k in ("shape", "kv_heads", "dtype", "causal", "window", "scale",
                                                  "sets", "seed", "batch_launches")} | {"backward": backward},
                         sort_keys=True)
        if key == self.key:
            return self.state
        self.key, self.state = None, None
        jax, jnp = self.jax, self.jnp
        b, h, sq, skv, d = job["shape"]
        hkv = job.get("kv_heads", h)
        dtype = self.dtypes[job["dtype"]]
        root = jax.random.key(job["seed"] & 0x7FFFFFFF)
        sets = []
        forward = jax.jit(lambda q, k, v: self.forward(q, k, v, job))
        for i in range(max(1, job["sets"])):
            kq, kk, kv, kd = jax.random.split(jax.random.fold_in(root, i), 4)
            qkv = (jax.random.normal(kq, (b, sq, h, d), jnp.float32).astype(dtype),
                   jax.random.normal(kk, (b, skv, hkv, d), jnp.float32).astype(dtype),
                   jax.random.normal(kv, (b, skv, hkv, d), jnp.float32).astype(dtype))
            if backward:
                # The forward once per set, outside the timed region: what the backward reads.
                do = jax.random.normal(kd, (b, sq, h, d), jnp.float32).astype(dtype)
                sets.append((do, *qkv, *forward(*qkv)))
            else:
                sets.append(qkv)
        if not backward:
            # (The backward's gradients are judged by attn before it is timed: backward_run.)
            self.verify(sets[0], job)
        flat = [x for one in sets for x in one]
        # Host overhead of one sample (argument handling, dispatch, the sync's wake-up): a jitted
        # function of the same arguments doing nothing to speak of.
        idle = self.jax.jit(lambda *flat: flat[0][0, 0, 0, 0])
        idle(*flat).block_until_ready()
        overhead = min(self.wall(idle, flat) for _ in range(5))
        # Calls per sample: at least the harness's, and enough that the overhead is under 1%
        # of a sample and a sample lasts SAMPLE_US.
        calls = max(1, job["batch_launches"])
        call, arity = (self.backward, 6) if backward else (self.call, 3)
        fn = self.sample_fn(job, calls, len(sets), call, arity)
        fn(*flat).block_until_ready()  # compile and warm up
        per_call = self.wall(fn, flat) / calls
        wanted = max(self.SAMPLE_US, 100.0 * overhead) / max(per_call, 1e-3)
        wanted = min(self.MAX_CALLS, max(calls, int(wanted) + 1))
        if wanted != calls:
            calls, fn = wanted, self.sample_fn(job, wanted, len(sets), call, arity)
            fn(*flat).block_until_ready()
        self.key, self.state = key, {"flat": flat, "fn": fn, "calls": calls}
        return self.state

    def verify(self, qkv, job):
        """FA3's output on `qkv` against a float64 reference on sampled rows (check_rows): its
        [B, S, H, D] arrays are the packed layout of B sequences of equal length."""
        np = self.np
        out = self.jax.jit(lambda q, k, v: self.call(q, k, v, job))(*qkv)
        q, k, v = qkv
        b, sq, h, d = q.shape
        skv, hkv = k.shape[1], k.shape[2]

        def host(x):
            return np.asarray(x.astype(self.jnp.float32), dtype=np.float64)

        check_rows(np, host, out.reshape(b * sq, h, d), q.reshape(b * sq, h, d), k.reshape(b * skv, hkv, d),
                   v.reshape(b * skv, hkv, d), offsets([sq] * b), offsets([skv] * b), job, "FA3")

    @staticmethod
    def wall(fn, flat):
        """µs of host time from a dispatch of `fn` to the end of its work on the device."""
        import time
        t0 = time.perf_counter()
        fn(*flat).block_until_ready()
        return (time.perf_counter() - t0) * 1e6

    def sample_fn(self, job, calls, sets, call, arity):
        """A timed sample: `calls` back-to-back FA3 calls (`call` of a set's `arity` arrays), call i
        on input set i mod `sets`, in one jitted dispatch (no Python between calls)."""

        def body(*flat):
            out = None
            for i in range(calls):
                j = arity * (i % sets)
                out = call(*flat[j:j + arity], job)
            return out

        return self.jax.jit(body)

    @staticmethod
    def device_span(fn, flat):
        """µs on the device from the start of a dispatch's first kernel to the end of its last,
        recorded by CUPTI through torch.profiler (which sees JAX's kernels too): what CUDA events
        around the same launches measure on a kernel side, without the host's dispatch."""
        import json
        import os
        import tempfile
        import torch
        from torch.profiler import ProfilerActivity, profile
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn(*flat).block_until_ready()
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            path = f.name
        try:
            prof.export_chrome_trace(path)
            with open(path) as f:
                trace = json.load(f)
        finally:
            os.unlink(path)
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        kernels = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
                   if e.get("ph") == "X" and e.get("cat") == "kernel"]
        if not kernels:
            raise ValueError("the profiler recorded no kernel of FA3's dispatch: its side cannot be timed on the device")
        return max(end for _, end in kernels) - min(start for start, _ in kernels)

    def time(self, job, backward=False):
        if job["mode"] != "batch":
            raise ValueError("FA3 runs through JAX, which exposes no CUDA events: time it with --mode batch")
        state = self.prepare(job, backward)
        fn, flat, calls = state["fn"], state["flat"], state["calls"]
        for _ in range(job["warmup"]):
            fn(*flat).block_until_ready()
        # Timed on the device, as a kernel side's events time it: the host's wall time of the
        # same dispatch (kept beside, `host_us`) adds JAX's dispatch and the sync's wake-up.
        samples, host = [], []
        for _ in range(job["samples"]):
            host.append(self.wall(fn, flat) / calls)
            samples.append(self.device_span(fn, flat) / calls)
        # No guard pass: the guards judge a candidate's launches, and FA3 is the yardstick.
        return {"samples_us": samples, "wall_us": [], "guard_event_us": [], "launches_per_sample": calls,
                "host_us": host}


class Backward:
    """SDPA's backward (dQ, dK, dV through autograd) as a baseline of attn's backward gate. Each
    input set's forward runs once, outside the timed region, with requires_grad under the chosen
    sdpa_kernel backend, and its graph is kept (retain_graph=True), so that what is timed is
    torch.autograd.grad(out, (q, k, v), grad_outputs=do, retain_graph=True) alone: the backward
    kernels autograd launches for that backend (its dO·O row-sum preprocessing and any zero-fill
    or dQ conversion included, as attn's backward side's attn_bwd_pre and attn_bwd_post are)
    plus autograd's dispatch, which CUDA-graph replay (graph and batch modes) takes off the
    device's critical path and flushed mode leaves in."""

    SDPA = ("default", "flash", "efficient", "cudnn", "math")

    def __init__(self, helper):
        self.helper, self.torch = helper, helper.torch
        self.key, self.state = None, None

    def handle(self, job):
        if job["backend"] == "fa3":
            if job.get("varlen") is not None:
                raise ValueError("FA3's backward baseline takes dense batches")
            fa3 = self.helper.fa3()
            return fa3.run_backward(job) if job["kind"] == "backward_run" else fa3.time(job, backward=True)
        if job["backend"] not in self.SDPA:
            raise ValueError(f"{job['backend']} has no backward here: SDPA's own backends (default, flash, efficient, cudnn, math), or fa3")
        if any(bound >= 0 for bound in job.get("window", [-1, -1])) or job.get("varlen") is not None:
            # attn refuses both before asking: SDPA has no window kernel and takes dense batches.
            raise ValueError("SDPA's backward takes dense batches without a window")
        if job["kind"] == "backward_run":
            return self.run(job)
        return self.time(job)

    def forward(self, q, k, v, do, job):
        """One set's forward with requires_grad under the job's backend, its graph kept: (out,
        (q, k, v), do) for grads()."""
        leaves = tuple(x.detach().requires_grad_(True) for x in (q, k, v))
        with self.helper.backend(job["backend"]):
            out = self.helper.sdpa(*leaves, job)
        return out, leaves, do

    def grads(self, fwd, job):
        """dQ, dK, dV of one kept forward: autograd's backward, the graph kept for the next call."""
        out, leaves, do = fwd
        with self.helper.backend(job["backend"]):
            return self.torch.autograd.grad(out, leaves, grad_outputs=do, retain_graph=True)

    def run(self, job):
        """The gradients of .npy inputs (q, k, v, do), and the forward's output O, written to .npy
        files (dq, dk, dv, o) for attn to judge against its float64 oracle."""
        torch, np = self.torch, self.helper.np
        q, k, v, do = (self.helper.load(job[x], job["dtype"]) for x in ("q", "k", "v", "do"))
        fwd = self.forward(q, k, v, do, job)
        dq, dk, dv = self.grads(fwd, job)
        torch.cuda.synchronize()
        for name, t in (("dq", dq), ("dk", dk), ("dv", dv), ("o", fwd[0].detach())):
            t = t.contiguous()
            arr = t.view(torch.int16).cpu().numpy().view(np.uint16) if job["dtype"] == "bf16" else t.cpu().numpy()
            np.save(job[name], arr)
        return {"dq": job["dq"], "dk": job["dk"], "dv": job["dv"], "o": job["o"]}

    def prepare(self, job):
        """Input sets, their kept forwards and (graph and batch modes) one CUDA graph of the
        backward per set, kept while the same problem is timed."""
        key = json.dumps({k: job.get(k) for k in ("shape", "kv_heads", "dtype", "causal", "scale", "backend",
                                                  "mode", "sets", "seed", "flush_bytes")}, sort_keys=True)
        if key == self.key:
            return self.state
        self.key, self.state = None, None
        torch = self.torch
        b, h, sq, skv, d = job["shape"]
        hkv = job.get("kv_heads", h)
        dtype = self.helper.dtypes[job["dtype"]]
        gen = torch.Generator(device=self.helper.dev)
        gen.manual_seed(job["seed"])
        dims = [(b, h, sq, d), (b, hkv, skv, d), (b, hkv, skv, d), (b, h, sq, d)]
        # The forwards run on the stream the graphs are captured on: autograd runs each backward
        # op on its forward op's stream, and a capture sees only its own stream's work.
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        fwds = []
        with torch.cuda.stream(stream):
            for _ in range(max(1, job["sets"])):
                q, k, v, do = (torch.randn(dim, generator=gen, device=self.helper.dev, dtype=torch.float32).to(dtype)
                               for dim in dims)
                fwds.append(self.forward(q, k, v, do, job))
            for fwd in fwds:
                self.grads(fwd, job)  # warm-up (workspaces, autotuning) before any capture
        torch.cuda.current_stream().wait_stream(stream)
        state = {"fwds": fwds, "counter": 0, "graphs": None, "stream": stream,
                 "flush": torch.empty(job["flush_bytes"], dtype=torch.uint8, device=self.helper.dev)}
        if job["mode"] in ("graph", "batch"):
            # As the forward side: replays time the kernels, not Python's dispatch (see Helper.prepare_timing).
            graphs = []
            for fwd in fwds:
                g = torch.cuda.CUDAGraph()
                try:
                    with torch.cuda.graph(g, stream=stream):
                        out = self.grads(fwd, job)
                except Exception as exc:  # noqa: BLE001 - one line, the mode named
                    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    raise ValueError(f"capturing torch.autograd.grad in a CUDA graph failed ({text}): "
                                     f"--mode {job['mode']} cannot time SDPA's backward here") from exc
                graphs.append((g, out))
            torch.cuda.synchronize()
            state["graphs"] = graphs
        self.key, self.state = key, state
        return state

    def time(self, job):
        """The forward side's protocol (event_protocol) on the backward."""
        torch = self.torch
        state = self.prepare(job)
        fwds, graphs = state["fwds"], state["graphs"]

        def launch(i):
            self.grads(fwds[i], job)

        def replay(i):
            graphs[i][0].replay()

        # The forwards' stream: uncaptured backward ops run there, so the events are recorded there.
        with torch.cuda.stream(state["stream"]):
            return event_protocol(torch, job, state, len(fwds), launch,
                                  replay if graphs is not None else launch)


if __name__ == "__main__":
    main()
