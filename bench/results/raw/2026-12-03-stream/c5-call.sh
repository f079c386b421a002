#!/usr/bin/env bash
# c5: a second sweep of the bf16 decode GEMM's one-row narrow shape around c3's winner (two
# warps, six 256-column stages, now main's 'a'): wip/bf16-shape2, GRAFT_SHAPE1 picks the shape.
# Projections alone, then the whole model bf16 batch 1 with the best against main's shape.
# Built here by
#   BINS="graft graft_matmul_bench" scripts/device-variants bfs2=wip/bf16-shape2
# and carried as .device/variants-c5s.tar.xz with the bundle.
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants-c5s.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c5; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) bfs2=$(cat $V/bfs2/COMMIT)" | tee $S
line() { grep -E "$2" $1 | awk '{print $(NF-3)}' | head -1; }
best=a; best_us=1e12
for n in a b c d e f g; do
  GRAFT_SHAPE1=$n timeout 60 $V/bfs2/graft_matmul_bench bench/configs/qwen3_5-27b --formats bf16 --rows 1 > $W/mm-n$n.txt 2>&1
  us=$(awk '/linear-attention out|attention o |mlp down/{s += $(NF-3)} END{print s}' $W/mm-n$n.txt)
  echo "$(date +%T) narrow $n: exit $? gdn-out $(line $W/mm-n$n.txt 'linear-attention out') down $(line $W/mm-n$n.txt 'gdn mlp down') o $(line $W/mm-n$n.txt 'attention o ') sum $us" | tee -a $S
  if awk -v a=$us -v b=$best_us 'BEGIN{exit !(a < b)}'; then best=$n; best_us=$us; fi
done
echo "best narrow $best" | tee -a $S
if [ "$best" != a ]; then
  tok() { grep -E '^decode ' $1 | tr -s ' ' | cut -d' ' -f3,6,7 | tr '\n' ' '; }
  B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 16384 --model bench/configs/qwen3_5-27b --decode-steps 48 --prefill 128 --decode-batches 1"
  for r in 1 2; do
    timeout 90 $V/bfs2/graft bench $B --dummy-quantize none > $W/bench-$r-main.txt 2> $W/bench-$r-main.log
    echo "$(date +%T) bf16 main: exit $? $(tok $W/bench-$r-main.txt)" | tee -a $S
    GRAFT_SHAPE1=$best timeout 90 $V/bfs2/graft bench $B --dummy-quantize none > $W/bench-$r-best.txt 2> $W/bench-$r-best.log
    echo "$(date +%T) bf16 best ($best): exit $? $(tok $W/bench-$r-best.txt)" | tee -a $S
  done
fi
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
