#!/usr/bin/env bash
# Prepared for the next device call (not yet run; ~330 s): the GDN in-projection's bf16 b / a rows
# riding in the 4-bit decode launch (wip/w4-tail ee295db, patch wip-w4-tail.patch beside this file,
# onto main 596f029): one launch and one SumSplits for both parts instead of the 4-bit launch, its
# SumSplits, ToBf16, the bf16 GEMV and its SumSplits — n1 measured the b / a GEMV alone at 7.2 us
# (60 warps on 132 SMs) a GDN layer. Each part keeps its bits (new test
# CudaQuant.W4a16WithABf16TailKeepsEachPartsBits), so the whole CUDA suite runs first.
#   BINS="graft graft_cuda_tests graft_matmul_bench" scripts/device-variants main10=596f029 tail=wip/w4-tail
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/tl; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) main10=$(cat $V/main10/COMMIT) tail=$(cat $V/tail/COMMIT)" | tee $S
timeout 120 $V/tail/graft_cuda_tests --gtest_brief=1 > $W/suite-tail.txt 2>&1
echo "$(date +%T) suite tail: exit $? $(grep -E 'PASSED|FAILED' $W/suite-tail.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
for v in main10 tail; do
  for f in w4a16 nvfp4; do
    timeout 40 $V/$v/graft_matmul_bench bench/configs/qwen3_5-27b --formats $f --rows 1,8,16 > $W/mm-$v-$f.txt 2>&1
    echo "$(date +%T) mm $v $f: exit $? $(grep -E '^step' $W/mm-$v-$f.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
  done
done
for v in tail main10; do
  timeout 100 $V/$v/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 48 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize w4a16 --prefill 128 --decode-batches 1,16 > $W/bench-$v.txt 2> $W/bench-$v.log
  echo "$(date +%T) $v w4a16: exit $? $(grep -E '^decode ' $W/bench-$v.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf tl.tgz tl && rm -rf tl
