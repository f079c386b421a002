#!/usr/bin/env bash
# Device call c4 (2026-12-02, tenth session): profiles for the next session, main's kernels
# (c3's head, 3ae8392). (1) every kernel of a w4a16 decode step on the 8-layer cut, batch 1 and
# 16, eager, timed one by one (ncu gpu__time_duration); (2) the unrolled 4-bit decode GEMM and a
# decode row's flash attention under ncu --set full with the per-instruction SASS page.
#   BINS="graft" scripts/device-variants head=3ae8392 u6=ab84231   (c3's archive)
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c4; mkdir -p $W/cut
S=$W/summary.txt
G=$V/head/graft
NCU=/usr/local/cuda/bin/ncu; [ -x $NCU ] || NCU=$(command -v ncu)
echo "start $(date +%T) head=$(cat $V/head/COMMIT)" | tee $S
scripts/device-cut-config bench/configs/qwen3_5-27b $W/cut 8
C="--load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 4096 --threads 16 --dummy-adapter-rank 0 --repeats 1 --model $W/cut --dummy-quantize w4a16 --prefill 128 --no-cuda-graphs"
for b in 1 16; do
  timeout 90 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
    $G bench $C --decode-steps 3 --decode-batches $b > $W/times-b$b.csv 2> $W/times-b$b.log
  echo "$(date +%T) times b$b: exit $?" | tee -a $S
  python3 scripts/ncu-kernel-times.py $W/times-b$b.csv > $W/times-b$b.txt 2>&1
  gzip -9 $W/times-b$b.csv
done
for ks in GemmDecodeW4Kernel:40 FlashAttentionKernel:4; do
  k=${ks%%:*} skip=${ks#*:}
  timeout 90 $NCU --clock-control none --set full --import-source no --kernel-name regex:$k \
    --launch-skip $skip --launch-count 4 -o $W/$k $G bench $C --decode-steps 3 --decode-batches 1 > $W/ncu-$k.log 2>&1
  echo "$(date +%T) ncu $k: exit $?" | tee -a $S
  $NCU -i $W/$k.ncu-rep --print-summary none --page details > $W/$k-details.txt 2>&1
  $NCU -i $W/$k.ncu-rep --page source --csv --print-source sass > $W/$k-source.csv 2>&1
  grep -E "Grid Size|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Memory Throughput|Executed Instructions  " $W/$k-details.txt | head -40 | tee -a $S
  gzip -9 $W/$k-source.csv $W/$k-details.txt
  rm -f $W/$k.ncu-rep
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
