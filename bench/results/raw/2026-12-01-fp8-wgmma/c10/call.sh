#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
W=$OUT/c10; mkdir -p $W
bench() {  # NAME SECONDS ARGS...
  local name=$1 secs=$2; shift 2
  timeout "$secs" "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 \
    --gpu-scratch 16384 --threads 16 --dummy-adapter-rank 0 --decode-steps 8 --repeats 1 --json "$W/$name.json" "$@" \
    > "$W/$name.txt" 2> "$W/$name.log"
  echo "== $name: exit $?"; grep -E "^(prefill|decode) " "$W/$name.txt"
}
bench bf16-32b 200 --model bench/configs/qwen3-32b --prefill 1024,4096 --decode-batches 1
bench fp8-32b 250 --model bench/configs/qwen3-32b --dummy-quantize fp8-block --prefill 1024,4096 --decode-batches 1
cd $OUT && tar czf c10.tgz c10 && rm -rf c10
