#!/usr/bin/env bash
# scripts/check-layers passes on the repository and fails, naming the file, line and both
# folders, on a tree with an include that points up, one into an unknown folder, or a folder
# missing from the layer list.
set -euo pipefail
check="$1"
repo="$2"
"$check" "$repo"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/util" "$tmp/src/cli"
printf '#pragma once\n#include "util/b.h"\n#include "cli/commands.h"\n' > "$tmp/src/util/a.h"
printf '#include "util/a.h"\n' > "$tmp/src/cli/main.cpp"
if out=$("$check" "$tmp" 2>&1); then echo "FAIL: an upward include passed"; exit 1; fi
echo "$out" | grep -q 'src/util/a.h:3: util/ includes cli/, a layer above it' || { echo "FAIL: message: $out"; exit 1; }
if echo "$out" | grep -q 'main.cpp'; then echo "FAIL: a downward include was reported: $out"; exit 1; fi
printf '#include "nowhere/x.h"\n' > "$tmp/src/cli/main.cpp"
rm "$tmp/src/util/a.h"
if out=$("$check" "$tmp" 2>&1); then echo "FAIL: an unknown folder passed"; exit 1; fi
echo "$out" | grep -q 'src/cli/main.cpp:1: includes "nowhere/...", a folder not in the layer list' || { echo "FAIL: $out"; exit 1; }
mkdir -p "$tmp/src/extra" && rm "$tmp/src/cli/main.cpp" && : > "$tmp/src/extra/x.h"
if out=$("$check" "$tmp" 2>&1); then echo "FAIL: an unlisted folder passed"; exit 1; fi
echo "$out" | grep -q 'src/extra/ is not in the layer list' || { echo "FAIL: $out"; exit 1; }
echo "layers test: ok"
