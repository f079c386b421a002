#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-c1.tar.xz"]
# head = main 2bea991 (its staging-floor refactor had not run on the device): the CUDA suite;
# the SASS of the W4A16 decode kernel and the GDN token kernel; Nsight Compute's full set on four
# consecutive W4A16 decode launches of a batch-1 step (config cut to 8 layers), with the
# per-instruction source page (executed counts, stall samples) exported as CSV.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-c1.tar.xz
. scripts/device-env
. scripts/device-env-variants
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c1; mkdir -p $W
G=$V/head/graft
NCU=/usr/local/cuda/bin/ncu; [ -x $NCU ] || NCU=$(command -v ncu)
CUOBJ=/usr/local/cuda/bin/cuobjdump; [ -x $CUOBJ ] || CUOBJ=$(command -v cuobjdump)
echo "start $(date +%T) head $(cat $V/head/COMMIT)"
timeout 200 $V/head/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests-head.log 2>&1
echo "$(date +%T) cuda suite head: exit $?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED" $W/cuda-tests-head.log | head -12
$CUOBJ -sass $G > $W/all.sass 2>/dev/null
python3 - $W/all.sass $W <<'PY'
import sys, re
text = open(sys.argv[1]).read()
parts = re.split(r'(?m)^\s*Function : ', text)
keep = {}
for p in parts[1:]:
    name = p.split('\n', 1)[0].strip()
    for key in ("GemmDecodeW4Kernel", "GdnCoreSeqsKernel", "AddRmsNorm", "SumSplits"):
        if key in name:
            keep.setdefault(key, []).append("Function : " + p)
for k, v in keep.items():
    open(f"{sys.argv[2]}/{k}.sass", "w").write("".join(v))
    print(k, len(v), "functions")
PY
rm -f $W/all.sass
mkdir -p $W/cut
python3 - bench/configs/qwen3_5-27b/config.json $W/cut/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); t = c.get("text_config", c)
t["num_hidden_layers"] = 8
if "layer_types" in t: t["layer_types"] = t["layer_types"][-8:]
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
timeout 200 $NCU --clock-control none --set full --import-source no --kernel-name regex:GemmDecodeW4Kernel \
  --launch-skip 40 --launch-count 4 -o $W/w4 $G bench --load-format dummy --device cuda --gpu-memory 120 \
  --gpu-scratch 4096 --threads 16 --dummy-adapter-rank 0 --decode-steps 2 --repeats 1 --model $W/cut \
  --dummy-quantize w4a16 --prefill 1 --decode-batches 1 --no-cuda-graphs > $W/ncu-w4.log 2>&1
echo "$(date +%T) ncu w4: exit $?"; tail -3 $W/ncu-w4.log
$NCU -i $W/w4.ncu-rep --print-summary none --page details > $W/w4-details.txt 2>&1
$NCU -i $W/w4.ncu-rep --page source --csv --print-source sass > $W/w4-source.csv 2>&1
echo "details $(wc -l < $W/w4-details.txt) lines, source $(wc -l < $W/w4-source.csv) lines"
gzip -9 $W/w4-source.csv $W/*.sass
echo "end $(date +%T)"
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
