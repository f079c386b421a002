#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-ew2.tar.xz"] (models/release/model.safetensors moved out)
# main = 526f563; gdn = wip/gdn-fused (the GDN gates and gated norm inside the token kernel);
# n32 / n16 = gdn + the FP8 GEMM taking 32 / 16 outputs a block for narrow weights at <= 64 rows.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-ew2.tar.xz
. scripts/device-env
. scripts/device-env-variants
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c2; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) $(for v in main gdn n32 n16; do echo -n "$v=$(cat $V/$v/COMMIT) "; done)" | tee $S
timeout 100 $V/gdn/graft_cuda_tests --gtest_brief=1 > $W/suite-gdn.txt 2>&1
echo "$(date +%T) suite gdn: exit $? $(grep -E 'PASSED|FAILED' $W/suite-gdn.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
for v in n32 n16; do
  timeout 60 $V/$v/graft_cuda_tests --gtest_brief=1 --gtest_filter='CudaQuant.*' > $W/suite-$v.txt 2>&1
  echo "$(date +%T) suite $v CudaQuant: exit $? $(grep -E 'PASSED|FAILED' $W/suite-$v.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
done
mm() {  # variant format
  timeout 45 $V/$1/graft_matmul_bench bench/configs/qwen3_5-27b --formats $2 --rows 1,16 > $W/mm-$1-$2.txt 2>&1
  echo "$(date +%T) mm $1 $2: exit $? $(grep -E '^step' $W/mm-$1-$2.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $S
}
for v in gdn n32 n16; do mm $v fp8-block; done
bench() {  # variant format
  timeout 100 $V/$1/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $2 --prefill 128 --decode-batches 1,16 > $W/bench-$1-$2.txt 2> $W/bench-$1-$2.log
  echo "$(date +%T) $1 $2: exit $? $(grep -E '^decode ' $W/bench-$1-$2.txt | tr '\n' ' ' | cut -c1-220)" | tee -a $S
}
bench gdn w4a16
bench main w4a16
bench gdn none
bench main none
bench n32 fp8-block
bench n16 fp8-block
bench main fp8-block
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
