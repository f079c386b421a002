#!/usr/bin/env bash
# c1: (a) the K / V tile copy shared by the prefill rows and the decode row (wip/kv-tile 5af0653,
# a refactor: the same loads, stores and batches) — the CUDA suite and its attention kernels'
# times under ncu, beside main 70612b3's (c1 of 2026-12-03-attn-row measured 491d841's: the same
# CUDA code as main); (b) bench/probes/decode_stream.cu: a batch-1 step's weight stream cut into
# one kernel a projection (PDL, graph) against one persistent grid with barriers.
# Built here by
#   BINS="graft graft_cuda_tests" scripts/device-variants head=main kv=wip/kv-tile
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cudart static \
#     bench/probes/decode_stream.cu -o .device/probe/graft_probe_decode_stream
# carried as .device/variants-c1s.tar.xz, .device/probe with the bundle.
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants-c1s.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c1; mkdir -p $W/cut
S=$W/summary.txt
NCU=/usr/local/cuda/bin/ncu; [ -x $NCU ] || NCU=$(command -v ncu)
echo "start $(date +%T) $(for v in head kv; do echo -n "$v=$(cat $V/$v/COMMIT) "; done)" | tee $S
for s in 2 0 4; do
  timeout 60 .device/probe/graft_probe_decode_stream --reps 10 --smalls $s > $W/probe-s$s.txt 2>&1
  echo "$(date +%T) probe smalls $s: exit $?" | tee -a $S; cat $W/probe-s$s.txt | tee -a $S
done
timeout 150 $V/kv/graft_cuda_tests --gtest_brief=1 > $W/suite-kv.txt 2>&1
echo "$(date +%T) suite kv: exit $? $(grep -E 'PASSED|FAILED' $W/suite-kv.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
scripts/device-cut-config bench/configs/qwen3_5-27b $W/cut 8
C="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 4096 --model $W/cut --dummy-quantize w4a16"
for v in head kv; do
  timeout 60 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
    --kernel-name regex:'Flash' $V/$v/graft bench $C --prefill 128 --decode-steps 3 --decode-batches 1,16 --no-cuda-graphs \
    > $W/ncu-attn-$v.csv 2> $W/ncu-attn-$v.log
  echo "$(date +%T) ncu attention $v: exit $?" | tee -a $S
  python3 scripts/ncu-kernel-times.py $W/ncu-attn-$v.csv | tee -a $S
  gzip -9 $W/ncu-attn-$v.csv
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
