#!/usr/bin/env bash
# Prepared for the next device call (not run: this session's device time ran out; ~100 s of
# work): Nsight Compute's full set, with the per-instruction
# SASS page (executed counts, stall samples), on the two small kernels c4 found costliest on the
# batch-1 critical path: the GDN token kernel (GdnCoreSeqsKernel, fused gates and norm) and a
# decode row's flash attention (FlashAttentionSeqsKernel), main's HEAD, the 8-layer cut, w4a16,
# context ~130, eager steps.
#   BINS="graft" scripts/device-variants head=HEAD   (or c5's archive, whose head is 79b708f)
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/p1; mkdir -p $W/cut
S=$W/summary.txt
G=$V/head/graft
NCU=/usr/local/cuda/bin/ncu; [ -x $NCU ] || NCU=$(command -v ncu)
echo "start $(date +%T) head=$(cat $V/head/COMMIT)" | tee $S
scripts/device-cut-config bench/configs/qwen3_5-27b $W/cut 8
for k in GdnCoreSeqsKernel FlashAttentionSeqsKernel; do
  timeout 100 $NCU --clock-control none --set full --import-source no --kernel-name regex:$k \
    --launch-skip 2 --launch-count 2 -o $W/$k $G bench --load-format dummy --device cuda --gpu-memory 120 \
    --gpu-scratch 4096 --threads 16 --dummy-adapter-rank 0 --decode-steps 3 --repeats 1 --model $W/cut \
    --dummy-quantize w4a16 --prefill 128 --decode-batches 1 --no-cuda-graphs > $W/ncu-$k.log 2>&1
  echo "$(date +%T) ncu $k: exit $?" | tee -a $S
  $NCU -i $W/$k.ncu-rep --print-summary none --page details > $W/$k-details.txt 2>&1
  $NCU -i $W/$k.ncu-rep --page source --csv --print-source sass > $W/$k-source.csv 2>&1
  echo "  details $(wc -l < $W/$k-details.txt) lines, source $(wc -l < $W/$k-source.csv) lines" | tee -a $S
  grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|Memory Throughput" $W/$k-details.txt | head -12 | tee -a $S
  gzip -9 $W/$k-source.csv $W/$k-details.txt
  rm -f $W/$k.ncu-rep
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf p1.tgz p1 && rm -rf p1
