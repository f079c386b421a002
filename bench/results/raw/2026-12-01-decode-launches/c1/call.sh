#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c1; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
timeout 90 $B/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests.log 2>&1
echo "cuda tests: exit $? at $(date +%T)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A5 $W/cuda-tests.log | head -30
GRAFT_FP8_SPEC=2 timeout 60 $B/graft_cuda_tests --gtest_brief=1 --gtest_filter='*Fp8*:*Quant*:CudaModel*' > $W/cuda-tests-spec2.log 2>&1
echo "cuda fp8 tests spec2: exit $? at $(date +%T)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A5 $W/cuda-tests-spec2.log | head -30
for v in 0 2; do
  GRAFT_FP8_SPEC=$v timeout 60 $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats fp8-block --rows 1,16,64,1024 --iters 20 > $W/mm-spec$v.txt 2>&1
  echo "== matmul spec $v"; cat $W/mm-spec$v.txt | grep -v "^\s*$" | tail -40
done
for v in 0 2; do
GRAFT_FP8_SPEC=$v timeout 100 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 8 --repeats 1 --json "$W/fp8-27b-spec$v.json" --model bench/configs/qwen3_5-27b \
  --dummy-quantize fp8-block --prefill 1024 --decode-batches 1,16,64 > $W/fp8-27b-spec$v.txt 2> $W/fp8-27b-spec$v.log
echo "== fp8-27b spec $v: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " $W/fp8-27b-spec$v.txt
done
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
