#!/usr/bin/env bash
# Why the timing modes part (issue: graph and batch verdicts differ): the probe of SDPA/cuDNN and
# FlashAttention-3 (CUPTI kernel times beside each timing method), hopper benched in both modes
# against cuDNN, hopper against FA3 in batch mode, and ncu kernel durations with the L2 flushed
# (`--cache-control all`) and not. On a GPU machine from a bundle, with .anchors carried (FA3).
# Usage: scripts/mode-evidence.sh REVISION   (logs, evidence and the probe in $OUT/run1.tgz)
set -u
REV=${1:-unknown}
X=target/bundle/xtask
L=$OUT/logs; mkdir -p $L $OUT/ev
xz -dc .anchors/libfa3.so.xz > /tmp/libfa3.so; export ATTN_FA3_LIB=/tmp/libfa3.so
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $L/smi.txt 2>&1
step() { local name=$1 limit=$2; shift 2; echo "== $name $(date -u +%T)"; timeout $limit "$@" > $L/$name.log 2>&1; echo "   rc=$? $(date -u +%T)"; }
step probe 240 env ATTN_REVISION=$REV python3 scripts/mode_probe.py --shape 2,16,1024,128 --shape 4,16,2048,128 --shape 2,16,8192,128,causal --fa3 /tmp/libfa3.so --out $OUT/probe
for rep in 1 2; do for mode in graph batch; do
  step bench-$mode-$rep 60 $X bench --impl hopper --sdpa-backends cudnn --shape 2,16,1024,128 --mode $mode --evidence $OUT/ev
done; done
step bench-fa3 150 $X bench --impl hopper --sdpa-backends cudnn,fa3 --shape 4,16,2048,128 --shape "2,16,8192,128 causal" --mode batch --evidence $OUT/ev
for cc in all none; do
  step ncu-$cc 90 ncu --target-processes all --clock-control none --cache-control $cc --metrics gpu__time_duration.sum -k "regex:attn_fwd|fprop" --launch-skip 20 --launch-count 40 --csv $X bench --impl hopper --sdpa-backends cudnn --shape 2,16,1024,128 --mode batch --samples 5 --warmup 1 --evidence /tmp/ev-ncu
done
tar -C $OUT -czf $OUT/run1.tgz logs ev probe
echo "== tables"
tail -15 $L/probe.log
for f in $L/bench-*.log; do echo "-- $f"; grep -E "hopper|cudnn|fa3|µs|us " $f | tail -6; done
for cc in all none; do echo "-- ncu $cc"; grep -c gpu__time_duration $L/ncu-$cc.log; done
