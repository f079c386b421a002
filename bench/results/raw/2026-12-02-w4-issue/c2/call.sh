#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-c2.tar.xz"]
# gdn = wip/gdn-batched 5da2efe (GDN token kernel's loads batched, gated norm's gate / weight read
# with x; on 383a98a: the graph-staging named-error test) against head = main 2bea991.
# CUDA suite on gdn; the GDN kernels' times under ncu (8-layer cut, context ~160: the open chunk
# half full) for both; then whole-model w4a16 decode benches alternated head / gdn / head / gdn.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-c2.tar.xz
. scripts/device-env
. scripts/device-env-variants
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c2; mkdir -p $W
NCU=/usr/local/cuda/bin/ncu; [ -x $NCU ] || NCU=$(command -v ncu)
echo "start $(date +%T) head $(cat $V/head/COMMIT) gdn $(cat $V/gdn/COMMIT)"
timeout 200 $V/gdn/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests-gdn.log 2>&1
echo "$(date +%T) cuda suite gdn: exit $?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED" $W/cuda-tests-gdn.log | head -12
mkdir -p $W/cut
python3 - bench/configs/qwen3_5-27b/config.json $W/cut/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); t = c.get("text_config", c)
t["num_hidden_layers"] = 8
if "layer_types" in t: t["layer_types"] = t["layer_types"][-8:]
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
for v in head gdn; do
  timeout 120 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
    --kernel-name regex:'GdnCore|GatedNorm' $V/$v/graft bench --load-format dummy --device cuda --gpu-memory 120 \
    --gpu-scratch 4096 --threads 16 --dummy-adapter-rank 0 --decode-steps 3 --repeats 1 --model $W/cut \
    --prefill 160 --decode-batches 1,16 > $W/ncu-gdn-$v.csv 2> $W/ncu-gdn-$v.log
  echo "$(date +%T) ncu $v: exit $?"
  python3 - $W/ncu-gdn-$v.csv <<'PY'
import csv, sys, collections
lines = open(sys.argv[1]).read().splitlines()
h = [n for n, l in enumerate(lines) if l.startswith('"ID"')]
rows = [r for r in csv.DictReader(lines[h[0]:]) if r.get("gpu__time_duration.sum", "").replace(",", "").replace(".", "").isdigit()]
by = collections.defaultdict(list)
for r in rows:
    by[(r["Kernel Name"].split("(")[0][-40:], r["Grid Size"])].append(float(r["gpu__time_duration.sum"].replace(",", "")) / 1000)
for k, v in sorted(by.items()):
    v2 = sorted(v); print(f"  {k[0]:40s} {k[1]:>14s} n={len(v):3d} median {v2[len(v2)//2]:7.2f} us  min {v2[0]:7.2f}")
PY
done
for run in 1 2; do
  for v in head gdn; do
    timeout 100 $V/$v/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
      --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
      --dummy-quantize w4a16 --prefill 128 --decode-batches 1,16 > $W/bench-$v-w4a16-$run.txt 2> $W/bench-$v-w4a16-$run.log
    echo "$(date +%T) $v w4a16 run $run: exit $? $(grep -E '^decode ' $W/bench-$v-w4a16-$run.txt | tr '\n' ' ' | cut -c1-200)"
  done
done
echo "end $(date +%T)"
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
