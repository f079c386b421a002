#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-f1.tar.xz", ".device/f1.sh"]
# Flash attention with batched tile loads (fa, wip/flash-batched-loads) against main: CUDA suite
# (fa), per-launch attention times under ncu (bf16 dummy 27B, prefill 1024, decode b1 / b16),
# whole-model decode w4a16.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-f1.tar.xz
. scripts/device-env
. scripts/device-env-variants
W=$OUT/f1; mkdir -p $W
echo "start $(date +%T)"
for n in fa main; do
  timeout 120 /usr/local/cuda/bin/ncu -k regex:FlashAttention --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv --page raw \
    "$V/$n/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 4096 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 2 --repeats 1 --model bench/configs/qwen3_5-27b \
    --prefill 1024 --decode-batches 1,16 > $W/ncu-$n.csv 2> $W/ncu-$n.log
  echo "== ncu $n: exit $? at $(date +%T)"; wc -l < $W/ncu-$n.csv
done
timeout 200 scripts/device-variants-bench $W/v --no-matmul --bench-formats w4a16 fa > $W/variants-fa.out 2>&1
echo "fa: exit $? at $(date +%T)"
timeout 120 scripts/device-variants-bench $W/v --no-matmul --no-tests --bench-formats w4a16 main > $W/variants-main.out 2>&1
echo "main: exit $? at $(date +%T)"
grep -E "^==|exit|FAILED|Failure|decode" $W/v/summary.txt | cut -c1-150
cd $OUT && tar czf f1.tgz f1 && rm -rf f1
