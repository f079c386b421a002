#!/usr/bin/env bash
# c7: the bf16 one-row decode GEMM under Nsight Compute's full set, for the next session: why the
# narrow shape (down / o / GDN out: 73% / 61% of the copy bandwidth) trails the wide one (gate|up
# 87%). main 1cbd5d6's graft_matmul_bench (the c4 variants archive), bf16 at one row, every
# GemmDecodeKernel launch of one pass. Carries .device/variants-c4s.tar.xz with the bundle.
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants-c4s.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c7; mkdir -p $W
S=$W/summary.txt
NCU=/usr/local/cuda/bin/ncu; [ -x $NCU ] || NCU=$(command -v ncu)
echo "start $(date +%T) head=$(cat $V/head/COMMIT)" | tee $S
timeout 240 $NCU --set full --import-source no -k regex:GemmDecodeKernel --launch-count 12 -o $W/bf16-b1 \
  $V/head/graft_matmul_bench bench/configs/qwen3_5-27b --formats bf16 --rows 1 --iters 1 > $W/ncu.log 2>&1
echo "$(date +%T) ncu: exit $?" | tee -a $S
timeout 60 $NCU --import $W/bf16-b1.ncu-rep --page details --csv > $W/details.csv 2>> $W/ncu.log
echo "$(date +%T) details: exit $? $(wc -l < $W/details.csv) lines" | tee -a $S
grep -E '"(Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|Achieved Occupancy|Registers Per Thread|Grid Size|Block Size|Issue Slots Busy|Eligible Warps Per Scheduler|Warp Cycles Per Issued Instruction)"' $W/details.csv | cut -c1-220 | tee -a $S | head -150 > /dev/null
gzip -9 $W/details.csv; rm -f $W/bf16-b1.ncu-rep
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
