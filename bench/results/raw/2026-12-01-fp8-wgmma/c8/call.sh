#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
W=$OUT/c8; mkdir -p $W
for d in 0 1 2 3 4; do
  FP8_D=$d timeout 100 $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats fp8-block --rows 1,16 --iters 30 > $W/mm-d$d.txt 2>&1
  echo "== D$d"; grep -E "rows=|^step|mlp" $W/mm-d$d.txt | grep -v attn | cut -c1-100
done
for p in 0 1 2 3; do
  FP8_P=$p timeout 100 $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats fp8-block --rows 1024 --iters 10 > $W/mm-p$p.txt 2>&1
  echo "== P$p"; grep -E "^step|mlp|qkv" $W/mm-p$p.txt | grep -v attn | cut -c1-130
done
timeout 100 $B/graft_matmul_bench bench/configs/qwen3-32b --formats bf16,fp8-block --rows 1024 --iters 10 > $W/mm-32b.txt 2>&1
echo "== 32b"; grep -E "rows=|^step" $W/mm-32b.txt | cut -c1-130
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
