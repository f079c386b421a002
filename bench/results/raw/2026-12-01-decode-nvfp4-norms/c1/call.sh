#!/usr/bin/env bash
set -uo pipefail
. scripts/device-env
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c1; mkdir -p $W
echo "bundle $(cat $B/COMMIT) start $(date +%T)"
timeout 90 $B/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests.log 2>&1
echo "cuda tests: exit $? at $(date +%T)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A5 $W/cuda-tests.log | head -30
timeout 120 $B/graft_matmul_bench bench/configs/qwen3_5-27b --formats w4a16,nvfp4 --rows 1,16 > $W/matmul.txt 2>&1
echo "matmul bench: exit $? at $(date +%T)"; cat $W/matmul.txt | tail -30
cuobjdump -sass $B/graft_cuda_tests 2>/dev/null | python3 -c '
import re,sys
from collections import Counter
s=sys.stdin.read()
for f in re.split(r"\n\s*Function : ",s)[1:]:
    name=f.split("\n")[0]
    if "GemmDecodeW4" not in name: continue
    ins=re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)",f)
    c=Counter(ins)
    print(name[:110], len(ins), dict(c.most_common(14)))
' > $W/sass-counts.txt 2>&1
echo "sass:"; cat $W/sass-counts.txt | cut -c1-400 | head -20
timeout 110 "$B/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 6 --repeats 1 --json "$W/nvfp4-27b.json" --model bench/configs/qwen3_5-27b \
    --dummy-quantize nvfp4 --prefill 1024 --decode-batches 1,16,64 > $W/nvfp4-27b.txt 2> $W/nvfp4-27b.log
echo "== nvfp4-27b: exit $? at $(date +%T)"; grep -E "^(prefill|decode) " $W/nvfp4-27b.txt
