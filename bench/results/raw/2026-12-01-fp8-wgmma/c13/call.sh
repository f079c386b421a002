#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c13; mkdir -p $W
echo "bundle $(cat $B/COMMIT)"
timeout 150 $B/graft_cuda_tests --gtest_brief=1 --gtest_filter='CudaQuant.*' > $W/quant-tests.log 2>&1
echo "quant tests: exit $?"; grep -E "^\[  (PASSED|FAILED)|Failure" -A4 $W/quant-tests.log | head -30
timeout 200 $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats fp8-block --rows 1,16,64,1024 --iters 20 > $W/mm.txt 2>$W/mm.log
echo "matmul bench: exit $?"; grep -E "rows=|^step|mlp|qkv" $W/mm.txt | cut -c1-130
cd $OUT && tar czf c13.tgz c13 && rm -rf c13
