#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c5; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
timeout 200 scripts/device-test $W/test > $W/device-test.out 2>&1
echo "device-test: exit $? at $(date +%T)"; grep -E "exit|FAILED|gate:|ok$|differ|commit" $W/device-test.out | head -40
bench() {  # NAME SECONDS ARGS...
  local name=$1 secs=$2; shift 2
  timeout "$secs" "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 \
    --gpu-scratch 16384 --threads 16 --dummy-adapter-rank 0 --decode-steps 8 --repeats 1 --json "$W/$name.json" "$@" \
    > "$W/$name.txt" 2> "$W/$name.log"
  echo "== $name: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " "$W/$name.txt"
}
bench fp8-27b 120 --model bench/configs/qwen3_5-27b --dummy-quantize fp8-block --prefill 1024 --decode-batches 1,16,64
bench bf16-27b 100 --model bench/configs/qwen3_5-27b --prefill 1024 --decode-batches 1,16,64
bench w4a16-27b 100 --model bench/configs/qwen3_5-27b --dummy-quantize w4a16 --prefill 1024 --decode-batches 1,16,64
bench nvfp4-27b 100 --model bench/configs/qwen3_5-27b --dummy-quantize nvfp4 --prefill 1024 --decode-batches 1,16,64
bench fp8-32b 100 --model bench/configs/qwen3-32b --dummy-quantize fp8-block --prefill 1024,4096 --decode-batches 1,16
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
