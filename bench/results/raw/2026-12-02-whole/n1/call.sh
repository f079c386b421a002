#!/usr/bin/env bash
# ncu --set full on the W4A16 decode GEMMs at one row (graft_matmul_bench, 3 warm-up + 5 calls a
# projection: the GDN layer's in (+ its bf16 b / a product), out, gate|up, down, then the attention
# layer's), on main = b1e991f: registers, achieved occupancy,
# DRAM throughput and stall reasons, for the next session's choice of what to change.
#   BINS="graft_matmul_bench" scripts/device-variants main9=b1e991f
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/n1; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) main9=$(cat $V/main9/COMMIT)" | tee $S
timeout 400 /usr/local/cuda/bin/ncu --set full -k 'regex:GemmDecodeW4Kernel|GemmDecodeKernel' --launch-count 40 \
  -o $W/w4-b1 $V/main9/graft_matmul_bench bench/configs/qwen3_5-27b --formats w4a16 --rows 1 --iters 5 > $W/ncu.log 2>&1
echo "$(date +%T) ncu: exit $?" | tee -a $S
/usr/local/cuda/bin/ncu -i $W/w4-b1.ncu-rep --page details > $W/details.txt 2>&1
/usr/local/cuda/bin/ncu -i $W/w4-b1.ncu-rep --page raw --csv > $W/raw.csv 2>&1
echo "$(date +%T) $(grep -c 'Section: GPU Speed' $W/details.txt) kernels in details" | tee -a $S
grep -E '^\s+(void|[A-Za-z].*\(.*\)\s*\()|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit' $W/details.txt | head -80 | tee -a $S
echo "end $(date +%T)" | tee -a $S
[ $(stat -c %s $W/w4-b1.ncu-rep 2>/dev/null || echo 0) -gt 30000000 ] && rm -f $W/w4-b1.ncu-rep
cd $OUT && gzip n1/raw.csv 2>/dev/null; tar czf n1.tgz n1 && rm -rf n1
