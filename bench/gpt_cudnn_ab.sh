#!/bin/bash
# cuDNN's fused attention (libgpt_cudnn.so, model/cuda/attention_cudnn.h)
# against the in-tree wgmma kernels in the whole training step, on one GPU,
# in one call (issue #26): the same gpt_bench binary with GPT_CUDA_CUDNN=0
# and without it, alternating ROUNDS times at each size so that clock and
# thermal drift fall on both; gpt2-124m and 350m B16, 774m B8, T 1024, bf16.
# Prints each run's attention line, tokens/s and memory; then the medians.
# usage: bench/gpt_cudnn_ab.sh PATH/TO/gpt_bench
# environment: SIZES ("124m 350m 774m"), ROUNDS (2), STEPS (50), BUDGET_S (300)
set -u
BIN=${1:?usage: gpt_cudnn_ab.sh PATH/TO/gpt_bench}
BUDGET=${BUDGET_S:-300} ROUNDS=${ROUNDS:-2} STEPS=${STEPS:-50}
. "$(dirname "$0")/gpu_lib.sh"
T=$(mktemp -d)
for size in ${SIZES:-124m 350m 774m}; do
  case $size in
    124m) shape=(--layers 12 --heads 12 --channels 768 --batch 16) ;;
    350m) shape=(--layers 24 --heads 16 --channels 1024 --batch 16) ;;
    774m) shape=(--layers 36 --heads 20 --channels 1280 --batch 8) ;;
    *) echo "gpt_cudnn_ab.sh: unknown size $size" >&2; exit 2 ;;
  esac
  for r in $(seq "$ROUNDS"); do
    for mode in in-tree cudnn; do
      if [ "$mode" = in-tree ]; then e=(GPT_CUDA_CUDNN=0); else e=(); fi
      step "$size $mode round $r" 90 env "${e[@]}" "$BIN" "${shape[@]}" --steps "$STEPS" \
        --profile 0 >"$T/run.txt"
      grep -E "attention|tokens/s" "$T/run.txt" | sed 's/cuBLASLt.*//'
      awk -v s="$size" -v m="$mode" '/^tokens\/s:/ {print s, m, $2}' "$T/run.txt" >>"$T/all.txt"
    done
  done
done
echo "== medians (tokens/s)"
sort "$T/all.txt" | awk '{k=$1" "$2; v[k]=v[k]" "$3} END {for (k in v) print k ":" v[k]}' | sort
rm -rf "$T"
