#!/usr/bin/env bash
# Prepared for the next device call (not yet run; ~400 s): flash attention asking L2 for the key /
# value tiles ahead of their loads (wip/attn-prefetch 78a7ad9, patch wip-attn-prefetch.patch
# beside this file, onto bf013e7) against main8 = bf013e7:
#   BINS="graft graft_cuda_tests graft_matmul_bench" scripts/device-variants main8=bf013e7 apf=wip/attn-prefetch
# p2 (2026-12-02-sweeps.md) measured one decode row's attention at 29 us at context 130 under ncu
# (16 layers: ~0.47 ms of a 9.4 ms w4a16 step); its 64-key tiles arrive in four dependent round
# trips of eight float4s a thread each. Same arithmetic, same bits: the CUDA suite runs first.
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/ap; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) main8=$(cat $V/main8/COMMIT) apf=$(cat $V/apf/COMMIT)" | tee $S
timeout 100 $V/apf/graft_cuda_tests --gtest_brief=1 > $W/suite-apf.txt 2>&1
echo "$(date +%T) suite apf: exit $? $(grep -E 'PASSED|FAILED' $W/suite-apf.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
for v in main8 apf; do
  for p in 128 4096; do
    timeout 120 /usr/local/cuda/bin/ncu --clock-control none --cache-control none -k regex:FlashAttention \
      --metrics gpu__time_duration.sum --csv --page raw $V/$v/graft bench --load-format dummy --device cuda \
      --gpu-memory 120 --gpu-scratch 16384 --threads 16 --dummy-adapter-rank 0 --decode-steps 3 --repeats 1 \
      --model bench/configs/qwen3_5-27b --prefill $p --decode-batches 1,16 > $W/ncu-$v-$p.csv 2> $W/ncu-$v-$p.log
    echo "$(date +%T) ncu $v prefill $p: exit $? $(grep -c FlashAttention $W/ncu-$v-$p.csv) launches" | tee -a $S
  done
done
for v in apf main8; do
  timeout 100 $V/$v/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 48 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize w4a16 --prefill 128,4096 --decode-batches 1,16 > $W/bench-$v.txt 2> $W/bench-$v.log
  echo "$(date +%T) $v w4a16: exit $? $(grep -E '^(decode|prefill) ' $W/bench-$v.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-400)" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && gzip ap/*.csv && tar czf ap.tgz ap && rm -rf ap
