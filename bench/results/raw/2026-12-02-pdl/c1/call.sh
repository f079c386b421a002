#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-pdl1.tar.xz"] (models/release/model.safetensors moved out)
# pdl = wip/pdl 09c5c2d (programmatic dependent launch for every kernel; the W4 decode projection's
# first weight loads before its wait) against head = main 2bea991 (same kernels, plain launches):
# the CUDA suite on pdl, then the whole-model decode bench (w4a16, bf16, fp8-block) and the
# projections (graft_matmul_bench) for both, alternating.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-pdl1.tar.xz
. scripts/device-env
. scripts/device-env-variants
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c1; mkdir -p $W
echo "start $(date +%T) head $(cat $V/head/COMMIT) pdl $(cat $V/pdl/COMMIT)" | tee $W/summary.txt
timeout 90 $V/pdl/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests-pdl.log 2>&1
echo "$(date +%T) pdl cuda suite: exit $? $(grep -E '^\[  (PASSED|FAILED)' $W/cuda-tests-pdl.log | tr '\n' ' ')" | tee -a $W/summary.txt
grep -E "Failure|FAILED" $W/cuda-tests-pdl.log | head -8 | tee -a $W/summary.txt
bench() {  # variant format
  local q=$2; [ "$q" = bf16 ] && q=none
  timeout 100 $V/$1/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $q --prefill 128 --decode-batches 1,16 > $W/bench-$1-$2.txt 2> $W/bench-$1-$2.log
  echo "$(date +%T) $1 $2: exit $? $(grep -E '^decode ' $W/bench-$1-$2.txt | tr '\n' ' ' | cut -c1-200)" | tee -a $W/summary.txt
}
bench pdl w4a16; bench head w4a16
bench pdl bf16; bench head bf16
for v in pdl head; do
  timeout 60 $V/$v/graft_matmul_bench bench/configs/qwen3_5-27b --formats w4a16,nvfp4 --rows 1,16 > $W/matmul-$v.txt 2>&1
  echo "$(date +%T) $v matmul: exit $?" | tee -a $W/summary.txt
  grep -E "rows=|^step" $W/matmul-$v.txt | cut -c1-118 | tee -a $W/summary.txt
done
bench pdl fp8-block; bench head fp8-block
bench pdl w4a16
echo "end $(date +%T)" | tee -a $W/summary.txt
