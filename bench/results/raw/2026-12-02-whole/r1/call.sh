#!/usr/bin/env bash
# n1's ncu: the 1-3-row W4A16 decode kernel (four warps) uses 79 registers (int4, bf16 scales,
# groups >= 128; NVFP4 96): 6 blocks a multiprocessor, 37.5% theoretical occupancy, issue 49% busy,
# 1.3 eligible warps a scheduler. Bounding the four-warp form to 7 (72 registers, 92 B of spills)
# or 8 blocks (64 registers, 136 B) against main9 = b1e991f:
#   BINS="graft graft_cuda_tests graft_matmul_bench" scripts/device-variants main9=b1e991f lb7=wip/w4-lb7 lb8=wip/w4-lb8
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/r1; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) main9=$(cat $V/main9/COMMIT) lb7=$(cat $V/lb7/COMMIT) lb8=$(cat $V/lb8/COMMIT)" | tee $S
mm() {  # variant format
  timeout 40 $V/$1/graft_matmul_bench bench/configs/qwen3_5-27b --formats $2 --rows 1,2,3 > $W/mm-$1-$2.txt 2>&1
  echo "$(date +%T) mm $1 $2: exit $? $(grep -E '^step' $W/mm-$1-$2.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
}
for v in main9 lb7 lb8; do mm $v w4a16; done
for v in main9 lb7 lb8; do mm $v nvfp4; done
best=$(for v in lb7 lb8; do echo "$(grep -E '^step' $W/mm-$v-w4a16.txt | head -1 | sed -E 's/.*\(([0-9.]+) tok.*/\1/') $v"; done | sort -rn | head -1 | cut -d' ' -f2)
echo "best: $best" | tee -a $S
timeout 60 $V/$best/graft_cuda_tests --gtest_brief=1 --gtest_filter='CudaQuant.*:CudaUpload.*' > $W/suite-$best.txt 2>&1
echo "$(date +%T) CudaQuant suite $best: exit $? $(grep -E 'PASSED|FAILED' $W/suite-$best.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
for v in $best main9; do
  timeout 80 $V/$v/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 48 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize w4a16 --prefill 128 --decode-batches 1 > $W/bench-$v.txt 2> $W/bench-$v.log
  echo "$(date +%T) $v w4a16: exit $? $(grep -E '^decode ' $W/bench-$v.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf r1.tgz r1 && rm -rf r1
