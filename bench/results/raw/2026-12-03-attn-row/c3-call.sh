#!/usr/bin/env bash
# c3: every format's whole-model decode at main 491d841 (the decode attention row on its whole
# block), as 2026-12-02-unroll's c3 measured them at 3ae8392; and the 4-bit decode GEMM's SASS
# (w4a16's batch-1 form) for counting its instructions here. Carries .device/variants-c2.tar.xz.
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c3; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) head=$(cat $V/head/COMMIT)" | tee $S
tok() { grep -E '^decode ' $1 | tr -s ' ' | cut -d' ' -f3,6,7 | tr '\n' ' '; }
B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 16384 --model bench/configs/qwen3_5-27b --decode-steps 48 --prefill 128 --decode-batches 1,16"
i=0
for q in none fp8-block nvfp4 w4a16; do
  i=$((i+1))
  timeout 110 $V/head/graft bench $B --dummy-quantize $q > $W/bench-$i-$q.txt 2> $W/bench-$i-$q.log
  echo "$(date +%T) $q head: exit $? $(tok $W/bench-$i-$q.txt)" | tee -a $S
done
CUOBJ=/usr/local/cuda/bin/cuobjdump; [ -x $CUOBJ ] || CUOBJ=$(command -v cuobjdump)
timeout 90 $CUOBJ -sass $V/head/graft_matmul_bench 2> $W/sass.log | awk '/Function :/{p = /GemmDecodeW4Kernel/} p' | gzip -9 > $W/w4-sass.txt.gz
echo "$(date +%T) sass: exit $? $(zcat $W/w4-sass.txt.gz | grep -c 'Function :') functions" | tee -a $S
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
