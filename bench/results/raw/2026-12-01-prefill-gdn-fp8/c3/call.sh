#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
W=$OUT/c3; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
M=/tmp/q35-4l; mkdir -p $M
python3 - <<'PY'
import json
c = json.load(open('bench/configs/qwen3_5-27b/config.json'))
c['num_hidden_layers'] = 4; c['layer_types'] = c['layer_types'][:4]
json.dump(c, open('/tmp/q35-4l/config.json', 'w'))
PY
NCU=/usr/local/cuda/bin/ncu
timeout 150 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
  "$B/graft" bench --load-format dummy --device cuda --gpu-memory 40 --gpu-scratch 8192 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 2 --repeats 1 --model $M --prefill 1024 --decode-batches 1 \
  --dummy-quantize fp8-block > $W/ncu-all.csv 2> $W/ncu-all.log
echo "ncu all: exit $? at $(date +%T)"; wc -l $W/ncu-all.csv
timeout 200 $NCU --clock-control none --kernel-name regex:"Gdn(Chunk|Coef)Kernel" --launch-count 4 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis --section LaunchStats \
  "$B/graft" bench --load-format dummy --device cuda --gpu-memory 40 --gpu-scratch 8192 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 2 --repeats 1 --model $M --prefill 1024 --decode-batches 1 > $W/ncu-gdn.txt 2> $W/ncu-gdn.log
echo "ncu gdn: exit $? at $(date +%T)"
grep -E "Gdn|Duration|Issue Slots Busy|Achieved Occupancy|Stall|Warp Cycles Per Issued|Registers|Block Limit|Compute \(SM\) Throughput|Memory Throughput" $W/ncu-gdn.txt | head -60
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
