#!/usr/bin/env bash
# Prepared for the next device call (not yet run; ~330 s): the W4A16 decode GEMM's warps a block
# (wip-w4-sweep.patch, git am onto af5cbfe: variant w4s) and the FP8 GEMM's K parts for the
# down / o projections (wip-fp8-parts.patch, onto 7df0334: variant f8p), main5 = af5cbfe:
#   BINS="graft graft_cuda_tests graft_matmul_bench" scripts/device-variants main5=af5cbfe w4s=wip/w4-sweep f8p=wip/fp8-parts main6=9615614
# main6 (the review commit's shared device helpers, not yet run on a GPU) runs the whole CUDA suite first.
# GRAFT_W4=few,wide,narrow,from: warps a block below `from` rows, and from it for N >= 8192 / N < 8192.
# GRAFT_FP8_PARTS=a,b: K parts (a cluster of that many blocks a tile) for K < 8192 (o) / K >= 8192 (down).
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/w4s; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) main5=$(cat $V/main5/COMMIT) w4s=$(cat $V/w4s/COMMIT) f8p=$(cat $V/f8p/COMMIT) main6=$(cat $V/main6/COMMIT)" | tee $S
timeout 100 $V/main6/graft_cuda_tests --gtest_brief=1 > $W/suite-main6.txt 2>&1
echo "$(date +%T) suite main6: exit $? $(grep -E 'PASSED|FAILED' $W/suite-main6.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
GRAFT_W4=2,16,4,2 timeout 100 $V/w4s/graft_cuda_tests --gtest_brief=1 --gtest_filter='CudaQuant.*' > $W/suite-w4s.txt 2>&1
echo "$(date +%T) suite w4s (2,16,4,2): exit $? $(grep -E 'PASSED|FAILED' $W/suite-w4s.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
mm() {  # tag env
  GRAFT_W4=$2 timeout 40 $V/w4s/graft_matmul_bench bench/configs/qwen3_5-27b --formats w4a16 --rows 1,8,16 > $W/mm-$1.txt 2>&1
  echo "$(date +%T) mm $1 ($2): exit $? $(grep -E '^step' $W/mm-$1.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
}
GRAFT_FP8_PARTS=3,4 timeout 100 $V/f8p/graft_cuda_tests --gtest_brief=1 --gtest_filter='CudaQuant.*' > $W/suite-f8p.txt 2>&1
echo "$(date +%T) suite f8p (3,4): exit $? $(grep -E 'PASSED|FAILED' $W/suite-f8p.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
for p in 2,2 3,2 4,2 2,3 2,4; do
  GRAFT_FP8_PARTS=$p timeout 40 $V/f8p/graft_matmul_bench bench/configs/qwen3_5-27b --formats fp8-block --rows 1,16 > $W/mm-f8p-$p.txt 2>&1
  echo "$(date +%T) mm f8p $p: exit $? $(grep -E '^step' $W/mm-f8p-$p.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
done
mm main 4,8,8,4
mm one2 2,8,8,4      # 1-3 rows: two warps (more blocks)
mm one8 8,8,8,4      # 1-3 rows: eight warps
mm w16 4,16,8,4      # wide from 4 rows: sixteen warps
mm n4 4,8,4,4        # narrow (down, o) from 4 rows: four warps
mm n2 4,8,2,4        # narrow: two warps
bench() {  # variant format env
  GRAFT_W4=$3 timeout 100 $V/$1/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $2 --prefill 128 --decode-batches 1,8,16 > $W/bench-$1-$2.txt 2> $W/bench-$1-$2.log
  echo "$(date +%T) $1 $2: exit $? $(grep -E '^decode ' $W/bench-$1-$2.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $S
}
bench main5 w4a16 ""
bench main5 nvfp4 ""
bench main6 w4a16 ""
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf w4s.tgz w4s && rm -rf w4s
