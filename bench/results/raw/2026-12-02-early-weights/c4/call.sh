#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-ew4.tar.xz"] (models/release/model.safetensors moved out)
# gdn2 = wip/gdn-fused 604ae81 (c3's fused kernel + z and the norm weight loaded at the token's
# start): the CUDA suite, then the GDN kernels under ncu as in c3.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-ew4.tar.xz
. scripts/device-env
. scripts/device-env-variants
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c4; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) gdn2=$(cat $V/gdn2/COMMIT)" | tee $S
timeout 100 $V/gdn2/graft_cuda_tests --gtest_brief=1 > $W/suite-gdn2.txt 2>&1
echo "$(date +%T) suite gdn2: exit $? $(grep -E 'PASSED|FAILED' $W/suite-gdn2.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $S
timeout 80 /usr/local/cuda/bin/ncu -k regex:'Gdn|GatedNorm' --clock-control none --cache-control none \
  --metrics gpu__time_duration.sum --csv --page raw \
  "$V/gdn2/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 4096 --threads 16 \
  --dummy-adapter-rank 0 --decode-steps 2 --repeats 1 --model bench/configs/qwen3_5-27b \
  --prefill 128 --decode-batches 1,16 > $W/ncu-gdn2.csv 2> $W/ncu-gdn2.log
echo "$(date +%T) ncu gdn2: exit $? $(wc -l < $W/ncu-gdn2.csv) lines" | tee -a $S
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
