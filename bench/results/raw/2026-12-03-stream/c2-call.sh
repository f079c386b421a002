#!/usr/bin/env bash
# c2: bench/probes/decode_stream.cu for each format, bare and with the step's small ops (two a
# projection gap) and a 10 us recurrence before each GDN-out / o. Built here by
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cudart static \
#     bench/probes/decode_stream.cu -o .device/probe/graft_probe_decode_stream
# and carried as .device/probe.
set -uo pipefail
W=$OUT/c2; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader)" | tee $S
for f in int4 fp8 bf16; do
  for o in "--smalls 0 --serial-us 0" "--smalls 2 --serial-us 0" "--smalls 0 --serial-us 10" "--smalls 2 --serial-us 10"; do
    timeout 60 .device/probe/graft_probe_decode_stream --reps 10 --format $f $o > $W/probe.txt 2>&1
    echo "$(date +%T) probe --format $f $o: exit $?" | tee -a $S; tee -a $S < $W/probe.txt
  done
done
rm -f $W/probe.txt
echo "end $(date +%T)" | tee -a $S
