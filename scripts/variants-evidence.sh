#!/usr/bin/env bash
# Evidence for the attention variants (grouped-query, multi-query, sliding window, varlen) on a
# GPU machine, from a bundle (`cargo xtask bundle`): the kernels' GPU tests over the variants'
# matrices, benches of the variant suites (our kernels against SDPA's GQA path, and against
# PyTorch's varlen_attn on windows and varlen batches and FlexAttention on windows, which SDPA has
# no kernel for; back-to-back
# batches like the FlashAttention-3 anchor), the anchor itself on the same problems when its
# library is given, and the gate on the GQA and MQA suites against SDPA and on the window and
# varlen suites against varlen_attn. Logs go to $LOGS (default /tmp/attn-logs), evidence to
# evidence/.
# Usage: scripts/variants-evidence.sh [tests] [bench] [fa3] [gate]   (default: all)
#   FA3_LIB=/path/libfa3.so for the fa3 step (see ../shared/anchors/fa3/README.md).
set -u
cd "$(dirname "$0")/.."
X=target/bundle/xtask
T=target/bundle/tests
LOGS=${LOGS:-/tmp/attn-logs}
mkdir -p "$LOGS"
steps=${*:-tests bench fa3 gate}
step() { echo "== $1: $(date -u +%H:%M:%S)"; }
for s in $steps; do
  case $s in
    tests)
      step tests
      (cd crates/attn-kernels && timeout 420 "../../$T/attn-kernels-test-gpu" --include-ignored --test-threads 1 \
        variants varlen hopper_matches mma_matches > "$LOGS/gpu-variants.log" 2>&1); echo "gpu variants rc=$?"
      grep -E "cases,|test result|FAILED|panicked" "$LOGS/gpu-variants.log" | head -20
      # Varlen batches through the whole gate: honest mma and hopper, a kernel ignoring cu_seqlens.
      (cd crates/attn-measure && timeout 600 "../../$T/attn-measure-test-planted" --include-ignored --exact \
        varlen_batches_are_judged_through_the_gate --nocapture --test-threads 1 > "$LOGS/gpu-varlen-gate.log" 2>&1); echo "gpu varlen gate rc=$?"
      grep -E "STATUS|test result|FAILED|panicked" "$LOGS/gpu-varlen-gate.log" | head -20 ;;
    bench)
      step bench
      for suite in gqa mqa; do
        timeout 240 $X bench --suite $suite --impl hopper,mma --sdpa-backends default --mode batch --samples 20 > "$LOGS/bench-$suite.log" 2>&1; echo "bench $suite rc=$?"
      done
      timeout 300 $X bench --suite window --impl hopper,mma --sdpa-backends varlen,flex --mode batch --samples 20 > "$LOGS/bench-window.log" 2>&1; echo "bench window rc=$?"
      # Varlen batches, each also as the dense batch at its mean length (the per-token target).
      timeout 300 $X bench --suite varlen --impl hopper,mma --sdpa-backends varlen --mode batch --samples 20 > "$LOGS/bench-varlen.log" 2>&1; echo "bench varlen rc=$?"
      grep -E "^varlen vs dense" "$LOGS/bench-varlen.log"
      # The dense problems the windows cut down, for time-versus-window.
      timeout 120 $X bench --shape "2,16,16384,128 causal" --shape "2,16,16384,128" --impl hopper --sdpa-backends default --mode batch --samples 20 > "$LOGS/bench-window-dense.log" 2>&1; echo "bench dense rc=$?"
      grep -E "^\| " "$LOGS"/bench-*.log | cut -c1-170 ;;
    fa3)
      step fa3
      if [ -n "${FA3_LIB:-}" ]; then
        timeout 300 python3 scripts/fa3_variants.py "$FA3_LIB" --out "$LOGS/fa3" \
          --shape "2,32/8,2048,128" --shape "2,32/8,4096,128" --shape "2,32/8,8192,128" \
          --shape "2,32/8,8192,128 causal" --shape "1,32/8,16384,128 causal" \
          --shape "2,32/1,4096,128" --shape "2,32/1,8192,128 causal" --shape "2,16/1,8192,64" \
          --shape "2,16,16384,128 causal window=4096,-1" --shape "2,16,16384,128 window=2048,2048" \
          --shape "2,32/8,16384,128 causal window=4096,-1" --shape "2,16,8192,64 causal window=1024,-1" \
          --shape "2,16,16384,128 causal" --shape "2,16,16384,128" > "$LOGS/fa3.log" 2>&1; echo "fa3 rc=$?"
        cat "$LOGS/fa3.log" | grep -v "^WARNING" | tail -16
      else
        echo "fa3 skipped: FA3_LIB not set"
      fi ;;
    gate)
      step gate
      for suite in gqa mqa; do
        timeout 300 $X gate --impl hopper --suite $suite --samples 30 --markdown "$LOGS/gate-$suite.md" > "$LOGS/gate-$suite.log" 2>&1; echo "gate $suite rc=$?"
        grep -E "^  [0-9]" "$LOGS/gate-$suite.log"
      done
      for suite in window varlen; do
        timeout 400 $X gate --impl hopper --suite $suite --sdpa-backend varlen --samples 30 --markdown "$LOGS/gate-$suite.md" > "$LOGS/gate-$suite.log" 2>&1; echo "gate $suite rc=$?"
        grep -E "^  (varlen|[0-9])" "$LOGS/gate-$suite.log"
      done ;;
    *) echo "unknown step $s" ;;
  esac
done
step done
