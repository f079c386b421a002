#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
W=$OUT/c2; mkdir -p $W
timeout 200 $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats fp8-block --rows 1,16,64,1024 --iters 20 > $W/mm.txt 2>$W/mm.log
echo "matmul bench: exit $?"; grep -E "rows=|^step|gate_up|down|qkv" $W/mm.txt | cut -c1-130
bench() {  # NAME SECONDS ARGS...
  local name=$1 secs=$2; shift 2
  timeout "$secs" "$B/graft" bench --model bench/configs/qwen3_5-27b --load-format dummy --device cuda --gpu-memory 120 \
    --gpu-scratch 16384 --threads 16 --dummy-adapter-rank 0 --decode-steps 8 --repeats 1 --json "$W/$name.json" "$@" \
    > "$W/$name.txt" 2> "$W/$name.log"
  echo "== $name: exit $?"; grep -E "^(prefill|decode) " "$W/$name.txt"
}
bench fp8-block 200 --dummy-quantize fp8-block --prefill 1024,4096 --decode-batches 1,16,64
bench bf16 120 --prefill 1024,4096 --decode-batches 1
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
