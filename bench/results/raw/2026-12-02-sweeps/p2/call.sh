#!/usr/bin/env bash
# p2: per-launch GPU time of a w4a16 decode step at batch 1 on main7 = 058cbf4
# (the CUDA code of this session's main), as 2026-12-02-decode-profile's p1 did at e6f1756:
#   BINS="graft" scripts/device-variants main7=058cbf4; carry the bundle and that archive.
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/p2; mkdir -p $W
G=$V/main7/graft
echo "start $(date +%T) $(cat $V/main7/COMMIT)" | tee $W/summary.txt
for f in w4a16; do
  timeout 230 /usr/local/cuda/bin/ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
    "$G" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 4096 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 2 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $f --prefill 128 --decode-batches 1 > $W/ncu-$f.csv 2> $W/ncu-$f.log
  echo "== ncu $f: exit $? at $(date +%T) $(wc -l < $W/ncu-$f.csv) lines" | tee -a $W/summary.txt
  gzip $W/ncu-$f.csv
done
for f in fp8-block nvfp4; do  # the whole model on main7, as s1 / s2
  timeout 110 $G bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 48 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $f --prefill 128 --decode-batches 1,16 > $W/bench-$f.txt 2> $W/bench-$f.log
  echo "$(date +%T) $f: exit $? $(grep -E '^decode ' $W/bench-$f.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $W/summary.txt
done
cd $OUT && tar czf p2.tgz p2 && rm -rf p2
