#!/usr/bin/env bash
# s2: main7 = 058cbf4 (the W4A16 decode GEMM's sixteen-warp blocks past eight rows for N >= 8192)
# and rel = wip/pdl-release-first (341544b: PdlBegin releases the successor before it waits, so
# that the next grid — a projection's early weight loads — is scheduled while this one waits).
#   BINS="graft graft_cuda_tests graft_matmul_bench" scripts/device-variants main7=058cbf4 rel=wip/pdl-release-first
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/s2; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) main7=$(cat $V/main7/COMMIT) rel=$(cat $V/rel/COMMIT)" | tee $S
for v in main7 rel; do
  timeout 120 $V/$v/graft_cuda_tests --gtest_brief=1 > $W/suite-$v.txt 2>&1
  echo "$(date +%T) suite $v: exit $? $(grep -E 'PASSED|FAILED' $W/suite-$v.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
done
timeout 60 $V/main7/graft_matmul_bench bench/configs/qwen3_5-27b --formats w4a16,nvfp4 --rows 1,8,16 > $W/mm-main7.txt 2>&1
echo "$(date +%T) mm main7: exit $? $(grep -E '^step' $W/mm-main7.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
bench() {  # tag variant format
  timeout 110 $V/$2/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 48 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $3 --prefill 128 --decode-batches 1,16 > $W/bench-$1.txt 2> $W/bench-$1.log
  echo "$(date +%T) $1: exit $? $(grep -E '^decode ' $W/bench-$1.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $S
}
bench main7-w4-a main7 w4a16
bench rel-w4-a rel w4a16
bench rel-bf16 rel none
bench main7-bf16 main7 none
bench main7-w4-b main7 w4a16
bench rel-w4-b rel w4a16
bench rel-nvfp4 rel nvfp4
echo "end $(date +%T)" | tee -a $S
