#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-c3.tar.xz"] (models/release/model.safetensors moved out)
# The W4A16 decode kernel with more warps an SM: ring depth 3 or 4, __launch_bounds__ of 7 or 8
# blocks (72 / 64 registers) — d3b8, d4b7, d3b7 — against head (main 2bea991: depth 4, 79
# registers, 6 blocks). Same arithmetic: the W4A16 / quantized tests; then the projections
# (graft_matmul_bench w4a16, nvfp4 at 1 and 16 rows) for all four, and the whole-model w4a16
# decode bench for head and d3b8.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-c3.tar.xz
. scripts/device-env
. scripts/device-env-variants
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c3; mkdir -p $W
echo "start $(date +%T)"
for v in d3b8 d4b7 d3b7; do
  timeout 60 $V/$v/graft_cuda_tests --gtest_brief=1 --gtest_filter='CudaQuant.*' > $W/tests-$v.log 2>&1
  echo "$v ($(cat $V/$v/COMMIT)) CudaQuant: exit $? $(grep -E '^\[  (PASSED|FAILED)' $W/tests-$v.log | tr '\n' ' ')"
done
for v in head d3b8 d4b7 d3b7; do
  timeout 100 $V/$v/graft_matmul_bench bench/configs/qwen3_5-27b --formats w4a16,nvfp4 --rows 1,16 > $W/matmul-$v.txt 2>&1
  echo "$(date +%T) $v matmul: exit $?"; grep -E "rows=|^step|gate.up|down" $W/matmul-$v.txt | grep -v "^attn" | cut -c1-120
done
for v in head d3b8; do
  timeout 100 $V/$v/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize w4a16 --prefill 128 --decode-batches 1,16 > $W/bench-$v-w4a16.txt 2> $W/bench-$v-w4a16.log
  echo "$(date +%T) $v w4a16: exit $? $(grep -E '^decode ' $W/bench-$v-w4a16.txt | tr '\n' ' ' | cut -c1-200)"
done
echo "end $(date +%T)"
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
