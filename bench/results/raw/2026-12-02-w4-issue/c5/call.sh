#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-c5.tar.xz"] (models/release/model.safetensors moved out)
# tma = wip/w4-tma b42bf68 (W4A16 / NVFP4 decode by 2-D bulk tensor copies, a block's slice at
# once) against head = main 2bea991: the CUDA suite on tma, then the projections. The last ~7
# device minutes of the session: results are written as they come.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-c5.tar.xz
. scripts/device-env
. scripts/device-env-variants
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c5; mkdir -p $W
echo "start $(date +%T) head $(cat $V/head/COMMIT) tma $(cat $V/tma/COMMIT)" | tee $W/summary.txt
timeout 60 $V/tma/graft_cuda_tests --gtest_brief=1 --gtest_filter='CudaQuant.*' > $W/tests-tma-quant.log 2>&1
echo "$(date +%T) tma CudaQuant: exit $? $(grep -E '^\[  (PASSED|FAILED)' $W/tests-tma-quant.log | tr '\n' ' ')" | tee -a $W/summary.txt
grep -E "Failure|FAILED" $W/tests-tma-quant.log | head -5
for v in tma head; do
  timeout 60 $V/$v/graft_matmul_bench bench/configs/qwen3_5-27b --formats w4a16,nvfp4 --rows 1,16 > $W/matmul-$v.txt 2>&1
  echo "$(date +%T) $v matmul: exit $?" | tee -a $W/summary.txt
  grep -E "rows=|^step|gate.up|down" $W/matmul-$v.txt | grep -v "^attn" | cut -c1-118 | tee -a $W/summary.txt
done
timeout 60 $V/tma/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests-tma.log 2>&1
echo "$(date +%T) tma cuda suite: exit $? $(grep -E '^\[  (PASSED|FAILED)' $W/cuda-tests-tma.log | tr '\n' ' ')" | tee -a $W/summary.txt
echo "end $(date +%T)"
