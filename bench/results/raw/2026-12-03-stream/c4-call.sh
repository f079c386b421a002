#!/usr/bin/env bash
# c4: main at 1cbd5d6 (the bf16 one-row narrow shape landed): the CUDA suite, every format's
# whole-model decode (batch 1 and 16, context 128), and the probe's int4 step with shorter
# recurrences (what the batch-1 ceiling would be if the GDN token kernel and a decode row's
# attention took 5 or 3 us). Built here by
#   BINS="graft graft_matmul_bench graft_cuda_tests" scripts/device-variants head=main
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cudart static \
#     bench/probes/decode_stream.cu -o .device/probe/graft_probe_decode_stream
# carried as .device/variants-c4s.tar.xz and .device/probe with the bundle.
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants-c4s.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c4; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) head=$(cat $V/head/COMMIT)" | tee $S
timeout 150 $V/head/graft_cuda_tests --gtest_brief=1 > $W/suite-head.txt 2>&1
echo "$(date +%T) suite head: exit $? $(grep -E 'PASSED|FAILED' $W/suite-head.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
for u in 5 3; do
  timeout 60 .device/probe/graft_probe_decode_stream --reps 10 --format int4 --smalls 2 --serial-us $u > $W/probe.txt 2>&1
  echo "$(date +%T) probe int4 --smalls 2 --serial-us $u: exit $?" | tee -a $S; tee -a $S < $W/probe.txt
done
rm -f $W/probe.txt
tok() { grep -E '^decode ' $1 | tr -s ' ' | cut -d' ' -f3,6,7 | tr '\n' ' '; }
B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 16384 --model bench/configs/qwen3_5-27b --decode-steps 48 --prefill 128 --decode-batches 1,16"
for q in none fp8-block nvfp4 w4a16; do
  timeout 110 $V/head/graft bench $B --dummy-quantize $q > $W/bench-$q.txt 2> $W/bench-$q.log
  echo "$(date +%T) $q head: exit $? $(tok $W/bench-$q.txt)" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
