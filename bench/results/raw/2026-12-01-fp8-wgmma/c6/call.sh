#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
W=$OUT/c6; mkdir -p $W
NCU=/usr/local/cuda/bin/ncu
for rows in 1 1024; do
timeout 200 $NCU --clock-control none --kernel-name "regex:GemmFp8Kernel" --launch-skip 3 --launch-count 3 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats \
  $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats fp8-block --rows $rows --iters 1 > $W/ncu-$rows.txt 2>&1
echo "== ncu rows $rows: exit $?"
grep -E "GemmFp8Kernel|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Warp Cycles Per Issued|Stall|stall|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Issued Warp|No Eligible|Registers Per|Block Limit" $W/ncu-$rows.txt | cut -c1-150 | head -60
done
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
