#!/usr/bin/env bash
# Device call c3 (2026-12-02, tenth session): where main's HEAD stands at batch 1 and 16 in every
# format (w4a16, NVFP4, fp8-block, bf16; the whole Qwen3.5-27B model, dummy weights quantized in
# memory) after the unrolled 4-bit slices, and wip/w4-unroll6 (the same kernel bounded to six
# blocks an SM: 80 registers, a few bytes of spills) beside it for the two 4-bit formats.
#   BINS="graft" scripts/device-variants head=3ae8392 u6=ab84231
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c3; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) head=$(cat $V/head/COMMIT) u6=$(cat $V/u6/COMMIT)" | tee $S
tok() { grep -E '^decode ' $1 | tr -s ' ' | cut -d' ' -f3,6,7 | tr '\n' ' '; }
B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 16384 --model bench/configs/qwen3_5-27b --decode-steps 48 --prefill 128 --decode-batches 1,16"
i=0
for vq in head:w4a16 u6:w4a16 head:nvfp4 u6:nvfp4 head:fp8-block head:none; do
  v=${vq%%:*} q=${vq#*:}; i=$((i+1))
  timeout 110 $V/$v/graft bench $B --dummy-quantize $q > $W/bench-$i-$v-$q.txt 2> $W/bench-$i-$v-$q.log
  echo "$(date +%T) $q $v: exit $? $(tok $W/bench-$i-$v-$q.txt)" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
