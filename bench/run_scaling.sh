#!/bin/bash
# Data-parallel scaling of train_gpt under launch (issue #26: ≥ 95 % on two
# GPUs): the same per-rank batch on 1 and on N ranks of one node, --zero 0
# and --zero 1, alternating (ROUNDS rounds, default 2, so that every
# configuration finds cuBLASLt's tuning cache after the first). train_gpt's
# tokens/s counts every rank's tokens (steps 2..STEPS); the efficiency is
# tokens/s on N ranks over N times the best tokens/s on one. Prints a
# markdown table and the AdamW state per rank (the ZeRO-1 split); figures go
# to docs/BENCHMARKS.md.
#
#   bench/run_scaling.sh [BIN_DIR]       (default .gpu-build/bin)
#
# On the GPU machine after `. bench/gpu_lib.sh`: N is the number of GPUs
# (nvidia-smi -L), and with one GPU the script says so and exits 0 (no
# figure without two). SCALE_DEVICE=cpu runs it on the CPU ring instead
# (N = SCALE_RANKS, default 2; SCALE_PRESET, e.g. tiny, keeps it short):
# that checks the script, not a figure anyone should quote. So does
# SCALE_SHARE_GPU=N on a machine with one GPU: N ranks on it through NCCL,
# one NCCL host each (tests/gpu_share_lib.sh), time-sliced: the CUDA path
# of the script checked before a machine with two GPUs is lent.
set -u
B=${1:-.gpu-build/bin}
DEV=${SCALE_DEVICE:-cuda}
PRESET=${SCALE_PRESET:-gpt2-124m}
BATCH=${SCALE_BATCH:-16}
SEQ=${SCALE_SEQ:-1024}
STEPS=${SCALE_STEPS:-40}
ROUNDS=${SCALE_ROUNDS:-2}
for f in "$B/launch" "$B/train_gpt"; do
  [ -x "$f" ] || { echo "run_scaling: no $f (build first, or name the bin dir)" >&2; exit 2; }
done
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
WRAP=()
if [ "$DEV" = cuda ]; then
  N=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "$N" -eq 1 ] && [ -n "${SCALE_SHARE_GPU:-}" ]; then
    N=$SCALE_SHARE_GPU
    . "$(dirname "$0")/../tests/gpu_share_lib.sh"
    gpu_share_wrap "$T"
    WRAP=("$GPU_SHARE_WRAP")
    echo "run_scaling: SCALE_SHARE_GPU=$N: $N ranks time-sliced on one GPU (a check of the script, no figure)"
  elif [ "$N" -lt 2 ]; then
    echo "run_scaling: $N GPU(s) here: scaling needs two or more (no figure)"
    exit 0
  fi
else
  N=${SCALE_RANKS:-2}
fi
unset RANK WORLD_SIZE LOCAL_RANK LAUNCH_RESUME_STEP LAUNCH_CKPT_DIR
# the jobs' registry (launch status) in the scratch directory, not the user's
export XDG_RUNTIME_DIR=$T
seq 1 3000000 >"$T/data.txt" # text, its bytes the tokens
M=(--preset "$PRESET" --batch "$BATCH" --seq-len "$SEQ" --steps "$STEPS"
   --val-every 0 --val-batches 1 --data "$T/data.txt" --device "$DEV")
if [ "$PRESET" != tiny ]; then M+=(--vocab 50257); fi

# run W Z: one job of W ranks; prints "tokens/s ms/step state_MiB"
run() {
  local w=$1 z=$2 log="$T/log.$1.$2"
  if ! "$B/launch" --standalone --nproc-per-node "$w" --max-restarts 0 \
      "${WRAP[@]}" "$B/train_gpt" "${M[@]}" --zero "$z" >"$log" 2>&1; then
    tail -30 "$log" >&2
    echo "run_scaling: $w rank(s), --zero $z failed" >&2
    exit 1
  fi
  local tps ms st
  tps=$(sed -n 's/.*final: .* ms\/step, \([0-9]*\) tok\/s.*/\1/p' "$log" | tail -1)
  ms=$(sed -n 's/.*final: .* | \([0-9.]*\) ms\/step.*/\1/p' "$log" | tail -1)
  st=$(sed -n 's/.*AdamW state: \([0-9.]*\) MiB.*/\1/p' "$log" | head -1)
  if [ -z "$tps" ]; then
    tail -30 "$log" >&2
    echo "run_scaling: no final tokens/s line from $w rank(s), --zero $z" >&2
    exit 1
  fi
  echo "$tps ${ms:-?} ${st:-?}"
}

echo "run_scaling: $PRESET B$BATCH T$SEQ on $DEV, 1 and $N ranks, $STEPS steps, $ROUNDS rounds"
declare -A best
printf '| round | ranks | --zero | tokens/s (all ranks) | ms/step | AdamW state per rank |\n'
printf '|---:|---:|---:|---:|---:|---:|\n'
for r in $(seq 1 "$ROUNDS"); do
  for z in 0 1; do
    for w in 1 "$N"; do
      read -r tps ms st < <(run "$w" "$z") || exit 1
      printf '| %s | %s | %s | %s | %s | %s MiB |\n' "$r" "$w" "$z" "$tps" "$ms" "$st"
      k="$w.$z"
      if [ -z "${best[$k]:-}" ] || [ "$tps" -gt "${best[$k]}" ]; then best[$k]=$tps; fi
    done
  done
done
for z in 0 1; do
  one=${best[1.$z]} many=${best[$N.$z]}
  eff=$(awk -v a="$many" -v b="$one" -v n="$N" 'BEGIN { printf "%.1f", 100 * a / (n * b) }')
  echo "scaling --zero $z: $N ranks $many tok/s against 1 rank $one tok/s: $eff % (best of $ROUNDS)"
done
