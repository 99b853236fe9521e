#!/usr/bin/env bash
# Correctness and speed of kernels/hopper.cu on an H100, through the bundled xtask (target/bundle).
# Run from the repository root on the GPU machine; writes its log to ${OUT:-/tmp}/hopper.log.
#   kernels/tools/hopper_device.sh [correct|perf|all]   (default all)
# Correctness: every shape below, fp16 and bf16, causal and not, against the f64 oracle (--checks 2,
# poisoned outputs), for three configs (OVERLAP 0 and 1); speed: (2,16,8192,D) fp16 vs SDPA.
# Machine code: cubins built by `hopper_check.py --keep target/hopper_sass` are disassembled.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
log=${OUT:-/tmp}/hopper.log
what=${1:-all}
xtask=target/bundle/xtask
seed=20261122

# hopper.cu's formula: 1024 + BLOCK_M·D·2 + STAGES·2·BLOCK_N·D·2, BLOCK_M = 16·NUM_WARPS.
shared() { echo $((1024 + 16 * $2 * $1 * 2 + $4 * 2 * $3 * $1 * 2)); }  # D NUM_WARPS BLOCK_N STAGES

gate() {  # D NUM_WARPS BLOCK_N STAGES OVERLAP dtype causal(0/1) shapes... ; extra gate args in $EXTRA
    local d=$1 nw=$2 bn=$3 st=$4 ov=$5 dtype=$6 causal=$7
    shift 7
    local args=(--src kernels/hopper.cu --define NUM_WARPS=$nw --define BLOCK_M=$((16 * nw))
        --define BLOCK_N=$bn --define STAGES=$st --define OVERLAP=$ov
        --define SHARED_BYTES=$(shared $d $nw $bn $st) --dtype $dtype --no-evidence --seed $seed)
    for s in "$@"; do args+=(--shape "$s"); done
    [ "$causal" = 1 ] && args+=(--causal)
    echo "=== D=$d NUM_WARPS=$nw BLOCK_N=$bn STAGES=$st OVERLAP=$ov $dtype causal=$causal: $*" | tee -a "$log"
    timeout 240 $xtask gate "${args[@]}" ${EXTRA:-} 2>&1 | tee -a "$log"
    echo "=== exit ${PIPESTATUS[0]}" | tee -a "$log"
}

for f in target/hopper_sass/*.cubin; do
    [ -f "$f" ] || continue
    echo "=== SASS $f" | tee -a "$log"
    cuobjdump --dump-sass "$f" | grep -oE "(HGMMA|HMMA)[.A-Z0-9x]*" | sort | uniq -c | tee -a "$log"
done

if [ "$what" != perf ]; then
    s64="1,2,64,64 2,4,1000,64 1,2,1,77,64 1,2,130,45,64 1,1,1,1,64 1,2,300,700,64"
    s128="1,3,100,128 1,2,2048,128 1,2,1,77,128 1,2,130,45,128 1,1,1,1,128 1,2,300,700,128"
    # A registered kernel as baseline: cuBLAS's graph capture failed on this machine.
    export EXTRA="--baseline mma --checks 2 --samples 3 --warmup 1 --resamples 100"
    for cfg in "8 128 2 0" "8 128 3 1" "4 64 3 1"; do
        for dtype in fp16 bf16; do
            [ "$cfg" = "4 64 3 1" ] && [ $dtype = bf16 ] && continue
            for causal in 0 1; do
                gate 64 $cfg $dtype $causal $s64
                gate 128 $cfg $dtype $causal $s128
            done
        done
    done
fi
if [ "$what" != correct ]; then
    export EXTRA="--baseline sdpa --checks 1 --samples 15 --warmup 5 --resamples 1000"
    gate 128 8 128 3 1 fp16 0 2,16,8192,128
    gate 128 8 128 3 1 fp16 1 2,16,8192,128
    gate 128 8 64 4 1 fp16 0 2,16,8192,128
    gate 64 8 128 3 1 fp16 0 2,16,8192,64
fi
echo "=== summary"
grep -E "^=== |incorrect|could not|passed|not faster|HGMMA|^\| [0-9]" "$log" | grep -v "^| shape" | head -150
