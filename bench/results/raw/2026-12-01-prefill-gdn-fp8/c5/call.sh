#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c5; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
timeout 120 $B/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests.log 2>&1
echo "cuda tests: exit $? at $(date +%T)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A5 $W/cuda-tests.log | head -40
for f in fp8-block none; do
  q=""; [ $f != none ] && q="--dummy-quantize $f"
  b=1; [ $f != none ] && b=1,16,64
  timeout 140 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 6 --repeats 1 --json "$W/$f-27b.json" --model bench/configs/qwen3_5-27b \
    $q --prefill 1024,4096 --decode-batches $b > $W/$f-27b.txt 2> $W/$f-27b.log
  echo "== $f-27b: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " $W/$f-27b.txt; tail -1 $W/$f-27b.log
done
M=/tmp/q35-4l; mkdir -p $M
python3 - <<'PY'
import json
c = json.load(open('bench/configs/qwen3_5-27b/config.json'))
c['num_hidden_layers'] = 4; c['layer_types'] = c['layer_types'][:4]
json.dump(c, open('/tmp/q35-4l/config.json', 'w'))
PY
timeout 150 /usr/local/cuda/bin/ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
  "$B/graft" bench --load-format dummy --device cuda --gpu-memory 40 --gpu-scratch 8192 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 2 --repeats 1 --model $M --prefill 1024 --decode-batches 1 \
  --dummy-quantize fp8-block > $W/ncu-all.csv 2> $W/ncu-all.log
echo "ncu all: exit $? at $(date +%T)"
timeout 220 scripts/device-test $W/test > $W/device-test.out 2>&1
echo "device-test: exit $? at $(date +%T)"; grep -v "^\s*$" $W/device-test.out | tail -30
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
