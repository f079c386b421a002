#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c1; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
timeout 120 $B/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests.log 2>&1
echo "cuda tests: exit $? at $(date +%T)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A5 $W/cuda-tests.log | head -40
grep -E "GatedDeltaNet|Fp8" $W/cuda-tests.log | head
timeout 60 $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats fp8-block --rows 1,16,64,1024 --iters 20 > $W/mm-fp8.txt 2>&1
echo "== matmul fp8 exit $?"; grep -vE "^\s*$" $W/mm-fp8.txt | cut -c1-150 | tail -30
for f in fp8-block none; do
  q=""; [ $f != none ] && q="--dummy-quantize $f"
  timeout 140 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 8 --repeats 1 --json "$W/$f-27b.json" --model bench/configs/qwen3_5-27b \
    $q --prefill 1024,4096 --decode-batches 1,16,64 > $W/$f-27b.txt 2> $W/$f-27b.log
  echo "== $f-27b: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " $W/$f-27b.txt; tail -2 $W/$f-27b.log
done
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
