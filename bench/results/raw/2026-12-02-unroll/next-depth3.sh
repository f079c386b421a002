#!/usr/bin/env bash
# Prepared for the next device call (not run; ~5 min): the 4-bit decode GEMM's register ring three
# stages deep instead of four (wip/w4-depth3, 5c92ee8 on e29c245): w4a16's four-warp form 82 -> 80
# registers without spills (six blocks an SM instead of five), the 8-16-row form 100 -> 87. c4's
# profile has the kernel latency-bound at five warps a scheduler (8-9 cycles an issue, issue slots
# 34-53% busy); the bounded variant with spills (unroll6) did not pay, this one has none. The same
# chains (depth changes when loads are issued, never the order of the sums).
#   BINS="graft graft_cuda_tests graft_matmul_bench" scripts/device-variants head=e29c245 d3=wip/w4-depth3
# (built 2026-12-02: .device/variants-next-depth3.tar.xz)
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/d1; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) head=$(cat $V/head/COMMIT) d3=$(cat $V/d3/COMMIT)" | tee $S
for f in w4a16 nvfp4; do
  for v in head d3; do
    timeout 40 $V/$v/graft_matmul_bench bench/configs/qwen3_5-27b --formats $f --rows 1,2,3,8,16 > $W/mm-$v-$f.txt 2>&1
    echo "$(date +%T) mm $v $f: exit $? $(grep -E '^step' $W/mm-$v-$f.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
  done
done
timeout 150 $V/d3/graft_cuda_tests --gtest_brief=1 > $W/suite-d3.txt 2>&1
echo "$(date +%T) suite d3: exit $? $(grep -E 'PASSED|FAILED' $W/suite-d3.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 16384 --model bench/configs/qwen3_5-27b --decode-steps 48 --prefill 128 --decode-batches 1,16 --dummy-quantize w4a16"
i=0
for v in head d3 head d3; do
  i=$((i+1))
  timeout 100 $V/$v/graft bench $B > $W/bench-$i-$v.txt 2> $W/bench-$i-$v.log
  echo "$(date +%T) $v: exit $? $(grep -E '^decode ' $W/bench-$i-$v.txt | tr -s ' ' | cut -d' ' -f3,6,7 | tr '\n' ' ')" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf d1.tgz d1 && rm -rf d1
