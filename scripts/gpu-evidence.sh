#!/usr/bin/env bash
# Collects the project's evidence on a GPU machine from a bundle (`cargo xtask bundle`), no Rust
# needed there: GPU tests, the gate on both suites, benches for the report, an ncu profile,
# compute-sanitizer (memcheck, racecheck) on mma, a config search, and the micro-benchmark's
# rankings with a hopper search seeded from one (and their rank correlation). Logs go to $LOGS
# (default /tmp/attn-logs); evidence to evidence/.
# Usage: scripts/gpu-evidence.sh [tests] [gate] [bench] [ncu] [sanitize] [evo] [micro] [run]   (default: all)
set -u
cd "$(dirname "$0")/.."
X=target/bundle/xtask
LOGS=${LOGS:-/tmp/attn-logs}
mkdir -p "$LOGS"
steps=${*:-tests gate bench ncu sanitize evo micro run}
step() { echo "== $1: $(date -u +%H:%M:%S)"; }
for s in $steps; do
  case $s in
    tests)
      step tests
      timeout 540 target/bundle/run-gpu-tests.sh > "$LOGS/gpu-tests.log" 2>&1; echo "run-gpu-tests rc=$?"
      grep -E "FAILED|all .* passed|cases,|^test .*(ok|FAILED)$" "$LOGS/gpu-tests.log" | grep -E "FAILED|passed|cases" ;;
    gate)
      step gate
      timeout 120 $X gate --suite seed --markdown "$LOGS/gate-seed.md" > "$LOGS/gate-seed.log" 2>&1; echo "gate seed rc=$?"
      grep -E "^  [0-9]|guard" "$LOGS/gate-seed.log"
      timeout 240 $X gate --suite large --samples 40 --markdown "$LOGS/gate-large.md" > "$LOGS/gate-large.log" 2>&1; echo "gate large rc=$?"
      grep -E "^  [0-9]" "$LOGS/gate-large.log" ;;
    bench)
      step bench
      timeout 150 $X bench --suite seed --impl tiled,mma,cublas --sdpa-backends default,flash,efficient --samples 50 > "$LOGS/bench-seed.log" 2>&1; echo "bench seed rc=$?"
      timeout 200 $X bench --suite sweep --impl mma,cublas --sdpa-backends default,flash --samples 15 > "$LOGS/bench-sweep.log" 2>&1; echo "bench sweep rc=$?"
      grep -E "^\| " "$LOGS/bench-seed.log" "$LOGS/bench-sweep.log" | cut -c1-150 ;;
    ncu)
      step ncu
      timeout 120 $X ncu --impl mma --shape 2,16,4096,128 > "$LOGS/ncu-mma.log" 2>&1; echo "ncu rc=$?"
      grep -E "bound|fitness|TFLOP|error" "$LOGS/ncu-mma.log" | head -8 ;;
    sanitize)
      step sanitize
      for tool in memcheck racecheck; do
        timeout 300 $X sanitize --impl mma --tool $tool > "$LOGS/sanitize-$tool.log" 2>&1; echo "sanitize $tool rc=$?"
        grep -vE "^(evidence|compute-sanitizer):" "$LOGS/sanitize-$tool.log" | head -6
      done ;;
    evo)
      step evo
      timeout 240 $X evo --impl mma --shape 2,8,1024,64 --budget 40 --population 8 --generations 8 --seed 11 --samples 30 --run mma-2-8-1024-64 > "$LOGS/evo.log" 2>&1; echo "evo rc=$?"
      tail -4 "$LOGS/evo.log"
      best=evidence/evo/mma-2-8-1024-64/best.json
      if [ -f "$best" ]; then
        cfg=$(python3 -c "import json,sys; print(','.join(f'{k}={v}' for k,v in json.load(open(sys.argv[1]))['config'].items()))" "$best")
        timeout 90 $X gate --impl mma --config "$cfg" --shape 2,8,1024,64 > "$LOGS/evo-confirm.log" 2>&1; echo "confirm rc=$?"
        grep -E "^  [0-9]" "$LOGS/evo-confirm.log"
      fi ;;
    micro)
      step micro
      for target in hopper cp-async; do
        timeout 240 $X micro --target $target --head-dim 128 > "$LOGS/micro-$target.log" 2>&1; echo "micro $target rc=$?"
        grep -E "^ ?[0-9]+\. " "$LOGS/micro-$target.log" | head -8
      done
      timeout 540 $X evo --impl hopper --shape 2,16,8192,128 --seed-from-micro --budget 24 --population 12 --generations 2 --seed 11 --samples 30 --timeout 30 --run hopper-2-16-8192-128-micro > "$LOGS/evo-micro.log" 2>&1; echo "evo seeded from micro rc=$?"
      grep -E "seeded from micro|configs measured by both|Spearman|^micro vs" "$LOGS/evo-micro.log" | cut -c1-220 ;;
    run)
      step run
      python3 -c "import numpy as np; r=np.random.default_rng(7); [np.save(f'/tmp/attn-{n}.npy', r.standard_normal((2,4,300,64)).astype(np.float16)) for n in 'qkv']"
      $X run --impl mma --q /tmp/attn-q.npy --k /tmp/attn-k.npy --v /tmp/attn-v.npy --out /tmp/attn-o.npy --causal
      $X run --impl reference --q /tmp/attn-q.npy --k /tmp/attn-k.npy --v /tmp/attn-v.npy --out /tmp/attn-r.npy --causal
      python3 -c "import numpy as np; a=np.load('/tmp/attn-o.npy').astype(np.float64); b=np.load('/tmp/attn-r.npy').astype(np.float64); print('mma vs reference .npy: max abs diff %.3e' % np.abs(a-b).max())" ;;
    *) echo "unknown step $s" ;;
  esac
done
step done
