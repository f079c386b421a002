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
echo "demo gate: ok"
