#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-ap5.tar.xz"] (models/release/model.safetensors moved out)
# main4 = 0ea75b3; w4w = wip/w4-warps (the W4A16 decode GEMM on eight-warp blocks from four rows).
# The last ~4 minutes of the session's device time: w4w's CUDA suite, then the 4-bit projections.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-ap5.tar.xz
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c5; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) main4=$(cat $V/main4/COMMIT) w4w=$(cat $V/w4w/COMMIT)" | tee $S
timeout 60 $V/w4w/graft_cuda_tests --gtest_brief=1 > $W/suite-w4w.txt 2>&1
echo "$(date +%T) suite w4w: exit $? $(grep -E 'PASSED|FAILED' $W/suite-w4w.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $S
mm() {  # variant format rows
  timeout 30 $V/$1/graft_matmul_bench bench/configs/qwen3_5-27b --formats $2 --rows $3 > $W/mm-$1-$2.txt 2>&1
  echo "$(date +%T) mm $1 $2: exit $? $(grep -E '^step' $W/mm-$1-$2.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
}
mm w4w w4a16 1,4,8,16
mm main4 w4a16 1,4,8,16
mm w4w nvfp4 1,16
mm main4 nvfp4 1,16
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
