#!/usr/bin/env bash
# Prepared for the next device call (not run; ~7.5 min of device work): two variants of main's
# e29c245, each its own branch, with the CUDA suite, their op measured alone and the whole model.
# - d3 = wip/w4-depth3 (5c92ee8): the 4-bit decode GEMM's register ring three stages deep instead
#   of four: w4a16's four-warp form 82 -> 80 registers without spills (six blocks an SM instead of
#   five), the 8-16-row form 100 -> 87. c4's profile has the kernel latency-bound at five warps a
#   scheduler (8-9 cycles an issue); unroll6 (the same six blocks through spills) did not pay.
# - arow = wip/attn-row (1529dd2): a decode row's flash attention on its whole block (c4: 25 us a
#   layer at context 130, one warp of four computing while three idle, 4-8 K / V round trips a
#   tile): the four warps split the scores by keys and P·V by output columns, the softmax in
#   FlashRows' order through shared memory, twice the load batch. The suite's
#   CudaOps.AttentionRowBitsIndependentOfChunking compares every single row (chunks of 1) and the
#   batched decode rows with the 700-row prefill bit for bit: it must pass before anything else
#   counts.
#   BINS="graft graft_cuda_tests graft_matmul_bench" scripts/device-variants head=e29c245 \
#     d3=wip/w4-depth3 arow=wip/attn-row
# (built 2026-12-02: .device/variants-next.tar.xz; carry it with the bundle and
# VARIANTS_ARCHIVE=.device/variants-next.tar.xz)
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/n1; mkdir -p $W/cut
S=$W/summary.txt
NCU=/usr/local/cuda/bin/ncu; [ -x $NCU ] || NCU=$(command -v ncu)
echo "start $(date +%T) $(for v in head d3 arow; do echo -n "$v=$(cat $V/$v/COMMIT) "; done)" | tee $S
tok() { grep -E '^decode ' $1 | tr -s ' ' | cut -d' ' -f3,6,7 | tr '\n' ' '; }
for v in arow d3; do
  timeout 150 $V/$v/graft_cuda_tests --gtest_brief=1 > $W/suite-$v.txt 2>&1
  echo "$(date +%T) suite $v: exit $? $(grep -E 'PASSED|FAILED' $W/suite-$v.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
done
for f in w4a16 nvfp4; do
  for v in head d3; do
    timeout 40 $V/$v/graft_matmul_bench bench/configs/qwen3_5-27b --formats $f --rows 1,2,3,8,16 > $W/mm-$v-$f.txt 2>&1
    echo "$(date +%T) mm $v $f: exit $? $(grep -E '^step' $W/mm-$v-$f.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
  done
done
scripts/device-cut-config bench/configs/qwen3_5-27b $W/cut 8
C="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 4096 --model $W/cut --dummy-quantize w4a16 --prefill 128"
for v in head arow; do
  timeout 60 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
    --kernel-name regex:'Flash' $V/$v/graft bench $C --decode-steps 3 --decode-batches 1,16 --no-cuda-graphs \
    > $W/ncu-attn-$v.csv 2> $W/ncu-attn-$v.log
  echo "$(date +%T) ncu attention $v: exit $?" | tee -a $S
  python3 scripts/ncu-kernel-times.py $W/ncu-attn-$v.csv | tee -a $S
  gzip -9 $W/ncu-attn-$v.csv
done
for v in head arow head arow; do
  timeout 60 $V/$v/graft bench $C --decode-steps 64 --decode-batches 1,16 > $W/cut-$v.txt 2> $W/cut-$v.log
  echo "$(date +%T) cut $v: exit $? $(tok $W/cut-$v.txt)" | tee -a $S
done
B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 16384 --model bench/configs/qwen3_5-27b --decode-steps 48 --prefill 128 --decode-batches 1,16 --dummy-quantize w4a16"
i=0
for v in head d3 arow head; do
  i=$((i+1))
  timeout 100 $V/$v/graft bench $B > $W/bench-$i-$v.txt 2> $W/bench-$i-$v.log
  echo "$(date +%T) whole $v: exit $? $(tok $W/bench-$i-$v.txt)" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf n1.tgz n1 && rm -rf n1
