#!/usr/bin/env bash
# c9 (prepared, not run: the session's device time ran out — the start was refused): the bf16
# one-row narrow GEMM with the weights as the A operand as it would land (wip/bf16-rowa4 c3caded,
# patch wip-bf16-rowa4.patch beside this; c8 measured the same kernel through an environment
# switch): the CUDA suite on exactly that code, the bf16 projections at one row, the whole model
# bf16 batch 1. Rebase the branch onto main, then build here by
#   BINS="graft graft_matmul_bench graft_cuda_tests" scripts/device-variants head=wip/bf16-rowa4
# and carried as .device/variants-c9s.tar.xz with the bundle.
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants-c9s.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c9; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) head=$(cat $V/head/COMMIT)" | tee $S
timeout 150 $V/head/graft_cuda_tests --gtest_brief=1 > $W/suite-head.txt 2>&1
echo "$(date +%T) suite head: exit $? $(grep -E 'PASSED|FAILED' $W/suite-head.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $S
line() { grep -E "$2" $1 | awk '{print $(NF-3)}' | head -1; }
timeout 60 $V/head/graft_matmul_bench bench/configs/qwen3_5-27b --formats bf16 --rows 1 > $W/mm-head.txt 2>&1
echo "$(date +%T) mm: exit $? gdn-out $(line $W/mm-head.txt 'linear-attention out') down $(line $W/mm-head.txt 'gdn mlp down') o $(line $W/mm-head.txt 'attention o ') step $(grep -E '^step' $W/mm-head.txt | awk '{print $(NF-8)}')" | tee -a $S
tok() { grep -E '^decode ' $1 | tr -s ' ' | cut -d' ' -f3,6,7 | tr '\n' ' '; }
B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 16384 --model bench/configs/qwen3_5-27b --decode-steps 48 --prefill 128 --decode-batches 1,16"
timeout 90 $V/head/graft bench $B --dummy-quantize none > $W/bench-none.txt 2> $W/bench-none.log
echo "$(date +%T) bf16 head: exit $? $(tok $W/bench-none.txt)" | tee -a $S
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c9.tgz c9 && rm -rf c9
