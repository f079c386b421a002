#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c12; mkdir -p $W
echo "bundle $(cat $B/COMMIT)"
timeout 200 $B/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests.log 2>&1
echo "cuda tests: exit $?"; grep -E "^\[  (PASSED|FAILED)|Failure" -A4 $W/cuda-tests.log | head -30
cd $OUT && tar czf c12.tgz c12 && rm -rf c12
