#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-ew1.tar.xz"] (models/release/model.safetensors moved out)
# main = 526f563; rlate = wip/fp8-release-late (FP8 GEMM releases its successor only at exit);
# fe = wip/fp8-early (its first weight tiles by TMA before the PDL wait); fel = both;
# bf16e = wip/bf16-early (bf16 decode GEMM's first weight stages before the wait);
# sums = wip/sums (SumSplits: eight slices' loads at once); all = bf16e + fel + sums (the suite).
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-ew1.tar.xz
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c1; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) $(for v in main rlate fe fel bf16e sums all; do echo -n "$v=$(cat $V/$v/COMMIT) "; done)" | tee $S
timeout 90 $V/all/graft_cuda_tests > $W/suite-all.txt 2>&1
echo "$(date +%T) suite all: exit $? $(grep -E 'PASSED|FAILED' $W/suite-all.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
mm() {  # variant format
  timeout 45 $V/$1/graft_matmul_bench bench/configs/qwen3_5-27b --formats $2 --rows 1,16 > $W/mm-$1-$2.txt 2>&1
  echo "$(date +%T) mm $1 $2: exit $? $(grep -E '^step|step:' $W/mm-$1-$2.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $S
}
for v in main rlate fe fel; do mm $v fp8-block; done
for v in main bf16e; do mm $v bf16; done
for v in main sums; do mm $v w4a16; done
bench() {  # variant format
  timeout 100 $V/$1/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $2 --prefill 128 --decode-batches 1,16 > $W/bench-$1-$2.txt 2> $W/bench-$1-$2.log
  echo "$(date +%T) $1 $2: exit $? $(grep -E '^decode ' $W/bench-$1-$2.txt | tr '\n' ' ' | cut -c1-220)" | tee -a $S
}
bench sums w4a16
bench main w4a16
bench fel fp8-block
bench main fp8-block
bench bf16e none
bench main none
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
