#!/usr/bin/env bash
# c6: the probe with each recurrence fused into the launch of the projection after it (fused-4:
# the structure a recurrence + out-projection split by head would have), beside the kernel form,
# for each format with the step's small ops and 10 / 5 / 3 us recurrences. Built here by
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cudart static \
#     bench/probes/decode_stream.cu -o .device/probe/graft_probe_decode_stream
# and carried as .device/probe.
set -uo pipefail
W=$OUT/c6; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T)" | tee $S
for run in "int4 10" "int4 5" "int4 3" "fp8 10" "fp8 3" "bf16 10"; do
  set -- $run
  timeout 60 .device/probe/graft_probe_decode_stream --reps 10 --format $1 --smalls 2 --serial-us $2 > $W/probe.txt 2>&1
  echo "$(date +%T) probe --format $1 --smalls 2 --serial-us $2: exit $?" | tee -a $S; tee -a $S < $W/probe.txt
done
rm -f $W/probe.txt
echo "end $(date +%T)" | tee -a $S
