#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-f2.tar.xz", ".device/f2.sh"]
# Flash attention: one head a block when a call has at most one 64-query tile (pair,
# wip/flash-pair-threshold2) against main (290a1b5, batched tile loads): CUDA suite (pair),
# per-launch attention times under ncu (bf16 dummy 27B, prefill 1024, decode b1 / b16), whole-model w4a16.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-f2.tar.xz
. scripts/device-env
. scripts/device-env-variants
W=$OUT/f2; mkdir -p $W
echo "start $(date +%T)"
for n in pair main; do
  timeout 120 /usr/local/cuda/bin/ncu -k regex:FlashAttention --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv --page raw \
    "$V/$n/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 4096 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 2 --repeats 1 --model bench/configs/qwen3_5-27b \
    --prefill 1024 --decode-batches 1,16 > $W/ncu-$n.csv 2> $W/ncu-$n.log
  echo "== ncu $n: exit $? at $(date +%T)"; wc -l < $W/ncu-$n.csv
done
timeout 200 scripts/device-variants-bench $W/v --no-matmul --bench-formats w4a16 pair > $W/variants-pair.out 2>&1
echo "pair: exit $? at $(date +%T)"
timeout 120 scripts/device-variants-bench $W/v --no-matmul --no-tests --bench-formats w4a16 main > $W/variants-main.out 2>&1
echo "main: exit $? at $(date +%T)"
grep -E "^==|exit|FAILED|Failure|decode" $W/v/summary.txt | cut -c1-150
cd $OUT && tar czf f2.tgz f2 && rm -rf f2
