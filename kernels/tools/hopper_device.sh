#!/usr/bin/env bash
# Correctness and speed of kernels/hopper.cu on an H100, through the bundled xtask (target/bundle).
# Run from the repository root on the GPU machine; writes its log to ${OUT:-/tmp}/hopper.log.
#   kernels/tools/hopper_device.sh [correct|perf|all]   (default all)
# Correctness: every shape below, fp16 and bf16, causal and not, against the f64 oracle (--checks 2,
# poisoned outputs), for the default config and a second one; speed: (2,16,8192,128) fp16 vs SDPA.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
log=${OUT:-/tmp}/hopper.log
what=${1:-all}
xtask=target/bundle/xtask
seed=20261122

# hopper.cu's formula: 1024 + BLOCK_M·D·2 + STAGES·2·BLOCK_N·D·2, BLOCK_M = 16·NUM_WARPS.
shared() { echo $((1024 + 16 * $2 * $1 * 2 + $4 * 2 * $3 * $1 * 2)); }  # D NUM_WARPS BLOCK_N STAGES

gate() {  # D NUM_WARPS BLOCK_N STAGES dtype causal(0/1) shapes... ; extra gate args via $EXTRA
    local d=$1 nw=$2 bn=$3 st=$4 dtype=$5 causal=$6
    shift 6
    local args=(--src kernels/hopper.cu --define NUM_WARPS=$nw --define BLOCK_M=$((16 * nw))
        --define BLOCK_N=$bn --define STAGES=$st --define SHARED_BYTES=$(shared $d $nw $bn $st)
        --dtype $dtype --no-evidence --seed $seed)
    for s in "$@"; do args+=(--shape "$s"); done
    [ "$causal" = 1 ] && args+=(--causal)
    echo "=== D=$d NUM_WARPS=$nw BLOCK_N=$bn STAGES=$st $dtype causal=$causal: $*" | tee -a "$log"
    timeout 240 $xtask gate "${args[@]}" ${EXTRA:-} 2>&1 | tee -a "$log"
    echo "=== exit ${PIPESTATUS[0]}" | tee -a "$log"
}

# Machine code: a cubin that kernels/tools/hopper_check.py --keep built (carried in target/hopper_sass)
# must show HGMMA, the warpgroup tensor-core instruction.
for f in target/hopper_sass/*.cubin; do
    [ -f "$f" ] || continue
    echo "=== SASS $f" | tee -a "$log"
    cuobjdump --dump-sass "$f" | grep -oE "(HGMMA|HMMA)[.A-Z0-9x]*" | sort | uniq -c | tee -a "$log"
done

if [ "$what" != perf ]; then
    shapes64="1,2,64,64 2,4,1000,64 1,2,1,77,64 1,2,130,45,64 1,1,1,1,64 1,2,300,700,64"
    shapes128="1,3,100,128 1,2,2048,128 1,2,1,77,128 1,2,130,45,128 1,1,1,1,128 1,2,300,700,128"
    for dtype in fp16 bf16; do
        for causal in 0 1; do
            EXTRA="--baseline cublas --checks 2 --samples 5 --warmup 2 --resamples 200" \
                gate 64 8 128 2 $dtype $causal $shapes64
            EXTRA="--baseline cublas --checks 2 --samples 5 --warmup 2 --resamples 200" \
                gate 128 8 128 2 $dtype $causal $shapes128
        done
    done
    for causal in 0 1; do
        EXTRA="--baseline cublas --checks 2 --samples 5 --warmup 2 --resamples 200" \
            gate 64 4 64 3 fp16 $causal $shapes64
        EXTRA="--baseline cublas --checks 2 --samples 5 --warmup 2 --resamples 200" \
            gate 128 4 64 3 fp16 $causal $shapes128
    done
fi
if [ "$what" != correct ]; then
    for causal in 0 1; do
        EXTRA="--baseline sdpa --checks 1 --samples 20 --warmup 5 --resamples 1000" \
            gate 128 8 128 2 fp16 $causal 2,16,8192,128
    done
fi
echo "=== summary"; grep -E "^=== |FAIL|fail|error|TFLOP|median|HGMMA" "$log" | head -150
