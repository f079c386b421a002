#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c5; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
timeout 120 $B/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests.log 2>&1
echo "cuda tests: exit $? at $(date +%T)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A5 $W/cuda-tests.log | head -30
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
