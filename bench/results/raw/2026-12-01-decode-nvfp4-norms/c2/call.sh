#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export PATH=$PATH:/usr/local/cuda/bin
W=$OUT/c2; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
mkdir -p /tmp/q35-4l && python3 -c '
import json; c=json.load(open("bench/configs/qwen3_5-27b/config.json"))
t=c.get("text_config",c); t["num_hidden_layers"]=4
if "layer_types" in t: t["layer_types"]=t["layer_types"][:4]
json.dump(c,open("/tmp/q35-4l/config.json","w"))'
for f in nvfp4 fp8-block; do
timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
  "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 4096 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 3 --repeats 1 --model /tmp/q35-4l \
  --dummy-quantize $f --prefill 100 --decode-batches 1 > $W/ncu-$f.csv 2> $W/ncu-$f.log
echo "== ncu $f: exit $? at $(date +%T)"
python3 - $W/ncu-$f.csv <<'PY'
import csv,sys
lines=open(sys.argv[1]).read().splitlines()
i=[n for n,l in enumerate(lines) if l.startswith('"ID"')][0]
rows=list(csv.DictReader(lines[i:]))
rows=[r for r in rows if r.get("gpu__time_duration.sum","").replace(".","").replace(",","").isdigit()]
idx=[n for n,r in enumerate(rows) if "EmbedKernel" in r["Kernel Name"]]
last=rows[idx[-1]:]
tot=0
for r in last:
    t=float(r["gpu__time_duration.sum"].replace(",",""))/1000; tot+=t
    print(f'{r["Kernel Name"][:60]:60s} {r["Grid Size"]:>14s} {t:8.2f}')
print("kernels",len(last),"total us",round(tot,1))
PY
done
# Stall reasons of the token GDN kernel (one launch, decode).
timeout 150 ncu --clock-control none -k regex:GdnCoreKernel -s 3 -c 1 --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --section SourceCounters \
  "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 4096 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 3 --repeats 1 --model /tmp/q35-4l \
  --dummy-quantize fp8-block --prefill 100 --decode-batches 1 > $W/ncu-gdn.txt 2>&1
echo "== ncu gdn: exit $? at $(date +%T)"; grep -E "Duration|Stall|stall|Warp Cycles|Issued|Eligible|Throughput|L1|L2|DRAM" $W/ncu-gdn.txt | head -60
