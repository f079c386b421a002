#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export PATH=$PATH:/usr/local/cuda/bin
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c3; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
timeout 90 $B/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests.log 2>&1
echo "cuda tests: exit $? at $(date +%T)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A5 $W/cuda-tests.log | head -30
mkdir -p /tmp/q35-4l && python3 -c '
import json; c=json.load(open("bench/configs/qwen3_5-27b/config.json"))
t=c.get("text_config",c); t["num_hidden_layers"]=4
if "layer_types" in t: t["layer_types"]=t["layer_types"][:4]
json.dump(c,open("/tmp/q35-4l/config.json","w"))'
timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
  "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 4096 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 3 --repeats 1 --model /tmp/q35-4l \
  --dummy-quantize fp8-block --prefill 100 --decode-batches 1 > $W/ncu-fp8.csv 2> $W/ncu-fp8.log
echo "== ncu: exit $? at $(date +%T)"
python3 - $W/ncu-fp8.csv <<'PY'
import csv,sys
lines=open(sys.argv[1]).read().splitlines()
i=[n for n,l in enumerate(lines) if l.startswith('"ID"')][0]
rows=list(csv.DictReader(lines[i:]))
rows=[r for r in rows if r.get("gpu__time_duration.sum","").replace(".","").replace(",","").isdigit()]
idx=[n for n,r in enumerate(rows) if "EmbedKernel" in r["Kernel Name"]]
last=rows[idx[-1]:]
for r in last[:30]:
    t=float(r["gpu__time_duration.sum"].replace(",",""))/1000
    print(f'{r["Kernel Name"][:50]:50s} {r["Grid Size"]:>14s} {t:8.2f}')
PY
for f in fp8-block nvfp4; do
  timeout 110 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 6 --repeats 1 --json "$W/$f-27b.json" --model bench/configs/qwen3_5-27b \
    --dummy-quantize $f --prefill 1024 --decode-batches 1,16,64 > $W/$f-27b.txt 2> $W/$f-27b.log
  echo "== $f-27b: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " $W/$f-27b.txt
done
