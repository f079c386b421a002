#!/usr/bin/env bash
# c3: the bf16 decode GEMM's one-row shape swept (wip/bf16-shape1: GRAFT_SHAPE1 picks the narrow
# shape — N < 8192: down, o, GDN out — GRAFT_SHAPE1W the wide one; 'a' is main's), projections
# alone, then the whole model bf16 batch 1 with the best pair against main's, alternated, and
# the CUDA suite under the best pair (every shape keeps each output's chain: the same bits).
# Built here by
#   BINS="graft graft_matmul_bench graft_cuda_tests" scripts/device-variants bfs=wip/bf16-shape1
# and carried as .device/variants-c3s.tar.xz with the bundle.
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants-c3s.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c3; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) bfs=$(cat $V/bfs/COMMIT)" | tee $S
step() { grep -E '^step' $1 | awk '{print $(NF-8)}'; }
line() { grep -E "$2" $1 | awk '{print $(NF-3)}' | head -1; }
best_n=a; best_n_us=1e12; best_w=a; best_w_us=1e12
for n in a b c d e f g; do
  GRAFT_SHAPE1=$n timeout 60 $V/bfs/graft_matmul_bench bench/configs/qwen3_5-27b --formats bf16 --rows 1 > $W/mm-n$n.txt 2>&1
  us=$(awk '/linear-attention out|attention o |mlp down/{s += $(NF-3)} END{print s}' $W/mm-n$n.txt)
  echo "$(date +%T) narrow $n: exit $? gdn-out $(line $W/mm-n$n.txt 'linear-attention out') down $(line $W/mm-n$n.txt 'gdn mlp down') o $(line $W/mm-n$n.txt 'attention o ') sum $us step $(step $W/mm-n$n.txt)" | tee -a $S
  if awk -v a=$us -v b=$best_n_us 'BEGIN{exit !(a < b)}'; then best_n=$n; best_n_us=$us; fi
done
for w in a b c d e f; do
  GRAFT_SHAPE1W=$w timeout 60 $V/bfs/graft_matmul_bench bench/configs/qwen3_5-27b --formats bf16 --rows 1 > $W/mm-w$w.txt 2>&1
  us=$(awk '/linear-attention in|attention q.k.v|mlp gate/{s += $(NF-3)} END{print s}' $W/mm-w$w.txt)
  echo "$(date +%T) wide $w: exit $? gdn-in $(line $W/mm-w$w.txt 'linear-attention in') gate-up $(line $W/mm-w$w.txt 'gdn mlp gate') qkv $(line $W/mm-w$w.txt 'q.k.v') head $(line $W/mm-w$w.txt '^head') sum $us step $(step $W/mm-w$w.txt)" | tee -a $S
  if awk -v a=$us -v b=$best_w_us 'BEGIN{exit !(a < b)}'; then best_w=$w; best_w_us=$us; fi
done
echo "best narrow $best_n wide $best_w" | tee -a $S
tok() { grep -E '^decode ' $1 | tr -s ' ' | cut -d' ' -f3,6,7 | tr '\n' ' '; }
B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 16384 --model bench/configs/qwen3_5-27b --decode-steps 48 --prefill 128 --decode-batches 1"
for r in 1 2; do
  timeout 90 $V/bfs/graft bench $B --dummy-quantize none > $W/bench-$r-main.txt 2> $W/bench-$r-main.log
  echo "$(date +%T) bf16 main: exit $? $(tok $W/bench-$r-main.txt)" | tee -a $S
  GRAFT_SHAPE1=$best_n GRAFT_SHAPE1W=$best_w timeout 90 $V/bfs/graft bench $B --dummy-quantize none > $W/bench-$r-best.txt 2> $W/bench-$r-best.log
  echo "$(date +%T) bf16 best ($best_n $best_w): exit $? $(tok $W/bench-$r-best.txt)" | tee -a $S
done
GRAFT_SHAPE1=$best_n GRAFT_SHAPE1W=$best_w timeout 150 $V/bfs/graft_cuda_tests --gtest_brief=1 > $W/suite-best.txt 2>&1
echo "$(date +%T) suite ($best_n $best_w): exit $? $(grep -E 'PASSED|FAILED' $W/suite-best.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
