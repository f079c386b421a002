#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-s3.tar.xz", "bench/results/raw/2026-12-02-launches/s3/call.sh"]
# (bundle: LIBS_ONLY; models/release/model.safetensors moved out of the tree for the call)
# stage 866adf0 (wip/stage-once, on main 9af29dd): a graph step's staged arrays copied in once
# before the graph launch. The last ~6 device minutes of the session: the CUDA graph and
# invariance tests (the replay test stages new positions, page tables and GDN counters every
# step), then one w4a16 decode bench to set beside s2's nozero runs.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-s3.tar.xz
. scripts/device-env
. scripts/device-env-variants
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/s3; mkdir -p $W
echo "start $(date +%T)"
timeout 60 $V/stage/graft_cuda_tests --gtest_brief=1 --gtest_filter='*CudaInvariance*:*Graph*' > $W/cuda-tests-stage.log 2>&1
echo "stage cuda graph/invariance tests: exit $?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED" $W/cuda-tests-stage.log | head -12
timeout 80 $V/stage/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
  --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
  --dummy-quantize w4a16 --prefill 128 --decode-batches 1,16 > $W/bench-stage-w4a16.txt 2> $W/bench-stage-w4a16.log
echo "$(date +%T) stage w4a16: exit $? $(grep -E '^decode ' $W/bench-stage-w4a16.txt | tr '\n' ' ' | cut -c1-220)"
echo "end $(date +%T)"
cd $OUT && tar czf s3.tgz s3 && rm -rf s3
