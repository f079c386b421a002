#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c4; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
timeout 150 scripts/device-test $W/test > $W/device-test.out 2>&1
echo "device-test: exit $? at $(date +%T)"; grep -v "^\s*$" $W/device-test.out | tail -25
for f in fp8-block w4a16 nvfp4 none; do
  q=""; [ $f != none ] && q="--dummy-quantize $f"
  timeout 110 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 8 --repeats 1 --json "$W/$f-27b.json" --model bench/configs/qwen3_5-27b \
    $q --prefill 1024 --decode-batches 1,16,64 > $W/$f-27b.txt 2> $W/$f-27b.log
  echo "== $f-27b: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " $W/$f-27b.txt
done
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
