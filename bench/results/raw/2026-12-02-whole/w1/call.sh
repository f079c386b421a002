#!/usr/bin/env bash
# W4A16 decode below four rows on wide weights (N >= 8192): one warp chains all of K, adding each
# 1024-column slice's chain to the sum as SumSplits does (no partials, no SumSplits launch, one
# longer stream a warp) — wip/w4-whole (25abd4e + tests) against main8 = bf013e7 (same CUDA code as
# babc6b7). GRAFT_W4_WHOLE = off | WARPS,RING sweeps the new form's block and ring depth.
# Also wip/attn-prefetch (78a7ad9) against main8 under ncu -k FlashAttention at prefill 128.
#   BINS="graft graft_cuda_tests graft_matmul_bench" scripts/device-variants main8=bf013e7 whole=wip/w4-whole apf=wip/attn-prefetch
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/w1; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) main8=$(cat $V/main8/COMMIT) whole=$(cat $V/whole/COMMIT) apf=$(cat $V/apf/COMMIT)" | tee $S
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a $S
timeout 120 $V/whole/graft_cuda_tests --gtest_brief=1 > $W/suite-whole.txt 2>&1
echo "$(date +%T) suite whole: exit $? $(grep -E 'PASSED|FAILED' $W/suite-whole.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
for e in 2,8 8,4; do
  GRAFT_W4_WHOLE=$e timeout 100 $V/whole/graft_cuda_tests --gtest_brief=1 --gtest_filter='CudaQuant.W4*' > $W/suite-whole-$e.txt 2>&1
  echo "$(date +%T) suite whole $e: exit $? $(grep -E 'PASSED|FAILED' $W/suite-whole-$e.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
done
mm() {  # tag variant format env
  GRAFT_W4_WHOLE=$4 timeout 40 $V/$2/graft_matmul_bench bench/configs/qwen3_5-27b --formats $3 --rows 1,2,3 > $W/mm-$1.txt 2>&1
  echo "$(date +%T) mm $1 ($4): exit $? $(grep -E '^step' $W/mm-$1.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
}
mm main8-w4 main8 w4a16 ""
mm off-w4 whole w4a16 off
mm 44-w4 whole w4a16 4,4
mm 46-w4 whole w4a16 4,6
mm 48-w4 whole w4a16 4,8
mm 24-w4 whole w4a16 2,4
mm 28-w4 whole w4a16 2,8
mm 84-w4 whole w4a16 8,4
mm main8-fp4 main8 nvfp4 ""
mm 44-fp4 whole nvfp4 4,4
mm 28-fp4 whole nvfp4 2,8
bench() {  # variant format env tag
  GRAFT_W4_WHOLE=$3 timeout 100 $V/$1/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 48 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $2 --prefill 128 --decode-batches 1,2 > $W/bench-$4.txt 2> $W/bench-$4.log
  echo "$(date +%T) $4: exit $? $(grep -E '^decode ' $W/bench-$4.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $S
}
bench whole w4a16 "" whole-w4
bench main8 w4a16 "" main8-w4
for v in main8 apf; do
  timeout 100 /usr/local/cuda/bin/ncu --clock-control none --cache-control none -k regex:FlashAttention \
    --metrics gpu__time_duration.sum --csv --page raw $V/$v/graft bench --load-format dummy --device cuda \
    --gpu-memory 120 --gpu-scratch 16384 --threads 16 --dummy-adapter-rank 0 --decode-steps 3 --repeats 1 \
    --model bench/configs/qwen3_5-27b --prefill 128 --decode-batches 1 > $W/ncu-$v.csv 2> $W/ncu-$v.log
  echo "$(date +%T) ncu $v: exit $? $(grep -c FlashAttention $W/ncu-$v.csv) launches" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && gzip w1/*.csv; tar czf w1.tgz w1 && rm -rf w1
