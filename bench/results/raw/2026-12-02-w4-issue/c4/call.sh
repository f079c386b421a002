#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-c4.tar.xz"] (models/release/model.safetensors moved out)
# persist = wip/w4-persist 9ed1de9: W4A16 / NVFP4 decode at 1-2 rows by a persistent form (a block
# an SM, each warp's tasks by bulk copies into two buffers) against head = main 2bea991.
# The CUDA suite on persist; the projections (graft_matmul_bench); whole-model decode benches
# alternated (w4a16 persist / head / persist, nvfp4 persist / head).
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-c4.tar.xz
. scripts/device-env
. scripts/device-env-variants
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c4; mkdir -p $W
echo "start $(date +%T) head $(cat $V/head/COMMIT) persist $(cat $V/persist/COMMIT)"
timeout 150 $V/persist/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests-persist.log 2>&1
echo "$(date +%T) cuda suite persist: exit $?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED" $W/cuda-tests-persist.log | head -12
for v in persist head; do
  timeout 100 $V/$v/graft_matmul_bench bench/configs/qwen3_5-27b --formats w4a16,nvfp4 --rows 1,16 > $W/matmul-$v.txt 2>&1
  echo "$(date +%T) $v matmul: exit $?"; grep -E "rows=|^step|^gdn|^attn" $W/matmul-$v.txt | grep -vE "rows=16" | cut -c1-118 | head -24
done
bench() {  # VARIANT FORMAT RUN
  timeout 120 $V/$1/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $2 --prefill 128 --decode-batches 1,16 > $W/bench-$1-$2-$3.txt 2> $W/bench-$1-$2-$3.log
  echo "$(date +%T) $1 $2 run $3: exit $? $(grep -E '^decode ' $W/bench-$1-$2-$3.txt | tr '\n' ' ' | cut -c1-200)"
}
bench persist w4a16 1; bench head w4a16 1; bench persist w4a16 2
bench persist nvfp4 1; bench head nvfp4 1
echo "end $(date +%T)"
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
