#!/usr/bin/env bash
# c4: the K / V tile copy shared by the prefill rows and the decode row (wip/kv-tile 3a77194: a
# refactor, the same loads, stores and batches) against main 491d841: the CUDA suite (the
# attention bits tests) and its attention kernels' times under ncu, to set beside c1's (491d841's
# are c1's arow: the same CUDA code; only this much fit the session's last device minutes). Built here by
#   BINS="graft graft_cuda_tests" scripts/device-variants head=491d841 kv=wip/kv-tile
# and carried as .device/variants-c4.tar.xz with the bundle.
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c4; mkdir -p $W/cut
S=$W/summary.txt
NCU=/usr/local/cuda/bin/ncu; [ -x $NCU ] || NCU=$(command -v ncu)
echo "start $(date +%T) $(for v in head kv; do echo -n "$v=$(cat $V/$v/COMMIT) "; done)" | tee $S
tok() { grep -E '^decode ' $1 | tr -s ' ' | cut -d' ' -f3,6,7 | tr '\n' ' '; }
timeout 150 $V/kv/graft_cuda_tests --gtest_brief=1 > $W/suite-kv.txt 2>&1
echo "$(date +%T) suite kv: exit $? $(grep -E 'PASSED|FAILED' $W/suite-kv.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
scripts/device-cut-config bench/configs/qwen3_5-27b $W/cut 8
C="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 4096 --model $W/cut --dummy-quantize w4a16"
for v in kv; do
  timeout 60 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
    --kernel-name regex:'Flash' $V/$v/graft bench $C --prefill 128 --decode-steps 3 --decode-batches 1,16 --no-cuda-graphs \
    > $W/ncu-attn-$v.csv 2> $W/ncu-attn-$v.log
  echo "$(date +%T) ncu attention $v: exit $?" | tee -a $S
  python3 scripts/ncu-kernel-times.py $W/ncu-attn-$v.csv | tee -a $S
  gzip -9 $W/ncu-attn-$v.csv
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
