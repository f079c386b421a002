#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c7; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
timeout 70 $B/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests.log 2>&1
echo "cuda tests: exit $? at $(date +%T)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A5 $W/cuda-tests.log | head -30
timeout 100 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 8 --repeats 1 --json "$W/fp8-27b.json" --model bench/configs/qwen3_5-27b \
  --dummy-quantize fp8-block --prefill 1024 --decode-batches 1,16,64 > $W/fp8-27b.txt 2> $W/fp8-27b.log
echo "== fp8-27b: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " $W/fp8-27b.txt
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
