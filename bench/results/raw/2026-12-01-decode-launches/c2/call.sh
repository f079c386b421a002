#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c2; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
GRAFT_FP8_TILED=1 timeout 60 $B/graft_cuda_tests --gtest_brief=1 --gtest_filter='*Fp8*:*Quant*' > $W/cuda-tests-tiled.log 2>&1
echo "cuda fp8 tests tiled: exit $? at $(date +%T)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A5 $W/cuda-tests-tiled.log | head -30
for v in 0 1; do
  GRAFT_FP8_TILED=$v timeout 60 $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats fp8-block --rows 1,16,64,1024 --iters 20 > $W/mm-tiled$v.txt 2>&1
  echo "== matmul tiled $v"; grep -E "rows=|gdn|step" $W/mm-tiled$v.txt | cut -c1-20,60-
done
GRAFT_FP8_TILED=1 timeout 100 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 100 --gpu-scratch 16384 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 8 --repeats 1 --json "$W/fp8-27b-tiled.json" --model bench/configs/qwen3_5-27b \
  --dummy-quantize fp8-block --prefill 1024 --decode-batches 1,16,64 > $W/fp8-27b-tiled.txt 2> $W/fp8-27b-tiled.log
echo "== fp8-27b tiled: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " $W/fp8-27b-tiled.txt
# Per-kernel GPU time of decode steps at batch 1 (graph nodes profiled one by one).
timeout 240 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
  "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 4096 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 2 --repeats 1 --model bench/configs/qwen3_5-27b \
  --dummy-quantize fp8-block --prefill 16 --decode-batches 1 > $W/ncu-b1.txt 2> $W/ncu-b1.log
echo "== ncu: exit $? at $(date +%T)"; tail -5 $W/ncu-b1.log
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
