#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-pdl3.tar.xz"] (models/release/model.safetensors moved out)
# edges = wip/pdl-edges 442e9a2 (pdl2's kernels + CudaOps::GraphShape and its test): the CUDA suite,
# whose decode-graph test prints the captured graph's kernels and programmatic edges; then the
# whole-model w4a16 decode without graphs (--no-cuda-graphs) for head and pdl2: is PDL's gain
# larger eagerly than inside the graph?
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-pdl3.tar.xz
. scripts/device-env
. scripts/device-env-variants
export GRAFT_FIXTURES_DIR=$PWD/fixtures
W=$OUT/c3; mkdir -p $W
T0=$(date +%s)
echo "start $(date +%T) head $(cat $V/head/COMMIT) pdl2 $(cat $V/pdl2/COMMIT) edges $(cat $V/edges/COMMIT)" | tee $W/summary.txt
timeout 90 $V/edges/graft_cuda_tests --gtest_brief=1 > $W/cuda-tests-edges.log 2>&1
echo "$(date +%T) edges cuda suite: exit $? $(grep -E '^\[  (PASSED|FAILED)' $W/cuda-tests-edges.log | tr '\n' ' ')" | tee -a $W/summary.txt
grep -E "decode graph:|Failure|FAILED" $W/cuda-tests-edges.log | head -8 | tee -a $W/summary.txt
bench() {  # variant format run extra-flags
  if [ $(( $(date +%s) - T0 )) -gt 300 ]; then echo "$(date +%T) $1 $2: skipped (time)" | tee -a $W/summary.txt; return; fi
  timeout 100 $V/$1/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $2 --prefill 128 --decode-batches 1 $4 > $W/bench-$1-$2-$3.txt 2> $W/bench-$1-$2-$3.log
  echo "$(date +%T) $1 $2 $4: exit $? $(grep -E '^decode ' $W/bench-$1-$2-$3.txt | tr '\n' ' ' | cut -c1-200)" | tee -a $W/summary.txt
}
bench pdl2 w4a16 eager --no-cuda-graphs; bench head w4a16 eager --no-cuda-graphs
bench edges w4a16 graph ""
echo "end $(date +%T)" | tee -a $W/summary.txt
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
