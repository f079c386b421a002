#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
W=$OUT/c3; mkdir -p $W
for b in 1 16; do
timeout 150 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 8 --repeats 1 --model bench/configs/qwen3_5-27b --dummy-quantize fp8-block \
  --prefill 64 --decode-batches $b --op-profile > $W/prof-b$b.txt 2> $W/prof-b$b.log
echo "== b$b exit $?"; grep -vE "^\s*$" $W/prof-b$b.txt | head -30
done
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
