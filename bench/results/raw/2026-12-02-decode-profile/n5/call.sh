#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-n5.tar.xz", ".device/n5.sh"] (bundle: LIBS_ONLY)
# (move models/release/model.safetensors out of the tree for the call: the carry limit)
# Slices summed in a thread-block cluster (clus, wip/w4-cluster-sums) and bf16 decode copies with
# 256-byte L2 fetches (bf16l2, wip/bf16-decode-l2) against main: CUDA suite, matmul bench
# (w4a16, nvfp4, bf16 at 1 and 16 rows), whole-model decode w4a16.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-n5.tar.xz
W=$OUT/n5; mkdir -p $W
echo "start $(date +%T)"
timeout 540 scripts/device-variants-bench $W/v --formats w4a16,nvfp4,bf16 --rows 1,16 --bench-formats w4a16 \
  clus main bf16l2 > $W/variants.out 2>&1
echo "variants: exit $? at $(date +%T)"
grep -E "^==|exit|FAILED|step|decode" $W/v/summary.txt | cut -c1-150
cd $OUT && tar czf n5.tgz n5 && rm -rf n5
