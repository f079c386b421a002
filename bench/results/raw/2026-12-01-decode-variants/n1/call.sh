#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-n1.tar.xz", ".device/n1.sh"] (bundle: LIBS_ONLY)
# The 4-bit decode variants: CUDA suite (bits) + matmul bench, w4a16 and nvfp4 at 1 and 16 rows.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-n1.tar.xz
W=$OUT/n1; mkdir -p $W
echo "start $(date +%T)"
timeout 570 scripts/device-variants-bench $W/v --formats w4a16,nvfp4 --rows 1,16 \
  main prefetch pfsums sums run2pf run2 d6 probe1 probe2 > $W/variants.out 2>&1
echo "variants: exit $? at $(date +%T)"
grep -E "^==|exit|FAILED|step|down|gate" $W/v/summary.txt | cut -c1-150
cd $OUT && tar czf n1.tgz n1 && rm -rf n1
