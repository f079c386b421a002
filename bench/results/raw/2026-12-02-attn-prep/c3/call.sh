#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-ap3.tar.xz"] (models/release/model.safetensors moved out)
# main3 = 928e8f5 (main: FP8 K halves, GatedQkvPrep, bf16 decode 2-16 rows on eight warps);
# sweep = main3 + GRAFT_DEC16=shape,from / GRAFT_DEC64=v choosing the bf16 decode GEMM's shapes.
# 1) main3's CUDA suite; 2) the whole model on main3; 3) the shape sweep at 1-16 and 32/64 rows.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-ap3.tar.xz
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c3; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) $(for v in main3 sweep; do echo -n "$v=$(cat $V/$v/COMMIT) "; done)" | tee $S
timeout 100 $V/main3/graft_cuda_tests --gtest_brief=1 > $W/suite-main3.txt 2>&1
echo "$(date +%T) suite main3: exit $? $(grep -E 'PASSED|FAILED' $W/suite-main3.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $S
bench() {  # variant format batches
  timeout 100 $V/$1/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $2 --prefill 1024 --decode-batches $3 > $W/bench-$1-$2.txt 2> $W/bench-$1-$2.log
  echo "$(date +%T) $1 $2: exit $? $(grep -E '^(prefill|decode) ' $W/bench-$1-$2.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-400)" | tee -a $S
}
bench main3 none 1,2,4,8,16,32,64
bench main3 w4a16 1,16
bench main3 fp8-block 1,16
mm() {  # tag rows env...
  local tag=$1 rows=$2; shift 2
  env "$@" timeout 45 $V/sweep/graft_matmul_bench bench/configs/qwen3_5-27b --formats bf16 --rows $rows > $W/mm-$tag.txt 2>&1
  echo "$(date +%T) mm $tag: exit $? $(grep -E '^step' $W/mm-$tag.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
}
mm main 1,2,4,8,16,32,64 GRAFT_DEC16=0
for sh in 4 7 8 9 10 11; do mm s$sh 1,2,4,16 GRAFT_DEC16=$sh,1; done
for v in 1 2; do mm d64-$v 32,64 GRAFT_DEC64=$v; done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
