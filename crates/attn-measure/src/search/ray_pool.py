"""attn's bridge to a Ray cluster for `evo --on ray` and `bench --on ray`: one actor per GPU of one
model, each running the bundle's `PROGRAM evo-worker JOB` (a search's candidate) or `PROGRAM ARGS`
(a suite matrix's task) on its own GPU, driven over stdin/stdout by the Rust driver.

Usage: python3 ray_pool.py ADDRESS PROGRAM [MODEL]   (ADDRESS "auto" joins the local cluster)

First reply, once the actors are up:
  {"slots": [{"slot": i, "model": ..., "node": ..., "gpu": ...}, ...], "others": [...]}
  (the slots of MODEL, or of the model with the most GPUs; "others" the models left out, since
  timings of different models never mix), or {"fatal": "one line"}.
Requests, one JSON line each: {"id": N, "slot": i, "job": "<WorkerJob JSON>", "timeout_s": T}, or
{"id": N, "slot": i, "args": [...], "cwd": DIR, "timeout_s": T} (PROGRAM ARGS run in DIR;
"probe": true for a question about the GPU, which a test's planted losses leave alone), or
{"id": N, "cpu": true, "args": [...], "cwd": DIR, "timeout_s": T}: PROGRAM ARGS as a task of one
CPU and no GPU, wherever Ray places it (a search's compile task).
Replies, in the order jobs finish: {"id": N, "line": "<the last JSON line the worker printed>"} or
{"id": N, "error": "one line"}. A worker process that dies (its
node lost) is restarted by Ray and its job retried (MAX_RETRIES), so that a job is measured or its
failure recorded, never dropped.

The workers see this process's ATTN_* variables (Ray's runtime_env).
Models are Ray's `accelerator_type:NAME` node resources (set by Ray on NVIDIA nodes, or given to
`ray start --resources`): a node without one is `unknown`.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading

PROTOCOL = sys.stdout
sys.stdout = sys.stderr  # nothing but replies may reach the protocol stream
MAX_RETRIES = 2
LOCK = threading.Lock()


def reply(obj):
    with LOCK:
        PROTOCOL.write(json.dumps(obj) + "\n")
        PROTOCOL.flush()


def models(ray):
    """GPUs per model over the cluster's live nodes: {model: count}."""
    found = {}
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        res = node.get("Resources", {})
        gpus = int(res.get("GPU", 0))
        if gpus == 0:
            continue
        names = [k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")]
        model = names[0] if names else "unknown"
        found[model] = found.get(model, 0) + gpus
    return found


def lose(kind):
    """A test's lost worker (ATTN_RAY_LOSE, candidates and matrix tasks only): `once:PATH` dies
    mid-job the first time (PATH marks it), `always` every time."""
    how = os.environ.get("ATTN_RAY_LOSE", "")
    if kind not in ("candidate", "task") or not how:
        return
    if how == "always":
        os._exit(1)
    if how.startswith("once:") and not os.path.exists(how[5:]):
        open(how[5:], "w").close()
        os._exit(1)


def make_worker(ray):
    @ray.remote(num_gpus=1, max_restarts=MAX_RETRIES, max_task_retries=MAX_RETRIES)
    class GpuWorker:
        """One GPU of the model: runs the bundle's worker command on it (CUDA device 0 there)."""

        def __init__(self, program, model):
            self.program, self.model = program, model

        def describe(self):
            ids = ray.get_gpu_ids()
            return {"model": self.model, "node": ray.util.get_node_ip_address(),
                    "gpu": str(ids[0]) if ids else "?"}

        def run(self, job, timeout_s):
            job = json.loads(job)
            lose(job.get("task", {}).get("kind"))
            job["device"] = 0  # Ray shows this actor its own GPU alone
            # In a file: a job with its compiled kernels outgrows one argument (128 KiB on Linux).
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(job, f)
            try:
                return self.command(["evo-worker", "@" + f.name], None, timeout_s)
            finally:
                os.unlink(f.name)

        def run_args(self, args, cwd, timeout_s, probe=False):
            if not probe:
                lose("task")
            return self.command(args, cwd, timeout_s)

        def command(self, args, cwd, timeout_s):
            return command(self.program, args, cwd, timeout_s)

    return GpuWorker


def command(program, args, cwd, timeout_s):
    """PROGRAM ARGS in CWD: its last JSON line, or why there is none."""
    try:
        out = subprocess.run([program, *args], capture_output=True, text=True, timeout=timeout_s, cwd=cwd)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout_s} s"}
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if lines:
        return {"line": lines[-1]}
    tail = (out.stderr.strip().splitlines() or [f"exit code {out.returncode}"])[-1]
    return {"error": tail[:200]}


def make_cpu_task(ray):
    @ray.remote(num_cpus=1, num_gpus=0, max_retries=MAX_RETRIES)
    def cpu_task(program, args, cwd, timeout_s):
        """PROGRAM ARGS on one CPU of the cluster, no GPU (a search's compile task)."""
        return command(program, args, cwd, timeout_s)

    return cpu_task


def main():
    if len(sys.argv) < 3:
        reply({"fatal": "usage: ray_pool.py ADDRESS PROGRAM [MODEL]"})
        return
    address, program = sys.argv[1], sys.argv[2]
    wanted = sys.argv[3] if len(sys.argv) > 3 else None
    try:
        import ray
    except Exception as exc:  # noqa: BLE001 - one line to the caller
        reply({"fatal": f"Ray is not importable ({exc}): pip install 'ray>=2.40'"})
        return
    try:
        # attn's own settings (the kernel cache, a test's lost worker) reach the workers.
        env = {k: v for k, v in os.environ.items() if k.startswith("ATTN_")}
        ray.init(address=address, namespace="attn", log_to_driver=False, logging_level="ERROR",
                 runtime_env={"env_vars": env})
    except Exception as exc:  # noqa: BLE001
        reply({"fatal": f"no Ray cluster at {address}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"})
        return
    found = models(ray)
    if not found:
        reply({"fatal": f"the Ray cluster at {address} has no GPU (ray start --num-gpus=N)"})
        return
    if wanted is not None and wanted not in found:
        reply({"fatal": f"the Ray cluster has no {wanted} GPU (it has {', '.join(sorted(found))})"})
        return
    model = wanted or max(sorted(found), key=lambda m: found[m])
    resources = {} if model == "unknown" else {f"accelerator_type:{model}": 0.001}
    worker = make_worker(ray)
    cpu_task = make_cpu_task(ray)
    actors = [worker.options(resources=resources).remote(program, model) for _ in range(found[model])]
    try:
        slots = ray.get([a.describe.remote() for a in actors], timeout=300)
    except Exception as exc:  # noqa: BLE001
        reply({"fatal": f"the GPU workers did not start: {str(exc).splitlines()[0]}"})
        return
    for i, s in enumerate(slots):
        s["slot"] = i
    others = [{"model": m, "gpus": n} for m, n in sorted(found.items()) if m != model]
    reply({"slots": slots, "others": others})

    pending = {}  # ObjectRef -> (id, attempts so far)
    cond = threading.Condition()
    closed = [False]

    def read():
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                req = json.loads(line)
                if req.get("cpu"):
                    ref = cpu_task.remote(program, req["args"], req.get("cwd"), req["timeout_s"])
                    with cond:
                        pending[ref] = req["id"]
                        cond.notify()
                    continue
                actor = actors[req["slot"]]
                if "args" in req:
                    ref = actor.run_args.remote(req["args"], req.get("cwd"), req["timeout_s"],
                                                req.get("probe", False))
                else:
                    ref = actor.run.remote(req["job"], req["timeout_s"])
            except Exception as exc:  # noqa: BLE001
                reply({"id": req.get("id") if isinstance(req, dict) else None, "error": f"bad request: {exc}"})
                continue
            with cond:
                pending[ref] = req["id"]
                cond.notify()
        with cond:
            closed[0] = True
            cond.notify()

    threading.Thread(target=read, daemon=True).start()
    while True:
        with cond:
            while not pending and not closed[0]:
                cond.wait()
            if not pending and closed[0]:
                return
            refs = list(pending)
        done, _ = ray.wait(refs, num_returns=1, timeout=1.0)
        for ref in done:
            with cond:
                job_id = pending.pop(ref)
            try:
                result = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - retries exhausted: recorded, not dropped
                text = str(exc).strip().splitlines()
                result = {"error": f"the Ray worker was lost after {MAX_RETRIES + 1} attempts: "
                                   f"{text[0][:160] if text else type(exc).__name__}"}
            result["id"] = job_id
            reply(result)


if __name__ == "__main__":
    main()
