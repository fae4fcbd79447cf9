#!/bin/bash
# A short check on the GPU machine when little device time is left: the
# kernel and model tests, the benchmark with this build's defaults
# (profiled) and with fewer classifier chunks, then the kernels the product
# was measured against (lab/cuda/, where DIR holds its programs: a build
# with -DLAUNCH_LAB=ON); each part skipped when fewer seconds than its limit
# are left of BUDGET_S. DIR as for gpt_gpu_session.sh; results in OUT (quick.txt).
# usage: bench/gpt_gpu_quick.sh DIR [OUT]
set -u
DIR=${1:?usage: gpt_gpu_quick.sh DIR [OUT]}
OUT=${2:-${OUT:-/tmp/out}}
BUDGET=${BUDGET_S:-60}
mkdir -p "$OUT"
. "$(dirname "$0")/gpu_lib.sh"
{
  nvidia-smi -L
  step "test_gpt_cuda_kernels" 20 env GPT_TEST_TIME=1 "$DIR/test_gpt_cuda_kernels"
  step "test_gpt_cuda_model" 10 "$DIR/test_gpt_cuda_model"
  step "default" 6 "$DIR/gpt_bench" --profile 5
  step "7 classifier chunks (256 MiB)" 5 env GPT_CUDA_LOGITS_MIB=256 "$DIR/gpt_bench" --profile 0
  for p in attention_sm90 attention_mma layernorm_backward; do
    [ -x "$DIR/$p" ] && step "lab/cuda/$p" 10 "$DIR/$p"
  done
} >"$OUT/quick.txt" 2>&1
grep "^== \|^rc=\|^RESULT\|^ms/step\|FAIL\|PASS\|^| \|^per kernel" "$OUT/quick.txt"
