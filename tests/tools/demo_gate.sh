#!/bin/sh
# The demo models' quality gate, small enough for CI: extract the adapter from the committed
# base/release pair, make the reference with `graft decide` on the release, and gate base +
# adapter against it on a few test-split records. Also proves the gate can fail: the base
# alone must not pass it.
#   demo_gate.sh GRAFT_BINARY REPO_ROOT WORKDIR
set -eu
graft=$1 root=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
req=$root/fixtures/demo-gate/requests.jsonl
"$graft" adapter extract --merged "$root/models/release" --base "$root/models/base" --rank 32 \
  --out "$work/adapter" --eval-sequences 0 2>"$work/extract.log" || { cat "$work/extract.log"; exit 1; }
"$graft" decide --model "$root/models/release" --input "$req" --output "$work/release.jsonl" 2>"$work/decide.log" \
  || { cat "$work/decide.log"; exit 1; }
echo "== base + extracted adapter against the merged release"
"$graft" gate --reference "$work/release.jsonl" --requests "$req" --model "$root/models/base" --adapter "$work/adapter"
echo "== the base alone must fail the same gate"
if "$graft" gate --reference "$work/release.jsonl" --requests "$req" --model "$root/models/base"; then
  echo "the base alone passed the gate: the gate cannot tell the release from the base"
  exit 1
fi
echo "== exact mode: base + the release's exact representation decides as the release, bit for bit"
"$graft" adapter extract --merged "$root/models/release" --base "$root/models/base" --rank 32 --exact \
  --out "$work/exact" --eval-sequences 0 2>"$work/extract-exact.log" || { cat "$work/extract-exact.log"; exit 1; }
"$graft" decide --model "$root/models/base" --adapter "$work/exact" --input "$req" --output "$work/exact.jsonl" \
  2>"$work/decide-exact.log" || { cat "$work/decide-exact.log"; exit 1; }
python3 - "$work/release.jsonl" "$work/exact.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) and a, "line counts differ"
for i, (x, y) in enumerate(zip(a, b)):
    assert y.get("mode") == "exact", f"line {i + 1}: served as {y.get('mode')}"
    # json.loads keeps every float's shortest round-trip text: equal values are equal bits.
    assert x["decisions"] == y["decisions"], f"line {i + 1}: exact-mode decisions differ from the release's"
print(f"exact mode: {len(a)} decisions equal the release's")
PY
echo "demo gate: ok"
