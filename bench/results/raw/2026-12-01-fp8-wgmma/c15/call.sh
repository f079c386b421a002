#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c15; mkdir -p $W
echo "bundle $(cat $B/COMMIT)"
timeout 100 $B/graft_cuda_tests --gtest_brief=1 --gtest_filter='CudaQuant.*' > $W/quant-tests.log 2>&1
echo "quant tests: exit $?"; grep -E "^\[  (PASSED|FAILED)|Failure" -A4 $W/quant-tests.log | head -30
timeout 110 /usr/local/cuda/bin/ncu --clock-control none --kernel-name "regex:GemmFp8Kernel" --launch-skip 0 --launch-count 24 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
  $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats fp8-block --rows 1 --iters 1 > $W/ncu-1.txt 2>&1
echo "ncu: exit $?"
grep -E "GemmFp8Kernel|Duration|DRAM Throughput|Issued Warp Per|Warp Cycles Per Issued" $W/ncu-1.txt | sed -e 's/(const [^)]*)//' | cut -c1-110 | paste - - - - - | awk '{print}' | head -30
cd $OUT && tar czf c15.tgz c15 && rm -rf c15
