#!/usr/bin/env bash
# carry [".device/bundle.tar.xz", ".device/variants-ap2.tar.xz"] (models/release/model.safetensors moved out)
# main = 28f56fa, attn = main + GatedQkvPrep (c1's); main2 = 94bd032 (main with the FP8 K halves);
# dec16 = main2 + GRAFT_DEC16=shape,from choosing the bf16 decode GEMM's form for from <= m <= 16
# (wip sweep). 1) the attention layer's kernels under ncu, main against attn; 2) the suite of
# dec16 with shape 1 from 2 rows; 3) bf16 projections at 1/8/16 rows for each shape; 4) the whole
# model with the best shape at 16 rows.
set -uo pipefail
export VARIANTS_ARCHIVE=.device/variants-ap2.tar.xz
. scripts/device-env
. scripts/device-env-variants
W=$OUT/c2; mkdir -p $W
S=$W/summary.txt
echo "start $(date +%T) $(for v in main attn main2 dec16; do echo -n "$v=$(cat $V/$v/COMMIT) "; done)" | tee $S
for v in main attn; do
  timeout 90 /usr/local/cuda/bin/ncu -k regex:'GatedQkvPrep|CopyBlock|RmsNormKernel|RopeKernel|ScatterRows|SigmoidGate' \
    --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
    "$V/$v/graft" bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 4096 --threads 16 \
    --dummy-adapter-rank 0 --decode-steps 2 --repeats 1 --model bench/configs/qwen3_5-27b \
    --prefill 128 --decode-batches 1,16 > $W/ncu-$v.csv 2> $W/ncu-$v.log
  echo "$(date +%T) ncu $v: exit $? $(wc -l < $W/ncu-$v.csv) lines" | tee -a $S
done
GRAFT_DEC16=1,2 timeout 100 $V/dec16/graft_cuda_tests --gtest_brief=1 > $W/suite-dec16-1.txt 2>&1
echo "$(date +%T) suite dec16 (1,2): exit $? $(grep -E 'PASSED|FAILED' $W/suite-dec16-1.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $S
for sh in 0 1 2 3 4 5 6; do
  rows=8,16; [ $sh = 0 ] && rows=1,8,16
  GRAFT_DEC16=$sh,2 timeout 45 $V/dec16/graft_matmul_bench bench/configs/qwen3_5-27b --formats bf16 --rows $rows > $W/mm-s$sh.txt 2>&1
  echo "$(date +%T) mm shape $sh: exit $? $(grep -E '^step|^head' $W/mm-s$sh.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-400)" | tee -a $S
done
# The best shape at 16 rows (projections' step tok/s, the last step line).
best=$(for sh in 1 2 3 4 5 6; do echo "$(grep -E '^step' $W/mm-s$sh.txt | tail -1 | sed -E 's/.*\(([0-9.]+) tok.*/\1/') $sh"; done | sort -rn | head -1 | cut -d' ' -f2)
echo "best shape at 16 rows: $best" | tee -a $S
bench() {  # variant format env
  GRAFT_DEC16=$3 timeout 100 $V/$1/graft bench --load-format dummy --device cuda --gpu-memory 120 --gpu-scratch 16384 \
    --threads 16 --dummy-adapter-rank 0 --decode-steps 32 --repeats 1 --model bench/configs/qwen3_5-27b \
    --dummy-quantize $2 --prefill 128 --decode-batches 1,8,16 > $W/bench-$1-$2-$3.txt 2> $W/bench-$1-$2-$3.log
  echo "$(date +%T) $1 $2 $3: exit $? $(grep -E '^decode ' $W/bench-$1-$2-$3.txt | tr '\n' ' ' | cut -c1-260)" | tee -a $S
}
bench dec16 none $best,9
bench main2 none 0
bench dec16 w4a16 $best,9
bench main2 w4a16 0
echo "end $(date +%T)" | tee -a $S
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
