#!/usr/bin/env bash
# Device call c1 (2026-12-02, ninth session): the CUDA suite on wip/w4-tail (GDN b / a rows in the
# 4-bit launch) and wip/gdn-stage (the GDN token kernel's S and value rows staged in shared
# memory), the 4-bit projections main10 vs tail, the GDN token kernel under ncu (main10 vs gdn),
# and the whole model w4a16 for main10, tail, gdn and both.
#   BINS="graft graft_cuda_tests graft_matmul_bench" scripts/device-variants main10=596f029 \
#     tail=wip/w4-tail gdn=wip/gdn-stage both=wip/both
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c1; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) $(for v in main10 tail gdn both; do echo -n "$v=$(cat $V/$v/COMMIT) "; done)" | tee $S
for v in gdn tail; do
  timeout 120 $V/$v/graft_cuda_tests --gtest_brief=1 > $W/suite-$v.txt 2>&1
  echo "$(date +%T) suite $v: exit $? $(grep -E 'PASSED|FAILED' $W/suite-$v.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
done
for v in main10 tail; do
  timeout 40 $V/$v/graft_matmul_bench bench/configs/qwen3_5-27b --formats w4a16 --rows 1,8,16 > $W/mm-$v-w4a16.txt 2>&1
  echo "$(date +%T) mm $v w4a16: exit $? $(grep -E '^step' $W/mm-$v-w4a16.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
done
B="--load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 --dummy-adapter-rank 0 --repeats 1 --model bench/configs/qwen3_5-27b"
for v in main10 gdn; do
  timeout 100 ncu --clock-control none --cache-control none -k regex:GdnCore --metrics gpu__time_duration.sum --csv \
    --launch-skip 48 --launch-count 96 $V/$v/graft bench $B --decode-steps 4 --dummy-quantize w4a16 --prefill 128 \
    --decode-batches 1 > $W/ncu-gdn-$v.csv 2> $W/ncu-gdn-$v.log
  echo "$(date +%T) ncu gdn $v: exit $? $(grep -c gpu__time $W/ncu-gdn-$v.csv) rows" | tee -a $S
done
for v in both main10 gdn tail; do
  timeout 100 $V/$v/graft bench $B --decode-steps 48 --dummy-quantize w4a16 --prefill 128 --decode-batches 1,16 \
    > $W/bench-$v.txt 2> $W/bench-$v.log
  echo "$(date +%T) $v w4a16: exit $? $(grep -E '^decode ' $W/bench-$v.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
