#!/bin/bash
# A kernel change against the code before it, on one GPU, in one call (issue
# #26): the new build's kernel and model tests, then bench/gpt_bench at
# gpt2-774m (B 8), gpt2-350m and gpt2-124m (B 16, T 1024, bf16), the two
# builds alternating ROUNDS times (so that clock and thermal drift fall on
# both), each run under the CUPTI profiler (bench/kprof.c: GPU time per
# kernel, graphs and both streams as in training) and with --profile 5
# (per kernel class, serialized: no overlap of the two backward streams).
# Each part is skipped when fewer seconds than its limit are left of
# BUDGET_S. Results in OUT (kernel_ab.txt).
# usage: bench/gpt_kernel_ab.sh BASEDIR NEWDIR KPROF [OUT]
#   BASEDIR, NEWDIR: each holds gpt_bench (NEWDIR also test_gpt_cuda_kernels
#   and test_gpt_cuda_model, where it has them); KPROF: libkprof.so
# environment: ROUNDS (2), KERNELS (a grep pattern of the kernels to print:
#   ln_bwd|colsum), BUDGET_S (240)
set -u
BASE=${1:?usage: gpt_kernel_ab.sh BASEDIR NEWDIR KPROF [OUT]}
NEW=${2:?usage: gpt_kernel_ab.sh BASEDIR NEWDIR KPROF [OUT]}
KPROF=$(realpath "${3:?usage: gpt_kernel_ab.sh BASEDIR NEWDIR KPROF [OUT]}")
OUT=${4:-${OUT:-/tmp/out}}
BUDGET=${BUDGET_S:-240}
ROUNDS=${ROUNDS:-2}
KERNELS=${KERNELS:-ln_bwd|colsum}
mkdir -p "$OUT"
. "$(dirname "$0")/gpu_lib.sh"
CUPTI=$(python3 -c 'import nvidia, os, glob
print((glob.glob(os.path.join(nvidia.__path__[0], "*", "lib", "libcupti.so*")) + [""])[0])' 2>/dev/null)
KP=$(mktemp -d)
run() { # LABEL DIR ARGS...: gpt_bench under kprof, the kernels of KERNELS
  local label=$1 dir=$2
  shift 2
  rm -f "$KP/kp.txt"
  step "$label" 40 env KPROF_CUPTI="$CUPTI" KPROF_SKIP_S=3 KPROF_TOP=40 \
    KPROF_OUT="$KP/kp.txt" LD_PRELOAD="$KPROF" "$dir/gpt_bench" --profile 5 "$@"
  [ -f "$KP/kp.txt" ] && grep -E "kprof:|$KERNELS" "$KP/kp.txt"
}
{
  nvidia-smi -L
  env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)='
  for t in test_gpt_cuda_kernels test_gpt_cuda_model; do
    [ -x "$NEW/$t" ] && step "$t (new)" 40 "$NEW/$t"
  done
  for size in 774m 350m 124m; do
    case $size in
    774m) args=(--layers 36 --heads 20 --channels 1280 --batch 8 --steps 40) ;;
    350m) args=(--layers 24 --heads 16 --channels 1024 --steps 40) ;;
    124m) args=(--steps 150) ;; # 3 s of GPU time are skipped by kprof
    esac
    for r in $(seq 1 "$ROUNDS"); do
      run "base $size (round $r)" "$BASE" "${args[@]}"
      run "new $size (round $r)" "$NEW" "${args[@]}"
    done
  done
} >"$OUT/kernel_ab.txt" 2>&1
rm -rf "$KP"
grep -E "^== |^rc=|^RESULT|FAIL|PASS|layernorm bwd|matmul bwd|$KERNELS" "$OUT/kernel_ab.txt" |
  cut -c1-160
