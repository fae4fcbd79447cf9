#!/bin/bash
# cuDNN's fused attention (libgpt_cudnn.so, model/cuda/attention_cudnn.h)
# against the in-tree wgmma kernels in the whole training step, on one GPU,
# in one call (issue #26): GPT_CUDA_CUDNN=0 and unset, through
# bench/gpt_env_ab.sh (its environment: SIZES, ROUNDS, STEPS, BUDGET_S).
# usage: bench/gpt_cudnn_ab.sh PATH/TO/gpt_bench
set -u
BIN=${1:?usage: gpt_cudnn_ab.sh PATH/TO/gpt_bench}
SHOW=${SHOW:-attention} exec "$(dirname "$0")/gpt_env_ab.sh" "$BIN" GPT_CUDA_CUDNN "0 -"
