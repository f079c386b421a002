#!/usr/bin/env bash
# call 1: the wgmma FP8 kernel — quant tests first, projections (bf16 vs fp8) incl. prefill sizes,
# then scripts/device-test, then the fp8 step bench.
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c1; mkdir -p $W
echo "bundle $(cat $B/COMMIT)"
timeout 150 $B/graft_cuda_tests --gtest_brief=1 --gtest_filter='CudaQuant.*' > $W/quant-tests.log 2>&1
echo "quant tests: exit $?"; grep -E "^\[  (PASSED|FAILED)|Failure" -A4 $W/quant-tests.log | head -50
timeout 200 $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats bf16,fp8-block --rows 1,16,64,1024,4096 --iters 20 > $W/mm.txt 2>$W/mm.log
echo "matmul bench: exit $?"; grep -E "rows=|^step|gate_up|down" $W/mm.txt | cut -c1-120
timeout 330 scripts/device-test $W/test > $W/device-test.out 2>&1
echo "device-test: exit $?"; grep -E "exit|FAILED|gate:|ok$|differ" $W/device-test.out | head -40
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
