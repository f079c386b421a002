#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export PATH=$PATH:/usr/local/cuda/bin
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c1; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
timeout 90 $B/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests.log 2>&1
echo "cuda tests: exit $? at $(date +%T)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A5 $W/cuda-tests.log | head -30
timeout 120 $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats fp8-block --rows 1,16,64 > $W/matmul-fp8.txt 2>&1
echo "matmul fp8: exit $? at $(date +%T)"; grep -E "out |down |attention o|step" $W/matmul-fp8.txt
timeout 100 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 6 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize fp8-block --prefill 1024,4096 --decode-batches 1,16,64 > $W/fp8-27b.txt 2> $W/fp8-27b.log
echo "== fp8 27b: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " $W/fp8-27b.txt
for s in 17:down 12:gateup; do
  timeout 90 ncu --clock-control none -k regex:GemmDecodeW4Kernel -s ${s%%:*} -c 1 --set full --import-source no --page source --csv --print-source sass \
    $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats w4a16 --rows 1 --iters 2 2>&1 | xz -9 > $W/ncu-w4-${s##*:}-sass.csv.xz
  timeout 90 ncu --clock-control none -k regex:GemmDecodeW4Kernel -s ${s%%:*} -c 1 --set full \
    $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats w4a16 --rows 1 --iters 2 > $W/ncu-w4-${s##*:}-details.txt 2>&1
  echo "== ncu ${s##*:}: at $(date +%T)"; ls -la $W/ncu-w4-${s##*:}*
done
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
