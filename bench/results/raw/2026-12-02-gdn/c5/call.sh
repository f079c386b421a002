#!/usr/bin/env bash
# Device call c5 (2026-12-02, ninth session): wip/gdn-stage3 — the GDN token kernel stages its
# head's S and the open chunk's value and key rows in shared memory (all loads in flight at the
# start) where the grid stays resident (batch 1), key dots by half-warps over the shared rows;
# unstaged (batch 16) the kernel reads as main does. CUDA suite; the kernel under ncu and the
# batch-1 step on the 8-layer cut (c4's model), alternated with main's HEAD.
#   BINS="graft graft_cuda_tests" scripts/device-variants head=79b708f gdn3=wip/gdn-stage3
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c5; mkdir -p $W/cut
S=$W/summary.txt
NCU=/usr/local/cuda/bin/ncu; [ -x $NCU ] || NCU=$(command -v ncu)
echo "start $(date +%T) head=$(cat $V/head/COMMIT) gdn3=$(cat $V/gdn3/COMMIT)" | tee $S
timeout 150 $V/gdn3/graft_cuda_tests --gtest_brief=1 > $W/suite-gdn3.txt 2>&1
echo "$(date +%T) suite gdn3: exit $? $(grep -E 'PASSED|FAILED' $W/suite-gdn3.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $S
python3 - bench/configs/qwen3_5-27b/config.json $W/cut/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); t = c.get("text_config", c)
t["num_hidden_layers"] = 8
if "layer_types" in t: t["layer_types"] = t["layer_types"][-8:]
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 4096 --model $W/cut --dummy-quantize w4a16"
for v in head gdn3; do
  timeout 60 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
    --kernel-name regex:'GdnCore' $V/$v/graft bench $B --decode-steps 3 --prefill 160 --decode-batches 1,16 \
    > $W/ncu-gdn-$v.csv 2> $W/ncu-gdn-$v.log
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
for v in head gdn3 head gdn3 head gdn3; do
  timeout 60 $V/$v/graft bench $B --decode-steps 64 --prefill 128 --decode-batches 1,16 > $W/bench-$v.txt 2> $W/bench-$v.log
  echo "$(date +%T) $v: exit $? $(grep -E '^decode ' $W/bench-$v.txt | tr -s ' ' | cut -d' ' -f3,4,7 | tr '\n' ' ') $(grep -o 'host recording.*a step' $W/bench-$v.log)" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
