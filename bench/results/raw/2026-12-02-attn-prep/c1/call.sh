#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-ap1.tar.xz"] (models/release/model.safetensors moved out)
# main = 28f56fa (first GPU run of its review commit); attn = main + the attention input in one
# launch (wip/attn-prep rebased); ks = main + fp8-block down / o in two K halves as 2-block
# clusters (wip/fp8-ksplit rebased). The CUDA suite of each, then the whole model.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-ap1.tar.xz
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c1; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) $(for v in main attn ks; do echo -n "$v=$(cat $V/$v/COMMIT) "; done)" | tee $S
for v in main attn ks; do
  timeout 100 $V/$v/graft_cuda_tests --gtest_brief=1 > $W/suite-$v.txt 2>&1
  echo "$(date +%T) suite $v: exit $? $(grep -E 'PASSED|FAILED' $W/suite-$v.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $S
done
mm() {  # variant format
  timeout 45 $V/$1/graft_matmul_bench bench/configs/qwen3_5-27b --formats $2 --rows 1,16 > $W/mm-$1-$2.txt 2>&1
  echo "$(date +%T) mm $1 $2: exit $? $(grep -E '^step' $W/mm-$1-$2.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $S
}
mm ks fp8-block
mm main fp8-block
bench() {  # variant format prefill
  timeout 100 $V/$1/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $2 --prefill $3 --decode-batches 1,16 > $W/bench-$1-$2-$3.txt 2> $W/bench-$1-$2-$3.log
  echo "$(date +%T) $1 $2 p$3: exit $? $(grep -E '^(prefill|decode) ' $W/bench-$1-$2-$3.txt | tr '\n' ' ' | cut -c1-260)" | tee -a $S
}
bench attn w4a16 128
bench main w4a16 128
bench attn none 128
bench main none 128
bench ks fp8-block 1024
bench main fp8-block 1024
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
