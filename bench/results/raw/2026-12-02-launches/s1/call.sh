#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-s1.tar.xz", "bench/results/raw/2026-12-02-launches/s1/call.sh"]
# (bundle: LIBS_ONLY; models/release/model.safetensors moved out of the tree for the call)
# main 9cb0a88; nozero 9af29dd (scratch no longer cleared: no memset nodes in the step graph);
# fused 1fe3a4a (nozero + 4-bit K slices handed to SiLU-mul / the residual norm).
# CUDA suite on fused (it holds both changes); whole-model decode benches alternated.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-s1.tar.xz
. scripts/device-env
. scripts/device-env-variants
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/s1; mkdir -p $W
echo "start $(date +%T)"
timeout 150 $V/fused/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests-fused.log 2>&1
echo "fused cuda tests: exit $?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED" $W/cuda-tests-fused.log | head -12
bench() {  # NAME FORMAT
  timeout 100 $V/$1/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $2 --prefill 128 --decode-batches 1,16 > $W/bench-$1-$2-$3.txt 2> $W/bench-$1-$2-$3.log
  local rc=$?
  echo "$(date +%T) $1 $2 run $3: exit $rc $(grep -E '^decode ' $W/bench-$1-$2-$3.txt | tr '\n' ' ' | cut -c1-220)"
}
for r in 1 2; do for n in main nozero fused; do bench $n w4a16 $r; done; done
for n in main fused; do bench $n nvfp4 1; bench $n none 1; done
echo "end $(date +%T)"
cd $OUT && tar czf s1.tgz s1 && rm -rf s1
