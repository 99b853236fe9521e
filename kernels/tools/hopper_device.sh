#!/usr/bin/env bash
# Correctness and speed of the registered `hopper` implementation (kernels/hopper.cu) on an H100,
# through the bundled xtask. Run from the repository root on the GPU machine; writes its log to
# ${OUT:-/tmp}/hopper.log.
#   kernels/tools/hopper_device.sh [correct|perf|all]   (default all; BUNDLE=dir, default target/bundle)
# hopper takes TMA tensor maps (the TensorMaps ABI of kernels/README.md), which `gate --src` does
# not pass: configs go through `--impl hopper --config`. Correctness: odd shapes (tails, S_q ≠ S_kv,
# rows that see no key, warpgroups without rows), fp16 and bf16, causal and not, against the f64
# oracle (--checks 2, poisoned outputs); speed: (2,16,8192,D) fp16 vs SDPA.
# Machine code: cubins built by `hopper_check.py --keep target/hopper_sass` are disassembled.
set -u
export LD_LIBRARY_PATH=${CUDA_HOME:-/usr/local/cuda}/lib64:${LD_LIBRARY_PATH:-}
log=${OUT:-/tmp}/hopper.log
what=${1:-all}
xtask=${BUNDLE:-target/bundle}/xtask
seed=20261122

gate() {  # label config(K=V,... or "") args...
    local label=$1 cfg=$2
    shift 2
    echo "=== $label [$cfg]: $*" | tee -a "$log"
    timeout 240 $xtask gate --impl hopper --config "$cfg" --no-evidence --seed $seed "$@" 2>&1 | tee -a "$log"
    echo "=== exit ${PIPESTATUS[0]}" | tee -a "$log"
}

for f in target/hopper_sass/*.cubin; do
    [ -f "$f" ] || continue
    echo "=== SASS $f" | tee -a "$log"
    cuobjdump --dump-sass "$f" | grep -oE "(HGMMA|UTMALDG|USETMAXREG|LDL|STL)[.A-Z0-9x]*" | sort | uniq -c | tee -a "$log"
done

if [ "$what" != perf ]; then
    odd="--shape 1,2,1,77,64 --shape 1,2,130,45,64 --shape 1,2,50,200,64 --shape 2,2,300,700,64
         --shape 1,2,700,300,64 --shape 1,3,100,64 --shape 1,2,1000,1000,64 --shape 1,2,1,77,128
         --shape 1,2,130,45,128 --shape 1,2,50,200,128 --shape 1,3,100,128 --shape 2,2,300,700,128
         --shape 1,2,700,300,128 --shape 1,1,1000,1000,128"
    C="--baseline mma --checks 2 --samples 3 --warmup 1 --resamples 100"
    for dtype in fp16 bf16; do
        for causal in "" --causal; do
            gate "defaults $dtype $causal" "" --dtype $dtype $causal $C $odd
        done
    done
    gate "no ping-pong" "PINGPONG=0" --causal $C $odd
    gate "64-key tiles" "BLOCK_N=64,STAGES=4" --dtype bf16 --causal $C $odd
    gate "one warpgroup" "NUM_WARPS=4,BLOCK_M=64,PINGPONG=0" $C $odd
    # FlashAttention-3's 128 x 176 tile (opt-in; two consumer warpgroups also at D 64), then with
    # one warpgroup and no overlap; both dtypes, ragged at 176 (4099 = 23 · 176 + 51).
    t176="--shape 1,2,4099,128 --shape 2,4/2,1000,4099,128 --shape 1,2,177,175,128"
    for dtype in fp16 bf16; do
        for causal in "" --causal; do
            gate "176-key tiles $dtype $causal" "BLOCK_N=176,STAGES=2,NUM_WARPS=8,BLOCK_M=128" \
                --dtype $dtype $causal $C $odd $t176
        done
    done
    gate "176-key tiles, one warpgroup" "BLOCK_N=176,STAGES=2,NUM_WARPS=4,BLOCK_M=64,OVERLAP=0,PINGPONG=0" \
        --causal $C $odd $t176
fi
if [ "$what" != correct ]; then
    P="--baseline sdpa --checks 1 --samples 15 --warmup 5 --resamples 1000"
    gate "D128" "" $P --shape 2,16,8192,128
    gate "D128 causal" "" $P --shape 2,16,8192,128 --causal
    gate "D64" "" $P --shape 2,16,8192,64
    gate "D64 causal" "" $P --shape 2,16,8192,64 --causal
    gate "D128 176-key tiles" "BLOCK_N=176,STAGES=2" $P --shape 2,16,8192,128
    gate "D128 176-key tiles causal" "BLOCK_N=176,STAGES=2" $P --shape 2,16,8192,128 --causal
fi
echo "=== summary"
grep -E "^=== |incorrect|could not|HGMMA|UTMALDG|^\| [0-9]" "$log" | grep -v "^| shape" | head -150
