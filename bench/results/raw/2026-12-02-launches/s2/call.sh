#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-s2.tar.xz", "bench/results/raw/2026-12-02-launches/s2/call.sh"]
# (bundle: LIBS_ONLY; models/release/model.safetensors moved out of the tree for the call)
# main 9cb0a88; nozero 9af29dd (scratch no longer cleared); silu fb28193 (nozero + a 4-bit
# gate|up's K slices handed to SiLU-mul; s1's norm fusion dropped). CUDA suite on silu; whole-model
# decode benches alternated; fp8-block and nvfp4 for the record.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-s2.tar.xz
. scripts/device-env
. scripts/device-env-variants
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/s2; mkdir -p $W
t0=$(date +%s)
echo "start $(date +%T)"
timeout 150 $V/silu/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests-silu.log 2>&1
echo "silu cuda tests: exit $?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED" $W/cuda-tests-silu.log | head -12
bench() {  # NAME FORMAT RUN
  [ $(( $(date +%s) - t0 )) -lt 500 ] || { echo "skip $1 $2 $3 (time)"; return; }
  timeout 90 $V/$1/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $2 --prefill 128 --decode-batches 1,16 > $W/bench-$1-$2-$3.txt 2> $W/bench-$1-$2-$3.log
  local rc=$?
  echo "$(date +%T) $1 $2 run $3: exit $rc $(grep -E '^decode ' $W/bench-$1-$2-$3.txt | tr '\n' ' ' | cut -c1-220)"
}
for r in 1 2; do for n in nozero silu; do bench $n w4a16 $r; done; done
bench silu nvfp4 1
bench main fp8-block 1
bench silu fp8-block 1
echo "end $(date +%T)"
cd $OUT && tar czf s2.tgz s2 && rm -rf s2
