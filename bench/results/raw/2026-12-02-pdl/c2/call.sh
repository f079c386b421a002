#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-pdl2.tar.xz"] (models/release/model.safetensors moved out)
# pdl2 = wip/pdl 59b0b2a (pdl + the norm's weights and the GDN head state's L2 prefetches before
# the wait) against pdl = 09c5c2d and head = main 2bea991: the CUDA suite on pdl2 twice
# (shuffled: a missing wait shows as a race), then the whole-model w4a16 decode bench alternating
# (pdl2, head, pdl, pdl2, head, pdl), then nvfp4 for pdl2 and head while time is left.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-pdl2.tar.xz
. scripts/device-env
. scripts/device-env-variants
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c2; mkdir -p $W
T0=$(date +%s)
echo "start $(date +%T) head $(cat $V/head/COMMIT) pdl $(cat $V/pdl/COMMIT) pdl2 $(cat $V/pdl2/COMMIT)" | tee $W/summary.txt
timeout 120 $V/pdl2/graft_cuda_tests --gtest_brief=1 --gtest_repeat=2 --gtest_shuffle > $W/cuda-tests-pdl2.log 2>&1
echo "$(date +%T) pdl2 cuda suite x2 shuffled: exit $? $(grep -E '^\[  (PASSED|FAILED)' $W/cuda-tests-pdl2.log | tr '\n' ' ')" | tee -a $W/summary.txt
grep -E "Failure|FAILED" $W/cuda-tests-pdl2.log | head -8 | tee -a $W/summary.txt
bench() {  # variant format
  if [ $(( $(date +%s) - T0 )) -gt 470 ]; then echo "$(date +%T) $1 $2: skipped (time)" | tee -a $W/summary.txt; return; fi
  local q=$2; [ "$q" = bf16 ] && q=none
  timeout 100 $V/$1/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $q --prefill 128 --decode-batches 1,16 > $W/bench-$1-$2-$3.txt 2> $W/bench-$1-$2-$3.log
  echo "$(date +%T) $1 $2: exit $? $(grep -E '^decode ' $W/bench-$1-$2-$3.txt | tr '\n' ' ' | cut -c1-200)" | tee -a $W/summary.txt
}
bench pdl2 w4a16 1; bench head w4a16 1; bench pdl w4a16 1; bench pdl2 w4a16 2; bench head w4a16 2; bench pdl w4a16 2
bench pdl2 nvfp4 1; bench head nvfp4 1
echo "end $(date +%T)" | tee -a $W/summary.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
