#!/usr/bin/env bash
# c8: the bf16 one-row decode GEMM with the weights as the mma's A operand (wip/bf16-rowa:
# GRAFT_ROWA=n for the narrow weights, =a for every one-row product; GRAFT_ROWA_SHAPE picks warps /
# stage columns / stages) — the CUDA suite under it (the row-bits tests: the same bits as the
# other forms?), projections alone, and the whole model bf16 batch 1 against main's form.
# Built here by
#   BINS="graft graft_matmul_bench graft_cuda_tests" scripts/device-variants rowa=wip/bf16-rowa
# and carried as .device/variants-c8s.tar.xz with the bundle.
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants-c8s.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c8; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) rowa=$(cat $V/rowa/COMMIT)" | tee $S
GRAFT_ROWA=a timeout 150 $V/rowa/graft_cuda_tests --gtest_brief=1 > $W/suite-rowa.txt 2>&1
echo "$(date +%T) suite GRAFT_ROWA=a: exit $? $(grep -E 'PASSED|FAILED' $W/suite-rowa.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $S
line() { grep -E "$2" $1 | awk '{print $(NF-3)}' | head -1; }
mm() {  # tag, env...
  local tag=$1; shift
  env "$@" timeout 60 $V/rowa/graft_matmul_bench bench/configs/qwen3_5-27b --formats bf16 --rows 1 > $W/mm-$tag.txt 2>&1
  echo "$(date +%T) $tag: exit $? gdn-in $(line $W/mm-$tag.txt 'linear-attention in') gdn-out $(line $W/mm-$tag.txt 'linear-attention out') gate-up $(line $W/mm-$tag.txt 'gdn mlp gate') down $(line $W/mm-$tag.txt 'gdn mlp down') qkv $(line $W/mm-$tag.txt 'q.k.v') o $(line $W/mm-$tag.txt 'attention o ') head $(line $W/mm-$tag.txt '^head') step $(grep -E '^step' $W/mm-$tag.txt | awk '{print $(NF-8)}')" | tee -a $S
}
mm main GRAFT_ROWA=0
for sh in a b c d e; do mm n$sh GRAFT_ROWA=n GRAFT_ROWA_SHAPE=$sh; done
mm all-a GRAFT_ROWA=a GRAFT_ROWA_SHAPE=a
mm all-b GRAFT_ROWA=a GRAFT_ROWA_SHAPE=b
best=$(for f in $W/mm-n?.txt; do echo "$(awk '/linear-attention out|attention o |mlp down/{s += $(NF-3)} END{print s}' $f) $(basename $f .txt | cut -c5)"; done | sort -n | head -1 | cut -d' ' -f2)
echo "best narrow shape $best" | tee -a $S
tok() { grep -E '^decode ' $1 | tr -s ' ' | cut -d' ' -f3,6,7 | tr '\n' ' '; }
B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 16384 --model bench/configs/qwen3_5-27b --decode-steps 48 --prefill 128 --decode-batches 1"
for r in 1 2; do
  GRAFT_ROWA=0 timeout 90 $V/rowa/graft bench $B --dummy-quantize none > $W/bench-$r-main.txt 2> $W/bench-$r-main.log
  echo "$(date +%T) bf16 main: exit $? $(tok $W/bench-$r-main.txt)" | tee -a $S
  GRAFT_ROWA=n GRAFT_ROWA_SHAPE=$best timeout 90 $V/rowa/graft bench $B --dummy-quantize none > $W/bench-$r-rowa.txt 2> $W/bench-$r-rowa.log
  echo "$(date +%T) bf16 rowa narrow $best: exit $? $(tok $W/bench-$r-rowa.txt)" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
