#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c3; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
GRAFT_PDL=1 timeout 90 $B/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests-pdl.log 2>&1
echo "cuda tests pdl: exit $? at $(date +%T)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A5 $W/cuda-tests-pdl.log | head -30
for v in 0 1; do
  GRAFT_PDL=$v timeout 60 $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats fp8-block --rows 1 --iters 20 > $W/mm-pdl$v.txt 2>&1
  echo "== matmul pdl $v"; grep -E "rows=|\[|step" $W/mm-pdl$v.txt | cut -c1-20,60-
done
GRAFT_PDL=1 timeout 100 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 8 --repeats 1 --json "$W/fp8-27b-pdl.json" --model bench/configs/qwen3_5-27b \
  --dummy-quantize fp8-block --prefill 1024 --decode-batches 1,16,64 > $W/fp8-27b-pdl.txt 2> $W/fp8-27b-pdl.log
echo "== fp8-27b pdl: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " $W/fp8-27b-pdl.txt; tail -3 $W/fp8-27b-pdl.log
# Per-launch GPU time (warm caches), the decode passes told apart by their kernels.
timeout 200 /usr/local/cuda/bin/ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
  "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 4096 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 2 --repeats 1 --model bench/configs/qwen3_5-27b \
  --dummy-quantize fp8-block --prefill 16 --decode-batches 1 > $W/ncu-raw.csv 2> $W/ncu-raw.log
echo "== ncu: exit $? at $(date +%T)"; wc -l $W/ncu-raw.csv
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
