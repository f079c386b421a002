#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-n2.tar.xz", ".device/n2.sh"] (bundle: LIBS_ONLY)
# Whole-model decode for the bit-identical latency variants (GDN state, KV tiles asked of L2).
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-n2.tar.xz; rm -rf .device/variants
W=$OUT/n2; mkdir -p $W
echo "start $(date +%T)"
timeout 570 scripts/device-variants-bench $W/v --no-matmul --bench-formats w4a16 main gdnpf attnpf > $W/variants.out 2>&1
echo "variants: exit $? at $(date +%T)"
grep -E "^==|exit|FAILED|decode" $W/v/summary.txt | cut -c1-150
cd $OUT && tar czf n2.tgz n2 && rm -rf n2
