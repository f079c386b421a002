#!/usr/bin/env bash
# Device call c3 (2026-12-02, ninth session): main's HEAD (the GDN b / a tail landed, decode-graph
# phase timing) through the CUDA suite; then batch-1 decode w4a16 and bf16 with the decode graphs'
# summary: how much of a replayed step is the host recording it, how much the graph.
#   BINS="graft graft_cuda_tests graft_matmul_bench" scripts/device-variants head=HEAD main10=596f029
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c3; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) head=$(cat $V/head/COMMIT)" | tee $S
timeout 150 $V/head/graft_cuda_tests --gtest_brief=1 > $W/suite-head.txt 2>&1
echo "$(date +%T) suite head: exit $? $(grep -E 'PASSED|FAILED' $W/suite-head.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $S
B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 16384 --model bench/configs/qwen3_5-27b --decode-steps 48 --prefill 128"
for f in w4a16 none; do
  timeout 100 $V/head/graft bench $B --dummy-quantize $f --decode-batches 1 > $W/bench-head-$f.txt 2> $W/bench-head-$f.log
  echo "$(date +%T) head $f b1: exit $? $(grep -E '^decode ' $W/bench-head-$f.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)" | tee -a $S
  grep -o "decode graphs.*" $W/bench-head-$f.log | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
