#!/usr/bin/env bash
# Device call c2 (2026-12-02, tenth session): wip/l2-prefetch — a decode step asks L2 for the
# first bytes of each projection's weight (slice-major, the decode grids' read order) right after
# the projection before it, so that they arrive while the small kernels between run. CUDA suite;
# the 8-layer cut at batch 1 with GRAFT_L2_PREFETCH_MB 0 / 8 / 16 / 24 / 32 / 48 beside main's
# HEAD; then the whole model, w4a16 and bf16, head against pf at the cut's best size, alternated.
#   BINS="graft graft_cuda_tests" scripts/device-variants head=b3740ac pf=wip/l2-prefetch
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c2; mkdir -p $W/cut
S=$W/summary.txt
echo "start $(date +%T) head=$(cat $V/head/COMMIT) pf=$(cat $V/pf/COMMIT)" | tee $S
timeout 150 $V/pf/graft_cuda_tests --gtest_brief=1 > $W/suite-pf.txt 2>&1
echo "$(date +%T) suite pf: exit $? $(grep -E 'PASSED|FAILED' $W/suite-pf.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $S
scripts/device-cut-config bench/configs/qwen3_5-27b $W/cut 8
C="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 4096 --model $W/cut --dummy-quantize w4a16 --decode-steps 64 --prefill 128 --decode-batches 1,16"
tok() { grep -E '^decode ' $1 | tr -s ' ' | cut -d' ' -f3,7 | tr '\n' ' '; }
b1() { grep -E '^decode +1 ' $1 | tr -s ' ' | cut -d' ' -f7; }
best=24 bestv=0
for r in 1; do
  timeout 60 $V/head/graft bench $C > $W/cut-head-$r.txt 2> $W/cut-head-$r.log
  echo "$(date +%T) cut head: exit $? $(tok $W/cut-head-$r.txt)" | tee -a $S
  for mb in 0 8 16 24 32 48; do
    GRAFT_L2_PREFETCH_MB=$mb timeout 60 $V/pf/graft bench $C > $W/cut-pf$mb-$r.txt 2> $W/cut-pf$mb-$r.log
    v=$(b1 $W/cut-pf$mb-$r.txt)
    echo "$(date +%T) cut pf $mb MB: exit $? $(tok $W/cut-pf$mb-$r.txt)" | tee -a $S
    if python3 -c "import sys; sys.exit(0 if float('${v:-0}') > float('$bestv') else 1)"; then best=$mb bestv=$v; fi
  done
done
echo "best $best MB ($bestv tok/s)" | tee -a $S
B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 16384 --model bench/configs/qwen3_5-27b --decode-steps 48 --prefill 128 --decode-batches 1,16"
i=0
for q in w4a16 w4a16 none; do
  for v in head pf; do
    i=$((i+1))
    GRAFT_L2_PREFETCH_MB=$best timeout 120 $V/$v/graft bench $B --dummy-quantize $q > $W/bench-$i-$v-$q.txt 2> $W/bench-$i-$v-$q.log
    echo "$(date +%T) $q $v: exit $? $(tok $W/bench-$i-$v-$q.txt)" | tee -a $S
  done
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
