#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-pdl3.tar.xz"] (models/release/model.safetensors moved out)
# c1 measured fp8-block batch 16 5% lower with PDL in one run each: repeat it, edges (= main's
# CUDA code, 442e9a2) then head (2bea991), batch 16 only.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-pdl3.tar.xz
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c4; mkdir -p $W
echo "start $(date +%T) head $(cat $V/head/COMMIT) edges $(cat $V/edges/COMMIT)" | tee $W/summary.txt
for v in edges head; do
  timeout 100 $V/$v/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize fp8-block --prefill 128 --decode-batches 16 > $W/bench-$v-fp8-block.txt 2> $W/bench-$v-fp8-block.log
  echo "$(date +%T) $v fp8-block: exit $? $(grep -E '^decode ' $W/bench-$v-fp8-block.txt | tr '\n' ' ' | cut -c1-200)" | tee -a $W/summary.txt
done
echo "end $(date +%T)" | tee -a $W/summary.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
