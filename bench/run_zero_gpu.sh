#!/bin/bash
# ZeRO-1 on one GPU (issue #26): train_gpt gpt2-124m, B 16, T 1024, bf16,
# world 1, --zero 0 and --zero 1 alternating (ROUNDS each, default 2, so
# that both find cuBLASLt's tuning cache after the first run). Prints the
# AdamW state per rank, the device memory in use (nvidia-smi, sampled while
# training), ms/step and tokens/s (steps 2..STEPS) per run; figures go to
# docs/BENCHMARKS.md. Run on the GPU machine after `. bench/gpu_lib.sh`.
#
#   bench/run_zero_gpu.sh [BIN_DIR]      (default .gpu-build/bin)
set -u
B=${1:-.gpu-build/bin}
ROUNDS=${ZERO_BENCH_ROUNDS:-2}
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
printf '| --zero | AdamW state per rank | GPU memory used (nvidia-smi, peak sampled) | ms/step | tokens/s |\n'
printf '|---:|---:|---:|---:|---:|\n'
for _ in $(seq 1 "$ROUNDS"); do
  for z in 0 1; do
    "$B/train_gpt" "${M[@]}" --zero "$z" >"$T/log" 2>&1 &
    pid=$!
    peak=0
    while kill -0 "$pid" 2>/dev/null; do
      u=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
      [ -n "$u" ] && [ "$u" -gt "$peak" ] && peak=$u
      sleep 0.5
    done
    wait "$pid" || { pid=; cat "$T/log" >&2; echo "run_zero_gpu: --zero $z failed" >&2; exit 1; }
    pid=
    st=$(sed -n 's/.*AdamW state: \([0-9.]*\) MiB.*/\1/p' "$T/log")
    ms=$(sed -n 's/.*final: .* | \([0-9.]*\) ms\/step.*/\1/p' "$T/log")
    tps=$(sed -n 's/.*final: .* ms\/step, \([0-9]*\) tok\/s.*/\1/p' "$T/log")
    printf '| %s | %s MiB | %s MiB | %s | %s |\n' "$z" "$st" "$peak" "$ms" "$tps"
  done
done
