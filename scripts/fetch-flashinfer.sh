#!/usr/bin/env bash
# FlashInfer (the decode and paged-prefill baseline) as wheels for a GPU machine that cannot reach
# PyPI: flashinfer-python and those of its requirements the device image lacks, into .whl/ (keep it
# out of git: `echo /.whl/ >> .git/info/exclude`). FlashInfer compiles its kernels at first use
# with the machine's nvcc; its wheel also carries sources of kernels the toolkit never asks for
# (MoE, sampling, FP4 GEMMs, experimental models), which are dropped so that the wheels travel
# within a 64 MiB working tree. Which of the remaining requirements `import flashinfer` really
# needs is for the first device call to find: `python3 -c "import flashinfer; print(flashinfer.__version__)"`.
# Usage: scripts/fetch-flashinfer.sh [VERSION]   (then, there: python3 -m pip install --no-index
#   --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:-0.7.4}
OUT=.whl
mkdir -p "$OUT"
download() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$OUT" "$@"
}
download "flashinfer-python==$VERSION"
# Not in the device image (its package list: device KINDS.md); torch, numpy, click, ninja,
# requests, tqdm, tabulate, packaging, nvidia-ml-py, typing-extensions and cuda-bindings are there;
# nvidia-cudnn-frontend, nvidia-cutlass-dsl and the NCCL packages are left for the first call to ask for.
download apache-tvm-ffi==0.1.15.post2 cuda-tile==1.7.0 einops==0.8.2
wheel=$(ls "$OUT"/flashinfer_python-"$VERSION"-*.whl)
python3 - "$wheel" <<'EOF'
import base64, hashlib, os, sys, zipfile
path = sys.argv[1]
# Data folders of kernels no attention baseline compiles; the Python modules all stay, so that
# `import flashinfer` finds every module it imports eagerly.
drop_prefixes = ("flashinfer/experimental/cake", "flashinfer/data/csrc/cake_", "flashinfer/data/csrc/kda",
                 "flashinfer/data/csrc/fused_moe", "flashinfer/data/csrc/gdn", "flashinfer/data/csrc/blackwell_",
                 "flashinfer/moe_ep/kernel_src")
def dropped(name):
    if any(name.startswith(p) for p in drop_prefixes):
        return True
    parts = name.split("/")
    # The cake_* backends' C++ sources (their Python stays).
    return len(parts) > 2 and parts[1].startswith("cake_") and "csrc" in parts[2:]
src = zipfile.ZipFile(path)
tmp = path + ".tmp"
kept, record_name, records = 0, None, []
with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as out:
    for info in src.infolist():
        if info.filename.endswith("RECORD"):
            record_name = info.filename
            continue
        if dropped(info.filename):
            continue
        data = src.read(info)
        out.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        records.append(f"{info.filename},sha256={digest},{len(data)}")
        kept += 1
    records.append(f"{record_name},,")
    out.writestr(record_name, "\n".join(records) + "\n")
os.replace(tmp, path)
print(f"{path}: {kept} files kept, {os.path.getsize(path) / 2**20:.1f} MiB")
EOF
du -ch "$OUT"/*.whl | tail -1
