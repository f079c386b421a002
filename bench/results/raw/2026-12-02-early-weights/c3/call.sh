#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-ew3.tar.xz"] (models/release/model.safetensors moved out)
# The fused GDN gates + gated norm (gdn = wip/gdn-fused eb32ee4) against main (526f563): the GDN
# kernels' times under ncu (bf16 dummy 27B, prefill 128, decode b1 / b16), then the whole-model
# w4a16 decode pair again, order swapped (c2 had gdn first).
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-ew3.tar.xz
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c3; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) $(for v in main gdn; do echo -n "$v=$(cat $V/$v/COMMIT) "; done)" | tee $S
for v in gdn main; do
  timeout 100 /usr/local/cuda/bin/ncu -k regex:'Gdn|GatedNorm' --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv --page raw \
    "$V/$v/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 4096 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 2 --repeats 1 --model bench/configs/qwen3_5-27b \
    --prefill 128 --decode-batches 1,16 > $W/ncu-$v.csv 2> $W/ncu-$v.log
  echo "$(date +%T) ncu $v: exit $? $(wc -l < $W/ncu-$v.csv) lines" | tee -a $S
done
bench() {  # variant format
  timeout 100 $V/$1/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $2 --prefill 128 --decode-batches 1,16 > $W/bench-$1-$2.txt 2> $W/bench-$1-$2.log
  echo "$(date +%T) $1 $2: exit $? $(grep -E '^decode ' $W/bench-$1-$2.txt | tr '\n' ' ' | cut -c1-220)" | tee -a $S
}
bench main w4a16
bench gdn w4a16
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
