#!/usr/bin/env bash
# c2: the 4-bit decode GEMM below four rows in blocks of fewer warps (same chains, same bits;
# more warps resident an SM at 88 allocated registers: 4-warp blocks 5 x 4 = 20, 2-warp 11 x 2 =
# 22, 1-warp 23), against main 491d841. Variants built here by
#   BINS="graft graft_cuda_tests graft_matmul_bench" scripts/device-variants head=491d841 \
#     w2=wip/w4-warps2 w1=wip/w4-warps1
# and carried as .device/variants-c2.tar.xz with the bundle.
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c2; mkdir -p $W/cut
S=$W/summary.txt
echo "start $(date +%T) $(for v in head w2 w1; do echo -n "$v=$(cat $V/$v/COMMIT) "; done)" | tee $S
tok() { grep -E '^decode ' $1 | tr -s ' ' | cut -d' ' -f3,6,7 | tr '\n' ' '; }
for v in w1 w2; do
  timeout 150 $V/$v/graft_cuda_tests --gtest_brief=1 > $W/suite-$v.txt 2>&1
  echo "$(date +%T) suite $v: exit $? $(grep -E 'PASSED|FAILED' $W/suite-$v.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
done
for f in w4a16 nvfp4; do
  for v in head w2 w1; do
    timeout 40 $V/$v/graft_matmul_bench bench/configs/qwen3_5-27b --formats $f --rows 1,2,3,8,16 > $W/mm-$v-$f.txt 2>&1
    echo "$(date +%T) mm $v $f: exit $? $(grep -E '^step' $W/mm-$v-$f.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
  done
done
scripts/device-cut-config bench/configs/qwen3_5-27b $W/cut 8
C="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 4096 --model $W/cut --dummy-quantize w4a16 --prefill 128"
i=0
for v in head w2 w1 head w2 w1; do
  i=$((i+1))
  timeout 60 $V/$v/graft bench $C --decode-steps 64 --decode-batches 1,16 > $W/cut-$i-$v.txt 2> $W/cut-$i-$v.log
  echo "$(date +%T) cut $v: exit $? $(tok $W/cut-$i-$v.txt)" | tee -a $S
done
B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 16384 --model bench/configs/qwen3_5-27b --decode-steps 48 --prefill 128 --decode-batches 1,16 --dummy-quantize w4a16"
i=0
for v in head w1 w2; do
  i=$((i+1))
  timeout 100 $V/$v/graft bench $B > $W/bench-$i-$v.txt 2> $W/bench-$i-$v.log
  echo "$(date +%T) whole $v: exit $? $(tok $W/bench-$i-$v.txt)" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
