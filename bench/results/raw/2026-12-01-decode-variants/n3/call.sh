#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-n3.tar.xz", ".device/n3.sh"] (bundle: LIBS_ONLY)
# W4A16 decode: register ring (main) against the asynchronous-copy form up to 8 rows (cpa) and at
# every row count (cpaall): CUDA suite (bits), matmul bench w4a16 + nvfp4 at 1 and 16 rows,
# whole-model decode w4a16 b1 / b16.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-n3.tar.xz
W=$OUT/n3; mkdir -p $W
echo "start $(date +%T)"
timeout 560 scripts/device-variants-bench $W/v --formats w4a16,nvfp4 --rows 1,16 --bench-formats w4a16 \
  cpa main cpaall > $W/variants.out 2>&1
echo "variants: exit $? at $(date +%T)"
grep -E "^==|exit|FAILED|step|decode" $W/v/summary.txt | cut -c1-150
cd $OUT && tar czf n3.tgz n3 && rm -rf n3
