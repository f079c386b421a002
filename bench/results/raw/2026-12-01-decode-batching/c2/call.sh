#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c2; mkdir -p $W
ldd $B/graft | grep -i "not found"; echo "start $(date +%T)"
timeout 280 scripts/device-test $W/test > $W/device-test.out 2>&1
echo "device-test: exit $? at $(date +%T)"; grep -E "exit|FAILED|gate:|ok$|differ|commit" $W/device-test.out | head -40
bench() {  # NAME SECONDS ARGS...
  local name=$1 secs=$2; shift 2
  timeout "$secs" "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 \
    --gpu-scratch 16384 --threads 16 --dummy-adapter-rank 0 --decode-steps 8 --repeats 1 --json "$W/$name.json" "$@" \
    > "$W/$name.txt" 2> "$W/$name.log"
  echo "== $name: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " "$W/$name.txt"
}
bench fp8-27b 140 --model bench/configs/qwen3_5-27b --dummy-quantize fp8-block --prefill 1024,4096 --decode-batches 1,16,64
bench w4a16-27b 100 --model bench/configs/qwen3_5-27b --dummy-quantize w4a16 --prefill 1024 --decode-batches 1,16
timeout 60 $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats fp8-block,w4a16 --rows 1,16 --iters 20 > $W/mm.txt 2>&1; echo "mm exit $?"
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
