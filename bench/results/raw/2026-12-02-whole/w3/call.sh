#!/usr/bin/env bash
# (1) The upload test over 4-64 MB weights: pre2 (wip/upload-pre 9ba12a4, no fix) and fix2 (5e4680b);
#     the W4A16 row-bits test repeated on fix2 and on whole (w1's variant, where it failed twice).
# (2) Two-head flash-attention blocks for a single decode row (wip/attn-rows 4e59a5d,
#     GRAFT_ATTN_PAIR=1): half the blocks, half the load round trips a tile each.
#   BINS="graft graft_cuda_tests graft_matmul_bench" scripts/device-variants pre2=wip/upload-pre fix2=5e4680b apair=wip/attn-rows whole=wip/w4-whole
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/w3; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) pre2=$(cat $V/pre2/COMMIT) fix2=$(cat $V/fix2/COMMIT) apair=$(cat $V/apair/COMMIT) whole=$(cat $V/whole/COMMIT)" | tee $S
t() {  # tag variant filter repeat [env]
  env ${5:-} timeout 100 $V/$2/graft_cuda_tests --gtest_brief=1 --gtest_filter="$3" --gtest_repeat=$4 > $W/t-$1.txt 2>&1
  echo "$(date +%T) $1 ($2 $3 x$4 ${5:-}): exit $? $(grep -c 'Failure' $W/t-$1.txt) failures $(grep -E '^\[  (PASSED|FAILED)' $W/t-$1.txt | sort | uniq -c | tr -s ' ' | tr '\n' ' ' | cut -c1-200)" | tee -a $S
}
t upload-pre2 pre2 'CudaUpload.*' 3
t upload-fix2 fix2 'CudaUpload.*' 2
t w4bits-fix2 fix2 'CudaQuant.W4a16IsTheSliced*' 5
t w4bits-whole whole 'CudaQuant.W4a16IsTheSliced*' 5
t attn-pair apair 'CudaOps.Attention*:CudaInvariance.*' 1 GRAFT_ATTN_PAIR=1
for e in "" GRAFT_ATTN_PAIR=1; do
  env $e timeout 100 /usr/local/cuda/bin/ncu --clock-control none --cache-control none -k regex:FlashAttention \
    --metrics gpu__time_duration.sum --csv --page raw $V/apair/graft bench --load-format dummy --device cuda \
    --gpu-memory 120 --gpu-scratch 16384 --threads 16 --dummy-adapter-rank 0 --decode-steps 3 --repeats 1 \
    --model bench/configs/qwen3_5-27b --prefill 128 --decode-batches 1 > $W/ncu-apair$e.csv 2> $W/ncu-apair$e.log
  echo "$(date +%T) ncu apair $e: exit $? $(grep -c FlashAttention $W/ncu-apair$e.csv) launches" | tee -a $S
done
for e in GRAFT_ATTN_PAIR=1 "" ; do
  env $e timeout 100 $V/apair/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 48 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize w4a16 --prefill 128 --decode-batches 1 > $W/bench-apair$e.txt 2> $W/bench-apair$e.log
  echo "$(date +%T) apair $e w4a16: exit $? $(grep -E '^decode ' $W/bench-apair$e.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && gzip w3/*.csv; tar czf w3.tgz w3 && rm -rf w3
