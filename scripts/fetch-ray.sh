#!/usr/bin/env bash
# Ray for `evo --on ray` on a GPU machine that cannot reach PyPI and lacks it: Ray's wheel for
# Python 3.12 and the requirements the device image lacks (device KINDS.md lists what it has),
# cut to what a Python driver and workers load (the Java worker's jars, the dashboard's web
# client and the RL, tuning, serving and data libraries dropped: Ray's wheel is about 72 MB,
# over what one call carries beside the tree) and packed as .ray/ray.tar.xz (keep .ray/ out of
# git: `echo /.ray/ >> .git/info/exclude`).
# Usage: scripts/fetch-ray.sh [VERSION] [PYTHON_VERSION]   (then, there:
#   mkdir -p /tmp/site && tar xJf .ray/ray.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:-2.52.1}
PY=${2:-3.12}
OUT=.ray
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$OUT"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$work/whl" \
  "ray==$VERSION" jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 \
  rpds-py==2026.9.1
mkdir -p "$work/site"
for w in "$work"/whl/*.whl; do python3 -m zipfile -e "$w" "$work/site"; done
# What neither a driver nor a worker of plain tasks and actors imports.
rm -rf "$work"/site/ray/jars "$work"/site/ray/dashboard/client "$work"/site/ray/rllib \
  "$work"/site/ray/tune "$work"/site/ray/serve "$work"/site/ray/train "$work"/site/ray/data \
  "$work"/site/ray/air
chmod +x "$work"/site/ray/core/src/ray/raylet/raylet "$work"/site/ray/core/src/ray/gcs/gcs_server
tar cJf "$OUT/ray.tar.xz" -C "$work/site" .
du -h "$OUT/ray.tar.xz"
