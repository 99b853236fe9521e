#!/usr/bin/env bash
# hopper against FlashAttention-3 in one harness, on a GPU machine from a bundle (`cargo xtask
# bundle`): the gate with `--baseline fa3 --mode batch` on each suite (one verdict per shape, FA3
# timed in the same run), and benches that time hopper, FA3 and SDPA's default (cuDNN) side by
# side for the report's "hopper against FlashAttention-3 and cuDNN" table. Logs go to $LOGS
# (default /tmp/attn-logs), evidence to evidence/ (or $EVIDENCE).
# Usage: ATTN_FA3_LIB=/path/libfa3.so [DTYPE=bf16] scripts/fa3-evidence.sh [gate] [bench] [SUITE[:causal] ...]
#   (default: gate and bench on large, sweep, gqa, mqa and window; `sweep:causal` is the sweep
#   with the causal mask on every shape; DTYPE: fp16, the default, or bf16)
set -u
cd "$(dirname "$0")/.."
X=target/bundle/xtask
LOGS=${LOGS:-/tmp/attn-logs}
EVIDENCE=${EVIDENCE:-evidence}
DTYPE=${DTYPE:-fp16}
mkdir -p "$LOGS"
if [ -z "${ATTN_FA3_LIB:-}" ]; then echo "set ATTN_FA3_LIB to FlashAttention-3's library" >&2; exit 2; fi
steps=() suites=()
for a in "$@"; do case $a in gate|bench) steps+=("$a") ;; *) suites+=("$a") ;; esac; done
[ ${#steps[@]} -eq 0 ] && steps=(gate bench)
[ ${#suites[@]} -eq 0 ] && suites=(large sweep gqa mqa window)
for s in "${steps[@]}"; do
  for name in "${suites[@]}"; do
    suite=${name%:causal} mask=()
    [ "$suite" != "$name" ] && mask=(--causal)
    log=${name/:/-}-$DTYPE
    echo "== $s $name: $(date -u +%H:%M:%S)"
    case $s in
      gate)
        timeout 580 $X gate --impl hopper --baseline fa3 --mode batch --suite "$suite" "${mask[@]}" --dtype "$DTYPE" \
          --samples 30 --checks 2 --evidence "$EVIDENCE" > "$LOGS/gate-fa3-$log.log" 2>&1; echo "gate $name rc=$?"
        grep -E '^\| [0-9v]|PASSED|FAILED|^error' "$LOGS/gate-fa3-$log.log" ;;
      bench)
        # SDPA has no window kernel: FA3 alone beside hopper there.
        backends=fa3,default; [ "$suite" = window ] && backends=fa3
        timeout 580 $X bench --impl hopper --suite "$suite" "${mask[@]}" --dtype "$DTYPE" --sdpa-backends $backends --mode batch \
          --samples 20 --evidence "$EVIDENCE" > "$LOGS/bench-fa3-$log.log" 2>&1; echo "bench $name rc=$?"
        grep -E '^\| (hopper|fa3|sdpa)' "$LOGS/bench-fa3-$log.log" ;;
    esac
  done
done
