#!/usr/bin/env bash
# Device call c4 (2026-12-02, ninth session): what each op kind costs on a batch-1 decode step's
# critical path. wip/ablate (main 79b708f + GRAFT_ABLATE, never on main) skips the launches of the
# named kinds (their outputs are then garbage; only the time is read). Qwen3.5-27B cut to its last
# 8 layers (6 GDN + 2 full attention, the model's ratio) + the bf16 head, w4a16, context 128.
#   BINS="graft" scripts/device-variants abl=wip/ablate
set -uo pipefail
export VARIANTS_ARCHIVE=${VARIANTS_ARCHIVE:-.device/variants.tar.xz}
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c4; mkdir -p $W/cut
S=$W/summary.txt
echo "start $(date +%T) abl=$(cat $V/abl/COMMIT)" | tee $S
python3 - bench/configs/qwen3_5-27b/config.json $W/cut/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); t = c.get("text_config", c)
t["num_hidden_layers"] = 8
if "layer_types" in t: t["layer_types"] = t["layer_types"][-8:]
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
B="--load-format dummy --device cuda --gpu-memory 120 --threads 16 --dummy-adapter-rank 0 --repeats 1 --gpu-scratch 4096 --model $W/cut --decode-steps 64 --prefill 128 --decode-batches 1"
i=0
for a in none sums norm none silu conv gdn attn,aprep,gate none sums,norm,silu,conv,gdn,attn,aprep,gate w4 w4,sums none; do
  i=$((i+1))
  GRAFT_ABLATE=$a timeout 60 $V/abl/graft bench $B --dummy-quantize w4a16 > $W/bench-$i-$a.txt 2> $W/bench-$i-$a.log
  echo "$(date +%T) $a: exit $? $(grep -E '^decode ' $W/bench-$i-$a.txt | tr -s ' ' | cut -d' ' -f4,7) $(grep -o 'host recording.*a step' $W/bench-$i-$a.log)" | tee -a $S
done
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
