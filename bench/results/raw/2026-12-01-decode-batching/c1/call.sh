#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c1; mkdir -p $W
echo "bundle $(cat $B/COMMIT)"
for v in 64,6,1,1 32,8,1,1; do
  GRAFT_FP8_DEC=$v timeout 100 $B/graft_cuda_tests --gtest_brief=1 --gtest_filter='CudaQuant.*' > $W/quant-$v.log 2>&1
  echo "quant tests $v: exit $?"; grep -E "^\[  (PASSED|FAILED)|Failure" -A4 $W/quant-$v.log | head -12
done
for v in 64,6,0,0 64,6,1,0 64,6,0,1 64,6,1,1 64,4,1,1 64,8,1,1 32,8,1,1 32,6,1,1 128,4,1,1; do
  GRAFT_FP8_DEC=$v timeout 60 $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats fp8-block --rows 1,16,64 --iters 20 > $W/mm-$v.txt 2>&1
  echo "== $v (exit $?)"; grep -v "^\s*$" $W/mm-$v.txt | tail -8
done
GRAFT_FP8_DEC=64,6,1,1 timeout 60 $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats fp8-channel --rows 1,16 --iters 20 > $W/mm-channel.txt 2>&1
echo "== channel 64,6,1,1"; tail -6 $W/mm-channel.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
