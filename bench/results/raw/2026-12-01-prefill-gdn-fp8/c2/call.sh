#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c2; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
timeout 120 $B/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests.log 2>&1
echo "cuda tests: exit $? at $(date +%T)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A5 $W/cuda-tests.log | head -40
for f in fp8-block none; do
  q=""; [ $f != none ] && q="--dummy-quantize $f"
  timeout 140 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 4 --repeats 1 --json "$W/$f-27b.json" --model bench/configs/qwen3_5-27b \
    $q --prefill 1024,4096 --decode-batches 1 > $W/$f-27b.txt 2> $W/$f-27b.log
  echo "== $f-27b: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " $W/$f-27b.txt; tail -1 $W/$f-27b.log
done
timeout 140 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 2 --repeats 1 --model bench/configs/qwen3_5-27b --op-profile \
  --dummy-quantize fp8-block --prefill 1024 --decode-batches 1 > $W/fp8-opprofile.txt 2> $W/fp8-opprofile.log
echo "== op profile: exit $? at $(date +%T)"; head -30 $W/fp8-opprofile.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
