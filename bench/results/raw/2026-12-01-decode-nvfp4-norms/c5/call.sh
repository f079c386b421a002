#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export PATH=$PATH:/usr/local/cuda/bin
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c5; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
timeout 90 $B/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests.log 2>&1
echo "cuda tests: exit $? at $(date +%T)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A5 $W/cuda-tests.log | head -30
timeout 150 scripts/device-test $W/test > $W/device-test.out 2>&1
echo "device-test: exit $? at $(date +%T)"; grep -E "gate: |exact mode|serve:|FAILED" $W/device-test.out | cut -c1-160
mkdir -p /tmp/q35-4l && python3 -c '
import json; c=json.load(open("bench/configs/qwen3_5-27b/config.json"))
t=c.get("text_config",c); t["num_hidden_layers"]=4
if "layer_types" in t: t["layer_types"]=t["layer_types"][:4]
json.dump(c,open("/tmp/q35-4l/config.json","w"))'
timeout 100 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
  "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 4096 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 3 --repeats 1 --model /tmp/q35-4l \
  --dummy-quantize fp8-block --prefill 100 --decode-batches 1 > $W/ncu-fp8.csv 2> $W/ncu-fp8.log
echo "== ncu: exit $? at $(date +%T)"
python3 - $W/ncu-fp8.csv > $W/ncu-fp8-step.txt <<'PY'
import csv,sys
lines=open(sys.argv[1]).read().splitlines()
i=[n for n,l in enumerate(lines) if l.startswith('"ID"')][0]
rows=list(csv.DictReader(lines[i:]))
rows=[r for r in rows if r.get("gpu__time_duration.sum","").replace(".","").replace(",","").isdigit()]
idx=[n for n,r in enumerate(rows) if "EmbedKernel" in r["Kernel Name"]]
last=rows[idx[-1]:]; tot=0
for r in last:
    t=float(r["gpu__time_duration.sum"].replace(",",""))/1000; tot+=t
    print(f'{r["Kernel Name"][:50]:50s} {r["Grid Size"]:>14s} {t:8.2f}')
print("kernels",len(last),"total us",round(tot,1))
PY
head -16 $W/ncu-fp8-step.txt; tail -1 $W/ncu-fp8-step.txt
timeout 60 ncu --clock-control none -k regex:GdnCoreKernel -s 3 -c 1 --set full --import-source no --page source --csv --print-source sass \
  "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 4096 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 3 --repeats 1 --model /tmp/q35-4l \
  --dummy-quantize fp8-block --prefill 100 --decode-batches 1 2>&1 | xz -9 > $W/ncu-gdn-sass.csv.xz
echo "== ncu gdn sass: at $(date +%T)"; ls -la $W/ncu-gdn-sass.csv.xz
for f in none fp8-block w4a16 nvfp4; do
  q=""; [ $f != none ] && q="--dummy-quantize $f"
  timeout 110 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 6 --repeats 1 --json "$W/$f-27b.json" --model bench/configs/qwen3_5-27b \
    $q --prefill 1024 --decode-batches 1,16,64 > $W/$f-27b.txt 2> $W/$f-27b.log
  echo "== $f-27b: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " $W/$f-27b.txt
done
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
