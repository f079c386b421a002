#!/usr/bin/env bash
# Device call c2 (2026-12-02, ninth session). Variants (scripts/device-variants):
#   main10=596f029 tail=wip/w4-tail gdn=wip/gdn-stage gdn2=wip/gdn-stage2 all=wip/all
# all = tail + the deep ring below four rows (wip/w4-deep) + gdn-stage + gdn-stage2.
# The CUDA suite on all; 4-bit projections tail vs all (the deep ring) at 1-3 rows; the GDN token
# kernel under ncu on an 8-layer cut at batch 1 and 16 (main10, gdn: always staged, gdn2: staged
# where the grid stays resident); the whole model w4a16 alternated main10 / all.
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c2; mkdir -p $W/cut
S=$W/summary.txt
NCU=/usr/local/cuda/bin/ncu; [ -x $NCU ] || NCU=$(command -v ncu)
echo "start $(date +%T) $(for v in main10 tail gdn gdn2 all; do echo -n "$v=$(cat $V/$v/COMMIT) "; done)" | tee $S
timeout 150 $V/all/graft_cuda_tests --gtest_brief=1 > $W/suite-all.txt 2>&1
echo "$(date +%T) suite all: exit $? $(grep -E 'PASSED|FAILED' $W/suite-all.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $S
for f in w4a16 nvfp4; do
  for v in tail all; do
    timeout 40 $V/$v/graft_matmul_bench bench/configs/qwen3_5-27b --formats $f --rows 1,2,3 > $W/mm-$v-$f.txt 2>&1
    echo "$(date +%T) mm $v $f: exit $? $(grep -E '^step' $W/mm-$v-$f.txt | sed -E 's/.*\(([0-9.]+) tok.*/\1/' | tr '\n' ' ')" | tee -a $S
  done
done
python3 - bench/configs/qwen3_5-27b/config.json $W/cut/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); t = c.get("text_config", c)
t["num_hidden_layers"] = 8
if "layer_types" in t: t["layer_types"] = t["layer_types"][-8:]
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1"
for v in main10 gdn gdn2; do
  timeout 120 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
    --kernel-name regex:'GdnCore' $V/$v/graft bench $B --gpu-scratch 4096 --decode-steps 3 --model $W/cut \
    --dummy-quantize w4a16 --prefill 160 --decode-batches 1,16 > $W/ncu-gdn-$v.csv 2> $W/ncu-gdn-$v.log
  echo "$(date +%T) ncu $v: exit $?" | tee -a $S
  python3 - $W/ncu-gdn-$v.csv <<'PY' | tee -a $S
import csv, sys, collections
lines = open(sys.argv[1]).read().splitlines()
h = [n for n, l in enumerate(lines) if l.startswith('"ID"')]
rows = [r for r in csv.DictReader(lines[h[0]:]) if r.get("gpu__time_duration.sum", "").replace(",", "").replace(".", "").isdigit()]
by = collections.defaultdict(list)
for r in rows:
    by[(r["Kernel Name"].split("(")[0][-30:], r["Grid Size"])].append(float(r["gpu__time_duration.sum"].replace(",", "")) / 1000)
for k, v in sorted(by.items()):
    v2 = sorted(v); print(f"  {k[0]:30s} {k[1]:>14s} n={len(v):3d} median {v2[len(v2)//2]:7.2f} us  min {v2[0]:7.2f}")
PY
done
for v in main10 all main10 all; do
  n=$(ls $W | grep -c "^bench-$v-" ); n=$((n/2+1))
  timeout 100 $V/$v/graft bench $B --gpu-scratch 16384 --model bench/configs/qwen3_5-27b --decode-steps 48 \
    --dummy-quantize w4a16 --prefill 128 --decode-batches 1,16 > $W/bench-$v-$n.txt 2> $W/bench-$v-$n.log
  echo "$(date +%T) $v w4a16 ($n): exit $? $(grep -E '^decode ' $W/bench-$v-$n.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
