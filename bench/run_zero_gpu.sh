#!/bin/bash
# ZeRO-1 on one GPU (issue #26): train_gpt gpt2-124m, B 16, T 1024, bf16,
# world 1, --zero 0 and --zero 1 alternating (ROUNDS each, default 2, so
# that both find cuBLASLt's tuning cache after the first run). Prints the
# AdamW state per rank, the device memory in use (nvidia-smi, sampled while
# training), ms/step and tokens/s (steps 2..STEPS) per run; figures go to
# docs/BENCHMARKS.md. Run on the GPU machine after `. bench/gpu_lib.sh`.
#
# ZERO_BENCH_RANKS=2: two ranks under launch ($BIN_DIR/launch), through
# NCCL; on a machine with one GPU both share it as two NCCL hosts
# (tests/gpu_share_lib.sh), and the memory column is each process's own
# (nvidia-smi --query-compute-apps, the peak sampled, rank by rank); their
# speed is that of two processes time-sliced on one GPU, not a figure.
#
#   bench/run_zero_gpu.sh [BIN_DIR]      (default .gpu-build/bin)
set -u
B=${1:-.gpu-build/bin}
ROUNDS=${ZERO_BENCH_ROUNDS:-2}
RANKS=${ZERO_BENCH_RANKS:-1}
STEPS=${ZERO_BENCH_STEPS:-40}
T=$(mktemp -d)
pid=
# train_gpt runs in the background (SIGINT ignored there): ended by pid on
# any exit, Ctrl-C included.
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
unset RANK WORLD_SIZE LOCAL_RANK LAUNCH_RESUME_STEP LAUNCH_CKPT_DIR
seq 1 3000000 >"$T/data.txt" # text, its bytes the tokens
M=(--preset gpt2-124m --vocab 50257 --batch 16 --seq-len 1024 --steps "$STEPS"
   --val-every 0 --val-batches 1 --data "$T/data.txt" --device cuda)
CMD=("$B/train_gpt")
if [ "$RANKS" -gt 1 ]; then
  # launch's job registry (launch status) in the scratch folder, not the user's
  export XDG_RUNTIME_DIR=$T
  . "$(dirname "$0")/../tests/gpu_share_lib.sh"
  CMD=("$B/launch" --standalone --nproc-per-node "$RANKS" -q)
  if [ "$(gpu_count)" -lt "$RANKS" ]; then
    gpu_share_wrap "$T"
    CMD+=("$GPU_SHARE_WRAP")
  fi
  CMD+=("$B/train_gpt")
fi
printf '| ranks | --zero | AdamW state per rank | GPU memory used (nvidia-smi, peak sampled%s) | ms/step | tokens/s |\n' \
  "$([ "$RANKS" -gt 1 ] && echo ', each process')"
printf '|---:|---:|---:|---:|---:|---:|\n'
for _ in $(seq 1 "$ROUNDS"); do
  for z in 0 1; do
    "${CMD[@]}" "${M[@]}" --zero "$z" >"$T/log" 2>&1 &
    pid=$!
    peak=0
    : >"$T/apps"
    while kill -0 "$pid" 2>/dev/null; do
      if [ "$RANKS" -gt 1 ]; then
        nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits \
          >>"$T/apps" 2>/dev/null
      else
        u=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
        [ -n "$u" ] && [ "$u" -gt "$peak" ] && peak=$u
      fi
      sleep 0.5
    done
    if [ "$RANKS" -gt 1 ]; then
      # each process's peak, in the order they appeared: "A / B MiB"
      peak=$(awk -F', *' 'NF == 2 { if (!($1 in m)) o[n++] = $1; if ($2 + 0 > m[$1]) m[$1] = $2 + 0 }
        END { for (i = 0; i < n; i++) printf "%s%d", i ? " / " : "", m[o[i]] }' "$T/apps")
    fi
    wait "$pid" || { pid=; cat "$T/log" >&2; echo "run_zero_gpu: --zero $z failed" >&2; exit 1; }
    pid=
    st=$(sed -n 's/.*AdamW state: \([0-9.]*\) MiB.*/\1/p' "$T/log" | head -1)
    ms=$(sed -n 's/.*final: .* | \([0-9.]*\) ms\/step.*/\1/p' "$T/log")
    tps=$(sed -n 's/.*final: .* ms\/step, \([0-9]*\) tok\/s.*/\1/p' "$T/log")
    printf '| %s | %s | %s MiB | %s MiB | %s | %s |\n' "$RANKS" "$z" "$st" "$peak" "$ms" "$tps"
  done
done
