#!/usr/bin/env bash
# Prepared for the next device call (not run; ~6 min): the 4-bit decode GEMM with its whole
# 1,024-column slices unrolled at compile time (wip/w4-unroll, patch wip-w4-unroll.patch beside
# this file): no ring moves between rounds, constant load / ldmatrix offsets, no per-stage index
# tests — the same chains. ncu (2026-12-02-w4-issue.md, c1) counted ~26 warp-instructions a 16 x 16
# tile, ~10 of them not the dequantization (IMAD 2.45, LEA 0.89, IADD3 0.83, ISETP 0.75, BRA 0.33
# ...), at 49% of the issue slots. Registers (ptxas): w4a16's four-warp form 79 -> 82 (88
# allocated: 6 -> 5 blocks an SM), NVFP4 83 -> 87; wip/w4-unroll6 bounds the four-warp form to six
# blocks (80 registers, 40 / 72 B of spills for w4a16, more for NVFP4 and fp32 scales).
#   BINS="graft graft_cuda_tests graft_matmul_bench" scripts/device-variants head=HEAD \
#     unroll=wip/w4-unroll unroll6=wip/w4-unroll6
# (built 2026-12-02: .device/variants-next-unroll.tar.xz holds head=72204da, unroll=0157ced, unroll6=0fa9e46)
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/u1; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) $(for v in head unroll unroll6; do echo -n "$v=$(cat $V/$v/COMMIT) "; done)" | tee $S
for f in w4a16 nvfp4; do
  for v in head unroll unroll6; do
    timeout 40 $V/$v/graft_matmul_bench bench/configs/qwen3_5-27b --formats $f --rows 1,2,3,8,16 > $W/mm-$v-$f.txt 2>&1
    echo "$(date +%T) mm $v $f: exit $? $(grep -E '^step' $W/mm-$v-$f.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
  done
done
for v in unroll unroll6; do
  timeout 150 $V/$v/graft_cuda_tests --gtest_brief=1 > $W/suite-$v.txt 2>&1
  echo "$(date +%T) suite $v: exit $? $(grep -E 'PASSED|FAILED' $W/suite-$v.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
done
B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 16384 --model bench/configs/qwen3_5-27b --decode-steps 48 --prefill 128 --dummy-quantize w4a16"
i=0
for v in head unroll head unroll; do
  i=$((i+1))
  timeout 100 $V/$v/graft bench $B --decode-batches 1,16 > $W/bench-$i-$v.txt 2> $W/bench-$i-$v.log
  echo "$(date +%T) $v: exit $? $(grep -E '^decode ' $W/bench-$i-$v.txt | tr -s ' ' | cut -d' ' -f3,7 | tr '\n' ' ')" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf u1.tgz u1 && rm -rf u1
