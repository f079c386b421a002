#!/usr/bin/env bash
# t1: tk = wip/w4-tickets (the W4A16 decode GEMM adds its slices in the kernel: a ticket counter
# a tile, the last block of a tile sums its partials; no SumSplits launch) against main7 = 058cbf4.
#   BINS="graft graft_cuda_tests graft_matmul_bench" scripts/device-variants main7=058cbf4 tk=wip/w4-tickets
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/t1; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) main7=$(cat $V/main7/COMMIT) tk=$(cat $V/tk/COMMIT)" | tee $S
timeout 60 $V/tk/graft_cuda_tests --gtest_brief=1 > $W/suite-tk.txt 2>&1
echo "$(date +%T) suite tk: exit $? $(grep -E 'PASSED|FAILED' $W/suite-tk.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
for v in tk main7; do
  timeout 30 $V/$v/graft_matmul_bench bench/configs/qwen3_5-27b --formats w4a16 --rows 1,16 > $W/mm-$v.txt 2>&1
  echo "$(date +%T) mm $v: exit $? $(grep -E '^step' $W/mm-$v.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
done
for v in tk main7; do
  timeout 75 $V/$v/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 48 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize w4a16 --prefill 128 --decode-batches 1,16 > $W/bench-$v.txt 2> $W/bench-$v.log
  echo "$(date +%T) $v w4a16: exit $? $(grep -E '^decode ' $W/bench-$v.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $S
done
cd $OUT && tar czf t1.tgz t1 && rm -rf t1
