#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-n4.tar.xz", ".device/n4.sh", ".device/probe"] (bundle: LIBS_ONLY)
# The 4-bit weight's load pattern alone (bench/probes/w4_load_pattern.cu), then the decode kernel
# with 256-byte L2 fetches (l2) against main: CUDA suite, matmul bench, decode w4a16.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-n4.tar.xz
W=$OUT/n4; mkdir -p $W
echo "start $(date +%T)"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
timeout 60 .device/probe/w4_load_pattern 2>&1 | tee $W/probe.txt
timeout 330 scripts/device-variants-bench $W/v --formats w4a16,nvfp4 --rows 1,16 --bench-formats w4a16 \
  l2 main > $W/variants.out 2>&1
echo "variants: exit $? at $(date +%T)"
grep -E "^==|exit|FAILED|step|decode" $W/v/summary.txt | cut -c1-150
cd $OUT && tar czf n4.tgz n4 && rm -rf n4
