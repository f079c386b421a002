#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-n5.tar.xz", ".device/p1.sh"]
# Per-launch GPU time of a w4a16 and an nvfp4 decode step at batch 1 (main's binary, e6f1756).
set -uo pipefail
. scripts/device-env
export VARIANTS_ARCHIVE=.device/variants-n5.tar.xz
. scripts/device-env-variants
W=$OUT/p1; mkdir -p $W
G=$V/main/graft
echo "start $(date +%T) $(cat $V/main/COMMIT)"
for f in w4a16 nvfp4; do
  timeout 250 /usr/local/cuda/bin/ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
    "$G" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 4096 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 2 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $f --prefill 128 --decode-batches 1 > $W/ncu-$f.csv 2> $W/ncu-$f.log
  echo "== ncu $f: exit $? at $(date +%T)"; wc -l $W/ncu-$f.csv; tail -2 $W/ncu-$f.log
done
cd $OUT && tar czf p1.tgz p1 && rm -rf p1
