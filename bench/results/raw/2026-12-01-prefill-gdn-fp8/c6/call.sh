#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c6; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
timeout 120 $B/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests.log 2>&1
echo "cuda tests: exit $? at $(date +%T)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A5 $W/cuda-tests.log | head -40
for f in fp8-block none; do
  q=""; [ $f != none ] && q="--dummy-quantize $f"
  b=1; [ $f != none ] && b=1,16,64
  timeout 140 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 6 --repeats 1 --json "$W/$f-27b.json" --model bench/configs/qwen3_5-27b \
    $q --prefill 1024,4096 --decode-batches $b > $W/$f-27b.txt 2> $W/$f-27b.log
  echo "== $f-27b: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " $W/$f-27b.txt; tail -1 $W/$f-27b.log
done
timeout 220 scripts/device-test $W/test > $W/device-test.out 2>&1
echo "device-test: exit $? at $(date +%T)"; grep -v "^\s*$" $W/device-test.out | tail -30
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
