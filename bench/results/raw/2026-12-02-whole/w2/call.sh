#!/usr/bin/env bash
# (1) The upload race: pre = the new first-use upload test without the fix (wip/upload-pre),
#     fix = 4613fe2 (uploads through CopyIn) — the CUDA suite and the test repeated.
# (2) Flash attention reading the page table a tile ahead (wip/attn-rows 85e5b6f, onto 4613fe2):
#     suite, ncu -k FlashAttention at prefill 128 and 4096, whole model w4a16 against fix.
#   BINS="graft graft_cuda_tests graft_matmul_bench" scripts/device-variants pre=wip/upload-pre fix=4613fe2 arow=wip/attn-rows
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/w2; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) pre=$(cat $V/pre/COMMIT) fix=$(cat $V/fix/COMMIT) arow=$(cat $V/arow/COMMIT)" | tee $S
timeout 60 $V/pre/graft_cuda_tests --gtest_brief=1 --gtest_filter='CudaUpload.*' --gtest_repeat=3 > $W/upload-pre.txt 2>&1
echo "$(date +%T) upload test, pre x3: exit $? $(grep -c 'Failure' $W/upload-pre.txt) failures" | tee -a $S
for v in fix arow; do
  timeout 120 $V/$v/graft_cuda_tests --gtest_brief=1 > $W/suite-$v.txt 2>&1
  echo "$(date +%T) suite $v: exit $? $(grep -E 'PASSED|FAILED' $W/suite-$v.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
done
timeout 60 $V/fix/graft_cuda_tests --gtest_brief=1 --gtest_filter='CudaUpload.*' --gtest_repeat=3 > $W/upload-fix.txt 2>&1
echo "$(date +%T) upload test, fix x3: exit $? $(grep -c 'Failure' $W/upload-fix.txt) failures" | tee -a $S
for v in fix arow; do
  for p in 128 4096; do
    timeout 100 /usr/local/cuda/bin/ncu --clock-control none --cache-control none -k regex:FlashAttention \
      --metrics gpu__time_duration.sum --csv --page raw $V/$v/graft bench --load-format dummy --device cuda \
      --gpu-memory 120 --gpu-scratch 16384 --threads 16 --dummy-adapter-rank 0 --decode-steps 3 --repeats 1 \
      --model bench/configs/qwen3_5-27b --prefill $p --decode-batches 1 > $W/ncu-$v-$p.csv 2> $W/ncu-$v-$p.log
    echo "$(date +%T) ncu $v $p: exit $? $(grep -c FlashAttention $W/ncu-$v-$p.csv) launches" | tee -a $S
  done
done
for v in arow fix; do
  timeout 120 $V/$v/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 48 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize w4a16 --prefill 128,4096 --decode-batches 1,16 > $W/bench-$v.txt 2> $W/bench-$v.log
  echo "$(date +%T) $v w4a16: exit $? $(grep -E '^(decode|prefill) ' $W/bench-$v.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-400)" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && gzip w2/*.csv; tar czf w2.tgz w2 && rm -rf w2
