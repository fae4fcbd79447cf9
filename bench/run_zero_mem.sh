#!/bin/bash
# Memory per rank of train_gpt with and without ZeRO-1 (issue #26) on the
# CPU: 1, 2 and 4 ranks under launch, --zero 0 and --zero 1, a model big
# enough for the AdamW state to show (4 layers, 512 channels: 12.8M
# parameters, 97 MiB of AdamW state). Prints rank 0's AdamW state, peak
# resident memory (VmHWM), final loss and time a step (steps 2..3: noisy,
# two steps) per run; figures go to docs/BENCHMARKS.md.
#
#   bench/run_zero_mem.sh [BUILD_DIR]      (default build-rel)
set -u
B=${1:-build-rel}
RANKS=${ZERO_BENCH_RANKS:-"1 2 4"}
M=(--layers 4 --heads 8 --channels 512 --seq-len 64 --batch 1 --steps 3
   --val-every 0 --threads 1)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
unset RANK WORLD_SIZE LOCAL_RANK LAUNCH_RESUME_STEP LAUNCH_CKPT_DIR
printf '| ranks | --zero | AdamW state, rank 0 | peak RSS, rank 0 | final loss | ms/step |\n'
printf '|---:|---:|---:|---:|---|---:|\n'
for n in $RANKS; do
  for z in 0 1; do
    if ! "$B/bin/launch" --standalone --nproc-per-node "$n" -q "$B/bin/train_gpt" \
        "${M[@]}" --zero "$z" >"$T/log" 2>&1; then
      cat "$T/log" >&2
      echo "run_zero_mem: $n ranks --zero $z failed" >&2
      exit 1
    fi
    st=$(sed -n 's/.*AdamW state: \([0-9.]*\) MiB.*/\1/p' "$T/log")
    rss=$(sed -n 's/.*peak memory of rank 0: \([0-9.]*\) MiB.*/\1/p' "$T/log")
    loss=$(sed -n 's/.*final: step [0-9]* loss \([0-9.]*\).*/\1/p' "$T/log")
    ms=$(sed -n 's/.*final: .* | \([0-9.]*\) ms\/step.*/\1/p' "$T/log")
    printf '| %s | %s | %s MiB | %s MiB | %s | %s |\n' "$n" "$z" "$st" "$rss" "$loss" "$ms"
  done
done
