#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export PATH=$PATH:/usr/local/cuda/bin
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c4; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
timeout 90 $B/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests.log 2>&1
echo "cuda tests: exit $? at $(date +%T)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A5 $W/cuda-tests.log | head -30
timeout 120 $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats w4a16,nvfp4 --rows 1,16 > $W/matmul-w4.txt 2>&1
echo "matmul w4: exit $? at $(date +%T)"; grep -E "rows=|gdn|step" $W/matmul-w4.txt
for f in w4a16 nvfp4; do
  timeout 110 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 6 --repeats 1 --json "$W/$f-27b.json" --model bench/configs/qwen3_5-27b \
    --dummy-quantize $f --prefill 1024 --decode-batches 1,16,64 > $W/$f-27b.txt 2> $W/$f-27b.log
  echo "== $f-27b: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " $W/$f-27b.txt
done
timeout 150 scripts/device-test $W/test > $W/device-test.out 2>&1
echo "device-test: exit $? at $(date +%T)"; grep -E "gate: |exact mode|serve:|FAILED" $W/device-test.out | cut -c1-160
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
