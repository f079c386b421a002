#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-ap4.tar.xz"] (models/release/model.safetensors moved out)
# main4 = 0ea75b3 (the bf16 decode GEMM's shape by rows and outputs, from c3's sweep): its CUDA
# suite, the bf16 projections at 1-64 rows, the whole model (bf16 at every batch, w4a16, fp8-block).
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-ap4.tar.xz
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c4; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) main4=$(cat $V/main4/COMMIT)" | tee $S
timeout 100 $V/main4/graft_cuda_tests --gtest_brief=1 > $W/suite-main4.txt 2>&1
echo "$(date +%T) suite main4: exit $? $(grep -E 'PASSED|FAILED' $W/suite-main4.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $S
timeout 45 $V/main4/graft_matmul_bench bench/configs/qwen3_5-27b --formats bf16 --rows 1,2,4,8,16,32,64 > $W/mm-main4.txt 2>&1
echo "$(date +%T) mm main4: exit $? $(grep -E '^step' $W/mm-main4.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
bench() {  # variant format batches
  timeout 100 $V/$1/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $2 --prefill 1024 --decode-batches $3 > $W/bench-$1-$2.txt 2> $W/bench-$1-$2.log
  echo "$(date +%T) $1 $2: exit $? $(grep -E '^(prefill|decode) ' $W/bench-$1-$2.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-400)" | tee -a $S
}
bench main4 none 1,2,4,8,16,32,64
bench main4 w4a16 1,16
bench main4 fp8-block 1,16
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
