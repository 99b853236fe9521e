#!/usr/bin/env bash
# FlashInfer (the decode and paged-prefill baseline) as wheels for a GPU machine that cannot reach
# PyPI: flashinfer-python and those of its requirements the device image lacks, into .whl/ (keep it
# out of git: `echo /.whl/ >> .git/info/exclude`). FlashInfer compiles its kernels at first use
# with the machine's nvcc; its wheel also carries sources of kernels the toolkit never asks for
# (MoE, sampling, FP4 GEMMs, experimental models), which scripts/flashinfer_slim.py drops so that
# the wheels travel within a 64 MiB working tree; `import flashinfer.decode` then loads the
# attention modules alone. Which of the remaining requirements `import flashinfer` really
# needs is for the first device call to find: `python3 -c "import flashinfer; print(flashinfer.__version__)"`.
# Usage: scripts/fetch-flashinfer.sh [VERSION]   (then, there: python3 -m pip install --no-index
#   --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
#   FLASHINFER_CUDA_ARCH_LIST=9.0a, the arch of the kernels it compiles at first use on H100/H200)
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
# Cut to the modules, sources and headers batch decode and paged prefill reach (the rest of the
# wheel, MoE, GEMMs and experimental models, would not travel within the device's 64 MiB).
python3 scripts/flashinfer_slim.py --trim-cccl "$wheel" "$wheel.slim" && mv "$wheel.slim" "$wheel"
du -ch "$OUT"/*.whl | tail -1
